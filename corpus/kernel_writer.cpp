#include "corpus/kernel_writer.hpp"

#include <cctype>

#include "corpus/emit.hpp"
#include "corpus/graph_ir.hpp"
#include "corpus/plan.hpp"

namespace kforge::corpus {

namespace {

result<std::vector<kernel_variant>> emit(const tasks::task& t, const plan& p) {
  switch (p.kind) {
    case plan_kind::elementwise:
      return p.dense ? detail::emit_dense_map(t, p) : detail::emit_elementwise(t, p);
    case plan_kind::rows: return detail::emit_rows(t, p);
    case plan_kind::gemm: return detail::emit_gemm(t, p);
  }
  return unsupported("no writer for this plan");
}

// "The reference computes `y = torch.silu(x); return y`.": the body of forward, one statement
// after another. An explanation that starts by restating it teaches the policy to read the
// reference (a copy) before it writes the ops out in CUDA.
std::string restated_reference(const tasks::task& t) {
  std::string body;
  std::size_t pos = t.reference.find(':');  // the end of "def forward(...):"
  pos = pos == std::string::npos ? 0 : pos + 1;
  while (pos < t.reference.size()) {
    auto end = t.reference.find('\n', pos);
    if (end == std::string::npos) end = t.reference.size();
    auto line = t.reference.substr(pos, end - pos);
    const auto first = line.find_first_not_of(" \t\r");
    const auto last = line.find_last_not_of(" \t\r");
    if (first != std::string::npos) body += (body.empty() ? "" : "; ") + line.substr(first, last - first + 1);
    pos = end + 1;
  }
  return "The reference computes `" + body + "`. ";
}

}  // namespace

result<std::vector<kernel_variant>> write_kernels(const tasks::task& t) {
  auto g = lower_reference(t);
  if (!g) return g.err();
  auto p = make_plan(t, std::move(*g));
  if (!p) return p.err();
  auto out = emit(t, *p);
  if (!out) return out.err();
  const auto restated = restated_reference(t);
  for (auto& v : *out) v.explanation = restated + v.explanation;
  return out;
}

std::string completion_text(const kernel_variant& v) {
  return v.explanation + "\n\n```cuda\n" + v.source + "```\n";
}

std::string reason_key(const std::string& message) {
  std::string s = message;
  if (s.rfind("unsupported: ", 0) == 0) s = s.substr(13);
  if (s.rfind("op aten::", 0) == 0) return s.substr(0, s.find(' ', 3));
  std::size_t end = 0;
  while (end < s.size() && end < 60 && s[end] != '\'' && s[end] != '(' && s[end] != ':' &&
         !std::isdigit(static_cast<unsigned char>(s[end])))
    ++end;
  s.resize(end);
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s.empty() ? "other" : s;
}

}  // namespace kforge::corpus
