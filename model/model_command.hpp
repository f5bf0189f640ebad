#pragma once
// `kforge model`: tools to check the policy model against other implementations of it.
//   logits          the logits kforge computes for given token ids, with or without a LoRA adapter
//                   directory, written as a safetensors file ("logits" [T, V] fp32, "tokens" [T]
//                   int64) that deploy/check_peft_adapter.py compares with transformers + PEFT.
//   random-adapter  a LoRA adapter in the PEFT layout written by the trainer's own writer
//                   (save_lora), with A initialised as the trainer does and B drawn at random: a
//                   fresh adapter's B is zero and would make such a check vacuous.
// Torch-free header; the flags live in model_cli.hpp.

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace kforge::model {

struct logits_options {
  std::string model;    ///< checkpoint directory
  std::string adapter;  ///< PEFT adapter directory; empty: the base model
  std::vector<std::int64_t> tokens;
  std::string dtype = "float32";  ///< float32, bfloat16 or float16
  std::string device = "cpu";     ///< cpu, cuda, cuda:N
  std::string out;                ///< .safetensors file to write
};

struct random_adapter_options {
  std::string model;  ///< checkpoint directory (only its config.json is read)
  std::string out;    ///< adapter directory to write
  std::int64_t rank = 8;
  double alpha = 16;
  std::vector<std::string> targets;  ///< empty: every projection
  std::uint64_t seed = 0;
  /// Standard deviation of B's entries.
  double b_std = 0.02;
};

/// Exit code: 0, 2 for bad options or inputs (nothing written), 1 when writing fails.
int logits_command(const logits_options& opt, std::ostream& out, std::ostream& err);
int random_adapter_command(const random_adapter_options& opt, std::ostream& out, std::ostream& err);

}  // namespace kforge::model
