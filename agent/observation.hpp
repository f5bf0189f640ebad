#pragma once
// The observation of one turn of an episode: the sandbox's verdict on the model's kernel written as
// feedback the model can act on — compile errors as a short list (line, message, what it means,
// the offending source line), ptxas resources and the launch limits they imply, which check a
// wrong answer failed and by how much, runtime errors and timeouts, and for a correct kernel its
// speedup over the baseline and over the episode's best, with an Nsight Compute profile when one
// was taken. The words come from one editable template (observation_template.txt, embedded; a
// user's file instead), like the prompt's.

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/gpu_facts.hpp"
#include "common/result.hpp"
#include "messages/rollout_generated.h"
#include "sandbox/ncu_report.hpp"

namespace kforge::agent {

/// Nsight Compute's short profile of one kernel of a correct candidate (sandbox/ncu_report.hpp):
/// the sandbox collects it and sends it in the verdict.
using kernel_profile = sandbox::kernel_profile;

/// Which kinds of feedback observations show ([agent] feedback), for ablations. A kind that is off
/// leaves only the turn's status line for the verdicts it covers.
struct feedback_kinds {
  bool compile = true;      ///< compile and link errors, rejections by the static checks
  bool resources = true;    ///< ptxas registers, shared memory, spills, and the limits they imply
  bool correctness = true;  ///< wrong answers and suspected hacks
  bool runtime = true;      ///< runtime errors (with the program's output) and timeouts
  bool timing = true;       ///< a correct kernel's times and speedups
  bool profile = true;      ///< a correct kernel's Nsight Compute profile
  /// From kind names (those of names()); an unknown one is an error naming it and the known ones.
  static result<feedback_kinds> parse(const std::vector<std::string>& kinds);
  static const std::vector<std::string>& names();
};

/// Where the turn stands in its episode.
struct turn_context {
  int turn = 1;
  int max_turns = 1;
  /// The episode's best speedup before this turn; 0 when no earlier turn was correct.
  double best_speedup = 0;
  /// The GPU the kernel ran on, for the launch limits of its registers and shared memory
  /// (registers_per_sm and shared_per_sm; a zero one's limit is left out).
  gpu_facts gpu;
  /// The profile to show for a correct kernel; none: the one the verdict carries, if any
  /// (the sandbox takes it: sandbox/ncu_profiler.hpp).
  std::optional<kernel_profile> profile;
};

class observation_template {
 public:
  /// The embedded default (agent/observation_template.txt).
  static observation_template embedded();
  /// `text` checked: every section known and present, every placeholder known to its section; an
  /// error names the problem, its line and `origin`.
  static result<observation_template> from_text(const std::string& text, const std::string& origin);
  /// The file at `path`, checked; an error names the file.
  static result<observation_template> load(const std::string& path);

  /// The observation of verdict `v` (its candidate's source gives the lines errors point at).
  std::string render(const wire::VerdictT& v, const turn_context& ctx, const feedback_kinds& kinds) const;

  /// Every section name, in the order they are joined.
  static const std::vector<std::string>& section_names();

 private:
  explicit observation_template(std::vector<std::string> sections) : sections_(std::move(sections)) {}
  std::vector<std::string> sections_;  ///< the text of each section, in section_names() order
};

}  // namespace kforge::agent
