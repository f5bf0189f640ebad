#pragma once
// Repair drills: two-turn records that teach a model to use the sandbox's feedback. A correct
// kernel of the corpus is broken by one small edit, the broken file goes through the sandbox as a
// candidate would (static checks, nvcc, the entry-point check: compile-only, which judges a kernel
// that does not build exactly as a GPU run does), and its verdict, rendered by the observation
// template an episode uses (agent/observation.hpp), is the observation. The record's turns are the
// broken completion (not trained: a model should not learn to write it) and the correct one.
//
// Why: kforge-tiny learnt from single-shot (prompt, kernel) records only; in 3-turn episodes on an
// H100 (2026-12-06) its turns after an observation were nearly all compile errors, a mix of kernels
// it knew, so episodes gained nothing. These drills show it what a compile error's observation
// says and that the answer is the whole file again, fixed.
//
// Breakages (each the kind of slip small models make). That stop the build: a statement's
// semicolon dropped, one use of a local name misspelt (undeclared), the entry point misspelt
// (kf_forward not exported: a link error), the ABI header's #include dropped. That build and then
// compute wrongly (only a run shows them, so they are drawn only where the drills are judged on a
// GPU; their observation is a wrong answer's or a fault's): a launch grid rounded down instead of
// up (the tail left unwritten, or no block at all), a sum's accumulator started at 1, a constant
// of the element function changed.

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "corpus/kernel_writer.hpp"
#include "tasks/task.hpp"

namespace kforge::corpus {

enum class breakage {
  drop_semicolon,
  undeclared_name,
  entry_point_name,
  no_include,
  grid_rounded_down,
  sum_starts_at_one,
  op_constant,
};

/// "drop_semicolon", ...
const char* to_string(breakage b);

/// Whether a kernel broken this way still builds, so that only running it shows the fault.
bool shows_only_when_run(breakage b);

/// `source` broken by `kind` at a place drawn from `rng`; nullopt when it has no such place.
std::optional<std::string> break_source(const std::string& source, breakage kind, std::mt19937_64& rng);

/// One drill: the broken completion, the sandbox's observation of it, the correct completion.
struct repair_drill {
  std::string task_id;
  std::string variant;
  std::string edit;  ///< the breakage's name
  std::string prompt;
  std::string broken_completion;
  std::string observation;
  std::string completion;
};

/// A task's prompt and one of its correct variants.
struct drill_source {
  const tasks::task* task = nullptr;
  std::string prompt;
  kernel_variant variant;
};

/// What came of drawing drills.
struct repair_drill_tally {
  int written = 0;
  int unbroken = 0;  ///< the edit left a kernel that still built: no drill
};

/// `count` drills over `sources` (drawn with `seed`; breakages in turn), each broken kernel judged
/// by a sandbox with its cache in `cache_dir`: on GPU `gpu` (every breakage drawn), or, with `gpu`
/// -1, compile-only (the breakages that stop the build only). An error when the sandbox cannot start.
result<std::vector<repair_drill>> repair_drills(const std::vector<drill_source>& sources, int count,
                                                std::uint64_t seed, const std::string& cache_dir, int gpu = -1,
                                                repair_drill_tally* tally = nullptr);

}  // namespace kforge::corpus
