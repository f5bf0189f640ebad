#pragma once
// Speed drills: two-turn records that teach a model to act on a correct kernel's timing. Where the
// corpus holds two correct variants of a task whose measured speeds differ (a `kforge eval` verdict
// file of the corpus's kernels from a GPU, the same one `--verdicts` keeps variants by), the slower
// variant is the first turn (not trained), its real verdict rendered by the observation template
// an episode uses ("correct: X ms against the baseline's Y ms ... make it faster") is the
// observation, and the faster variant is the answer.
//
// Why: with repair drills (repair_drill.hpp) a model learns to fix what does not build; a correct
// kernel's observation asks for a faster one, and the corpus already knows, per task, which of its
// variants is faster on the GPU that measured them.

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/gpu_facts.hpp"
#include "corpus/kernel_writer.hpp"
#include "tasks/task.hpp"

namespace kforge::corpus {

/// A kept variant with its verdict line (status ok, with a speedup).
struct timed_variant {
  const tasks::task* task = nullptr;
  std::string prompt;
  kernel_variant variant;
  nlohmann::json verdict;
};

struct speed_drill {
  std::string task_id;
  std::string slow_variant, fast_variant;
  double slow_speedup = 0, fast_speedup = 0;
  std::string prompt;
  std::string slow_completion;
  std::string observation;
  std::string fast_completion;
};

/// One drill per task whose fastest variant is at least `min_gain` times its slowest (by their
/// verdicts' speedups), in the order tasks first appear in `variants`; `gpu` gives the
/// observation's launch limits. A verdict line that does not read back as a verdict is an error.
result<std::vector<speed_drill>> speed_drills(const std::vector<timed_variant>& variants, double min_gain,
                                              const gpu_facts& gpu);

}  // namespace kforge::corpus
