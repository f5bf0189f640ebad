#pragma once
// The chat format of a checkpoint, for wrapping one user prompt the way transformers'
// apply_chat_template(messages=[{"role": "user", ...}], add_generation_prompt=True) renders it.
//
// The Jinja template of tokenizer_config.json is not executed (no Jinja engine here): it is
// recognised by the markers of the two families the policy comes from, and an unrecognised one is
// an error rather than a prompt the model was never trained on:
//   ChatML (Qwen):  [<|im_start|>system\nDEFAULT<|im_end|>\n]<|im_start|>user\nPROMPT<|im_end|>\n
//                   <|im_start|>assistant\n
//                   DEFAULT is the template's default system message when it spells one as a
//                   literal (Qwen2.5: "You are Qwen, created by Alibaba Cloud. ...").
//   Llama 3:        BOS<|start_header_id|>user<|end_header_id|>\n\nPROMPT(trimmed)<|eot_id|>
//                   <|start_header_id|>assistant<|end_header_id|>\n\n
//                   (Llama 3.1's dated default system block is not reproduced.)
// No template: the prompt is used as it is, tokenized with the tokenizer's own special tokens.
// Torch-free.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/result.hpp"
#include "model/tokenizer.hpp"

namespace kforge::model {

enum class chat_style { raw, chatml, llama3 };

struct chat_format {
  chat_style style = chat_style::raw;
  /// ChatML: the default system message, empty when the template has none.
  std::string system;
  /// Llama 3: the text of the bos token that starts every conversation.
  std::string bos;

  /// The text to tokenize for one user message, the assistant's turn opened.
  std::string wrap(std::string_view user) const;
  /// The text that follows the assistant's turn with one more user message (an observation of an
  /// agent episode) and opens the assistant's next turn. `closed`: the assistant's turn already
  /// ended with its end token (<|im_end|>, <|eot_id|>), which is then not written again. Raw: the
  /// message between blank lines.
  std::string follow_up(std::string_view user, bool closed) const;
  /// Whether to tokenize with the tokenizer's post-processor (a bos, ...): only raw prompts; a
  /// wrapped one already carries its special tokens, as apply_chat_template's text does.
  bool add_special_tokens() const noexcept { return style == chat_style::raw; }
  /// "raw", "ChatML" or "Llama 3", for logs.
  std::string_view name() const noexcept;
};

/// The format `chat_template` (tokenizer_config.json's, as load_generation_defaults returns it)
/// describes; its special tokens must be known to `tok`. `bos_token` is the checkpoint's bos id
/// (Llama 3 needs it). `source` (the config file) prefixes errors.
[[nodiscard]] result<chat_format> detect_chat_format(const std::string& chat_template, const tokenizer& tok,
                                                     std::optional<std::int64_t> bos_token,
                                                     const std::string& source);

}  // namespace kforge::model
