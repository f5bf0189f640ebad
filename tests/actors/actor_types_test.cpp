// The CAF message types: the checked factory, type IDs, and CAF serialization that re-verifies.

#include <doctest/doctest.h>

#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>
#include <caf/deep_to_string.hpp>
#include <caf/message.hpp>

#include "actors/actor_types.hpp"
#include "tests/actors/caf_fixture.hpp"

namespace {

using namespace kforge;
using namespace kforge::actors;

#ifndef CAF_ENABLE_TYPE_ID_CHECKS
#error "kforge::actors must export CAF_ENABLE_TYPE_ID_CHECKS to its users"
#endif

// Every type the stages send has a type ID, so make_message accepts it under the checks.
static_assert(caf::has_type_id<messages::envelope>::value);
static_assert(caf::has_type_id<task_msg>::value && caf::has_type_id<generate_request_msg>::value &&
              caf::has_type_id<candidate_msg>::value && caf::has_type_id<verdict_msg>::value &&
              caf::has_type_id<scored_msg>::value && caf::has_type_id<train_batch_msg>::value &&
              caf::has_type_id<policy_weights_msg>::value && caf::has_type_id<control_msg>::value &&
              caf::has_type_id<stage_metrics>::value && caf::has_type_id<weights_sink>::value);
static_assert(caf::type_id<messages::envelope>::value == caf::first_custom_type_id);
static_assert(caf::id_block::kforge_actors::end - caf::id_block::kforge_actors::begin == 11);

messages::header test_header(std::uint64_t id) {
  messages::header h;
  h.message_id = id;
  h.sample_id = 1000 + id;
  h.sender = "test";
  h.policy_version = 3;
  return h;
}

messages::envelope candidate_envelope(std::uint64_t id) {
  wire::CandidateT c;
  c.code_hash = 42 + id;
  c.source = "__global__ void k() {}";
  return messages::pack(test_header(id), c);
}

messages::envelope verdict_envelope(std::uint64_t id) {
  wire::VerdictT v;
  v.status = wire::VerdictStatus::compile_error;
  v.reason = "expected ';'";
  return messages::pack(test_header(id), v);
}

bool is(const caf::error& err, actor_errc code) {
  return err.category() == caf::detail::error_factory<actor_errc>::category &&
         err.code() == static_cast<std::uint8_t>(code);
}

template <class T>
std::vector<char> serialize(const T& x) {
  std::vector<char> buf;
  caf::binary_serializer sink{nullptr, buf};
  auto copy = x;
  auto err = sink(copy);
  REQUIRE_MESSAGE(!err, caf::to_string(err));
  return buf;
}

template <class T>
caf::error deserialize(const std::vector<char>& buf, T& out) {
  caf::binary_deserializer source{nullptr, buf};
  return source(out);
}

TEST_CASE("a payload_msg is made only from an envelope holding its payload") {
  auto ok = candidate_msg::make(candidate_envelope(1));
  REQUIRE(ok.ok());
  CHECK(ok->valid());
  CHECK(ok->payload().code_hash() == 43);
  CHECK(ok->header().sample_id() == 1001);

  auto wrong = candidate_msg::make(verdict_envelope(2));
  REQUIRE_FALSE(wrong.ok());
  CHECK(wrong.message().find("expected a Candidate envelope, got Verdict") != std::string::npos);
  CHECK(wrong.message().find("message 2 from \"test\"") != std::string::npos);

  auto empty = verdict_msg::make(messages::envelope{});
  REQUIRE_FALSE(empty.ok());
  CHECK(empty.message().find("empty envelope") != std::string::npos);

  // pack() cannot produce a wrong payload: the object type fixes it.
  wire::ControlT ctl;
  ctl.command = wire::ControlCommand::pause;
  auto packed = control_msg::pack(test_header(3), ctl);
  CHECK(packed.envelope().type() == wire::Payload::Control);
  CHECK(packed.payload().command() == wire::ControlCommand::pause);
}

TEST_CASE("CAF serialization of a payload_msg round-trips and re-verifies the bytes") {
  const auto original = candidate_msg::make(candidate_envelope(7)).value();

  SUBCASE("round trip") {
    candidate_msg back;
    auto err = deserialize(serialize(original), back);
    REQUIRE_MESSAGE(!err, caf::to_string(err));
    CHECK(back == original);
    CHECK(back.payload().code_hash() == 49);
    CHECK(back.envelope().data() != original.envelope().data());  // fresh copy
  }

  SUBCASE("another payload type is refused") {
    const auto verdict = verdict_msg::make(verdict_envelope(8)).value();
    candidate_msg back;
    auto err = deserialize(serialize(verdict), back);
    REQUIRE(err);
    CHECK(is(err, actor_errc::wrong_payload));
    CHECK_FALSE(back.valid());
    // ... while the plain envelope type takes any payload.
    messages::envelope any;
    CHECK_FALSE(deserialize(serialize(verdict), any));
    CHECK(any.type() == wire::Payload::Verdict);
  }

  SUBCASE("bytes that are no envelope are refused") {
    const auto& env = original.envelope();
    std::vector<std::uint8_t> bytes(env.data(), env.data() + env.size());
    bytes[3] = 0x7f;  // the root offset's high byte: it now points far outside the buffer
    auto buf = serialize(bytes);
    candidate_msg back;
    auto err = deserialize(buf, back);
    REQUIRE(err);
    CHECK(is(err, actor_errc::invalid_envelope));
    CHECK_FALSE(back.valid());
  }

  SUBCASE("a truncated stream is refused before allocating") {
    auto buf = serialize(original);
    buf.resize(buf.size() / 2);
    candidate_msg back;
    auto err = deserialize(buf, back);
    REQUIRE(err);
    CHECK(is(err, actor_errc::invalid_envelope));
  }

  SUBCASE("an empty message stays empty") {
    candidate_msg back = original;
    CHECK_FALSE(deserialize(serialize(candidate_msg{}), back));
    CHECK_FALSE(back.valid());
  }
}

TEST_CASE_FIXTURE(testing::caf_fixture, "registered types travel inside type-erased CAF messages") {
  const auto original = candidate_msg::make(candidate_envelope(9)).value();
  stage_metrics metrics;
  metrics.name = "sampler/0";
  metrics.sent = 8;
  auto msg = caf::make_message(original, metrics);
  CHECK(caf::to_string(msg).find("Candidate message_id=9 sample_id=1009") != std::string::npos);

  // Serializing a caf::message looks its element types up by the names init_actor_types gave.
  std::vector<char> buf;
  caf::binary_serializer sink{sys, buf};
  REQUIRE_FALSE(sink(msg));
  caf::message back;
  caf::binary_deserializer source{sys, buf};
  auto err = source(back);
  REQUIRE_MESSAGE(!err, sys.render(err));
  REQUIRE((back.match_elements<candidate_msg, stage_metrics>()));
  CHECK(back.get_as<candidate_msg>(0) == original);
  CHECK(back.get_as<stage_metrics>(1).name == "sampler/0");
  CHECK(back.get_as<stage_metrics>(1).sent == 8);

  // The error category is registered too, so errors render with their context.
  auto rendered = sys.render(make_actor_error(actor_errc::wrong_payload, "expected a Candidate"));
  CHECK(rendered == "kforge: wrong_payload (expected a Candidate)");
}

}  // namespace
