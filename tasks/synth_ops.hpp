#pragma once
// The op catalogue of task synthesis (tasks/synth.hpp): for each op, the shapes it accepts, the
// shape it gives, the parameter inputs it adds (weights, biases, a second operand) with their
// init, its TorchScript, a phrase for the description and its cost. Torch-free.
//
// Shapes are symbolic: a shape is a list of dimension symbols, and each symbol has a size in each
// of three size sets at once: the primary shapes (H200-sized, timed), a medium and a small variant
// (correctness; the CPU checks run there). An op applies only where it is valid in all three, so
// one generated chain renders all of a task's shapes, and a residual add can ask whether the
// current value has x's shape by symbol, not by a coincidence of sizes.
//
// References use only builtin operators (`torch.X` is aten::X when compiled from C++) that exist
// in LibTorch 1.13 (CI) and 2.x (the GPU host).

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tasks/task.hpp"

namespace kforge::tasks::synth {

/// The size sets every symbol has a size in; variants[0] and [1] of a rendered task are medium
/// and small.
enum size_set : std::size_t { primary = 0, medium = 1, small = 2 };
constexpr std::size_t size_sets = 3;
using sizes = std::array<std::int64_t, size_sets>;

/// What a dimension means: ops check roles (a conv needs channels and two spatial dims) and the
/// size choices depend on it. `fixed` is a kernel size, `one` a kept reduced dimension.
enum class role { batch, rows, seq, features, channels, spatial, fixed, one };

/// A deterministic generator (splitmix64): the same seed gives the same numbers on every host and
/// standard library, which std::uniform_int_distribution does not promise.
class rng {
 public:
  explicit rng(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next();
  /// Uniform in [lo, hi] (inclusive).
  std::int64_t uniform(std::int64_t lo, std::int64_t hi);
  /// Uniform in [0, 1).
  double unit();
  bool chance(double p) { return unit() < p; }
  template <class T>
  const T& pick(const std::vector<T>& v) {
    return v[static_cast<std::size_t>(uniform(0, static_cast<std::int64_t>(v.size()) - 1))];
  }

 private:
  std::uint64_t state_;
};

/// splitmix64's finalizer: a seed for sub-stream `k` of `seed`.
std::uint64_t mix(std::uint64_t seed, std::uint64_t k);

/// The dimension symbols of one chain and their sizes.
class dim_table {
 public:
  int add(role r, sizes n);
  role role_of(int sym) const { return dims_.at(static_cast<std::size_t>(sym)).r; }
  std::int64_t size(int sym, std::size_t set) const {
    return dims_.at(static_cast<std::size_t>(sym)).n[set];
  }
  void set_size(int sym, std::size_t set, std::int64_t n) {
    dims_.at(static_cast<std::size_t>(sym)).n[set] = n;
  }
  /// The symbol of a kept reduced dimension (size 1 everywhere), made on first use.
  int one();
  /// A fixed size (a kernel's k), the same symbol for the same k.
  int fixed(std::int64_t k);

 private:
  struct dim {
    role r;
    sizes n;
  };
  std::vector<dim> dims_;
};

using sym_shape = std::vector<int>;

/// A concrete shape of `s` in one size set.
shape eval(const dim_table& d, const sym_shape& s, std::size_t set);
/// Elements of `s` in one size set.
std::int64_t numel(const dim_table& d, const sym_shape& s, std::size_t set);

/// The starting tensor x: a matrix [M, N], a sequence batch [B, T, D] or an image batch
/// [B, C, H, W]. Part of the canonical signature (the "shape class").
enum class layout { matrix, sequence, image };
std::string_view to_string(layout l);

/// An input an op adds (a weight, a bias, a second operand).
struct param {
  std::string name;
  sym_shape dims;
  init_spec init;
  bool operand = false;  ///< a second data input (z), not a weight: at most two per chain
};

/// How an op bears on the task's tolerance: sums over a dimension grow rounding error (atol
/// 1e-3, as the built-in library's sums); a final softmax gives values far below 1e-4 (atol 1e-6).
enum class tol_hint { none, sums, probabilities };

/// One op of a chain, as the catalogue made it for the current value.
struct step {
  std::string op;         ///< catalogue name
  std::string signature;  ///< the op with its parameters: "sum(1,keep)", "conv2d(k3,s2,b)"
  /// TorchScript expression; `$` stands for the current value (a variable name), `%` for x.
  std::string expr;
  std::string phrase;  ///< for the description: "sum over dim 1 (kept)"
  tasks::category cat = tasks::category::other;
  std::vector<param> params;  ///< inputs it adds, in order
  sym_shape out;
  dtype out_type = dtype::float32;
  /// Nothing may follow (an integer output).
  bool terminal = false;
  tol_hint tol = tol_hint::none;
  /// Arithmetic: flop_factor times the product of the sizes of flop_dims (0: memory-bound).
  double flop_factor = 0.0;
  std::vector<int> flop_dims;
  /// Passes over the data (reads of the input + writes of the output); 2 for two-pass ops.
  double passes = 1.0;
};

/// What an op sees when it is offered the next place in a chain.
struct chain_state {
  dim_table* dims = nullptr;  ///< ops add symbols here (new features, pooled sizes)
  synth::layout layout = synth::layout::matrix;
  sym_shape x;    ///< the input's shape
  sym_shape cur;  ///< the current value's shape
  int index = 1;  ///< 1-based position of the op (names its parameters: w1, b1)
  std::string prev_op;
  int data_inputs = 1;  ///< x plus second operands so far
};

/// One catalogue entry. `make` returns nothing when the op does not apply to the current value
/// (rank, roles, or a size set where it would be invalid).
struct op_def {
  std::string_view name;
  tasks::category cat;
  int weight;  ///< relative chance of being offered
  std::function<std::optional<step>(chain_state& s, rng& r)> make;
};

/// A new dimension of features (a linear layer's outputs, x's last dimension).
int feature_dim(dim_table& d, rng& r);

/// Every op, in a fixed order (generation is reproducible from a seed).
const std::vector<op_def>& catalogue();

/// Largest tensor (elements) any op may produce at the primary shapes: 2^28 (1 GiB of float32).
constexpr std::int64_t max_primary_numel = std::int64_t{1} << 28;
/// Largest at the medium variant, so CPU checks stay fast.
constexpr std::int64_t max_medium_numel = std::int64_t{1} << 19;

}  // namespace kforge::tasks::synth
