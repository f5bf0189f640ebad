#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "bus/channel.hpp"
#include "bus/frames.hpp"
#include "helpers.hpp"

using namespace kforge::bus;
using namespace kforge::bus::test;
using kforge::messages::envelope;
using kforge::messages::envelope_alignment;

namespace {

bool aligned(const envelope& e) {
  return reinterpret_cast<std::uintptr_t>(e.data()) % envelope_alignment == 0;
}

}  // namespace

TEST_CASE("an inproc frame becomes an envelope without a copy") {
  const auto sent = blob(1, 4096);
  auto got = envelope_of(frame_of(sent), frame_origin::inproc);
  REQUIRE(got.ok());
  CHECK(got->data() == sent.data());  // the sender's own bytes, verified again
  CHECK(is_blob(*got, 1, 4096));

  // A small envelope travels as a copy in zmq's buffer, which the envelope then keeps.
  zmq::message_t small = frame_of(blob(2, 16));
  const void* where = small.data();
  auto kept = envelope_of(std::move(small), frame_origin::inproc);
  REQUIRE(kept.ok());
  CHECK(kept->data() == where);
  CHECK(is_blob(*kept, 2, 16));
}

TEST_CASE("stream frames are copied unless larger than zmq's receive batch") {
  const auto small = blob(3, 4096);
  auto copied = envelope_of(frame_of(small), frame_origin::stream);
  REQUIRE(copied.ok());
  CHECK(copied->data() != small.data());
  CHECK(*copied == small);

  const auto large = blob(4, 64 * 1024);
  auto kept = envelope_of(frame_of(large), frame_origin::stream);
  REQUIRE(kept.ok());
  CHECK(kept->data() == large.data());

  CHECK(origin_of("inproc://x") == frame_origin::inproc);
  CHECK(origin_of("tcp://127.0.0.1:5555") == frame_origin::stream);
  CHECK(origin_of("ipc:///tmp/x") == frame_origin::stream);
}

TEST_CASE("a misaligned frame is copied; a bad one is refused either way") {
  const auto e = blob(5, 4096);
  std::vector<std::uint8_t> buf(e.size() + 1);
  std::copy_n(e.data(), e.size(), buf.begin() + 1);
  // A frame that points one byte into `buf` (zmq does not own or free it).
  zmq::message_t odd(buf.data() + 1, e.size(), nullptr, nullptr);
  auto got = envelope_of(std::move(odd), frame_origin::inproc);
  REQUIRE(got.ok());
  CHECK(got->data() != buf.data() + 1);
  CHECK(aligned(*got));
  CHECK(*got == e);

  auto bytes = std::vector<std::uint8_t>(e.data(), e.data() + e.size());
  bytes[3] = 0x7f;  // the root offset now points outside the buffer
  for (auto origin : {frame_origin::inproc, frame_origin::stream}) {
    CHECK_FALSE(envelope_of(zmq::message_t(bytes.data(), bytes.size()), origin).ok());
    CHECK_FALSE(envelope_of(zmq::message_t(bytes.data(), bytes.size())).ok());
  }
}

TEST_CASE("an envelope crosses an inproc channel without being copied") {
  auto rx = receiver::bind("inproc://frames-test-zero-copy");
  REQUIRE(rx.ok());
  auto tx = sender::connect("inproc://frames-test-zero-copy");
  REQUIRE(tx.ok());
  const auto sent = blob(6, 8192);
  REQUIRE(tx->send(sent, 1000ms).ok());
  auto r = rx->receive(5000ms);
  REQUIRE(r.ok());
  REQUIRE(r->has_value());
  CHECK((*r)->data() == sent.data());
  CHECK(is_blob(**r, 6, 8192));
}
