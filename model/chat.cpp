#include "model/chat.hpp"

#include <cctype>

#include "common/text.hpp"

namespace kforge::model {
namespace {

constexpr std::string_view im_start = "<|im_start|>";
constexpr std::string_view im_end = "<|im_end|>";

bool has(std::string_view s, std::string_view part) { return s.find(part) != std::string_view::npos; }

// A Jinja string literal's escapes as they appear in templates (\n, \t, \', \", \\).
std::string unescape(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 == s.size()) {
      out.push_back(s[i]);
      continue;
    }
    const char c = s[++i];
    out.push_back(c == 'n' ? '\n' : c == 't' ? '\t' : c);
  }
  return out;
}

// The default system message a ChatML template spells as one literal:
// '<|im_start|>system\nTEXT<|im_end|>\n' (TEXT holding no quote or Jinja expression). Empty when
// there is none (the system turn is then only written when the caller gives one).
std::string default_system(std::string_view tpl) {
  const std::string head = std::string(im_start) + "system\\n";  // the template's escaped "\n"
  for (std::size_t at = tpl.find(head); at != std::string_view::npos; at = tpl.find(head, at + 1)) {
    const std::size_t from = at + head.size();
    const std::size_t to = tpl.find(im_end, from);
    if (to == std::string_view::npos) break;
    const std::string_view text = tpl.substr(from, to - from);
    if (text.empty() || text.find_first_of("'\"{}") != std::string_view::npos) continue;
    return unescape(text);
  }
  return {};
}

}  // namespace

std::string chat_format::wrap(std::string_view user) const {
  switch (style) {
    case chat_style::raw:
      return std::string(user);
    case chat_style::chatml: {
      std::string out;
      if (!system.empty()) out += std::string(im_start) + "system\n" + system + std::string(im_end) + "\n";
      out += std::string(im_start) + "user\n";
      out += user;
      out += std::string(im_end) + "\n" + std::string(im_start) + "assistant\n";
      return out;
    }
    case chat_style::llama3: {
      std::string out = bos + "<|start_header_id|>user<|end_header_id|>\n\n";
      out += trim(user);
      out += "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n";
      return out;
    }
  }
  return std::string(user);
}

std::string chat_format::follow_up(std::string_view user, bool closed) const {
  switch (style) {
    case chat_style::raw:
      return "\n\n" + std::string(user) + "\n\n";
    case chat_style::chatml:
      return (closed ? std::string() : std::string(im_end)) + "\n" + std::string(im_start) + "user\n" +
             std::string(user) + std::string(im_end) + "\n" + std::string(im_start) + "assistant\n";
    case chat_style::llama3:
      return (closed ? std::string() : std::string("<|eot_id|>")) +
             "<|start_header_id|>user<|end_header_id|>\n\n" + std::string(trim(user)) +
             "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n";
  }
  return std::string(user);
}

std::string_view chat_format::name() const noexcept {
  switch (style) {
    case chat_style::raw: return "raw";
    case chat_style::chatml: return "ChatML";
    case chat_style::llama3: return "Llama 3";
  }
  return "?";
}

result<chat_format> detect_chat_format(const std::string& chat_template, const tokenizer& tok,
                                       std::optional<std::int64_t> bos_token, const std::string& source) {
  chat_format f;
  if (trim(chat_template).empty()) return f;
  auto need = [&](std::initializer_list<std::string_view> tokens, std::string_view family) -> status {
    for (auto t : tokens)
      if (!tok.token_to_id(t))
        return error{source + ": chat_template: a " + std::string(family) + " template, but the tokenizer has no '" +
                     std::string(t) + "' token"};
    return status::success();
  };
  if (has(chat_template, im_start)) {
    if (auto s = need({im_start, im_end}, "ChatML"); !s) return s.err();
    f.style = chat_style::chatml;
    f.system = default_system(chat_template);
    return f;
  }
  if (has(chat_template, "<|start_header_id|>")) {
    if (auto s = need({"<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"}, "Llama 3"); !s) return s.err();
    if (!bos_token) return error{source + ": chat_template: a Llama 3 template, but no bos_token is configured"};
    auto bos = tok.id_to_token(*bos_token);
    if (!bos)
      return error{source + ": chat_template: bos token id " + std::to_string(*bos_token) +
                   " is not in the tokenizer"};
    f.style = chat_style::llama3;
    f.bos = *bos;
    return f;
  }
  return error{source + ": chat_template: not a format the engine knows how to render (ChatML with <|im_start|>, "
                        "or Llama 3 with <|start_header_id|>); remove chat_template to use raw prompts"};
}

}  // namespace kforge::model
