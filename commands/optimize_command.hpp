#pragma once
// `kforge optimize --task ID|FILE --turns N --samples G --out DIR`: the agent loop at inference time,
// for an engineer with a task and a trained policy. G episodes of up to N turns each: the model
// writes a kernel, the sandbox judges it, the verdict comes back as an observation
// (agent/observation.hpp) and the model writes the next one, until a turn reaches
// --target-speedup or the turns run out. Written to DIR:
//   best.cu, best.json      the fastest correct kernel (episode, turn, speedup, verdict)
//   episode-K/turn-T.cu     every turn's kernel, turn-T.json its verdict
//   episode-K/transcript.md the conversation: prompt, the model's turns, the observations
//   report.md               per turn: how many episodes had a correct kernel, the best speedup
//   verdicts.jsonl          every turn's verdict with "task", "episode" and "turn": the lines
//                           `kforge eval` writes, so `kforge compare --best-of-task` sets episodes
//                           beside single-shot samples of the same budget
// With --baselines FILE (torch.compile's times, as kforge eval's flag) a correct kernel's lines,
// best.json and the reports also give its speedup against torch.compile, the bar KernelBench's
// results are reported against.
// `--tasks FILE|builtin` works every task of a task file the same way, each in DIR/<task id>/, with
// DIR/report.md over tasks (per turn: tasks with a correct kernel, mean best speedup) and one
// DIR/verdicts.jsonl. Each turn, every live episode of every task is generated in batches of
// --batch sequences, then every kernel is judged (the sandbox has the GPU to itself for timing).
// Without a GPU (or with --compile-only) the sandbox only compiles: the best verdict is `compiled`
// and no kernel is correct, and the command says so.

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace kforge::pipeline {

struct optimize_options {
  std::string task;                    ///< a built-in task id, or a task file holding it
  std::string task_id;                 ///< which task of a file of several
  std::string tasks;                   ///< instead of task: every task of this file ("builtin": the library)
  std::string model = "models/kforge-tiny";
  std::string out;                     ///< output directory (created; must not hold a report yet)
  int turns = 3;
  int samples = 4;                     ///< episodes
  double target_speedup = 0;           ///< > 0: an episode stops at a correct kernel this fast
  double temperature = 0.8;
  double top_p = 1.0;
  int max_new_tokens = 1024;
  /// An episode ends when its context reaches this many tokens; 0: the model's context length
  /// less max_new_tokens, so that every turn fits the positions the model was trained on.
  std::size_t max_tokens = 0;
  int batch = 64;                      ///< sequences per generate call
  int jobs = 0;                        ///< sandbox threads; 0: the cores, at most 16
  std::vector<std::string> feedback;   ///< observation kinds (agent::feedback_kinds); empty: all
  std::string observation_template;    ///< a template file; empty: the embedded one
  int gpu = -1;                        ///< CUDA ordinal for the model; -1: the CPU
  bool compile_only = false;           ///< the sandbox compiles only, even with GPUs
  std::string arch = "auto";           ///< nvcc target, as kforge eval's --arch
  std::uint64_t seed = 1;              ///< sampling, and the sandbox's input sets as kforge eval --seed
  /// A task's repeated source is judged once (kforge eval --reuse-repeats): its verdict line says
  /// "reused".
  bool reuse_repeats = false;
  std::string ncu;                     ///< Nsight Compute for profiles; empty: found as [sandbox] ncu
  /// Eager and torch.compile times (tasks/measured_baselines.hpp), as kforge eval --baselines:
  /// correct kernels also get their speedup against torch.compile. Empty: against eager only.
  std::string baselines;
};

/// Runs the command: 0 when it ran (whether or not a correct kernel was found), 2 on bad input.
int optimize_command(const optimize_options& o, std::ostream& out, std::ostream& err);

}  // namespace kforge::pipeline
