#include "sandbox/toolchain.hpp"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "common/subprocess.hpp"

namespace kforge::sandbox {

namespace fs = std::filesystem;

namespace {

std::string abi_include_dir() {
  // The header ships next to the sources (development tree) or next to the binary (install).
  for (const fs::path& p : {fs::path(KFORGE_ABI_INCLUDE_DIR),
                           fs::path(self_executable()).parent_path() / "include"})
    if (fs::exists(p / "kforge" / "kernel_abi.h")) return p.string();
  return KFORGE_ABI_INCLUDE_DIR;
}

}  // namespace

result<toolchain> find_toolchain() {
  std::vector<std::string> tried;
  std::vector<fs::path> candidates;
  if (const char* env = std::getenv("KFORGE_NVCC"); env && *env) candidates.emplace_back(env);
  if (const char* path = std::getenv("PATH")) {
    std::stringstream ss(path);
    for (std::string dir; std::getline(ss, dir, ':');)
      if (!dir.empty()) candidates.push_back(fs::path(dir) / "nvcc");
  }
  candidates.emplace_back("/usr/local/cuda/bin/nvcc");
  for (const auto& c : candidates) {
    tried.push_back(c.string());
    if (::access(c.c_str(), X_OK) != 0) continue;
    auto out = run_process({c.string(), "--version"}, std::chrono::seconds(30));
    if (!out || out->exit_code != 0) continue;
    std::smatch m;
    static const std::regex release(R"(release ([0-9]+\.[0-9]+))");
    toolchain tc{fs::absolute(c).string(), "unknown", abi_include_dir()};
    if (std::regex_search(out->output, m, release)) tc.release = m[1];
    return tc;
  }
  std::string where;
  for (const auto& t : tried) where += (where.empty() ? "" : ", ") + t;
  return error{"nvcc not found (looked at $KFORGE_NVCC, PATH and /usr/local/cuda/bin: " + where +
               ")"};
}

std::vector<std::string> compile_command(const toolchain& tc, const std::string& source,
                                         const std::string& output, const std::string& arch) {
  std::vector<std::string> cmd = {tc.nvcc, "-O3"};
  const auto target = arch_flags(arch);
  cmd.insert(cmd.end(), target.begin(), target.end());
  cmd.insert(cmd.end(), {"-shared", "-Xcompiler", "-fPIC", "-I" + tc.abi_include, "-cudart", "shared", "-o",
                         output, source});
  return cmd;
}

std::vector<std::string> arch_flags(const std::string& arch) {
  const std::string virt = arch.rfind("sm_", 0) == 0 ? "compute_" + arch.substr(3) : arch;
  return {"-gencode", "arch=" + virt + ",code=" + arch};
}

const char* known_good_candidate() {
  return R"(#include <kforge/kernel_abi.h>

__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    y[i] = x[i] > 0.f ? x[i] : 0.f;
}

extern "C" int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs,
                          int32_t num_outputs, void* workspace, cudaStream_t stream) {
  if (num_inputs != 1 || num_outputs != 1 || inputs[0].dtype != KF_FLOAT32) return 1;
  const int64_t n = kf_numel(&inputs[0]);
  const int blocks = (int)((n + 255) / 256 < 4096 ? (n + 255) / 256 : 4096);
  relu_kernel<<<blocks > 0 ? blocks : 1, 256, 0, stream>>>((const float*)inputs[0].data,
                                                         (float*)outputs[0].data, n);
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}
)";
}

result<compile_probe> compile_known_good(const toolchain& tc, const std::string& out_dir,
                                         const std::string& arch) {
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  const auto src = (fs::path(out_dir) / "probe.cu").string();
  const auto lib = (fs::path(out_dir) / "probe.so").string();
  std::ofstream(src) << known_good_candidate();
  auto out = run_process(compile_command(tc, src, lib, arch), std::chrono::seconds(120));
  if (!out) return out.err();
  compile_probe p;
  p.ok = out->exit_code == 0 && fs::exists(lib);
  p.seconds = out->seconds;
  p.log = out->output;
  return p;
}

}  // namespace kforge::sandbox
