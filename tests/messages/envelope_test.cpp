#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

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
  const auto e = sample_candidate();
  const std::vector<std::uint8_t> bytes(e.data(), e.data() + e.size());
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

TEST_CASE("JSON rendering writes non-finite floats as strings, so every line is JSON") {
  wire::VerdictT v;
  v.status = wire::VerdictStatus::wrong_answer;
  v.reason = "inf nan \"inf\" -inf";  // inside a string: left as it is
  v.max_abs_error = std::numeric_limits<double>::infinity();
  v.max_rel_error = std::numeric_limits<double>::quiet_NaN();
  v.candidate = std::make_unique<wire::CandidateT>();
  v.candidate->logprobs = {-std::numeric_limits<float>::infinity(), -0.5f};
  auto json = to_json(pack(header{1, 2, "sandbox_worker", 0, 1}, v));
  REQUIRE(json.ok());
  INFO(*json);
  const auto j = nlohmann::json::parse(*json, nullptr, false);
  REQUIRE_FALSE(j.is_discarded());
  const auto& p = j["payload"];
  CHECK(p["max_abs_error"] == "inf");
  CHECK(p["max_rel_error"] == "nan");
  CHECK(p["candidate"]["logprobs"][0] == "-inf");
  CHECK(p["candidate"]["logprobs"][1] == -0.5);
  CHECK(p["reason"] == "inf nan \"inf\" -inf");
}

TEST_CASE("JSON rendering keeps a message whose string is not UTF-8: each bad byte is \\u00NN") {
  // A reason is a compiler's or candidate's output, any bytes; such a message once stopped
  // `kforge inspect`, and the messages after it were lost to the reader.
  wire::VerdictT v;
  v.status = wire::VerdictStatus::compile_error;
  v.reason = std::string("bad \xff\xfe byte, caf\xc3\xa9, a \\x41 that was text");
  v.candidate = std::make_unique<wire::CandidateT>();
  auto json = to_json(pack(header{1, 2, "sandbox_worker", 0, 1}, v));
  REQUIRE_MESSAGE(json.ok(), (json.ok() ? "" : json.message()));
  INFO(*json);
  const auto j = nlohmann::json::parse(*json, nullptr, false);
  REQUIRE_FALSE(j.is_discarded());
  // \xff -> U+00FF, \xfe -> U+00FE (UTF-8 c3 bf, c3 be); valid UTF-8 and a written "\x41" stay.
  CHECK(j["payload"]["reason"] == "bad \xc3\xbf\xc3\xbe byte, caf\xc3\xa9, a \\x41 that was text");
}

namespace {

// Bytes in a holder that reports its own destruction, and can present them `skew` bytes into its
// storage (to model a frame that does not start aligned).
struct tracked_bytes {
  std::vector<std::uint8_t> storage;
  std::size_t skew = 0;
  bool* destroyed = nullptr;
  tracked_bytes(const envelope& e, std::size_t skew_by, bool* flag)
      : storage(skew_by + e.size()), skew(skew_by), destroyed(flag) {
    std::copy_n(e.data(), e.size(), storage.begin() + static_cast<std::ptrdiff_t>(skew));
  }
  tracked_bytes(tracked_bytes&& o) noexcept
      : storage(std::move(o.storage)),
        skew(o.skew),
        destroyed(std::exchange(o.destroyed, nullptr)) {}
  tracked_bytes& operator=(tracked_bytes&&) = delete;
  ~tracked_bytes() {
    if (destroyed) *destroyed = true;
  }
  const std::uint8_t* data() const { return storage.data() + skew; }
  std::size_t size() const { return storage.size() - skew; }
};

}  // namespace

TEST_CASE("adopt verifies bytes where they lie and keeps their holder while any copy lives") {
  const auto original = sample_candidate();
  bool destroyed = false;
  tracked_bytes holder(original, 0, &destroyed);
  const auto* where = holder.data();
  auto r = envelope::adopt(std::move(holder));
  REQUIRE(r.ok());
  CHECK(r->data() == where);  // not copied
  CHECK(*r == original);
  CHECK(r->as<wire::Candidate>()->code_hash() == 22);

  auto copy = *r;
  CHECK(copy.data() == where);
  void* token = copy.retain();
  r = envelope{};
  copy = envelope{};
  CHECK_FALSE(destroyed);  // the retained reference still holds it
  envelope::release(token);
  CHECK(destroyed);
}

TEST_CASE("adopt copies misaligned bytes and refuses bad ones, freeing the holder either way") {
  const auto original = sample_candidate();
  for (std::size_t skew : {1, 4, 7}) {
    bool destroyed = false;
    auto r = envelope::adopt(tracked_bytes(original, skew, &destroyed));
    REQUIRE(r.ok());
    CHECK(destroyed);  // copied, so the holder is gone already
    CHECK(reinterpret_cast<std::uintptr_t>(r->data()) % envelope_alignment == 0);
    CHECK(*r == original);
  }
  bool destroyed = false;
  tracked_bytes bad(original, 0, &destroyed);
  bad.storage[3] = 0x7f;  // the root offset now points outside the buffer
  auto r = envelope::adopt(std::move(bad));
  CHECK_FALSE(r.ok());
  CHECK(destroyed);
}

TEST_CASE("built envelopes keep the builder's buffer, aligned, whatever its size") {
  // An object larger than pack()'s initial 1 KB makes the builder reallocate first.
  wire::CandidateT c;
  c.source = std::string(100000, 'x');
  c.code_hash = 5;
  const auto big = pack(header{1, 1, "s", 0, 0}, c);
  REQUIRE(big.valid());
  CHECK(reinterpret_cast<std::uintptr_t>(big.data()) % envelope_alignment == 0);
  auto back = envelope::from_bytes(big.data(), big.size());
  REQUIRE(back.ok());
  CHECK(back->as<wire::Candidate>()->source()->size() == 100000);

  // A builder is reusable after seal(), and a plain FlatBufferBuilder works too.
  envelope_builder fbb(64);
  const auto first = seal(fbb, header{1, 1, "a", 0, 0}, wire::Payload::Blob,
                          wire::CreateBlob(fbb).Union());
  const auto second = seal(fbb, header{2, 2, "b", 0, 0}, wire::Payload::Blob,
                           wire::CreateBlob(fbb).Union());
  CHECK(first->message_id() == 1);
  CHECK(second->message_id() == 2);
  CHECK(first.data() != second.data());
  flatbuffers::FlatBufferBuilder plain;
  const auto third = seal(plain, header{3, 3, "c", 0, 0}, wire::Payload::Blob,
                          wire::CreateBlob(plain).Union());
  REQUIRE(third.valid());
  CHECK(third->message_id() == 3);
  CHECK(envelope::from_bytes(third.data(), third.size()).ok());

  // Blobs of any size, the empty one included, verify.
  for (std::size_t n : {0, 1, 255, 4096, 70000}) {
    std::vector<std::uint8_t> data(n, 0xab);
    const auto e = make_blob(header{n, 0, "bench"}, data.data(), n);
    auto v = envelope::from_bytes(e.data(), e.size());
    REQUIRE(v.ok());
    CHECK(v->as<wire::Blob>()->data()->size() == n);
  }
}
