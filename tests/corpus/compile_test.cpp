// Every variant the writer gives for the family tasks and a few synthesized tasks passes the
// sandbox's static check (with the preprocessed pass) and compiles with nvcc under the sandbox's
// flags and library check: the sandbox's own evaluator without a run stage must say "compiled".
// Compile only; a GPU host runs them in test_corpus_gpu.
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <filesystem>
#include <thread>

#include "common/parallel.hpp"
#include "corpus/kernel_writer.hpp"
#include "corpus_tasks.hpp"
#include "sandbox/evaluator.hpp"
#include "sandbox/toolchain.hpp"

using namespace kforge;
namespace fs = std::filesystem;

#ifdef KFORGE_TASKS_WITH_TORCH
TEST_CASE("every written variant passes the static check and compiles") {
  if (const auto tc = sandbox::find_toolchain(); !tc) {
    MESSAGE("skipped: no CUDA toolchain (" << tc.message() << ")");
    return;
  }
  struct item {
    tasks::task task;
    corpus::kernel_variant v;
  };
  std::vector<item> items;
  const auto lib = corpus::testing::builtin_by_id();
  std::vector<tasks::task> chosen;
  const char* all_env = std::getenv("KFORGE_CORPUS_COMPILE_ALL");
  const bool all = all_env != nullptr && std::string(all_env) == "1";
  for (const auto& id : all ? corpus::testing::family_tasks() : corpus::testing::compile_subset())
    chosen.push_back(lib.at(id));
  if (all) {
    int synth_supported = 0;
    for (const auto& t : corpus::testing::synth_tasks(60)) {
      if (synth_supported >= 6) break;
      if (corpus::write_kernels(t)) {
        chosen.push_back(t);
        ++synth_supported;
      }
    }
    CHECK(synth_supported == 6);
  } else {
    MESSAGE("compiling one task per kernel kind; KFORGE_CORPUS_COMPILE_ALL=1 compiles every family task");
  }
  for (const auto& t : chosen) {
    auto ks = corpus::write_kernels(t);
    REQUIRE_MESSAGE(ks.ok(), t.id << ": " << (ks.ok() ? "" : ks.message()));
    for (auto& v : *ks) items.push_back({t, std::move(v)});
  }
  const fs::path cache =
      fs::temp_directory_path() / ("kforge-corpus-cache-" + std::to_string(::getpid()));
  struct remove_at_end {
    fs::path p;
    ~remove_at_end() {
      std::error_code ec;
      fs::remove_all(p, ec);
    }
  } cleanup{cache};
  sandbox::evaluator_options eo;
  eo.compile.cache_dir = cache.string();
  eo.preprocess_time_limit = std::chrono::milliseconds(300'000);
  eo.compile.time_limit = std::chrono::milliseconds(600'000);
  auto ev = sandbox::evaluator::create(eo);
  REQUIRE_MESSAGE(ev.ok(), (ev.ok() ? "" : ev.message()));
  std::vector<std::string> verdicts(items.size()), reasons(items.size());
  const int threads = static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 4u));
  parallel_for(items.size(), threads, [&](std::size_t i) {
    const auto v = ev->evaluate(items[i].task, items[i].v.source, {});
    verdicts[i] = wire::EnumNameVerdictStatus(v.status);
    reasons[i] = v.reason;
    for (const auto& d : v.diagnostics)
      if (d && reasons[i].size() < 3000)
        reasons[i] += "\n" + std::to_string(d->line) + ": " + d->message;
  });
  for (std::size_t i = 0; i < items.size(); ++i) {
    INFO(items[i].task.id << " / " << items[i].v.name << ": " << reasons[i]);
    CHECK(verdicts[i] == "compiled");
  }
  MESSAGE(items.size() << " variants of " << chosen.size() << " tasks compiled");
}
#endif
