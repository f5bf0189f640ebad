// GPU: a real Nsight Compute profile of a correct kernel through the sandbox pool (the known-good
// ReLU on l1/relu): ncu started in the candidate confinement, the child's one call between
// cudaProfilerStart and cudaProfilerStop, the report read into the verdict (sandbox/ncu_profiler.hpp).
// Exits 77 without a GPU or without ncu; on a host whose driver keeps the counters from
// non-administrators it says so and exits 77 too (the profile is then skipped by design).
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "sandbox/ncu_profiler.hpp"
#include "sandbox/pool.hpp"
#include "sandbox/toolchain.hpp"
#include "sandbox/verdict_json.hpp"
#include "tasks/builtin.hpp"

namespace fs = std::filesystem;
namespace ks = kforge::sandbox;

TEST_CASE("a correct kernel's Nsight Compute profile reaches its verdict") {
  if (ks::visible_gpu_count() == 0) {
    std::printf("SKIP: no GPU visible\n");
    std::exit(77);
  }
  if (auto ncu = ks::find_ncu(""); !ncu) {
    std::printf("SKIP: %s\n", ncu.message().c_str());
    std::exit(77);
  }
  auto library = kforge::tasks::builtin_tasks();
  REQUIRE(library.ok());
  const kforge::tasks::task* relu = nullptr;
  for (const auto& t : *library)
    if (t.id == "l1/relu") relu = &t;
  REQUIRE(relu != nullptr);

  ks::pool_options po;
  po.eval.compile.cache_dir = fs::temp_directory_path() / "kforge-profile-cache";
  fs::create_directories(po.eval.compile.cache_dir);
  po.work_dir = po.eval.compile.cache_dir;
  po.run.program = KFORGE_BINARY;
  po.run.profile = true;
  po.gpus = {0};
  po.runners_per_gpu = 1;
  auto pool = ks::sandbox_pool::create(po);
  REQUIRE_MESSAGE(pool.ok(), (pool.ok() ? "" : pool.message()));
  std::printf("sandbox: %s\n", (*pool)->describe().c_str());

  const auto v = (*pool)->evaluate(*relu, ks::known_good_candidate(), 1234);
  const auto j = ks::verdict_json(v);
  std::printf("verdict: %s\n", j.dump(2).c_str());
  REQUIRE(v.status == kforge::wire::VerdictStatus::ok);
  if (v.profile_skipped.find("ERR_NVGPUCTRPERM") != std::string::npos) {
    std::printf("SKIP: %s\n", v.profile_skipped.c_str());
    std::exit(77);
  }
  REQUIRE_MESSAGE(v.profile, v.profile_skipped);
  CHECK(v.profile->kernel.find("relu_kernel") != std::string::npos);
  CHECK(v.profile->duration_us > 0);
  CHECK(v.profile->achieved_occupancy_pct > 0);
  CHECK(v.profile->dram_throughput_pct > 0);
  CHECK(v.profile_ms > 0);
  CHECK((*pool)->phases().profiles == 1);
}
