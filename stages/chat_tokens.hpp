#pragma once
// A checkpoint's tokenizer, chat format and stop tokens without its weights: what a sampler whose
// model runs elsewhere (the openai backend, `kforge serve`'s text endpoints) needs to send the very
// prompt ids the in-process engine would feed its model, and to read back what it sampled.
// Loaded as the engine loads them (stages/engine_sampler.cpp): generation_config.json and
// tokenizer_config.json for stops and the chat template, config.json's eos ids when those give
// none. Torch-free.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.hpp"
#include "model/chat.hpp"
#include "model/tokenizer.hpp"

namespace kforge::pipeline {

class chat_tokens {
 public:
  /// `model_dir` holds config.json and generation_config.json; `tokenizer_dir` (empty: the model
  /// directory) tokenizer.json and tokenizer_config.json. Errors name the file and what is wrong.
  [[nodiscard]] static result<chat_tokens> load(const std::string& model_dir, const std::string& tokenizer_dir = "");

  /// A prompt wrapped in the chat format and tokenized, as the engine sampler feeds it.
  std::vector<std::int32_t> prompt_ids(std::string_view prompt) const;
  /// A user message following the model's turn `previous` (engine_policy::follow_up_ids).
  std::vector<std::int32_t> follow_up_ids(std::string_view message, const std::vector<std::int32_t>& previous) const;
  /// Plain text tokenized without any chat wrapping (a completions prompt given as a string).
  std::vector<std::int32_t> encode(std::string_view text) const;
  /// Text of ids; special tokens left out when `skip_special`.
  std::string decode(const std::vector<std::int32_t>& ids, bool skip_special = false) const;
  /// Text of a completion as the engine reports it: special tokens and a final stop token left out.
  std::string completion_text(const std::vector<std::int32_t>& ids) const;

  const std::vector<std::int64_t>& stops() const noexcept { return stops_; }
  std::int64_t vocab_size() const { return tok_.vocab_size(); }

 private:
  chat_tokens(model::tokenizer t, model::chat_format c, std::vector<std::int64_t> stops)
      : tok_(std::move(t)), chat_(std::move(c)), stops_(std::move(stops)) {}

  model::tokenizer tok_;
  model::chat_format chat_;
  std::vector<std::int64_t> stops_;
};

}  // namespace kforge::pipeline
