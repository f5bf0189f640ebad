#include <doctest/doctest.h>

#include <random>
#include <thread>

#include "bus/channel.hpp"
#include "bus/socket.hpp"
#include "helpers.hpp"

using namespace kforge::bus;
using namespace kforge::bus::test;
using kforge::messages::envelope;

namespace {

// Sends n blobs from a thread while the caller receives them, checking count, order and payload.
void stream(sender& tx, receiver& rx, std::uint64_t n, std::size_t size) {
  const auto sent_before = tx.counters().sent;
  const auto received_before = rx.counters().received;
  // doctest assertions must stay on the test's thread: the producer only records failures.
  std::uint64_t send_failures = 0;
  std::thread producer([&] {
    for (std::uint64_t i = 1; i <= n; ++i)
      if (!tx.send(blob(i, size), 5000ms).ok()) ++send_failures;
  });
  std::uint64_t expected = 1;
  bool in_order = true;
  while (expected <= n) {
    auto r = rx.receive(5000ms);
    if (!r.ok() || !r->has_value()) break;
    in_order = in_order && is_blob(**r, expected, size);
    ++expected;
  }
  producer.join();
  CHECK(send_failures == 0);
  CHECK(expected == n + 1);
  CHECK(in_order);
  CHECK(tx.counters().sent - sent_before == n);
  CHECK(rx.counters().received - received_before == n);
  CHECK(rx.counters().rejected == 0);
  auto extra = rx.receive(0ms);
  REQUIRE(extra.ok());
  CHECK_FALSE(extra->has_value());
}

}  // namespace

TEST_CASE("push/pull over inproc delivers every envelope in order") {
  auto rx = receiver::bind("inproc://channel-test-inproc");
  REQUIRE(rx.ok());
  auto tx = sender::connect("inproc://channel-test-inproc");
  REQUIRE(tx.ok());
  CHECK(tx->last_endpoint() == "inproc://channel-test-inproc");
  stream(*tx, *rx, 2000, 100);
  stream(*tx, *rx, 50, 64 * 1024);  // shared-buffer frames, not copies
}

TEST_CASE("push/pull over tcp on an ephemeral port delivers every envelope in order") {
  auto rx = receiver::bind("tcp://127.0.0.1:*");
  REQUIRE(rx.ok());
  CHECK(rx->last_endpoint().rfind("tcp://127.0.0.1:", 0) == 0);
  CHECK(rx->last_endpoint() != "tcp://127.0.0.1:*");
  auto tx = sender::connect(rx->last_endpoint());
  REQUIRE(tx.ok());
  stream(*tx, *rx, 2000, 300);
  stream(*tx, *rx, 20, 1 << 20);
}

TEST_CASE("the sender may bind and the receiver connect") {
  auto tx = sender::bind("tcp://127.0.0.1:*");
  REQUIRE(tx.ok());
  auto rx = receiver::connect(tx->last_endpoint());
  REQUIRE(rx.ok());
  stream(*tx, *rx, 500, 4096);
}

TEST_CASE("a send with no receiver fails after its timeout instead of vanishing") {
  auto tx = sender::bind("tcp://127.0.0.1:*");
  REQUIRE(tx.ok());
  auto s = tx->send(blob(1), 20ms);
  REQUIRE_FALSE(s.ok());
  CHECK(s.message().find("no room") != std::string::npos);
  CHECK(tx->counters().send_timeouts == 1);
  CHECK(tx->counters().sent == 0);
  CHECK_FALSE(tx->send(envelope{}, 0ms).ok());  // an empty envelope is refused
}

TEST_CASE("a full receiver makes send time out: back-pressure, not loss") {
  channel_options small;
  small.high_water_mark = 4;
  auto rx = receiver::bind("inproc://channel-test-full", small);
  REQUIRE(rx.ok());
  auto tx = sender::connect("inproc://channel-test-full", small);
  REQUIRE(tx.ok());
  std::uint64_t accepted = 0;
  for (std::uint64_t i = 1; i <= 100; ++i) {
    if (!tx->send(blob(i), 0ms).ok()) break;
    ++accepted;
  }
  CHECK(accepted < 100);
  CHECK(tx->counters().send_timeouts == 1);
  // Everything accepted arrives.
  for (std::uint64_t i = 1; i <= accepted; ++i) {
    auto r = rx->receive(1000ms);
    REQUIRE(r.ok());
    REQUIRE(r->has_value());
    CHECK(is_blob(**r, i, 64));
  }
}

TEST_CASE("receive returns nothing when nothing arrives within the timeout") {
  auto rx = receiver::bind("inproc://channel-test-empty");
  REQUIRE(rx.ok());
  const auto t0 = clock::now();
  auto r = rx->receive(30ms);
  REQUIRE(r.ok());
  CHECK_FALSE(r->has_value());
  CHECK(clock::now() - t0 >= 25ms);
}

TEST_CASE("garbage, truncated and multi-frame messages are rejected and counted") {
  auto rx = receiver::bind("tcp://127.0.0.1:*");
  REQUIRE(rx.ok());
  auto raw = open_socket(shared_context(), zmq::socket_type::push, {});
  REQUIRE(raw.ok());
  REQUIRE(attach(*raw, {rx->last_endpoint(), link::connect}).ok());

  std::mt19937_64 rng(99);
  const envelope good = blob(42, 500);
  std::uint64_t bad_sent = 0;
  for (int i = 0; i < 200; ++i) {
    std::vector<std::uint8_t> junk(rng() % 600);
    for (auto& b : junk) b = static_cast<std::uint8_t>(rng());
    if (junk.size() >= 8 && i % 2 == 0) std::copy_n("KFEV", 4, junk.begin() + 4);
    raw->send(zmq::buffer(junk));
    ++bad_sent;
  }
  for (std::size_t n = 0; n < good.size(); n += 7) {  // truncations of a valid envelope
    raw->send(zmq::const_buffer(good.data(), n));
    ++bad_sent;
  }
  raw->send(zmq::const_buffer(good.data(), good.size()), zmq::send_flags::sndmore);
  raw->send(zmq::const_buffer(good.data(), good.size()));  // valid bytes, but two frames
  ++bad_sent;
  raw->send(zmq::const_buffer(good.data(), good.size()));  // finally a good one

  std::uint64_t errors = 0;
  std::optional<envelope> got;
  const bool done = eventually([&] { return got.has_value(); },
                               [&] {
                                 auto r = rx->receive(100ms);
                                 if (!r.ok()) {
                                   ++errors;
                                   CHECK(r.message().find("rejected") != std::string::npos);
                                 } else if (r->has_value()) {
                                   got = **r;
                                 }
                               });
  REQUIRE(done);
  CHECK(*got == good);
  CHECK(errors == bad_sent);
  CHECK(rx->counters().rejected == bad_sent);
  CHECK(rx->counters().received == 1);
}
