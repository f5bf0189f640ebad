// Elementwise maps: every output element is an expression of the inputs at the same (broadcast)
// index. Variants: one thread per element; a grid-stride loop; float4 loads and stores when
// every tensor is contiguous, unbroadcast and 16-byte aligned (else the grid-stride path).
#include "corpus/cuda_expr.hpp"
#include "corpus/emit.hpp"

namespace kforge::corpus::detail {
namespace {

std::string n_ops(const plan& p) { return std::to_string(std::max<std::size_t>(1, p.operands.size())); }

// Types and the per-element device function shared by the three variants.
result<std::string> common_part(const tasks::task& t, const plan& p) {
  const auto nout = std::to_string(t.outputs.size());
  auto op = op_function(t, p);
  if (!op) return op.err();
  std::string s = *op;
  s += "#define KF_NOPS " + n_ops(p) + "\n#define KF_NOUT " + nout + "\n\n";
  s += "// The iteration shape (the outputs' shape) and, per operand and output, its strides\n"
       "// aligned to it (0 where an operand broadcasts).\n";
  s += "struct kf_iter {\n  int ndim;\n  int64_t n;\n  int64_t shape[KF_MAX_DIMS];\n"
       "  int64_t st[KF_NOPS][KF_MAX_DIMS];\n  int64_t ost[KF_NOUT][KF_MAX_DIMS];\n};\n";
  s += "struct kf_ptrs {\n  const float* in[KF_NOPS];\n  float* out[KF_NOUT];\n};\n\n";
  s += "__device__ __forceinline__ void kf_point(const kf_ptrs& p, const kf_iter& it, int64_t i) {\n";
  const std::size_t nops = p.operands.size();
  for (std::size_t k = 0; k < nops; ++k) s += "  int64_t o" + std::to_string(k) + " = 0;\n";
  for (std::size_t j = 0; j < t.outputs.size(); ++j) s += "  int64_t w" + std::to_string(j) + " = 0;\n";
  s += "  int64_t rem = i;\n  for (int d = it.ndim - 1; d >= 0; --d) {\n"
       "    const int64_t c = rem % it.shape[d];\n    rem /= it.shape[d];\n";
  for (std::size_t k = 0; k < nops; ++k)
    s += "    o" + std::to_string(k) + " += c * it.st[" + std::to_string(k) + "][d];\n";
  for (std::size_t j = 0; j < t.outputs.size(); ++j)
    s += "    w" + std::to_string(j) + " += c * it.ost[" + std::to_string(j) + "][d];\n";
  s += "  }\n  " +
       op_call(t, p, [](std::size_t k) { return "p.in[" + std::to_string(k) + "][o" + std::to_string(k) + "]"; },
               [](std::size_t j) { return "p.out[" + std::to_string(j) + "][w" + std::to_string(j) + "]"; }) +
       "\n}\n\n";
  return s;
}

// Host code up to the launch: checks, the iteration shape, strides and pointers.
std::string host_setup(const tasks::task& t, const plan& p) {
  std::string s;
  s += "  if (int e = kf_check_args(inputs, num_inputs, outputs, num_outputs)) return e;\n";
  s += "  kf_iter it;\n  it.ndim = outputs[0].ndim;\n  it.n = 1;\n"
       "  for (int d = 0; d < it.ndim; ++d) {\n    it.shape[d] = outputs[0].shape[d];\n"
       "    it.n *= it.shape[d];\n  }\n";
  s += "  for (int32_t j = 0; j < num_outputs; ++j) {\n"
       "    if (outputs[j].ndim != it.ndim) return 3;\n"
       "    for (int d = 0; d < it.ndim; ++d) {\n"
       "      if (outputs[j].shape[d] != it.shape[d]) return 3;\n"
       "      it.ost[j][d] = outputs[j].strides[d];\n    }\n  }\n";
  s += fill_operand_strides(p, "it", "  ");
  s += "  kf_ptrs ptrs;\n";
  s += fill_operand_pointers(p, "ptrs", "  ");
  s += "  for (int32_t j = 0; j < num_outputs; ++j) ptrs.out[j] = static_cast<float*>(outputs[j].data);\n";
  s += "  if (it.n == 0) return 0;\n";
  (void)t;
  return s;
}

std::string what_it_computes(const tasks::task& t, const plan& p) {
  std::string s = "The task is a pure elementwise map";
  if (p.operands.size() > 1) s += " over " + std::to_string(p.operands.size()) + " inputs";
  s += ", so each output element depends only on the input elements at the same index; inputs "
       "of smaller shape broadcast (PyTorch's right-aligned rule), which the kernel handles by "
       "giving each operand stride 0 along the dims it broadcasts over, computed on the host "
       "from the kf_tensor shapes and strides.";
  (void)t;
  return s;
}

}  // namespace

result<std::vector<kernel_variant>> emit_elementwise(const tasks::task& t, const plan& p) {
  auto common = common_part(t, p);
  if (!common) return common.err();
  const std::string helpers = host_helpers(t);
  const std::string setup = host_setup(t, p);
  const std::string what = what_it_computes(t, p);
  std::vector<kernel_variant> out;

  {
    kernel_variant v;
    v.name = "naive";
    v.source = file_head(t, v.name) + *common +
               "__global__ void kf_map(kf_ptrs p, kf_iter it) {\n"
               "  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;\n"
               "  if (i < it.n) kf_point(p, it, i);\n}\n\n" +
               helpers + forward_head() + setup +
               "  const int threads = 256;\n"
               "  const int64_t blocks = (it.n + threads - 1) / threads;\n"
               "  kf_map<<<(unsigned)blocks, threads, 0, stream>>>(ptrs, it);\n"
               "  return (int)cudaGetLastError();\n}\n";
    v.explanation = what + " This version launches one thread per output element (256 threads "
                           "per block, as many blocks as needed); each thread turns its linear "
                           "index into a multi-index and from it into one offset per tensor.";
    out.push_back(std::move(v));
  }
  const std::string grid_stride_kernel =
      "__global__ void kf_map(kf_ptrs p, kf_iter it, int64_t begin) {\n"
      "  const int64_t step = (int64_t)gridDim.x * blockDim.x;\n"
      "  for (int64_t i = begin + (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < it.n; i += step)\n"
      "    kf_point(p, it, i);\n}\n\n" +
      grid_helper(4096);
  {
    kernel_variant v;
    v.name = "grid_stride";
    v.source = file_head(t, v.name) + *common + grid_stride_kernel + helpers + forward_head() +
               setup +
               "  kf_map<<<kf_grid(it.n, 256), 256, 0, stream>>>(ptrs, it, 0);\n"
               "  return (int)cudaGetLastError();\n}\n";
    v.explanation = what + " This version caps the grid at 4096 blocks of 256 threads and lets "
                           "each thread walk the elements with a grid-stride loop, so the launch "
                           "size does not grow with the tensor and every element is still "
                           "visited exactly once.";
    out.push_back(std::move(v));
  }
  {
    const std::string lanes = float4_lanes(t, p, "    ");
    std::string kernel = "__global__ void kf_map4(kf_ptrs p, int64_t n4) {\n"
                         "  const int64_t step = (int64_t)gridDim.x * blockDim.x;\n"
                         "  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += step) {\n";
    for (std::size_t k = 0; k < p.operands.size(); ++k)
      kernel += "    const float4 a" + std::to_string(k) +
                " = reinterpret_cast<const float4*>(p.in[" + std::to_string(k) + "])[i];\n";
    for (std::size_t j = 0; j < t.outputs.size(); ++j)
      kernel += "    float4 r" + std::to_string(j) + ";\n";
    kernel += lanes;
    for (std::size_t j = 0; j < t.outputs.size(); ++j)
      kernel += "    reinterpret_cast<float4*>(p.out[" + std::to_string(j) + "])[i] = r" +
                std::to_string(j) + ";\n";
    kernel += "  }\n}\n\n";
    std::string check =
        "  // The float4 path needs every tensor dense in row-major order with the output's\n"
        "  // shape (no broadcasting) and 16-byte aligned; anything else takes the general path.\n"
        "  bool dense = true;\n"
        "  uintptr_t addresses = 0;\n"
        "  int64_t expect[KF_MAX_DIMS];\n"
        "  {\n    int64_t s = 1;\n"
        "    for (int d = it.ndim - 1; d >= 0; --d) {\n      expect[d] = it.shape[d] == 1 ? 0 : s;\n"
        "      s *= it.shape[d];\n    }\n  }\n"
        "  for (int k = 0; k < KF_NOPS; ++k) {\n"
        "    addresses |= reinterpret_cast<uintptr_t>(ptrs.in[k]);\n"
        "    for (int d = 0; d < it.ndim; ++d) dense = dense && it.st[k][d] == expect[d];\n  }\n"
        "  for (int j = 0; j < KF_NOUT; ++j) {\n"
        "    addresses |= reinterpret_cast<uintptr_t>(ptrs.out[j]);\n"
        "    for (int d = 0; d < it.ndim; ++d)\n"
        "      dense = dense && (it.shape[d] == 1 || it.ost[j][d] == expect[d]);\n  }\n"
        "  const int64_t n4 = dense && (addresses & 15) == 0 ? it.n / 4 : 0;\n"
        "  if (n4 > 0) kf_map4<<<kf_grid(n4, 256), 256, 0, stream>>>(ptrs, n4);\n"
        "  if (n4 * 4 < it.n) kf_map<<<kf_grid(it.n - n4 * 4, 256), 256, 0, stream>>>(ptrs, it, n4 * 4);\n"
        "  return (int)cudaGetLastError();\n}\n";
    kernel_variant v;
    v.name = "vec4";
    v.source = file_head(t, v.name) + *common + grid_stride_kernel + kernel + helpers +
               forward_head() + setup + check;
    v.explanation =
        what + " This version is memory-bound-friendly: when every tensor is contiguous, has the "
               "output's shape and is 16-byte aligned, it moves data with float4 loads and stores "
               "(four elements per instruction) in a grid-stride loop and handles the last numel % "
               "4 elements with the scalar kernel; when any tensor broadcasts or is strided it "
               "falls back to the general grid-stride kernel for everything.";
    out.push_back(std::move(v));
  }
  return out;
}

}  // namespace kforge::corpus::detail
