#include "corpus/kernel_writer.hpp"

#include <cctype>

#include "corpus/emit.hpp"
#include "corpus/graph_ir.hpp"
#include "corpus/plan.hpp"

namespace kforge::corpus {

result<std::vector<kernel_variant>> write_kernels(const tasks::task& t) {
  auto g = lower_reference(t);
  if (!g) return g.err();
  auto p = make_plan(t, std::move(*g));
  if (!p) return p.err();
  switch (p->kind) {
    case plan_kind::elementwise:
      return p->dense ? detail::emit_dense_map(t, *p) : detail::emit_elementwise(t, *p);
    case plan_kind::rows: return detail::emit_rows(t, *p);
    case plan_kind::gemm: return detail::emit_gemm(t, *p);
  }
  return unsupported("no writer for this plan");
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
