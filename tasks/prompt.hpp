#pragma once
// Prompts: a task rendered for the policy (the reference, its shapes and dtypes, the candidate ABI
// and its rules, the GPU it will run on), and the kernel source taken back out of a completion.
//
// The embedded template puts what every task shares first (the ABI, its rules, the GPU) and the
// task itself last, just before the answer: the reference is then a short look back for the policy
// (kforge-tiny, 7 M parameters, did not learn to copy it from ~1,400 tokens back), and prompts of
// one GPU share a long common prefix.
//
// The format lives in one template file, tasks/prompt_template.txt, embedded at build time; a user
// may pass their own file instead. A template is plain text with `{{name}}` placeholders (spaces
// inside the braces are allowed); prompt_placeholders() lists the names. A `{{` that is not
// followed by an identifier and `}}` is ordinary text, so brace initialisers in code are safe. An
// unknown name is an error naming it and its line, found when the template is loaded, not when
// the first prompt is built.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/gpu_facts.hpp"
#include "common/result.hpp"
#include "tasks/task.hpp"

namespace kforge::tasks {

/// The GPU a prompt describes, from the device or the manifest. A zero or empty field is
/// unknown, and the prompt says "unknown".
using hardware_context = kforge::gpu_facts;

/// The embedded default template (tasks/prompt_template.txt).
std::string_view default_prompt_template();

/// The text of include/kforge/kernel_abi.h, embedded at build time.
std::string_view kernel_abi_header();

/// Every placeholder name a prompt template may use, sorted.
const std::vector<std::string>& prompt_placeholders();

/// Replaces each `{{name}}` in `text` with values.at(name). An error when a name has no value,
/// listing every such name with its line: "unknown placeholder {{foo}} (line 3); known: ...".
/// `origin` ("prompt template FILE") prefixes the message.
result<std::string> render_template(std::string_view text,
                                    const std::map<std::string, std::string>& values,
                                    std::string_view origin = "prompt template");

/// The value of every placeholder for `t` on `hw`.
std::map<std::string, std::string> prompt_values(const task& t, const hardware_context& hw);

/// A checked template, ready to render prompts.
class prompt_template {
 public:
  /// The embedded default.
  static prompt_template embedded();
  /// `text`, checked: an error names `origin` and every unknown placeholder.
  static result<prompt_template> from_text(std::string text, std::string origin);
  /// The file at `path` (a user's template), checked; an error names the file.
  static result<prompt_template> load(const std::string& path);

  /// The prompt for `t` on `hw`.
  std::string render(const task& t, const hardware_context& hw) const;

  const std::string& text() const noexcept { return text_; }
  const std::string& origin() const noexcept { return origin_; }

 private:
  prompt_template(std::string text, std::string origin)
      : text_(std::move(text)), origin_(std::move(origin)) {}
  std::string text_;
  std::string origin_;
};

/// The prompt for `t` on `hw` with the embedded template.
std::string build_prompt(const task& t, const hardware_context& hw);

/// Stable across processes and hosts (fnv1a64 of the prompt's bytes); the buffer dedups by it.
std::uint64_t prompt_hash(std::string_view prompt) noexcept;

/// The kernel source in a completion: the body of the last fenced block (```cuda, ```cu, ```cpp,
/// ```c++, ```c or a bare ```) that mentions kf_forward. A fence may be indented and longer than
/// three backticks; it closes at a line of at least as many backticks. An error says what was
/// found instead (no fenced block, blocks without kf_forward, an unterminated fence).
result<std::string> extract_kernel_source(std::string_view completion);

/// Why `text`, a candidate's source, holds no kernel to judge because it is a malformed fenced
/// answer: it has a line that opens a fence (the rule extract_kernel_source uses) and no kernel
/// can be extracted from it (most often a completion cut off inside its block, which the sampler
/// hands over whole). The extraction's message; nullopt where `text` has no fence line (bare code
/// or prose, for the compiler to judge) or a kernel can be extracted.
std::optional<std::string> fenced_answer_problem(std::string_view text);

}  // namespace kforge::tasks
