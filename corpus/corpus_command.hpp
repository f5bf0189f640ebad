#pragma once
// `kforge corpus build`: the kernel writer (corpus/kernel_writer.hpp) over a task set, written as
// a pretraining corpus:
//
//   kforge corpus build --tasks builtin|FILE.jsonl|synth:COUNT:SEED --out DIR
//                       [--category elementwise,reduction,...] [--gpu-facts FILE.toml]
//                       [--verdicts FILE.jsonl] [--prompt-template FILE]
//                       [--copy-drills N] [--lowering-drills N --exclude FILE ...] [--drill-seed S]
//                       [--repair-drills N] [--speed-drills]
//
// DIR/tasks.jsonl        the supported tasks (what `kforge eval --tasks` reads)
// DIR/kernels/<id>/<variant>.cu   one file per variant (what `kforge eval --candidates` reads)
// DIR/sft.jsonl          {"task_id", "variant", "prompt", "completion"} per variant; with
//                        --verdicts (a `kforge eval` verdict file) only variants whose verdict
//                        is ok, with "speedup" added; drills after them (repair drills as
//                        {"prompt", "turns": [{"completion", "observation", "train": false},
//                        {"completion"}]})
// and a summary: tasks seen, supported, variants written, unsupported reasons counted. The same
// arguments give the same files, byte for byte.
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace kforge::corpus {

struct corpus_options {
  /// "builtin", a task file, or "synth:COUNT:SEED".
  std::string tasks = "builtin";
  /// Only these categories (empty: all).
  std::vector<std::string> categories;
  std::string out;
  /// A TOML file with the keys of a manifest's [tasks.gpu] (at the top or under [tasks.gpu]);
  /// empty: every fact "unknown", as a run without [tasks.gpu] on a CPU host.
  std::string gpu_facts;
  /// Or the facts of this CUDA ordinal, probed as a run's task generator probes them; -1: none.
  int gpu = -1;
  /// `kforge eval` verdict lines; empty: keep every variant.
  std::string verdicts;
  /// A prompt template file (tasks/prompt.hpp), as a run's [tasks] prompt_template; empty: the
  /// embedded one.
  std::string prompt_template;
  /// Copy drills appended to sft.jsonl (corpus/copy_drill.hpp): short records whose completion
  /// is only the restated reference of a scrambled task, marked "prefix_only"; 0: none.
  int copy_drills = 0;
  std::uint64_t drill_seed = 1;
  /// Lowering drills appended to sft.jsonl (corpus/lowering_drill.hpp): map tasks with scrambled
  /// elementwise references, their completions cut after kf_op and the map kernel after it,
  /// "prefix_only"; 0: none. Seeded by drill_seed + 1.
  int lowering_drills = 0;
  /// Task files (or "builtin") whose tasks no lowering drill may repeat (reference or op
  /// skeleton), as `kforge tasks synth --exclude`.
  std::vector<std::string> exclude;
  /// Repair drills appended to sft.jsonl (corpus/repair_drill.hpp): two-turn records, a kept
  /// variant broken by one edit with the sandbox's real observation of it, then the variant; 0:
  /// none. Seeded by drill_seed + 2; compiled (compile-only) with a cache in OUT/repair-cache.
  int repair_drills = 0;
  /// Speed drills appended to sft.jsonl (corpus/speed_drill.hpp): per task whose kept variants'
  /// verdicts differ in speed by speed_drill_gain or more, the slowest variant, its verdict's
  /// observation, then the fastest. Needs `verdicts`.
  bool speed_drills = false;
};

/// A speed drill's faster variant is at least this many times as fast as the slower.
inline constexpr double speed_drill_gain = 1.25;

/// 0 success; 2 bad arguments or unreadable input; 3 not available in this build.
int corpus_command(const corpus_options& opt, std::ostream& out, std::ostream& err);

}  // namespace kforge::corpus
