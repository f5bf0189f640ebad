// GPU: a reference server gives back the working memory of a large task's reference. A 450 s run
// (2026-12-03) lost 11 candidates to CUDA out-of-memory (infra_error) while four servers held
// 20-28 GiB each of torch's cached free blocks against a 4 GiB expected-output share.
#include <doctest/doctest.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "sandbox/child_protocol.hpp"
#include "sandbox/runner.hpp"

namespace ks = kforge::sandbox;
using json = nlohmann::json;

namespace {

std::size_t free_device_bytes() {
  std::size_t free = 0, total = 0;
  REQUIRE(cudaMemGetInfo(&free, &total) == cudaSuccess);
  return free;
}

}  // namespace

TEST_CASE("after a large task's expected outputs, the reference server holds them and little more") {
  if (ks::visible_gpu_count() == 0) {
    std::printf("SKIP: no GPU visible (deploy/gpu-host.sh runs this on the GPU host)\n");
    std::exit(77);
  }
  REQUIRE(cudaFree(nullptr) == cudaSuccess);  // this process's own context, before measuring
  // x [8192, 16384] float32 is 512 MiB; each op of the chain makes a 512 MiB intermediate, and
  // torch's allocator keeps at least one of them cached once it is freed.
  const json task = json::parse(R"({
    "id": "test/large_chain", "category": "fused",
    "description": "exp, sin, cos, then add x back, on a 512 MiB input",
    "inputs": [{"name": "x", "shape": [8192, 16384], "dtype": "float32",
                "init": {"dist": "normal", "mean": 0.0, "std": 1.0}}],
    "outputs": [{"name": "out", "shape": [8192, 16384], "dtype": "float32"}],
    "reference": "def forward(x):\n    y = torch.exp(x)\n    y = torch.sin(y)\n    y = torch.cos(y)\n    return torch.add(y, x)\n",
    "tolerance": {"atol": 0.0001, "rtol": 0.0001}, "variants": [{"x": [64, 64]}],
    "allow_cublas": false})");
  ks::run_options o;
  o.program = KFORGE_BINARY;
  o.reference_servers = 1;
  auto slot = std::make_shared<ks::gpu_slot>(o);
  const auto started = slot->start_servers();
  REQUIRE_MESSAGE(started.ok(), (started.ok() ? "" : started.message()));
  // The chain once at its small variant first: the kernels torch loads on first use are not counted.
  const auto warm = slot->reference({{"op", "prepare"}, {"task", task}, {"checks", json::array({{{"seed", 1}, {"variant", 0}}})}});
  REQUIRE_MESSAGE(warm.ok(), (warm.ok() ? "" : warm.message()));
  const std::size_t before = free_device_bytes();
  const auto reply = slot->reference(
      {{"op", "prepare"}, {"task", task}, {"checks", json::array({{{"seed", 1}, {"variant", ks::protocol::primary}}})}});
  REQUIRE_MESSAGE(reply.ok(), (reply.ok() ? "" : reply.message()));
  const std::size_t after = free_device_bytes();
  const std::size_t kept = std::size_t{1} << 30;  // the cached input and expected output
  const std::size_t taken = before > after ? before - after : 0;
  std::printf("reference server: %zu MiB taken by a prepare that keeps %zu MiB\n", taken >> 20, kept >> 20);
  CHECK(taken <= kept + (std::size_t{256} << 20));
}
