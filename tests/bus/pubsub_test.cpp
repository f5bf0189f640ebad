#include <doctest/doctest.h>

#include "bus/pubsub.hpp"
#include "helpers.hpp"

using namespace kforge::bus;
using namespace kforge::bus::test;
using kforge::messages::envelope;

TEST_CASE("subscribers get exactly the topics they asked for, in order") {
  auto pub = publisher::bind("tcp://127.0.0.1:*");
  REQUIRE(pub.ok());
  auto weights = subscriber::connect(pub->last_endpoint(), {"weights"});
  REQUIRE(weights.ok());
  auto control = subscriber::connect(pub->last_endpoint(), {"control"});
  REQUIRE(control.ok());
  auto both = subscriber::connect(pub->last_endpoint(), {""});
  REQUIRE(both.ok());
  // No sleeping for the slow joiner: the publisher sees the three subscriptions arrive.
  auto joined = pub->wait_for_subscriptions(3, 5000ms);
  REQUIRE(joined.ok());
  REQUIRE(*joined);

  for (std::uint64_t i = 1; i <= 20; ++i) {
    REQUIRE(pub->publish(i % 2 ? "weights" : "control", blob(i, 2048), 1000ms).ok());
  }
  CHECK(pub->counters().published == 20);

  auto drain = [](subscriber& s, std::uint64_t expect) {
    std::vector<topic_message> got;
    eventually([&] { return got.size() >= expect; },
               [&] {
                 auto r = s.receive(100ms);
                 if (r.ok() && r->has_value()) got.push_back(std::move(**r));
               });
    auto extra = s.receive(20ms);
    CHECK((extra.ok() && !extra->has_value()));
    return got;
  };
  auto w = drain(*weights, 10);
  auto c = drain(*control, 10);
  auto a = drain(*both, 20);
  REQUIRE(w.size() == 10);
  REQUIRE(c.size() == 10);
  REQUIRE(a.size() == 20);
  for (std::uint64_t k = 0; k < 10; ++k) {
    CHECK(w[k].topic == "weights");
    CHECK(is_blob(w[k].env, 2 * k + 1, 2048));
    CHECK(c[k].topic == "control");
    CHECK(is_blob(c[k].env, 2 * k + 2, 2048));
  }
  for (std::uint64_t k = 0; k < 20; ++k) CHECK(a[k].env->message_id() == k + 1);
}

TEST_CASE("a subscriber that stops reading makes publish fail, not drop silently") {
  pubsub_options small;
  small.high_water_mark = 2;
  auto pub = publisher::bind("inproc://pubsub-test-full", small);
  REQUIRE(pub.ok());
  auto sub = subscriber::connect("inproc://pubsub-test-full", {"w"}, small);
  REQUIRE(sub.ok());
  REQUIRE(pub->wait_for_subscriptions(1, 5000ms).value());
  std::uint64_t accepted = 0;
  for (std::uint64_t i = 1; i <= 100; ++i) {
    if (!pub->publish("w", blob(i), 0ms).ok()) break;
    ++accepted;
  }
  CHECK(accepted < 100);
  CHECK(pub->counters().publish_timeouts == 1);
  for (std::uint64_t i = 1; i <= accepted; ++i) {
    auto r = sub->receive(1000ms);
    REQUIRE(r.ok());
    REQUIRE(r->has_value());
    CHECK((*r)->env->message_id() == i);
  }
}

TEST_CASE("malformed pub/sub messages are rejected and counted") {
  // A raw XPUB stands in for a broken publisher; it too can wait for the subscription.
  auto raw = open_socket(shared_context(), zmq::socket_type::xpub, {});
  REQUIRE(raw.ok());
  auto ep = attach(*raw, {"tcp://127.0.0.1:*", link::bind});
  REQUIRE(ep.ok());
  auto sub = subscriber::connect(*ep, {""});
  REQUIRE(sub.ok());
  std::vector<zmq::message_t> frames;
  auto n = receive_within(*raw, frames, 1, 5000ms);
  REQUIRE(n.ok());
  REQUIRE(*n == 1);

  const envelope good = blob(5, 100);
  raw->send(zmq::str_buffer("lonely-topic"));  // one frame
  raw->send(zmq::str_buffer("t"), zmq::send_flags::sndmore);
  raw->send(zmq::str_buffer("not an envelope at all"));
  raw->send(zmq::str_buffer("t"), zmq::send_flags::sndmore);
  raw->send(zmq::const_buffer(good.data(), good.size() / 2));  // truncated
  raw->send(zmq::str_buffer("t"), zmq::send_flags::sndmore);
  raw->send(zmq::const_buffer(good.data(), good.size()), zmq::send_flags::sndmore);
  raw->send(zmq::str_buffer("extra"));  // three frames
  raw->send(zmq::str_buffer("t"), zmq::send_flags::sndmore);
  raw->send(zmq::const_buffer(good.data(), good.size()));

  std::uint64_t errors = 0;
  std::optional<topic_message> got;
  REQUIRE(eventually([&] { return got.has_value(); },
                     [&] {
                       auto r = sub->receive(100ms);
                       if (!r.ok())
                         ++errors;
                       else if (r->has_value())
                         got = std::move(**r);
                     }));
  CHECK(got->topic == "t");
  CHECK(got->env == good);
  CHECK(errors == 4);
  CHECK(sub->counters().rejected == 4);
}
