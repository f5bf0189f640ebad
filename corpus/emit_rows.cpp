// Row programs: the iteration space F (the shape of the reduced tensors) seen as rows = (outer,
// inner) pairs, each with `red` elements along the reduced dims. Each reduction is one pass over
// the row (a softmax: a max pass, a sum pass over exp(x - max), then a pass writing the outputs);
// values per row (the max, the sum, a variance) stay in registers between passes. Variants differ
// only in who works on a row: one thread (sequential, double accumulators for sums), one
// 256-thread block (strided partial results, shared-memory tree), or one warp (shuffles).
#include <set>

#include "corpus/cuda_expr.hpp"
#include "corpus/emit.hpp"
#include "corpus/emit_rows.hpp"

namespace kforge::corpus::detail {
namespace {

struct style {
  std::string name;
  std::string first, step;  // the loop over one row's elements
  std::string guard;        // which thread writes a row's per-row outputs
  bool wide_acc;            // sums and products accumulate in double (sequential summation)
  std::string reduce_prefix;  // "kf_block_" (with the shared buffer) / "kf_warp_" / "" (none)
};

// Sums and products: the reductions whose accumulators are widened to double where asked
// (max and min lose nothing in float).
bool widens(const std::string& op) { return op == "sum" || op == "prod"; }

std::string identity(const std::string& op) {
  if (op == "sum") return "0.0f";
  if (op == "prod") return "1.0f";
  if (op == "max") return "__int_as_float(0xff800000)";
  return "__int_as_float(0x7f800000)";
}

std::string combine(const std::string& op, const std::string& acc, const std::string& v,
                    bool wide) {
  if (op == "sum") return acc + " += " + (wide ? "(double)" : "") + v + ";";
  if (op == "prod") return acc + " *= " + (wide ? "(double)" : "") + v + ";";
  if (op == "max") return acc + " = fmaxf(" + acc + ", " + v + ");";
  return acc + " = fminf(" + acc + ", " + v + ");";
}

std::string reducer_functions(const std::set<std::string>& ops, const std::string& prefix) {
  std::string s;
  for (const auto& op : ops) {
    const std::string f = op == "sum"    ? "a + b"
                          : op == "prod" ? "a * b"
                          : op == "max"  ? "fmaxf(a, b)"
                                         : "fminf(a, b)";
    if (prefix == "kf_block_") {
      s += "// Tree reduction over the block (blockDim.x a power of two); every thread gets the result.\n";
      s += "__device__ float kf_block_" + op + "(float v, float* sh) {\n"
           "  sh[threadIdx.x] = v;\n  __syncthreads();\n"
           "  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {\n"
           "    if (threadIdx.x < s) {\n      const float a = sh[threadIdx.x], b = sh[threadIdx.x + s];\n"
           "      sh[threadIdx.x] = " + f + ";\n    }\n    __syncthreads();\n  }\n"
           "  const float r = sh[0];\n  __syncthreads();\n  return r;\n}\n\n";
    } else if (prefix == "kf_warp_") {
      s += "// Butterfly reduction over the warp; every lane gets the result.\n";
      s += "__device__ __forceinline__ float kf_warp_" + op + "(float a) {\n"
           "  for (int o = 16; o > 0; o >>= 1) {\n"
           "    const float b = __shfl_xor_sync(0xffffffffu, a, o);\n    a = " + f + ";\n  }\n"
           "  return a;\n}\n\n";
    }
  }
  return s;
}

// The statements processing one row (in scope: p, a, row, sh when blocks cooperate).
result<std::string> row_body(const tasks::task& t, const plan& p, const style& st) {
  const graph& g = p.g;
  const std::size_t nops = p.operands.size();
  std::string s;
  // Where operand k / output j is read or written at position r of the row.
  auto operand_at = [&](std::size_t k) {
    const auto ks = std::to_string(k);
    if (p.dense) return "p.in[" + ks + "][" + (p.row_shaped[k] ? "r" : "row * a.red + r") + "]";
    return "p.in[" + ks + "][b" + ks + " + kf_part(a, " + ks + ", r, a.d0, a.d1)]";
  };
  auto output_at = [&](std::size_t j) {
    const auto js = std::to_string(j);
    if (p.dense) return "p.out[" + js + "][row * a.red + r]";
    return "p.out[" + js + "][bo" + js + " + kf_part(a, KF_NOPS + " + js + ", r, a.d0, a.d1)]";
  };
  for (std::size_t k = 0; k < nops && !p.dense; ++k)
    s += "  const int64_t b" + std::to_string(k) + " = kf_base(a, " + std::to_string(k) + ", row);\n";
  for (std::size_t j = 0; j < t.outputs.size() && !p.dense; ++j)
    if (p.output_levels[j] == level::full)
      s += "  const int64_t bo" + std::to_string(j) + " = kf_base(a, KF_NOPS + " +
           std::to_string(j) + ", row);\n";

  int names = 0;  // one numbering for every emitter of this kernel: nested scopes read outer names
  expr_emitter rowem(g, "  ", names);
  std::function<result<std::string>(int)> row_leaf = [&](int id) -> result<std::string> {
    const auto& n = g.nodes[static_cast<std::size_t>(id)];
    if (n.kind == node_kind::row_count) return std::string("(float)a.red");
    return unsupported("a per-row value computed out of order");
  };
  // A full-level pass: `pre` collects per-row statements it needs (before the loop).
  auto full_leaf = [&](std::string& pre) {
    return [&, pre_ptr = &pre](int id) -> result<std::string> {
      if (auto it = p.leaf_operand.find(id); it != p.leaf_operand.end())
        return operand_at(static_cast<std::size_t>(it->second));
      if (p.levels[static_cast<std::size_t>(id)] == level::row)
        return rowem.value(id, *pre_ptr, row_leaf);
      return unsupported("a value the row program cannot read");
    };
  };
  const std::string loop = "    for (int64_t r = " + st.first + "; r < a.red; r += " + st.step + ") {\n";
  int reductions = 0;
  for (int red : p.reductions) {
    const auto& n = g.nodes[static_cast<std::size_t>(red)];
    const auto r = std::to_string(++reductions);  // r1, r2, ... in the order the passes run
    std::string pre, body;
    expr_emitter em(g, "      ", names);
    auto v = em.float_value(n.args[0], body, full_leaf(pre));
    if (!v) return v.err();
    const bool wide = st.wide_acc && widens(n.op);
    s += pre;
    s += "  float r" + r + ";\n  {  // " + n.op + " over the row\n";
    s += std::string("    ") + (wide ? "double" : "float") + " acc = " + identity(n.op) + ";\n";
    s += loop + body + "      " + combine(n.op, "acc", *v, wide) + "\n    }\n";
    const std::string partial = wide ? "(float)acc" : "acc";
    if (st.reduce_prefix == "kf_block_")
      s += "    r" + r + " = kf_block_" + n.op + "(" + partial + ", sh);\n";
    else if (st.reduce_prefix == "kf_warp_")
      s += "    r" + r + " = kf_warp_" + n.op + "(" + partial + ");\n";
    else
      s += "    r" + r + " = (float)acc;\n";
    s += "  }\n";
    rowem.bind(red, "r" + r);
  }
  // Outputs: full-level ones in a last pass, per-row ones by one thread.
  bool any_full = false;
  for (auto l : p.output_levels) any_full = any_full || l == level::full;
  if (any_full) {
    std::string pre, body;
    expr_emitter em(g, "      ", names);
    for (std::size_t j = 0; j < t.outputs.size(); ++j) {
      if (p.output_levels[j] != level::full) continue;
      auto v = em.float_value(g.outputs[j], body, full_leaf(pre));
      if (!v) return v.err();
      body += "      " + output_at(j) + " = " + *v + ";\n";
    }
    s += pre + "  {  // write the outputs\n" + loop + body + "    }\n  }\n";
  }
  std::string row_out;
  for (std::size_t j = 0; j < t.outputs.size(); ++j) {
    if (p.output_levels[j] != level::row) continue;
    auto v = rowem.float_value(g.outputs[j], s, row_leaf);
    if (!v) return v.err();
    row_out += "    p.out[" + std::to_string(j) + "][row] = " + *v + ";\n";
  }
  if (!row_out.empty()) s += "  if (" + st.guard + ") {\n" + row_out + "  }\n";
  // Per-row values go into `pre`, ahead of the pass whose emitter numbered its own values first:
  // renumbered in reading order, v1, v2, ... run down the file.
  return renumber_values(s);
}

std::string row_types(const tasks::task& t, const plan& p) {
  std::string s;
  s += "#define KF_NOPS " + std::to_string(std::max<std::size_t>(1, p.operands.size())) + "\n";
  s += "#define KF_NOUT " + std::to_string(t.outputs.size()) + "\n\n";
  s += "// The reduced tensor's shape F, split into rows: dims [0, d0) and [d1, ndim) index a row,\n"
       "// dims [d0, d1) run along it. Strides per operand (0 where it broadcasts), then per output.\n";
  s += "struct kf_rows {\n  int ndim, d0, d1;\n  int64_t rows, red, inner;\n"
       "  int64_t shape[KF_MAX_DIMS];\n  int64_t st[KF_NOPS + KF_NOUT][KF_MAX_DIMS];\n};\n";
  s += "struct kf_ptrs {\n  const float* in[KF_NOPS];\n  float* out[KF_NOUT];\n};\n\n";
  s += "// Offset along dims [lo, hi) of tensor k for the row-major index idx over those dims.\n";
  s += "__device__ __forceinline__ int64_t kf_part(const kf_rows& a, int k, int64_t idx, int lo, int hi) {\n"
       "  int64_t off = 0;\n"
       "  for (int d = hi - 1; d >= lo; --d) {\n"
       "    off += (idx % a.shape[d]) * a.st[k][d];\n    idx /= a.shape[d];\n  }\n"
       "  return off;\n}\n\n";
  s += "__device__ __forceinline__ int64_t kf_base(const kf_rows& a, int k, int64_t row) {\n"
       "  return kf_part(a, k, row / a.inner, 0, a.d0) + kf_part(a, k, row % a.inner, a.d1, a.ndim);\n}\n\n";
  return s;
}

std::string dense_row_types(const tasks::task& t, const plan& p) {
  std::string s;
  s += "#define KF_NOPS " + std::to_string(p.operands.size()) + "\n";
  s += "#define KF_NOUT " + std::to_string(t.outputs.size()) + "\n\n";
  s += "// Rows of `red` contiguous elements (the reduced trailing dims); every tensor is contiguous.\n";
  s += "struct kf_rows {\n  int64_t rows, red;\n};\n";
  s += "struct kf_ptrs {\n  const float* in[KF_NOPS];\n  float* out[KF_NOUT];\n};\n\n";
  return s;
}

// The end of a dense row program's host code, once `a` (and `n` where a full-size tensor needs
// it) is set: per output whether it holds a value per row or per element, said by name before
// it is checked (v9 checked a reduction's output as full-size (n) where it holds one value per row
// (a.rows), the softmax habit); every task input the row program reads and every output checked
// dense; the pointers, a staged product's being the workspace.
std::string dense_checks_and_pointers(const tasks::task& t, const plan& p) {
  std::string h;
  for (std::size_t j = 0; j < t.outputs.size(); ++j)
    h += "  // Output `" + t.outputs[j].name + "`: " +
         (p.output_levels[j] == level::full ? "one value per element (n).\n"
                                            : "one value per row (a.rows).\n");
  std::string checks;
  for (std::size_t k = 0; k < p.operands.size(); ++k)
    if (p.operands[k] >= 0)
      checks += "!kf_dense(inputs[" + std::to_string(p.operands[k]) + "], " +
                (p.row_shaped[k] ? "a.red" : "n") + ") ||\n      ";
  for (std::size_t j = 0; j < t.outputs.size(); ++j)
    checks += std::string(j ? " ||\n      " : "") + "!kf_dense(outputs[" + std::to_string(j) + "], " +
              (p.output_levels[j] == level::full ? "n" : "a.rows") + ")";
  h += "  if (" + checks + ")\n    return 2;\n";
  h += "  kf_ptrs ptrs;\n" + fill_operand_pointers(p, "ptrs", "  ");
  for (std::size_t k = 0; k < p.operands.size(); ++k)
    if (p.operands[k] < 0)
      h += "  ptrs.in[" + std::to_string(k) + "] = static_cast<const float*>(workspace);\n";
  for (std::size_t j = 0; j < t.outputs.size(); ++j)
    h += "  ptrs.out[" + std::to_string(j) + "] = static_cast<float*>(outputs[" + std::to_string(j) +
         "].data);\n";
  return h;
}

// Host code of a dense row program after forward_head, up to the launch: counts, the row split
// from the first full-shape operand, every tensor's element count and contiguity, the pointers.
std::string dense_host(const tasks::task& t, const plan& p) {
  std::size_t f = 0;
  while (p.row_shaped[f]) ++f;
  const auto fi = std::to_string(p.operands[f]);
  std::string h = count_check(t);
  h += "  // A row is the last " + std::to_string(p.iter_rank - p.d0) + " dim(s) of inputs[" + fi + "].\n";
  h += "  const kf_tensor& f = inputs[" + fi + "];\n  if (f.ndim != " + std::to_string(p.iter_rank) +
       ") return 2;\n";
  h += "  kf_rows a;\n  a.rows = 1;\n  a.red = 1;\n"
       "  for (int d = 0; d < f.ndim; ++d) {\n"
       "    if (d < " + std::to_string(p.d0) + ") a.rows *= f.shape[d];\n"
       "    else a.red *= f.shape[d];\n  }\n";
  h += "  const int64_t n = a.rows * a.red;\n";
  h += dense_checks_and_pointers(t, p);
  h += "  if (a.rows == 0) return 0;\n  if (a.red == 0) return 4;  // an empty reduction\n";
  return h;
}

// Host code of a dense row program over a product staged in the workspace, after the GEMM's
// launch (`g`, its shape, in scope): one row per (batch, m), the product's N columns along it
// (the product being non-empty, no row count is 0).
std::string dense_staged_host(const tasks::task& t, const plan& p) {
  std::string h = "  // Rows of C: one per (batch, m), its N columns along it, dense in the workspace.\n"
                  "  kf_rows a;\n  a.rows = g.batch * g.M;\n  a.red = g.N;\n";
  bool uses_n = false;  // n, the element count of C, checks full-size operands and outputs
  for (std::size_t k = 0; k < p.operands.size(); ++k) uses_n = uses_n || (p.operands[k] >= 0 && !p.row_shaped[k]);
  for (auto l : p.output_levels) uses_n = uses_n || l == level::full;
  if (uses_n) h += "  const int64_t n = a.rows * a.red;\n";
  return h + dense_checks_and_pointers(t, p);
}

}  // namespace

result<rows_code> rows_parts(const tasks::task& t, const plan& p) {
  rows_code c;
  c.types = p.dense ? dense_row_types(t, p) : row_types(t, p);
  // The sum and max helpers in every such kernel, whatever it reduces: a policy that learnt them
  // per program wrote calls to kf_warp_max or kf_block_sum in kernels that never defined them
  // (kforge-tiny v10, losses and norms); a fixed pair is one thing to learn. Others as used.
  std::set<std::string> ops{"sum", "max"};
  for (int r : p.reductions) ops.insert(p.g.nodes[static_cast<std::size_t>(r)].op);
  // Rows longer than this get no thread-per-row variant (one thread walking millions of elements
  // runs for seconds) and accumulate sums in double in the others (each thread's float partial
  // sum over thousands of elements drifts past a 1e-4 tolerance).
  const bool long_rows = p.max_row > 65536;
  const std::vector<style> styles{
      {"thread_per_row", "0", "1", "true", true, ""},
      {"block_tree", "threadIdx.x", "blockDim.x", "threadIdx.x == 0", long_rows, "kf_block_"},
      {"warp_shuffle", "lane", "32", "lane == 0", long_rows, "kf_warp_"},
  };
  for (const auto& st : styles) {
    if (long_rows && st.name == "thread_per_row") continue;
    auto body = row_body(t, p, st);
    if (!body) return body.err();
    std::string k = reducer_functions(ops, st.reduce_prefix);
    if (st.name == "thread_per_row") {
      k += "__global__ void kf_rows_kernel(kf_ptrs p, kf_rows a) {\n"
           "  const int64_t step = (int64_t)gridDim.x * blockDim.x;\n"
           "  for (int64_t row = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; row < a.rows; row += step) {\n" +
           *body + "  }\n}\n\n";
      c.launch.push_back("  kf_rows_kernel<<<kf_grid(a.rows, 128), 128, 0, stream>>>(ptrs, a);\n");
    } else if (st.name == "block_tree") {
      k += "__global__ void __launch_bounds__(256) kf_rows_kernel(kf_ptrs p, kf_rows a) {\n"
           "  __shared__ float sh[256];\n"
           "  for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {\n" +
           *body + "  }\n}\n\n";
      c.launch.push_back(
          "  kf_rows_kernel<<<(unsigned)(a.rows < 65536 ? a.rows : 65536), 256, 0, stream>>>(ptrs, a);\n");
    } else {
      k += "__global__ void kf_rows_kernel(kf_ptrs p, kf_rows a) {\n"
           "  const int lane = threadIdx.x & 31;\n"
           "  const int64_t warps = ((int64_t)gridDim.x * blockDim.x) >> 5;\n"
           "  for (int64_t row = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5; row < a.rows; row += warps) {\n" +
           *body + "  }\n}\n\n";
      c.launch.push_back("  kf_rows_kernel<<<kf_grid(a.rows * 32, 256), 256, 0, stream>>>(ptrs, a);\n");
    }
    c.kernels.push_back(std::move(k));
    c.names.push_back(st.name);
  }
  c.grid_helper = grid_helper(65535);
  if (p.dense) {
    c.host = p.kind == plan_kind::gemm ? dense_staged_host(t, p) : dense_host(t, p);
    return c;
  }
  // Host: F's shape from the operands, the row split, strides, output checks.
  std::string h;
  const auto rank = std::to_string(p.iter_rank);
  h += "  kf_rows a;\n  a.ndim = " + rank + ";\n  a.d0 = " + std::to_string(p.d0) +
       ";\n  a.d1 = " + std::to_string(p.d1) + ";\n";
  h += "  for (int d = 0; d < a.ndim; ++d) a.shape[d] = 1;\n";
  h += "  // F is the broadcast of the operands' shapes.\n";
  for (std::size_t k = 0; k < p.operands.size(); ++k) {
    const std::string tn = p.operands[k] < 0 ? "kf_virtual" : "inputs[" + std::to_string(p.operands[k]) + "]";
    h += "  {\n    const kf_tensor& t = " + tn + ";\n    const int lead = a.ndim - t.ndim;\n"
         "    if (lead < 0) return 3;\n"
         "    for (int d = 0; d < t.ndim; ++d) {\n"
         "      if (t.shape[d] == 1) continue;\n"
         "      if (a.shape[lead + d] != 1 && a.shape[lead + d] != t.shape[d]) return 3;\n"
         "      a.shape[lead + d] = t.shape[d];\n    }\n  }\n";
  }
  h += "  a.rows = 1;\n  a.red = 1;\n  a.inner = 1;\n"
       "  for (int d = 0; d < a.ndim; ++d) {\n"
       "    if (d < a.d0) a.rows *= a.shape[d];\n"
       "    else if (d < a.d1) a.red *= a.shape[d];\n"
       "    else a.inner *= a.shape[d];\n  }\n  a.rows *= a.inner;\n";
  for (std::size_t k = 0; k < p.operands.size(); ++k) {
    const std::string tn = p.operands[k] < 0 ? "&kf_virtual" : "&inputs[" + std::to_string(p.operands[k]) + "]";
    h += "  if (kf_bcast(" + tn + ", a.ndim, a.shape, a.st[" + std::to_string(k) + "])) return 3;\n";
  }
  h += "  kf_ptrs ptrs;\n";
  for (std::size_t k = 0; k < p.operands.size(); ++k)
    h += "  ptrs.in[" + std::to_string(k) + "] = static_cast<const float*>(" +
         (p.operands[k] < 0 ? std::string("kf_virtual") : "inputs[" + std::to_string(p.operands[k]) + "]") +
         ".data);\n";
  for (std::size_t j = 0; j < t.outputs.size(); ++j) {
    const auto js = std::to_string(j);
    h += "  ptrs.out[" + js + "] = static_cast<float*>(outputs[" + js + "].data);\n";
    if (p.output_levels[j] == level::full) {
      h += "  // Output `" + t.outputs[j].name + "`: one value per element of F.\n"
           "  if (outputs[" + js + "].ndim != a.ndim) return 3;\n"
           "  for (int d = 0; d < a.ndim; ++d) {\n"
           "    if (outputs[" + js + "].shape[d] != a.shape[d]) return 3;\n"
           "    a.st[KF_NOPS + " + js + "][d] = outputs[" + js + "].strides[d];\n  }\n";
    } else {
      h += "  // Output `" + t.outputs[j].name +
           "`: one value per row, rows in row-major order: it must be dense.\n"
           "  if (kf_numel(&outputs[" + js + "]) != a.rows) return 3;\n"
           "  {\n    int64_t s = 1;\n"
           "    for (int d = outputs[" + js + "].ndim - 1; d >= 0; --d) {\n"
           "      if (outputs[" + js + "].shape[d] != 1 && outputs[" + js + "].strides[d] != s) return 3;\n"
           "      s *= outputs[" + js + "].shape[d];\n    }\n  }\n";
    }
  }
  h += "  if (a.rows == 0) return 0;\n  if (a.red == 0) return 4;  // an empty reduction\n";
  c.host = h;
  return c;
}

std::string rows_explanation(const plan& p, const std::string& variant) {
  const graph& g = p.g;
  std::string passes;
  for (std::size_t i = 0; i < p.reductions.size(); ++i) {
    const auto& n = g.nodes[static_cast<std::size_t>(p.reductions[i])];
    passes += (i ? (i + 1 == p.reductions.size() ? " and " : ", ") : "") + std::string("a ") + n.op;
  }
  bool any_full = false;
  for (auto l : p.output_levels) any_full = any_full || l == level::full;
  // After a staged product's explanation, briefly: every token of a GEMM + row program counts
  // against kforge-tiny's 3,072 (the strided ones ran to 4,500, measured 2026-12-03).
  if (p.dense && p.kind == plan_kind::gemm) {
    std::string s = "Each row of C (one per batch and m) is a row of the row program, its N elements "
                    "dense in the workspace; an operand of one row's shape, like a bias, is read at "
                    "the position in the row. Each row needs " + passes + " pass" +
                    (p.reductions.size() > 1 ? "es, in order" : "") +
                    (any_full ? ", then a pass that writes the outputs" : "") + ".";
    if (variant == "thread_per_row")
      s += " One thread takes a row and loops over it (sums accumulate in double).";
    else if (variant == "block_tree")
      s += " A block of 256 threads takes a row; a shared-memory tree combines their partial results.";
    else
      s += " A warp takes a row; its lanes combine their partial results with __shfl_xor_sync.";
    return s;
  }
  std::string s =
      "The task reduces over dims [" + std::to_string(p.d0) + ", " + std::to_string(p.d1) +
      ") of a rank-" + std::to_string(p.iter_rank) +
      " tensor, so I view it as rows: every combination of the other dims is one row, and the "
      "reduced dims run along it " +
      (p.dense ? std::string("(they are the trailing dims and every tensor comes contiguous, so row i is "
                             "the elements [i * red, (i + 1) * red) of a full-shape tensor, and an "
                             "operand of one row's shape is read at the position in the row). ")
               : std::string("(read through the strides, so any dim position works). ")) +
      "Each row needs " + passes + " pass" + (p.reductions.size() > 1 ? "es, in order, since later ones use "
                                                                "the earlier results" : "") +
      (any_full ? ", then a final pass that writes the full-size outputs" : "") +
      "; per-row values stay in registers between passes and elementwise work before, between "
      "and after the reductions is fused into those passes, so nothing intermediate goes to "
      "memory.";
  bool widened = false;
  for (int r : p.reductions) widened = widened || widens(g.nodes[static_cast<std::size_t>(r)].op);
  if (p.max_row > 65536 && widened && variant != "thread_per_row")
    s += " Rows here are long (up to " + std::to_string(p.max_row) +
         " elements), so each thread's partial sums and products accumulate in double before "
         "the threads combine them.";
  if (variant == "thread_per_row")
    s += " This version gives each row to one thread, which loops over the row sequentially "
         "(sums and products accumulate in double to keep the rounding error of long rows "
         "small); simple, and coalesced when the reduced dim is not the innermost one.";
  else if (variant == "block_tree")
    s += " This version gives each row to a block of 256 threads: each thread accumulates a "
         "strided slice of the row, then a shared-memory tree combines the 256 partial results "
         "and every thread reads the total back, ready for the next pass.";
  else
    s += " This version gives each row to one warp: the 32 lanes stride over the row and "
         "combine their partial results with __shfl_xor_sync butterflies, so every lane has the "
         "row's value without shared memory or block barriers, and a block of 256 threads works "
         "on 8 rows at once.";
  return s;
}

result<std::vector<kernel_variant>> emit_rows(const tasks::task& t, const plan& p) {
  auto c = rows_parts(t, p);
  if (!c) return c.err();
  std::vector<kernel_variant> out;
  for (std::size_t i = 0; i < c->names.size(); ++i) {
    kernel_variant v;
    v.name = c->names[i];
    v.source = file_head(t, v.name) + c->types + c->kernels[i] + c->grid_helper +
               (p.dense ? dense_helper() : host_helpers(t)) + forward_head() +
               (p.dense ? "" : "  if (int e = kf_check_args(inputs, num_inputs, outputs, num_outputs)) return e;\n") +
               c->host +
               c->launch[i] + "  return (int)cudaGetLastError();\n}\n";
    v.explanation = rows_explanation(p, v.name);
    out.push_back(std::move(v));
  }
  return out;
}

}  // namespace kforge::corpus::detail
