// Matrix products (torch.matmul semantics: batch dims broadcast, operands possibly transposed
// through their strides) with the elementwise rest of the graph fused as an epilogue, or, when a
// reduction follows (softmax, layer_norm, a sum), written to the workspace and read by a row
// program (corpus/emit_rows.hpp). Variants: one thread per output element; 16x16 shared-memory
// tiles.
#include <algorithm>

#include "corpus/cuda_expr.hpp"
#include "corpus/emit.hpp"
#include "corpus/emit_rows.hpp"

namespace kforge::corpus::detail {
namespace {

// How operand `side` ("A", M x K) is read: as stored, or transposed (the weight of a linear layer,
// x.transpose(-2, -1)). Written by name right above the dims it decides, so the choice sits next
// to the reference's own spelling of the operand.
std::string layout_comment(const tasks::task& t, const char* side, const gemm_operand& o,
                           const char* dims) {
  const std::string head = std::string("  // ") + side + " is `" +
                           t.inputs[static_cast<std::size_t>(o.input)].name + "`";
  if (o.transposed)
    return head + " read transposed (stored " + dims[1] + " x " + dims[0] + ").\n";
  return head + " as stored (" + dims[0] + " x " + dims[1] + ").\n";
}

std::string gemm_types(const tasks::task& t, const plan& p) {
  const auto ia = std::to_string(p.a.input), ib = std::to_string(p.b.input);
  const bool ta = p.a.transposed, tb = p.b.transposed;
  std::string s;
  s += "// C[b] = A[b] @ B[b] with broadcast batch dims; A is M x K and B is K x N as read through\n"
       "// (sam, sak) and (sbk, sbn): a transposed operand is just its strides swapped.\n";
  s += "struct kf_gemm {\n  int64_t batch, M, N, K;\n  int nb;\n  int64_t bshape[KF_MAX_DIMS];\n"
       "  int64_t sa[KF_MAX_DIMS], sb[KF_MAX_DIMS];\n  int64_t sam, sak, sbk, sbn;\n};\n\n";
  s += "static int kf_gemm_shape(const kf_tensor* inputs, kf_gemm* g) {\n";
  s += "  const kf_tensor& A = inputs[" + ia + "];\n  const kf_tensor& B = inputs[" + ib + "];\n";
  s += "  if (A.ndim < 2 || B.ndim < 2 || A.ndim > KF_MAX_DIMS || B.ndim > KF_MAX_DIMS) return 3;\n";
  s += "  const int ra = A.ndim, rb = B.ndim;\n";
  s += layout_comment(t, "A", p.a, "MK");
  s += std::string("  const int am = ra - ") + (ta ? "1" : "2") + ", ak = ra - " + (ta ? "2" : "1") + ";\n";
  s += layout_comment(t, "B", p.b, "KN");
  s += std::string("  const int bk = rb - ") + (tb ? "1" : "2") + ", bn = rb - " + (tb ? "2" : "1") + ";\n";
  s += "  g->M = A.shape[am];\n  g->K = A.shape[ak];\n  g->N = B.shape[bn];\n"
       "  g->sam = A.strides[am];\n  g->sak = A.strides[ak];\n"
       "  g->sbk = B.strides[bk];\n  g->sbn = B.strides[bn];\n"
       "  if (B.shape[bk] != g->K) return 3;\n"
       "  g->nb = (ra > rb ? ra : rb) - 2;\n  g->batch = 1;\n"
       "  for (int d = 0; d < g->nb; ++d) {\n"
       "    const int da = d - (g->nb - (ra - 2)), db = d - (g->nb - (rb - 2));\n"
       "    const int64_t na = da >= 0 ? A.shape[da] : 1, nb = db >= 0 ? B.shape[db] : 1;\n"
       "    if (na != nb && na != 1 && nb != 1) return 3;\n"
       "    g->bshape[d] = na > nb ? na : nb;\n"
       "    g->sa[d] = (da >= 0 && na != 1) ? A.strides[da] : 0;\n"
       "    g->sb[d] = (db >= 0 && nb != 1) ? B.strides[db] : 0;\n"
       "    g->batch *= g->bshape[d];\n  }\n  return 0;\n}\n\n";
  s += "__device__ __forceinline__ void kf_batch_offsets(const kf_gemm& g, int64_t b, int64_t* oa, int64_t* ob) {\n"
       "  int64_t a = 0, c = 0;\n"
       "  for (int d = g.nb - 1; d >= 0; --d) {\n"
       "    const int64_t i = b % g.bshape[d];\n    b /= g.bshape[d];\n"
       "    a += i * g.sa[d];\n    c += i * g.sb[d];\n  }\n"
       "  *oa = a;\n  *ob = c;\n}\n\n";
  return s;
}

// The fused epilogue: the rest of the graph at output element i, given the product's value.
result<std::string> epilogue_types(const tasks::task& t, const plan& p) {
  const std::size_t nops = p.operands.size();
  std::string s;
  s += "#define KF_NOPS " + std::to_string(std::max<std::size_t>(1, nops)) + "\n#define KF_NOUT " +
       std::to_string(t.outputs.size()) + "\n\n";
  s += "// The output shape and, per epilogue operand and output, strides aligned to it.\n";
  s += "struct kf_iter {\n  int ndim;\n  int64_t shape[KF_MAX_DIMS];\n"
       "  int64_t st[KF_NOPS][KF_MAX_DIMS];\n  int64_t ost[KF_NOUT][KF_MAX_DIMS];\n};\n";
  s += "struct kf_ptrs {\n  const float* in[KF_NOPS];\n  float* out[KF_NOUT];\n};\n";
  s += "struct kf_epi_args {\n  kf_ptrs p;\n  kf_iter it;\n};\n\n";
  s += "__device__ __forceinline__ void kf_store(const kf_epi_args& e, int64_t i, float acc) {\n";
  for (std::size_t k = 0; k < nops; ++k)
    if (p.operands[k] >= 0) s += "  int64_t o" + std::to_string(k) + " = 0;\n";
  for (std::size_t j = 0; j < t.outputs.size(); ++j) s += "  int64_t w" + std::to_string(j) + " = 0;\n";
  s += "  int64_t rem = i;\n  for (int d = e.it.ndim - 1; d >= 0; --d) {\n"
       "    const int64_t c = rem % e.it.shape[d];\n    rem /= e.it.shape[d];\n";
  for (std::size_t k = 0; k < nops; ++k)
    if (p.operands[k] >= 0)
      s += "    o" + std::to_string(k) + " += c * e.it.st[" + std::to_string(k) + "][d];\n";
  for (std::size_t j = 0; j < t.outputs.size(); ++j)
    s += "    w" + std::to_string(j) + " += c * e.it.ost[" + std::to_string(j) + "][d];\n";
  s += "  }\n";
  expr_emitter em(p.g, "  ");
  auto leaf = [&](int id) -> result<std::string> {
    if (id == p.gemm) return std::string("acc");
    auto it = p.leaf_operand.find(id);
    if (it == p.leaf_operand.end()) return unsupported("a leaf the epilogue cannot read");
    const auto k = std::to_string(it->second);
    return "e.p.in[" + k + "][o" + k + "]";
  };
  for (std::size_t j = 0; j < t.outputs.size(); ++j) {
    auto v = em.float_value(p.g.outputs[j], s, leaf);
    if (!v) return v.err();
    s += "  e.p.out[" + std::to_string(j) + "][w" + std::to_string(j) + "] = " + *v + ";\n";
  }
  s += "}\n\n";
  return s;
}

const char* naive_kernel =
    "__global__ void kf_gemm_kernel(const float* __restrict__ A, const float* __restrict__ B, kf_gemm g,\n"
    "                               kf_epi_args e) {\n"
    "  const int64_t total = g.batch * g.M * g.N;\n"
    "  const int64_t step = (int64_t)gridDim.x * blockDim.x;\n"
    "  for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += step) {\n"
    "    const int64_t n = idx % g.N, t = idx / g.N, m = t % g.M, b = t / g.M;\n"
    "    int64_t oa, ob;\n"
    "    kf_batch_offsets(g, b, &oa, &ob);\n"
    "    const float* a = A + oa + m * g.sam;\n"
    "    const float* c = B + ob + n * g.sbn;\n"
    "    float acc = 0.0f;\n"
    "    for (int64_t k = 0; k < g.K; ++k) acc += a[k * g.sak] * c[k * g.sbk];\n"
    "    kf_store(e, idx, acc);\n"
    "  }\n}\n\n";

const char* naive_launch =
    "  {\n    const int64_t total = g.batch * g.M * g.N;\n"
    "    int64_t blocks = (total + 255) / 256;\n    if (blocks > 65535) blocks = 65535;\n"
    "    kf_gemm_kernel<<<(unsigned)blocks, 256, 0, stream>>>(a_ptr, b_ptr, g, e);\n  }\n";

const char* tiled_kernel =
    "#define KF_TILE 16\n\n"
    "__global__ void __launch_bounds__(KF_TILE * KF_TILE)\n"
    "    kf_gemm_kernel(const float* __restrict__ A, const float* __restrict__ B, kf_gemm g, kf_epi_args e) {\n"
    "  // +1 column: threads of a warp read a column of As without bank conflicts.\n"
    "  __shared__ float As[KF_TILE][KF_TILE + 1];\n"
    "  __shared__ float Bs[KF_TILE][KF_TILE + 1];\n"
    "  const int tx = threadIdx.x, ty = threadIdx.y;\n"
    "  const int64_t m_tiles = (g.M + KF_TILE - 1) / KF_TILE;\n"
    "  for (int64_t b = blockIdx.z; b < g.batch; b += gridDim.z) {\n"
    "    int64_t oa, ob;\n"
    "    kf_batch_offsets(g, b, &oa, &ob);\n"
    "    const float* Ab = A + oa;\n"
    "    const float* Bb = B + ob;\n"
    "    for (int64_t tm = blockIdx.y; tm < m_tiles; tm += gridDim.y) {\n"
    "      const int64_t m = tm * KF_TILE + ty, n = (int64_t)blockIdx.x * KF_TILE + tx;\n"
    "      float acc = 0.0f;\n"
    "      for (int64_t k0 = 0; k0 < g.K; k0 += KF_TILE) {\n"
    "        // Out-of-range elements load as 0, so partial tiles add nothing.\n"
    "        As[ty][tx] = (m < g.M && k0 + tx < g.K) ? Ab[m * g.sam + (k0 + tx) * g.sak] : 0.0f;\n"
    "        Bs[ty][tx] = (k0 + ty < g.K && n < g.N) ? Bb[(k0 + ty) * g.sbk + n * g.sbn] : 0.0f;\n"
    "        __syncthreads();\n"
    "#pragma unroll\n"
    "        for (int kk = 0; kk < KF_TILE; ++kk) acc += As[ty][kk] * Bs[kk][tx];\n"
    "        __syncthreads();\n"
    "      }\n"
    "      if (m < g.M && n < g.N) kf_store(e, (b * g.M + m) * g.N + n, acc);\n"
    "    }\n"
    "  }\n}\n\n";

const char* tiled_launch =
    "  {\n    const int64_t m_tiles = (g.M + KF_TILE - 1) / KF_TILE, n_tiles = (g.N + KF_TILE - 1) / KF_TILE;\n"
    "    const dim3 grid((unsigned)n_tiles, (unsigned)(m_tiles < 65535 ? m_tiles : 65535),\n"
    "                    (unsigned)(g.batch < 65535 ? g.batch : 65535));\n"
    "    kf_gemm_kernel<<<grid, dim3(KF_TILE, KF_TILE), 0, stream>>>(a_ptr, b_ptr, g, e);\n  }\n";

std::string gemm_explanation(const tasks::task& t, const plan& p, const std::string& variant) {
  std::string s =
      "The core of the task is a matrix product C = A @ B (torch.matmul semantics: leading batch "
      "dims broadcast, and an operand written transposed, like the weight of a linear layer, is "
      "read through swapped strides instead of being copied). ";
  // A dense staged program (plan.hpp) says less: its tokens count against kforge-tiny's 3,072.
  const bool brief = p.staged && p.dense;
  if (brief)
    s += "A reduction follows, so C goes to the workspace (kf_workspace_bytes asks for batch*M*N "
         "floats) and a second kernel on the same stream runs the rest as a row program.";
  else if (p.staged)
    s += "A reduction follows the product, so the kernel writes C to the workspace "
         "(kf_workspace_bytes asks for batch*M*N floats) and a second kernel, launched on the same "
         "stream, runs the rest as a row program: each row of C is reduced and the elementwise "
         "work around the reduction is fused into its passes.";
  else if (p.g.outputs.size() == 1 && p.g.outputs[0] == p.gemm)
    s += "Each result is stored directly.";
  else
    s += "The elementwise rest of the task (bias, activation, residual inputs broadcast to C's "
         "shape) is fused as an epilogue: it is applied to each accumulator before the single "
         "store, so C never goes to memory.";
  if (brief)
    s += variant == "naive" ? " This version computes one element of C per thread with a loop over K."
                            : " This version tiles the product: 16x16 tiles of A and B in shared memory "
                              "(padded by one column), zeros past the edges.";
  else if (variant == "naive")
    s += " This version computes one output element per thread with a plain loop over K; "
         "consecutive threads take consecutive columns, so B's loads coalesce when its rows are "
         "contiguous.";
  else
    s += " This version tiles the product: a 16x16 thread block owns a 16x16 block of C and "
         "walks K in steps of 16, staging a tile of A and a tile of B in shared memory (padded by "
         "one column against bank conflicts) so each global element is loaded once per tile "
         "instead of once per output; tiles past the matrix edges load zeros, so any M, N and K "
         "work.";
  (void)t;
  return s;
}

}  // namespace

result<std::vector<kernel_variant>> emit_gemm(const tasks::task& t, const plan& p) {
  const std::string types = gemm_types(t, p);
  const std::string a_ptr = "static_cast<const float*>(inputs[" + std::to_string(p.a.input) + "].data)";
  const std::string b_ptr = "static_cast<const float*>(inputs[" + std::to_string(p.b.input) + "].data)";
  std::vector<kernel_variant> out;
  const std::vector<std::pair<std::string, std::pair<const char*, const char*>>> kinds{
      {"naive", {naive_kernel, naive_launch}}, {"tiled16", {tiled_kernel, tiled_launch}}};

  if (!p.staged) {
    auto epi = epilogue_types(t, p);
    if (!epi) return epi.err();
    std::string host =
        "  if (int e = kf_check_args(inputs, num_inputs, outputs, num_outputs)) return e;\n"
        "  kf_gemm g;\n  if (int e = kf_gemm_shape(inputs, &g)) return e;\n"
        "  kf_epi_args e;\n  e.it.ndim = g.nb + 2;\n"
        "  for (int d = 0; d < g.nb; ++d) e.it.shape[d] = g.bshape[d];\n"
        "  e.it.shape[g.nb] = g.M;\n  e.it.shape[g.nb + 1] = g.N;\n"
        "  for (int32_t j = 0; j < num_outputs; ++j) {\n"
        "    if (outputs[j].ndim != e.it.ndim) return 3;\n"
        "    for (int d = 0; d < e.it.ndim; ++d) {\n"
        "      if (outputs[j].shape[d] != e.it.shape[d]) return 3;\n"
        "      e.it.ost[j][d] = outputs[j].strides[d];\n    }\n"
        "    e.p.out[j] = static_cast<float*>(outputs[j].data);\n  }\n";
    host += fill_operand_strides(p, "e.it", "  ");
    host += fill_operand_pointers(p, "e.p", "  ");
    host += "  if (g.batch * g.M * g.N == 0) return 0;\n";
    host += "  const float* a_ptr = " + a_ptr + ";\n  const float* b_ptr = " + b_ptr + ";\n";
    for (const auto& [name, code] : kinds) {
      kernel_variant v;
      v.name = name;
      v.source = file_head(t, name) + types + *epi + code.first + host_helpers(t) +
                 forward_head() + host + code.second +
                 "  return (int)cudaGetLastError();\n}\n";
      v.explanation = gemm_explanation(t, p, name);
      out.push_back(std::move(v));
    }
    return out;
  }

  auto rows = rows_parts(t, p);
  if (!rows) return rows.err();
  const std::string store =
      "struct kf_epi_args {\n  float* ws;\n};\n\n"
      "__device__ __forceinline__ void kf_store(const kf_epi_args& e, int64_t i, float acc) { e.ws[i] = acc; }\n\n";
  const std::string wsbytes =
      "extern \"C\" size_t kf_workspace_bytes(const kf_tensor* inputs, int32_t num_inputs) {\n"
      "  kf_gemm g;\n"
      "  if (num_inputs != " + std::to_string(t.inputs.size()) + " || kf_gemm_shape(inputs, &g)) return 0;\n"
      "  return (size_t)(g.batch * g.M * g.N) * sizeof(float);\n}\n\n";
  // A dense row program (plan.hpp) reads the workspace as rows itself: no strided view of it,
  // and its kf_dense checks cover the row program's tensors, so only the product's operands are
  // checked here (kf_check_args would take 200 more tokens).
  const std::string check_args =
      p.dense ? count_check(t) + "  if (inputs[" + std::to_string(p.a.input) + "].dtype != KF_FLOAT32 || inputs[" +
                    std::to_string(p.b.input) + "].dtype != KF_FLOAT32) return 2;\n"
              : std::string("  if (int e = kf_check_args(inputs, num_inputs, outputs, num_outputs)) return e;\n");
  const std::string host_gemm = check_args +
      "  kf_gemm g;\n  if (int e = kf_gemm_shape(inputs, &g)) return e;\n"
      "  if (g.batch * g.M * g.N == 0) return 0;\n"
      "  if (workspace == NULL) return 5;\n" +
      std::string(p.dense ? "" :
      "  // The product, dense row-major in the workspace, as the row program's operand.\n"
      "  kf_tensor kf_virtual;\n  kf_virtual.data = workspace;\n  kf_virtual.dtype = KF_FLOAT32;\n"
      "  kf_virtual.ndim = g.nb + 2;\n"
      "  for (int d = 0; d < g.nb; ++d) kf_virtual.shape[d] = g.bshape[d];\n"
      "  kf_virtual.shape[g.nb] = g.M;\n  kf_virtual.shape[g.nb + 1] = g.N;\n"
      "  {\n    int64_t s = 1;\n"
      "    for (int d = kf_virtual.ndim - 1; d >= 0; --d) {\n"
      "      kf_virtual.strides[d] = s;\n      s *= kf_virtual.shape[d];\n    }\n  }\n") +
      "  kf_epi_args e;\n  e.ws = static_cast<float*>(workspace);\n"
      "  const float* a_ptr = " + a_ptr + ";\n  const float* b_ptr = " + b_ptr + ";\n";
  // Pair each product variant with the row variant of the same rank: naive + thread_per_row,
  // tiled16 + block_tree, tiled16 + warp_shuffle (rows_parts leaves thread_per_row out for long
  // rows).
  const std::vector<std::pair<std::size_t, std::string>> pairs{
      {0, "thread_per_row"}, {1, "block_tree"}, {1, "warp_shuffle"}};
  for (const auto& [gk, row_name] : pairs) {
    // A dense row program after a tiled product: the warp variant alone. With the block tree's
    // two reducers the file ran past the 3,072 tokens kforge-tiny writes (~3,300, 2026-12-03).
    if (p.dense && gk == 1 && row_name == "block_tree") continue;
    const auto found = std::find(rows->names.begin(), rows->names.end(), row_name);
    if (found == rows->names.end()) continue;
    const auto rk = static_cast<std::size_t>(found - rows->names.begin());
    kernel_variant v;
    v.name = kinds[gk].first + "_" + rows->names[rk];
    v.source = file_head(t, v.name) + rows->types + types + store + kinds[gk].second.first +
               rows->kernels[rk] + rows->grid_helper +
               (p.dense ? dense_helper() : host_helpers(t)) + wsbytes +
               forward_head() + host_gemm + kinds[gk].second.second + rows->host + rows->launch[rk] +
               "  return (int)cudaGetLastError();\n}\n";
    v.explanation = gemm_explanation(t, p, kinds[gk].first) +
                    (p.dense ? " " : " For the row program: ") + rows_explanation(p, rows->names[rk]);
    out.push_back(std::move(v));
  }
  return out;
}

}  // namespace kforge::corpus::detail
