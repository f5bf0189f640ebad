#include <set>

#include "corpus/cuda_expr.hpp"
#include "corpus/emit.hpp"

namespace kforge::corpus::detail {

std::string file_head(const tasks::task& t, const std::string& variant) {
  // No task id: a policy trained on these files would recall a training task by its id (a
  // held-out task's id is new to it) instead of reading the reference.
  (void)t;
  return "// " + variant + " variant, written by kforge corpus.\n#include <kforge/kernel_abi.h>\n\n";
}

std::string host_helpers(const tasks::task& t) {
  std::string s;
  s += "// The inputs and outputs the task declares, all float32.\n";
  s += "static int kf_check_args(const kf_tensor* inputs, int32_t num_inputs, const kf_tensor* "
       "outputs,\n                         int32_t num_outputs) {\n";
  s += count_check(t);
  s += "  for (int32_t i = 0; i < num_inputs; ++i)\n"
       "    if (inputs[i].dtype != KF_FLOAT32 || inputs[i].ndim > KF_MAX_DIMS) return 2;\n";
  s += "  for (int32_t i = 0; i < num_outputs; ++i)\n"
       "    if (outputs[i].dtype != KF_FLOAT32 || outputs[i].ndim > KF_MAX_DIMS) return 2;\n";
  s += "  return 0;\n}\n\n";
  s += "// Strides of `t` aligned right to an iteration shape, 0 along dims where it broadcasts.\n";
  s += "static int kf_bcast(const kf_tensor* t, int ndim, const int64_t* shape, int64_t* st) {\n"
       "  for (int d = 0; d < ndim; ++d) st[d] = 0;\n"
       "  const int lead = ndim - t->ndim;\n"
       "  if (lead < 0) return 3;\n"
       "  for (int d = 0; d < t->ndim; ++d) {\n"
       "    if (t->shape[d] == shape[lead + d])\n"
       "      st[lead + d] = t->shape[d] == 1 ? 0 : t->strides[d];\n"
       "    else if (t->shape[d] != 1)\n"
       "      return 3;\n"
       "  }\n"
       "  return 0;\n}\n\n";
  return s;
}

result<std::string> op_function(const tasks::task& t, const plan& p) {
  std::string params;
  for (std::size_t k = 0; k < p.operands.size(); ++k) params += "float x" + std::to_string(k) + ", ";
  for (std::size_t j = 0; j < t.outputs.size(); ++j)
    params += std::string(j ? ", " : "") + "float& y" + std::to_string(j);
  expr_emitter em(p.g, "  ");
  std::string body;
  auto leaf = [&](int id) -> result<std::string> {
    auto it = p.leaf_operand.find(id);
    if (it == p.leaf_operand.end()) return unsupported("a leaf the map cannot read");
    return "x" + std::to_string(it->second);
  };
  for (std::size_t j = 0; j < t.outputs.size(); ++j) {
    auto v = em.float_value(p.g.outputs[j], body, leaf);
    if (!v) return v.err();
    body += "  y" + std::to_string(j) + " = " + *v + ";\n";
  }
  // The comment restates the reference and its ops' formulas next to the code they become, so the
  // CUDA follows from the lines right above it (a small policy wrote its usual chain here when the
  // op was only named ~200 tokens before: kforge-tiny v7, 2026-12-02).
  std::string comment = "// One element of the reference";
  if (const auto body = reference_body(t); !body.empty()) comment += ": " + body;
  comment += "\n";
  if (const auto formulas = op_formulas(p.g); !formulas.empty()) comment += "// " + formulas + ".\n";
  return comment + "__device__ __forceinline__ void kf_op(" + params + ") {\n" + body + "}\n\n";
}

std::string op_call(const tasks::task& t, const plan& p, const std::function<std::string(std::size_t)>& operand,
                    const std::function<std::string(std::size_t)>& output) {
  std::string s = "kf_op(";
  for (std::size_t k = 0; k < p.operands.size(); ++k) s += operand(k) + ", ";
  for (std::size_t j = 0; j < t.outputs.size(); ++j) s += std::string(j ? ", " : "") + output(j);
  return s + ");";
}

std::string float4_lanes(const tasks::task& t, const plan& p, const std::string& indent) {
  std::string s;
  for (const std::string lane : {"x", "y", "z", "w"})
    s += indent + op_call(t, p, [&](std::size_t k) { return "a" + std::to_string(k) + "." + lane; },
                          [&](std::size_t j) { return "r" + std::to_string(j) + "." + lane; }) + "\n";
  return s;
}

std::string grid_helper(int max_blocks) {
  const auto cap = std::to_string(max_blocks);
  return "static unsigned kf_grid(int64_t work, int threads) {\n"
         "  int64_t blocks = (work + threads - 1) / threads;\n"
         "  if (blocks > " + cap + ") blocks = " + cap + ";\n"
         "  return blocks < 1 ? 1u : (unsigned)blocks;\n}\n\n";
}

// The counts under a comment naming the tensors as the prompt lists them ("Inputs (2, ...)" and
// "- [0] `x`"), so the numbers are copied from the task rather than recalled from another one.
std::string count_check(const tasks::task& t) {
  auto names = [](const auto& specs) {
    std::string s;
    for (const auto& spec : specs) s += (s.empty() ? "`" : ", `") + spec.name + "`";
    return s;
  };
  return "  // Inputs (" + std::to_string(t.inputs.size()) + "): " + names(t.inputs) + ". Outputs (" +
         std::to_string(t.outputs.size()) + "): " + names(t.outputs) + ".\n" +
         "  if (num_inputs != " + std::to_string(t.inputs.size()) +
         " || num_outputs != " + std::to_string(t.outputs.size()) + ") return 1;\n";
}

std::string forward_head() {
  return "extern \"C\" int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs,\n"
         "                          int32_t num_outputs, void* workspace, cudaStream_t stream) {\n"
         "  (void)workspace;\n";
}

std::string dense_helper() {
  return "// A float32 tensor, contiguous, with n elements: how this kernel reads and writes them.\n"
         "static bool kf_dense(const kf_tensor& t, int64_t n) {\n"
         "  return t.dtype == KF_FLOAT32 && kf_is_contiguous(&t) && kf_numel(&t) == n;\n}\n\n";
}

std::string dense_pointers(const tasks::task& t, const plan& p) {
  std::string s;
  for (std::size_t k = 0; k < p.operands.size(); ++k)
    s += "  const float* in" + std::to_string(k) + " = static_cast<const float*>(inputs[" +
         std::to_string(p.operands[k]) + "].data);\n";
  for (std::size_t j = 0; j < t.outputs.size(); ++j)
    s += "  float* out" + std::to_string(j) + " = static_cast<float*>(outputs[" + std::to_string(j) +
         "].data);\n";
  return s;
}

std::string fill_operand_strides(const plan& p, const std::string& it, const std::string& indent) {
  std::string s;
  for (std::size_t k = 0; k < p.operands.size(); ++k) {
    if (p.operands[k] < 0) continue;
    s += indent + "if (kf_bcast(&inputs[" + std::to_string(p.operands[k]) + "], " + it +
         ".ndim, " + it + ".shape, " + it + ".st[" + std::to_string(k) + "])) return 3;\n";
  }
  return s;
}

std::string fill_operand_pointers(const plan& p, const std::string& ptrs,
                                  const std::string& indent) {
  std::string s;
  for (std::size_t k = 0; k < p.operands.size(); ++k) {
    if (p.operands[k] < 0) continue;
    s += indent + ptrs + ".in[" + std::to_string(k) + "] = static_cast<const float*>(inputs[" +
         std::to_string(p.operands[k]) + "].data);\n";
  }
  return s;
}

std::vector<int> all_nodes(const graph& g) {
  std::vector<int> v;
  for (std::size_t i = 0; i < g.nodes.size(); ++i) v.push_back(static_cast<int>(i));
  return v;
}

std::string op_formulas(const graph& g) {
  std::string s;
  for (const auto& line : describe_ops(g, all_nodes(g))) s += (s.empty() ? "" : "; ") + line;
  return s;
}

}  // namespace kforge::corpus::detail
