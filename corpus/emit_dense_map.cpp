// Dense elementwise maps: every input has the output's shape and every tensor is contiguous (the
// host code checks), so one flat index addresses all of them and a kernel is a few lines where
// the general map (emit_elementwise.cpp) carries strides and broadcasting. Variants as there: one
// thread per element, a grid-stride loop, float4 loads and stores.
#include "corpus/cuda_expr.hpp"
#include "corpus/emit.hpp"

namespace kforge::corpus::detail {
namespace {

struct dense_map {
  std::string params;  // "const float* __restrict__ in0, float* __restrict__ out0, int64_t n"
  std::string args;    // "in0, out0, n"
};

dense_map signature(const tasks::task& t, const plan& p) {
  dense_map m;
  for (std::size_t k = 0; k < p.operands.size(); ++k) {
    m.params += "const float* __restrict__ in" + std::to_string(k) + ", ";
    m.args += "in" + std::to_string(k) + ", ";
  }
  for (std::size_t j = 0; j < t.outputs.size(); ++j) {
    m.params += "float* __restrict__ out" + std::to_string(j) + ", ";
    m.args += "out" + std::to_string(j) + ", ";
  }
  m.params += "int64_t n";
  m.args += "n";
  return m;
}

// The statement computing every output at flat index i.
std::string element(const tasks::task& t, const plan& p, const std::string& indent) {
  return indent + op_call(t, p, [](std::size_t k) { return "in" + std::to_string(k) + "[i]"; },
                          [](std::size_t j) { return "out" + std::to_string(j) + "[i]"; }) + "\n";
}

std::string host_checks(const tasks::task& t, const plan& p) {
  std::string s = count_check(t);
  s += "  // Every tensor has the output's shape: n elements, contiguous.\n";
  s += "  const int64_t n = kf_numel(&outputs[0]);\n  if (";
  for (std::size_t k = 0; k < p.operands.size(); ++k)
    s += "!kf_dense(inputs[" + std::to_string(p.operands[k]) + "], n) || ";
  for (std::size_t j = 0; j < t.outputs.size(); ++j)
    s += std::string(j ? " || " : "") + "!kf_dense(outputs[" + std::to_string(j) + "], n)";
  s += ") return 2;\n  if (n == 0) return 0;\n";
  return s + dense_pointers(t, p);
}

std::string what_it_computes(const plan& p) {
  std::string s = "The task is a pure elementwise map";
  if (p.operands.size() > 1) s += " over " + std::to_string(p.operands.size()) + " inputs";
  s += (p.operands.size() > 1 ? " of the output's shape" : "");
  s += ", and every tensor comes contiguous, so output element i depends only on element i of "
       "each input and one flat index addresses them all: no shapes or strides in the kernel. "
       "The host checks that every tensor is float32, contiguous and has the output's element "
       "count, and returns an error otherwise.";
  return s;
}

}  // namespace

result<std::vector<kernel_variant>> emit_dense_map(const tasks::task& t, const plan& p) {
  const auto sig = signature(t, p);
  const auto head = "(" + sig.params + ") {\n";
  auto op = op_function(t, p);
  if (!op) return op.err();
  const std::string one = element(t, p, "  "), looped = element(t, p, "    ");
  const std::string four = float4_lanes(t, p, "    ");
  const std::string host = dense_helper() + forward_head() + host_checks(t, p);
  const std::string what = what_it_computes(p);
  const std::string grid_stride_kernel =
      "__global__ void kf_map" + head +
      "  const int64_t step = (int64_t)gridDim.x * blockDim.x;\n"
      "  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {\n" +
      looped + "  }\n}\n\n" + grid_helper(4096);
  std::vector<kernel_variant> out;
  {
    kernel_variant v;
    v.name = "naive";
    v.source = file_head(t, v.name) + *op + "__global__ void kf_map" + head +
               "  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;\n"
               "  if (i >= n) return;\n" +
               one + "}\n\n" + host +
               "  const int64_t blocks = (n + 255) / 256;\n"
               "  kf_map<<<(unsigned)blocks, 256, 0, stream>>>(" + sig.args + ");\n"
               "  return (int)cudaGetLastError();\n}\n";
    v.explanation = what + " This version launches one thread per element (256 threads per "
                           "block, as many blocks as needed).";
    out.push_back(std::move(v));
  }
  {
    kernel_variant v;
    v.name = "grid_stride";
    v.source = file_head(t, v.name) + *op + grid_stride_kernel + host +
               "  kf_map<<<kf_grid(n, 256), 256, 0, stream>>>(" + sig.args + ");\n"
               "  return (int)cudaGetLastError();\n}\n";
    v.explanation = what + " This version caps the grid at 4096 blocks of 256 threads and lets "
                           "each thread walk the elements with a grid-stride loop, so the launch "
                           "size does not grow with the tensor.";
    out.push_back(std::move(v));
  }
  {
    std::string k = "// Four elements per step with float4 loads and stores, then the last n % 4 one by one.\n"
                    "__global__ void kf_map4" + head +
                    "  const int64_t step = (int64_t)gridDim.x * blockDim.x;\n"
                    "  const int64_t n4 = n / 4;\n"
                    "  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += step) {\n";
    for (std::size_t j = 0; j < p.operands.size(); ++j)
      k += "    const float4 a" + std::to_string(j) + " = reinterpret_cast<const float4*>(in" +
           std::to_string(j) + ")[i];\n";
    for (std::size_t j = 0; j < t.outputs.size(); ++j) k += "    float4 r" + std::to_string(j) + ";\n";
    k += four;
    for (std::size_t j = 0; j < t.outputs.size(); ++j)
      k += "    reinterpret_cast<float4*>(out" + std::to_string(j) + ")[i] = r" + std::to_string(j) + ";\n";
    k += "  }\n  for (int64_t i = n4 * 4 + (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {\n" +
         looped + "  }\n}\n\n";
    std::string addresses;
    for (std::size_t j = 0; j < p.operands.size(); ++j)
      addresses += "(uintptr_t)in" + std::to_string(j) + " | ";
    for (std::size_t j = 0; j < t.outputs.size(); ++j)
      addresses += std::string(j ? " | " : "") + "(uintptr_t)out" + std::to_string(j);
    kernel_variant v;
    v.name = "vec4";
    v.source = file_head(t, v.name) + *op + grid_stride_kernel + k + host +
               "  // float4 accesses need 16-byte aligned addresses; otherwise the scalar kernel.\n"
               "  if ((" + addresses + ") & 15)\n"
               "    kf_map<<<kf_grid(n, 256), 256, 0, stream>>>(" + sig.args + ");\n"
               "  else\n"
               "    kf_map4<<<kf_grid((n + 3) / 4, 256), 256, 0, stream>>>(" + sig.args + ");\n"
               "  return (int)cudaGetLastError();\n}\n";
    v.explanation = what + " This version moves four elements per instruction with float4 loads "
                           "and stores in a grid-stride loop, and the same threads finish the "
                           "last n % 4 elements one at a time; when a pointer is not 16-byte "
                           "aligned it launches the scalar grid-stride kernel instead.";
    out.push_back(std::move(v));
  }
  return out;
}

}  // namespace kforge::corpus::detail
