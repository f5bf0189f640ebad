#include <doctest/doctest.h>

#include <random>

#include "messages/envelope.hpp"

using namespace kforge::messages;

namespace {

envelope sample_candidate() {
  wire::CandidateT c;
  c.prompt_hash = 11;
  c.code_hash = 22;
  c.group_index = 3;
  c.source = "extern \"C\" int kf_forward() { return 0; }";
  c.logprobs = {-0.5f, -1.25f};
  c.task = std::make_unique<wire::TaskT>();
  c.task->id = "l1/relu";
  return pack(header{7, 42, "sampler-0", 0, 5}, c);
}

}  // namespace

TEST_CASE("an envelope round-trips through bytes with every header field") {
  const auto e = sample_candidate();
  REQUIRE(e.valid());
  auto back = envelope::from_bytes(e.data(), e.size());
  REQUIRE(back.ok());
  CHECK(*back == e);
  CHECK(back->get().message_id() == 7);
  CHECK(back->get().sample_id() == 42);
  CHECK(back->get().sender()->str() == "sampler-0");
  CHECK(back->get().policy_version() == 5);
  CHECK(back->get().send_time_ns() > 0);
  CHECK(back->type() == wire::Payload::Candidate);
  const auto* c = back->as<wire::Candidate>();
  REQUIRE(c != nullptr);
  CHECK(c->code_hash() == 22);
  CHECK(c->task()->id()->str() == "l1/relu");
  CHECK(back->as<wire::Verdict>() == nullptr);
  CHECK(payload_name(back->type()) == "Candidate");
}

TEST_CASE("random bytes never verify") {
  std::mt19937_64 rng(1234);
  for (int i = 0; i < 2000; ++i) {
    std::vector<std::uint8_t> junk(rng() % 512);
    for (auto& b : junk) b = static_cast<std::uint8_t>(rng());
    // Half the time give it the right identifier, so the verifier itself has to catch it.
    if (junk.size() >= 8 && (i % 2 == 0)) std::copy_n("KFEV", 4, junk.begin() + 4);
    auto r = envelope::from_bytes(junk.data(), junk.size());
    CHECK_FALSE(r.ok());
  }
}

TEST_CASE("every truncation of a valid envelope is rejected with a reason") {
  const auto e = sample_candidate();
  for (std::size_t n = 0; n < e.size(); ++n) {
    auto r = envelope::from_bytes(e.data(), n);
    REQUIRE_FALSE(r.ok());
    CHECK_FALSE(r.message().empty());
  }
}

TEST_CASE("a flipped length field is caught by the verifier") {
  auto bytes = sample_candidate().bytes();
  int rejected = 0;
  for (std::size_t i = 8; i < bytes.size(); ++i) {
    auto copy = bytes;
    copy[i] = 0xff;
    if (!envelope::from_bytes(std::move(copy)).ok()) ++rejected;
  }
  // Some bytes are plain scalars (any value is valid); offsets and lengths must not be.
  CHECK(rejected > 0);
}

TEST_CASE("an envelope without payload or with a foreign identifier is refused") {
  flatbuffers::FlatBufferBuilder fbb;
  wire::EnvelopeBuilder b(fbb);
  b.add_message_id(1);
  fbb.Finish(b.Finish(), wire::EnvelopeIdentifier());
  auto r = envelope::from_bytes(fbb.GetBufferPointer(), fbb.GetSize());
  REQUIRE_FALSE(r.ok());
  CHECK(r.message().find("no payload") != std::string::npos);

  flatbuffers::FlatBufferBuilder other;
  wire::EnvelopeBuilder b2(other);
  other.Finish(b2.Finish(), "XXXX");
  auto r2 = envelope::from_bytes(other.GetBufferPointer(), other.GetSize());
  REQUIRE_FALSE(r2.ok());
  CHECK(r2.message().find("KFEV") != std::string::npos);
}

TEST_CASE("blobs carry their bytes and JSON rendering names the payload") {
  const std::string text = "hello bus";
  const auto e = make_blob(header{1, 2, "bench"}, text.data(), text.size());
  const auto* blob = e.as<wire::Blob>();
  REQUIRE(blob != nullptr);
  CHECK(std::string(blob->data()->begin(), blob->data()->end()) == text);

  auto json = to_json(sample_candidate());
  REQUIRE(json.ok());
  CHECK(json->find("\"payload_type\": \"Candidate\"") != std::string::npos);
  CHECK(json->find("l1/relu") != std::string::npos);
  CHECK(schema_hash().size() == 64);
}
