#pragma once
// `kforge sample --model DIR --tasks SPEC --out DIR`: a checkpoint writes G candidate kernels per
// task, outside any run, in the layout `kforge eval --candidates` reads (OUT/<task id>/s<k>.cu),
// plus OUT/samples.jsonl (one line per sample: task, index, completion, token count, whether it
// stopped) and OUT/tasks.jsonl (the tasks sampled, for `kforge eval --tasks`). Together the two
// commands measure a policy on a task set: pass rate and speedup over G samples per task.
//
// Prompts are rendered exactly as a run renders them (the embedded template or --prompt-template,
// the same GPU facts: probed from --gpu unless --no-gpu-facts) and sampled by the engine sampler
// (stages/engine_sampler.hpp), so what this measures is what the run's sampler would write.

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace kforge::pipeline {

struct sample_options {
  std::string model;            ///< checkpoint directory (config, safetensors, tokenizer)
  std::string tasks = "builtin";///< "builtin" or a task file (.jsonl / .json)
  std::vector<std::string> categories;  ///< keep only these categories (empty: all)
  std::string out;              ///< output directory (created; must not hold samples already)
  int samples = 8;              ///< G per task; at most max_group_size, like sampler.group_size
  double temperature = 0.8;
  double top_p = 1.0;
  int max_new_tokens = 1024;
  int batch = 8;                ///< tasks per generate call
  std::uint64_t seed = 0;
  int gpu = -1;                 ///< CUDA ordinal for the model and the probed facts; -1: CPU
  bool no_gpu_facts = false;    ///< prompts say "unknown" for the GPU even with --gpu
  std::string prompt_template;  ///< a template file; empty: the embedded one
  bool profile_ops = false;     ///< print where the host's time went, op by op (model/op_profile.hpp)
};

/// Runs the command; 0 on success, 2 on bad input (a message on `err` names it).
int sample_command(const sample_options& o, std::ostream& out, std::ostream& err);

}  // namespace kforge::pipeline
