#include "stages/chat_tokens.hpp"

#include <algorithm>
#include <filesystem>

#include "model/config.hpp"

namespace kforge::pipeline {

namespace {

std::vector<std::int32_t> narrow(const std::vector<std::int64_t>& ids) {
  return std::vector<std::int32_t>(ids.begin(), ids.end());
}

std::vector<std::int64_t> widen(const std::vector<std::int32_t>& ids) {
  return std::vector<std::int64_t>(ids.begin(), ids.end());
}

}  // namespace

result<chat_tokens> chat_tokens::load(const std::string& model_dir, const std::string& tokenizer_dir) {
  if (model_dir.empty()) return error{"no model directory given (it holds the tokenizer files)"};
  const std::string tok_dir = tokenizer_dir.empty() ? model_dir : tokenizer_dir;
  auto tok = model::tokenizer::load(tok_dir);
  if (!tok) return tok.err();
  auto defaults = model::load_generation_defaults(model_dir, *tok, tokenizer_dir);
  if (!defaults) return defaults.err();
  auto chat = model::detect_chat_format(defaults->chat_template, *tok, defaults->bos_token,
                                        (std::filesystem::path(tok_dir) / "tokenizer_config.json").string());
  if (!chat) return chat.err();
  std::vector<std::int64_t> stops = defaults->stop_tokens;
  if (stops.empty()) {
    // The engine falls back to config.json's eos ids; a server-side model may have no config here.
    const auto config = std::filesystem::path(model_dir) / "config.json";
    std::error_code ec;
    if (std::filesystem::exists(config, ec)) {
      auto c = model::load_model_config(config.string());
      if (!c) return c.err();
      stops = c->eos_token_ids;
    }
  }
  return chat_tokens(std::move(*tok), std::move(*chat), std::move(stops));
}

std::vector<std::int32_t> chat_tokens::prompt_ids(std::string_view prompt) const {
  return narrow(tok_.encode(chat_.wrap(prompt), chat_.add_special_tokens()));
}

std::vector<std::int32_t> chat_tokens::follow_up_ids(std::string_view message,
                                                     const std::vector<std::int32_t>& previous) const {
  const bool closed =
      !previous.empty() && std::find(stops_.begin(), stops_.end(), previous.back()) != stops_.end();
  return narrow(tok_.encode(chat_.follow_up(message, closed), false));
}

std::vector<std::int32_t> chat_tokens::encode(std::string_view text) const { return narrow(tok_.encode(text, true)); }

std::string chat_tokens::decode(const std::vector<std::int32_t>& ids, bool skip_special) const {
  return tok_.decode(widen(ids), skip_special);
}

std::string chat_tokens::completion_text(const std::vector<std::int32_t>& ids) const {
  std::vector<std::int32_t> body = ids;
  if (!body.empty() && std::find(stops_.begin(), stops_.end(), body.back()) != stops_.end()) body.pop_back();
  return tok_.decode(widen(body), true);
}

}  // namespace kforge::pipeline
