#pragma once
// The sandbox's worker pool inside one process: any number of threads call evaluate(); static
// checks and compiles run on the calling thread (CPU work), the run stage borrows one of
// `runners_per_gpu` runners per GPU (runner.hpp), so compiles overlap with GPU work and each GPU
// has a bounded number of candidate children. With no GPU it is compile-only and says so.
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.hpp"
#include "sandbox/evaluator.hpp"
#include "sandbox/runner.hpp"

namespace kforge::sandbox {

/// The program the sandbox children run as (`PROGRAM sandbox-child|sandbox-ref`): this executable
/// when it is kforge, or the one KFORGE_SANDBOX_PROGRAM names (tests and other programs that embed
/// the sandbox).
std::string sandbox_program();

/// The facts of GPU `gpu`, asked of a short-lived reference server (this process makes no CUDA
/// context). An error when the GPU or the server does not work.
/// `program`: the kforge executable serving `sandbox-ref` (empty: sandbox_program()).
result<gpu_facts> probe_gpu_facts(int gpu, const std::string& program = {});

/// The nvcc target a sandbox builds for, and how it was chosen (for the banner), e.g.
/// {"sm_90a", "auto: GPU 0's compute capability 9.0"}.
struct resolved_arch {
  std::string arch;
  std::string how;
  bool automatic = false;  ///< from "auto": every GPU of the pool must want this same target
};

/// `setting` (pool_options: "auto" or one valid_arch target) for a sandbox whose first GPU has
/// the facts `first_gpu` (none: compile-only). An explicit target stays as it is; "auto" is the
/// first GPU's target (arch_for_compute_capability), or default_arch with no GPU to ask. An error
/// names a malformed setting or a GPU whose compute capability is unknown.
result<resolved_arch> resolve_arch(const std::string& setting, const std::optional<gpu_facts>& first_gpu);

struct pool_options {
  /// eval.compile.arch may be "auto" (common/gpu_arch.hpp): create resolves it (resolve_arch)
  /// before the evaluator is made, so every compile, static check and the cache key use the
  /// resolved target.
  evaluator_options eval;
  /// CUDA ordinals to run on; empty with compile_only=false: every visible GPU.
  std::vector<int> gpus;
  bool compile_only = false;
  int runners_per_gpu = 4;
  /// Reference server processes per GPU (run_options::reference_servers); 0: one per runner.
  int reference_servers = 0;
  /// Run settings shared by every GPU (`gpu` is filled per slot; `probe_library` by create;
  /// an empty `program` means $KFORGE_SANDBOX_PROGRAM, else this executable). With `profile`,
  /// `ncu` is the configured path or empty, and create replaces it with the one find_ncu finds
  /// (ncu_profiler.hpp), or leaves it empty with `ncu_missing` saying why.
  run_options run;
  /// Where the probe library goes when there is no compile cache.
  std::string work_dir;
};

class sandbox_pool {
 public:
  /// Finds nvcc, builds the probe kernel, starts a reference server on every GPU (so a GPU that
  /// does not work is an error here, not a stream of infra_error verdicts later; the GPU's other
  /// servers start on first use).
  static result<std::unique_ptr<sandbox_pool>> create(pool_options options);
  ~sandbox_pool();
  /// The verdict for one candidate. Thread-safe. `seed` picks the input sets: give every member of
  /// a GRPO group the same seed so the reference runs once for the group.
  wire::VerdictT evaluate(const tasks::task& t, std::string_view source, std::uint64_t seed);
  bool runs_on_gpu() const noexcept { return !slots_.empty(); }
  /// Starts every reference server and candidate child now (in parallel) instead of on first
  /// use, so the first candidates do not wait for process and CUDA start-up. The first error.
  status start_all();
  /// Facts of the first GPU, if any.
  std::optional<gpu_facts> facts() const { return facts_; }
  /// The name CUDA gives the GPU that runs the kernels (what baselines files key their times by);
  /// "" when none runs them (compile-only).
  std::string device_name() const { return runs_on_gpu() && facts_ ? facts_->name : ""; }
  /// One line: "2 GPU(s) (NVIDIA H200), 4 runner(s) each, nvcc 13.0, for sm_90a (auto: ...)" or
  /// "compile-only (...), nvcc 13.0, for sm_90a (...)".
  std::string describe() const;
  /// Whether correct kernels are profiled, with which ncu, or why not ("profiles: ...").
  std::string describe_profiles() const;
  /// The target every candidate is compiled for (eval().options().compile.arch), and how it was
  /// chosen.
  const resolved_arch& arch() const noexcept { return arch_; }
  const evaluator& eval() const noexcept { return *evaluator_; }
  /// Where the runners' time went so far, summed over GPUs (run_phases).
  run_phases phases() const;

 private:
  explicit sandbox_pool(pool_options o) : options_(std::move(o)) {}
  std::unique_ptr<runner> borrow();
  void give_back(std::unique_ptr<runner> r);

  pool_options options_;
  std::optional<evaluator> evaluator_;
  std::vector<std::shared_ptr<gpu_slot>> slots_;
  std::optional<gpu_facts> facts_;
  std::mutex mutex_;
  std::condition_variable free_cv_;
  std::vector<std::unique_ptr<runner>> free_;
  std::string compile_only_reason_;
  resolved_arch arch_;
};

}  // namespace kforge::sandbox
