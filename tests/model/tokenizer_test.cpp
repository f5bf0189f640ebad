#include "model/tokenizer.hpp"

#include <doctest/doctest.h>

#include <functional>

#include <nlohmann/json.hpp>

#include "tests/model/test_files.hpp"

using namespace kforge::model;
using namespace kforge::model::testing;
using json = nlohmann::json;

namespace {
bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Every case of a file written by make_fixtures.py: encode (ids and token strings) and decode, with
// and without special tokens.
void check_cases(const tokenizer& tok, const std::string& file, int want_encoded, int want_decoded) {
  const json cases = json::parse(read_text(fixtures(file)));
  int encoded = 0, decoded = 0;
  for (const auto& c : cases) {
    const auto ids = c["ids"].get<std::vector<std::int64_t>>();
    if (!c.value("ids_only", false)) {
      const std::string text = c["text"].get<std::string>();
      CAPTURE(text);
      CHECK(tok.encode(text) == ids);
      CHECK(tok.encode_tokens(text) == c["tokens"].get<std::vector<std::string>>());
      ++encoded;
    }
    CAPTURE(c["ids"].dump());
    CHECK(tok.decode(ids) == c["decoded"].get<std::string>());
    CHECK(tok.decode(ids, true) == c["decoded_skip_special"].get<std::string>());
    ++decoded;
  }
  CHECK(encoded == want_encoded);
  CHECK(decoded == want_decoded);
}

tokenizer fixture_tokenizer() {
  auto t = tokenizer::load(fixtures("tokenizer"));
  REQUIRE_MESSAGE(t.ok(), (t.ok() ? "" : t.message()));
  return t.value();
}
}  // namespace

TEST_CASE("tokenizer: encode and decode equal Hugging Face tokenizers on the whole fixture corpus") {
  const tokenizer tok = fixture_tokenizer();
  CHECK(tok.vocab_size() == 502);
  CHECK(tok.token_to_id("<|im_end|>") == std::optional<std::int64_t>{2});
  CHECK(tok.is_special(2));
  CHECK_FALSE(tok.is_special(500));
  CHECK(tok.id_to_token(500) == std::optional<std::string>{"<kf_tool>"});

  check_cases(tok, "tokenizer_cases.json", 54, 58);
}

TEST_CASE("tokenizer: a Llama 3 style tokenizer (ignore_merges, template adding BOS) equals tokenizers") {
  auto t = tokenizer::load(fixtures("tokenizer_llama3/tokenizer.json"));
  REQUIRE_MESSAGE(t.ok(), (t.ok() ? "" : t.message()));
  check_cases(t.value(), "tokenizer_llama3_cases.json", 53, 53);
  const auto bos = t->token_to_id("<|begin_of_text|>");
  REQUIRE(bos.has_value());
  CHECK(t->encode("x").front() == *bos);
  CHECK(t->encode("x", false).front() != *bos);
}

TEST_CASE("tokenizer: round trip, invalid UTF-8 and unknown ids") {
  const tokenizer tok = fixture_tokenizer();
  const std::string text = "__global__ void k() { /* ✓ 你好 */ }\n<|im_end|>";
  CHECK(tok.decode(tok.encode(text)) == text);
  // Invalid UTF-8 in is read as U+FFFD, as a Rust String would hold it.
  CHECK(tok.decode(tok.encode(std::string("a\xff" "b"))) == "a\xEF\xBF\xBD" "b");
  CHECK(tok.decode({100000, -1}) == "");
}

TEST_CASE("tokenizer: unsupported or malformed files are errors naming the field") {
  const std::string base = read_text(fixtures("tokenizer/tokenizer.json"));
  auto edit = [&](const std::function<void(json&)>& f) {
    json j = json::parse(base);
    f(j);
    return tokenizer::parse(j.dump(), "tok.json");
  };
  auto bad = tokenizer::parse("{\"model\": ", "tok.json");
  REQUIRE_FALSE(bad.ok());
  CHECK(contains(bad.message(), "tok.json: not valid JSON"));

  auto wordpiece = edit([](json& j) { j["model"]["type"] = "WordPiece"; });
  REQUIRE_FALSE(wordpiece.ok());
  CHECK(contains(wordpiece.message(), "model.type"));

  auto nfkc = edit([](json& j) { j["normalizer"] = {{"type", "NFKC"}}; });
  REQUIRE_FALSE(nfkc.ok());
  CHECK(contains(nfkc.message(), "normalizer"));

  auto regex = edit([](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed"; });
  REQUIRE_FALSE(regex.ok());
  CHECK(contains(regex.message(), "pre_tokenizer[0].pattern"));

  auto merge = edit([](json& j) { j["model"]["merges"][0] = json::array({"nope", "x"}); });
  REQUIRE_FALSE(merge.ok());
  CHECK(contains(merge.message(), "model.merges"));

  auto no_byte_level = edit([](json& j) { j["pre_tokenizer"] = j["pre_tokenizer"]["pretokenizers"][0]; });
  REQUIRE_FALSE(no_byte_level.ok());
  CHECK(contains(no_byte_level.message(), "tok.json: pre_tokenizer: must end with ByteLevel"));

  auto no_pre_tokenizer = edit([](json& j) { j.erase("pre_tokenizer"); });
  REQUIRE_FALSE(no_pre_tokenizer.ok());
  CHECK(contains(no_pre_tokenizer.message(), "tok.json: pre_tokenizer: must end with ByteLevel"));

  auto added = edit([](json& j) { j["added_tokens"][0].erase("id"); });
  REQUIRE_FALSE(added.ok());
  CHECK(contains(added.message(), "tok.json: added_tokens: every entry needs an integer id"));

  auto post = edit([](json& j) { j["post_processor"] = {{"type", "BertProcessing"}}; });
  REQUIRE_FALSE(post.ok());
  CHECK(contains(post.message(), "tok.json: post_processor.type: 'BertProcessing' is not supported"));

  auto decoder = edit([](json& j) { j["decoder"] = {{"type", "WordPiece"}}; });
  REQUIRE_FALSE(decoder.ok());
  CHECK(contains(decoder.message(), "tok.json: decoder: only ByteLevel is supported"));

  // The older "a b" merge format reads the same.
  auto old = edit([](json& j) {
    for (auto& m : j["model"]["merges"]) m = m[0].get<std::string>() + " " + m[1].get<std::string>();
  });
  REQUIRE(old.ok());
  const tokenizer tok = fixture_tokenizer();
  CHECK(old->encode("__global__ void add") == tok.encode("__global__ void add"));

  auto missing = tokenizer::load("/nonexistent");
  REQUIRE_FALSE(missing.ok());
  CHECK(contains(missing.message(), "/nonexistent: cannot read"));
}

TEST_CASE("tokenizer: special tokens and chat template from generation_config and tokenizer_config") {
  const tokenizer tok = fixture_tokenizer();
  auto d = load_generation_defaults(fixtures("qwen2"), tok, fixtures("tokenizer"));
  REQUIRE_MESSAGE(d.ok(), (d.ok() ? "" : d.message()));
  CHECK(d->stop_tokens == std::vector<std::int64_t>{2});  // eos 2 and "<|im_end|>" are the same
  CHECK(d->pad_token == std::optional<std::int64_t>{0});
  CHECK(d->bos_token == std::optional<std::int64_t>{1});
  CHECK(contains(d->chat_template, "<|im_start|>"));

  scratch_dir dir;
  write_text(dir.path("generation_config.json"), R"({"eos_token_id": [7, 9]})");
  write_text(dir.path("tokenizer_config.json"), R"({"eos_token": {"content": "<|im_end|>"}})");
  auto e = load_generation_defaults(dir.path(), tok);
  REQUIRE(e.ok());
  CHECK(e->stop_tokens == std::vector<std::int64_t>{7, 9, 2});
  CHECK_FALSE(e->pad_token.has_value());

  write_text(dir.path("tokenizer_config.json"), R"({"eos_token": "<|nope|>"})");
  auto unknown = load_generation_defaults(dir.path(), tok);
  REQUIRE_FALSE(unknown.ok());
  CHECK(contains(unknown.message(), "tokenizer_config.json: eos_token"));

  write_text(dir.path("generation_config.json"), "{");
  auto bad = load_generation_defaults(dir.path(), tok);
  REQUIRE_FALSE(bad.ok());
  CHECK(contains(bad.message(), "generation_config.json: not valid JSON"));

  scratch_dir empty;
  auto none = load_generation_defaults(empty.path(), tok);
  REQUIRE(none.ok());
  CHECK(none->stop_tokens.empty());
}

TEST_CASE("tokenizer: TemplateProcessing adds its special tokens with add_special_tokens") {
  json j = json::parse(read_text(fixtures("tokenizer/tokenizer.json")));
  j["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", json::array({{{"SpecialToken", {{"id", "<|im_start|>"}, {"type_id", 0}}}},
                              {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                              {{"SpecialToken", {{"id", "<|im_end|>"}, {"type_id", 0}}}}})},
      {"pair", json::array()},
      {"special_tokens", {{"<|im_start|>", {{"id", "<|im_start|>"}, {"ids", {1}}, {"tokens", {"<|im_start|>"}}}},
                          {"<|im_end|>", {{"id", "<|im_end|>"}, {"ids", {2}}, {"tokens", {"<|im_end|>"}}}}}}};
  auto t = tokenizer::parse(j.dump(), "tok.json");
  REQUIRE_MESSAGE(t.ok(), (t.ok() ? "" : t.message()));
  const auto plain = fixture_tokenizer().encode("void f()");
  auto with = t->encode("void f()");
  REQUIRE(with.size() == plain.size() + 2);
  CHECK(with.front() == 1);
  CHECK(with.back() == 2);
  CHECK(t->encode("void f()", false) == plain);
  CHECK(t->decode(with, true) == "void f()");
}

TEST_CASE("tokenizer: NFC equals Python's unicodedata.normalize on composed, decomposed and mixed text") {
  // nfc_cases.json was written with Python's unicodedata (see the commit adding it): canonical
  // reordering, Hangul, composition exclusions, singletons and blocked marks.
  const json cases = json::parse(read_text(fixtures("nfc_cases.json")));
  int changed = 0;
  for (const auto& c : cases) {
    const std::string text = c["text"].get<std::string>();
    CAPTURE(text);
    CHECK(nfc(text) == c["nfc"].get<std::string>());
    changed += nfc(text) != text;
  }
  CHECK(changed > 30);
  CHECK(nfc("plain ASCII and caf\xC3\xA9") == "plain ASCII and caf\xC3\xA9");

  // The tokenizer normalises before the pre-tokenizer: decomposed input encodes as composed.
  const tokenizer tok = fixture_tokenizer();
  CHECK(tok.encode("cafe\xCC\x81 na\xC3\xAFve") == tok.encode("caf\xC3\xA9 na\xC3\xAFve"));
}
