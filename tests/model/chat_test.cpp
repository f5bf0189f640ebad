// The chat format: recognised from the template's markers, the prompt wrapped as
// apply_chat_template(add_generation_prompt=True) renders it, unknown templates refused.
#include "model/chat.hpp"

#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "tests/model/test_files.hpp"

using namespace kforge::model;
using namespace kforge::model::testing;
using json = nlohmann::json;

namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

tokenizer load_tok(const std::string& name) {
  auto t = tokenizer::load(fixtures(name));
  REQUIRE_MESSAGE(t.ok(), (t.ok() ? "" : t.message()));
  return t.value();
}

}  // namespace

TEST_CASE("chat: ChatML from the fixture's template, its special tokens encoded as single ids") {
  const tokenizer tok = load_tok("tokenizer");
  auto d = load_generation_defaults(fixtures("qwen2"), tok, fixtures("tokenizer"));
  REQUIRE(d.ok());
  auto f = detect_chat_format(d->chat_template, tok, d->bos_token, "tokenizer_config.json");
  REQUIRE_MESSAGE(f.ok(), (f.ok() ? "" : f.message()));
  CHECK(f->style == chat_style::chatml);
  CHECK(f->system.empty());  // this template spells no default system message
  CHECK_FALSE(f->add_special_tokens());
  const std::string text = f->wrap("Write relu.");
  CHECK(text == "<|im_start|>user\nWrite relu.<|im_end|>\n<|im_start|>assistant\n");
  const auto ids = tok.encode(text, f->add_special_tokens());
  CHECK(ids.front() == 1);  // <|im_start|>
  CHECK(std::count(ids.begin(), ids.end(), 2) == 1);  // <|im_end|>
  // An observation after the assistant's turn: its end token written only when it did not stop on it.
  CHECK(f->follow_up("It failed.", true) ==
        "\n<|im_start|>user\nIt failed.<|im_end|>\n<|im_start|>assistant\n");
  CHECK(f->follow_up("It failed.", false) ==
        "<|im_end|>\n<|im_start|>user\nIt failed.<|im_end|>\n<|im_start|>assistant\n");
}

TEST_CASE("chat: a Qwen2.5-style default system message is taken from the template") {
  const tokenizer tok = load_tok("tokenizer");
  // As in Qwen2.5's tokenizer_config.json once JSON-decoded: Jinja literals with escaped newlines.
  const std::string tpl =
      "{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + messages[0]['content'] + "
      "'<|im_end|>\\n' }}{%- else %}{{- '<|im_start|>system\\nYou are Qwen, a helpful assistant.\\nBe brief."
      "<|im_end|>\\n' }}{%- endif %}{%- for message in messages %}...{%- endfor %}";
  auto f = detect_chat_format(tpl, tok, std::nullopt, "cfg");
  REQUIRE(f.ok());
  CHECK(f->system == "You are Qwen, a helpful assistant.\nBe brief.");
  CHECK(f->wrap("hi") ==
        "<|im_start|>system\nYou are Qwen, a helpful assistant.\nBe brief.<|im_end|>\n"
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
}

TEST_CASE("chat: Llama 3, raw prompts, and templates or tokens that do not fit are errors") {
  const tokenizer tok = load_tok("tokenizer");
  auto raw = detect_chat_format("", tok, std::nullopt, "cfg");
  REQUIRE(raw.ok());
  CHECK(raw->style == chat_style::raw);
  CHECK(raw->add_special_tokens());
  CHECK(raw->wrap("  as is ") == "  as is ");
  CHECK(raw->follow_up("note", true) == "\n\nnote\n\n");

  auto unknown = detect_chat_format("{% for m in messages %}[INST] {{ m.content }} [/INST]{% endfor %}", tok,
                                    std::nullopt, "dir/tokenizer_config.json");
  REQUIRE_FALSE(unknown.ok());
  CHECK(contains(unknown.message(), "dir/tokenizer_config.json: chat_template: not a format"));

  const std::string llama_tpl = "{{- bos_token }}{% for m in messages %}<|start_header_id|>{{ m.role }}"
                                "<|end_header_id|>\n\n{{ m.content | trim }}<|eot_id|>{% endfor %}";
  // The llama3 fixture tokenizer lacks the header tokens.
  const tokenizer l3 = load_tok("tokenizer_llama3");
  auto missing = detect_chat_format(llama_tpl, l3, l3.token_to_id("<|begin_of_text|>"), "cfg");
  REQUIRE_FALSE(missing.ok());
  CHECK(contains(missing.message(), "no '<|start_header_id|>' token"));

  // With them added, the conversation starts with the bos text and the content is trimmed.
  json j = json::parse(read_text(fixtures("tokenizer_llama3/tokenizer.json")));
  std::int64_t next = 0;
  for (const auto& a : j["added_tokens"]) next = std::max<std::int64_t>(next, a["id"].get<std::int64_t>() + 1);
  for (const char* t : {"<|start_header_id|>", "<|end_header_id|>"})
    j["added_tokens"].push_back({{"id", next++}, {"content", t}, {"single_word", false}, {"lstrip", false},
                                 {"rstrip", false}, {"normalized", false}, {"special", true}});
  auto full = tokenizer::parse(j.dump(), "edited");
  REQUIRE_MESSAGE(full.ok(), (full.ok() ? "" : full.message()));
  auto f = detect_chat_format(llama_tpl, *full, full->token_to_id("<|begin_of_text|>"), "cfg");
  REQUIRE_MESSAGE(f.ok(), (f.ok() ? "" : f.message()));
  CHECK(f->style == chat_style::llama3);
  CHECK(f->wrap(" go \n") ==
        "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\ngo<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n");
  CHECK(f->follow_up(" slow \n", false) ==
        "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nslow<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n");
  auto no_bos = detect_chat_format(llama_tpl, *full, std::nullopt, "cfg");
  REQUIRE_FALSE(no_bos.ok());
  CHECK(contains(no_bos.message(), "no bos_token"));
}
