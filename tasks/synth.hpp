#pragma once
// Task synthesis, the parts that need no execution: a seeded generator of op chains (1-5 ops of
// the catalogue in tasks/synth_ops.hpp, optionally joining second inputs), rendering a chain into
// a task, its canonical signature, a cost model for the eager time, and the filters that run
// before anything executes (duplicate signature, contamination, size bound). The execution-driven
// filters and the `kforge tasks synth` loop are in tasks/synth_run.hpp. Torch-free.

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.hpp"
#include "tasks/synth_ops.hpp"
#include "tasks/task.hpp"

namespace kforge::tasks::synth {

/// Why a candidate was dropped; the synth table has one row per reason, in this order (the order
/// the filters run in).
enum class reject_reason {
  duplicate,          ///< its canonical signature was already tried
  contaminated,       ///< matches a task of the --exclude list
  size,               ///< estimated eager time outside the window (the CPU's runtime stand-in)
  does_not_run,       ///< the reference does not compile or fails to run
  shape_mismatch,     ///< outputs differ from the shape rules (a catalogue bug)
  nan_inf,            ///< an output has NaN or Inf
  nondeterministic,   ///< two runs on the same inputs differ
  constant,           ///< an output is constant
  near_zero,          ///< an output is within atol of zero (everywhere, or mostly)
  input_independent,  ///< an output or an input does not matter (a redrawn input changes nothing)
  modifies_input,     ///< the reference writes to an input
  runtime,            ///< measured eager time outside the window (GPU only)
};
constexpr std::size_t reject_reason_count = 12;
std::string_view to_string(reject_reason r);

/// Sizes and chain length of generated programs.
struct generate_options {
  /// Ops per chain: uniform in [1, max_ops]; at most 5.
  int max_ops = 5;
  /// Window of estimated H200 eager time (ms) the primary sizes are scaled into.
  double min_ms = 0.1;
  double max_ms = 20.0;
};

/// The cost model behind estimate_ms: eager PyTorch on an H200 in float32 (no TF32), each op a
/// kernel launch bound by memory traffic or arithmetic, whichever is slower.
struct cost_model {
  double bytes_per_ms = 3.0e9;   ///< ~3 TB/s achieved of the 4.8 TB/s HBM3e peak
  double flops_per_ms = 4.0e10;  ///< ~40 TFLOP/s achieved float32 (cuBLAS/cuDNN, TF32 off)
  double launch_ms = 0.005;
};

/// A generated chain: its dimension symbols, input shape and ops. Renders into a task.
struct program {
  std::uint64_t seed = 0;  ///< generate(seed, options) gives this program again
  synth::layout layout = synth::layout::matrix;
  dim_table dims;
  sym_shape x;
  std::vector<step> steps;

  /// The canonical signature: the shape class (x's layout) and each op with its parameters,
  /// without sizes: "mat:linear(b)>gelu>sum(1,keep)". Two programs that differ only in sizes
  /// share it; dedup and contamination key on it.
  std::string signature() const;
  /// The output's shape in a size set.
  shape output_shape(std::size_t set) const;
  /// Estimated eager time in ms (cost_model) in a size set.
  double estimate_ms(std::size_t set = primary, const cost_model& m = {}) const;
};

/// A chain of 1..max_ops ops from `seed`: x's layout and sizes, then ops offered by weight among
/// those that apply, then the batch dimension scaled by powers of two toward a target time drawn
/// log-uniformly inside the window (the memory limit permitting). Deterministic in (seed, options).
program generate(std::uint64_t seed, const generate_options& opt = {});

/// The task of a program: id "synth/<hash of signature and shapes>", category (the op's, or
/// fused for several), a description, inputs x then each op's parameters in order, one output
/// "out", the reference, default_tolerance with atol 1e-3 where a sum or scan runs over a
/// dimension and 1e-6 after a final softmax (the built-in library's choices), variants [medium,
/// small], provenance "synth:<seed>:<signature>".
task render(const program& p);

/// The signature recorded in a synthesized task's provenance, or nothing for other tasks.
std::optional<std::string> provenance_signature(const task& t);

/// The reference with whitespace and comments removed and forward's arguments and assigned
/// variables renamed in order of appearance (a0, a1, ...; v0, v1, ...): equal for references that
/// differ only in naming and layout.
std::string normalized_reference(const std::string& source);

/// The reference's op skeleton: the input count and the sorted multiset of its ops, `torch.X`
/// calls and arithmetic operators alike (`x + b` and `torch.add(x, b)` are both "add"; `@` is
/// matmul, `**` pow; signs and exponents are not ops): "3:add,gelu,linear". Nesting, naming,
/// constants and layout do not change it.
std::string op_skeleton(const task& t);

/// Tasks of a benchmark that synthesized tasks must not repeat (the contamination filter).
class exclusion_list {
 public:
  void add(const task& t);
  /// Every task of a task file (JSON Lines or .json), or of the built-in library for "builtin".
  /// A file that does not parse is an error (naming its first bad line).
  status add_file(const std::string& path);
  /// Why `t` (with program signature `signature`) matches a listed task: the same signature (for
  /// listed tasks made by synthesis), the same normalized reference or the same op skeleton.
  std::optional<std::string> match(const task& t, const std::string& signature) const;
  std::size_t size() const { return count_; }

 private:
  std::map<std::string, std::string> signatures_, references_, skeletons_;  // key -> task id
  std::size_t count_ = 0;
};

/// The filters that need no execution, in order: duplicate signature (every signature offered is
/// recorded, kept or not, so a chain that failed is not tried again at other sizes),
/// contamination, and the estimated eager time against [min_ms / slack, max_ms * slack].
class static_filter {
 public:
  static_filter(exclusion_list exclude, double min_ms, double max_ms, double slack = 1.0);
  std::optional<reject_reason> admit(const program& p, const task& t, std::string* why = nullptr);

 private:
  exclusion_list exclude_;
  double min_ms_, max_ms_;
  std::set<std::string> seen_;
};

}  // namespace kforge::tasks::synth
