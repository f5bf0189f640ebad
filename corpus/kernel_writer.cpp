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

}  // namespace

// The statements of forward's body, one after another (comment lines left out). Empty when the
// body cannot be found (no "def forward(" with its closing parenthesis and colon) or a statement
// spans lines (brackets left open), where joining lines would misquote it.
std::string reference_body(const tasks::task& t) {
  const std::string& r = t.reference;
  const auto def = r.find("def forward(");
  if (def == std::string::npos) return "";
  int depth = 0;
  std::size_t pos = def + 11;  // at the '('
  for (; pos < r.size(); ++pos) {
    if (r[pos] == '(') ++depth;
    if (r[pos] == ')' && --depth == 0) break;
  }
  pos = r.find(':', pos);  // after any "-> Tensor" annotation
  if (pos == std::string::npos) return "";
  std::string body;
  int open = 0;
  for (++pos; pos < r.size();) {
    auto end = r.find('\n', pos);
    if (end == std::string::npos) end = r.size();
    const auto line = r.substr(pos, end - pos);
    pos = end + 1;
    const auto first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos || line[first] == '#') continue;
    const auto last = line.find_last_not_of(" \t\r");
    const auto stmt = line.substr(first, last - first + 1);
    for (char c : stmt) open += (c == '(' || c == '[') - (c == ')' || c == ']');
    if (open != 0) return "";
    body += (body.empty() ? "" : "; ") + stmt;
  }
  return body;
}

// An explanation that starts by restating the reference teaches the policy to read it (a copy)
// before it writes the ops out in CUDA.
std::string restated_reference(const tasks::task& t) {
  const auto body = reference_body(t);
  return body.empty() ? "" : "The reference computes `" + body + "`.";
}

result<std::vector<kernel_variant>> write_kernels(const tasks::task& t) {
  auto g = lower_reference(t);
  if (!g) return g.err();
  auto p = make_plan(t, std::move(*g));
  if (!p) return p.err();
  auto out = emit(t, *p);
  if (!out) return out.err();
  // The restated reference, then at once the formulas of its ops, then the approach: what depends on
  // the task comes first, next to what it is read from.
  std::string first = restated_reference(t);
  if (!first.empty()) first += " ";
  if (const auto f = detail::op_formulas(p->g); !f.empty())
    first += "The formulas follow PyTorch's float32 kernels: " + f + ". ";
  for (auto& v : *out) v.explanation = first + v.explanation;
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
