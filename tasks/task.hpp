#pragma once
// A kernel problem in plain C++: the task format of docs/task-format.md after
// parsing and validation. Stage logic works on this struct; tasks travel in messages as
// wire::TaskT (tasks/task_wire.hpp converts both ways).

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.hpp"

namespace kforge::tasks {

/// Element types a task may use; the same set and order as kf_dtype and wire::DType.
enum class dtype { float32, float16, bfloat16, int32, int64, boolean };

/// What kind of kernel a task asks for (curriculum and reports group by it).
enum class category { elementwise, reduction, normalization, gemm, conv, fused, other };

/// How an input tensor is filled (tasks/inputs.hpp draws it from a seed).
enum class distribution { normal, uniform, randint, constant };

/// A tensor shape; [] is a 0-d (scalar) tensor.
using shape = std::vector<std::int64_t>;

/// The parameters of a distribution. Only the ones the distribution uses are meaningful:
/// normal: mean, std; uniform: [low, high); randint: integers in [low, high); constant: value.
struct init_spec {
  distribution dist = distribution::normal;
  double mean = 0.0;
  double std = 1.0;
  double low = 0.0;
  double high = 1.0;
  double value = 0.0;
};

/// One input of the reference, passed positionally in declaration order. A task with `prepare`
/// also lists its draws as input_specs: the tensors drawn from `init` that prepare turns into the
/// inputs (whose own `init` is then unused).
struct input_spec {
  std::string name;
  tasks::shape shape;  ///< primary shape (the one timed)
  dtype type = dtype::float32;
  init_spec init;
  /// A parameter or buffer of the model the task came from (KernelBench's weights): the same
  /// tensor on every call there. Harnesses that treat such tensors apart (torch.compile's CUDA
  /// graphs do not copy them) read it; the kernel ABI passes it as any input.
  bool parameter = false;
};

/// One output of the reference; `shape` is its shape at the primary input shapes.
struct output_spec {
  std::string name;
  tasks::shape shape;
  dtype type = dtype::float32;
};

/// Output `o` is correct when |o - ref| <= atol + rtol * |ref| everywhere (integer and bool
/// outputs must match exactly).
struct tolerance {
  double atol = 1e-4;
  double rtol = 1e-4;
};

/// Extra input shapes the candidate must also handle (correctness only). An input a variant does
/// not name keeps its primary shape.
struct variant {
  std::map<std::string, tasks::shape> shapes;
};

/// A validated task. Build one with parse_task / load_task_set (tasks/task_parser.hpp) or
/// from_wire (tasks/task_wire.hpp); check_task holds every rule they enforce.
struct task {
  std::string id;
  tasks::category category = category::other;
  std::string description;
  std::vector<input_spec> inputs;
  std::vector<output_spec> outputs;
  /// TorchScript source defining `def forward(<inputs in order>)`.
  std::string reference;
  /// Inputs derived from drawn tensors (a symmetric matrix, a mask, a scaled draw): `draws` are
  /// drawn from their init specs as inputs otherwise are, and `prepare`, TorchScript source
  /// defining `def prepare(<draws in order>)`, computes the inputs from them. Both empty for a
  /// task whose inputs are drawn directly.
  std::vector<input_spec> draws;
  std::string prepare;
  tasks::tolerance tolerance;
  std::vector<variant> variants;
  /// Whether a candidate may link cuBLAS.
  bool allow_cublas = false;
  /// Where the task came from: "builtin:<file>", a file path, "synth:<seed>:<signature>", ...
  std::string provenance;
};

/// Names as written in task files ("float32", "reduction", "randint", ...).
std::string_view to_string(dtype t);
std::string_view to_string(category c);
std::string_view to_string(distribution d);
std::optional<dtype> parse_dtype(std::string_view s);
std::optional<category> parse_category(std::string_view s);
std::optional<distribution> parse_distribution(std::string_view s);

/// "float32, float16, ..." for error messages that list the accepted names.
std::string dtype_names();
std::string category_names();
std::string distribution_names();

bool is_floating(dtype t);
/// Bytes per element.
std::size_t element_size(dtype t);
/// Product of the dims (1 for a 0-d shape).
std::int64_t numel(const shape& s);
/// "[4096, 4096]".
std::string to_string(const shape& s);
/// Bytes of one input set and its outputs at the primary shapes (draws included): what one copy
/// of a candidate's working set takes on the GPU.
std::int64_t primary_bytes(const task& t);

/// The tolerance a task gets when its file gives none: 1e-2 if any output is float16 or bfloat16,
/// else 1e-4 (both atol and rtol).
tasks::tolerance default_tolerance(const std::vector<output_spec>& outputs);

/// Which input shapes to use: the primary ones (std::nullopt) or variants[i].
using shape_choice = std::optional<std::size_t>;

/// Input shapes, in input order, for the primary shapes or a variant.
std::vector<shape> input_shapes(const task& t, shape_choice which);

/// The variant with the fewest input elements in total, or std::nullopt (primary) when the task
/// has no variant smaller than its primary shapes. CI runs references there.
shape_choice smallest_shapes(const task& t);

/// The longest task id: the built-in ones and KernelBench's problem names stay under 100.
inline constexpr std::size_t max_task_id_length = 128;

/// A task id is one or more names joined by '/', each of letters, digits and _ - . and none empty
/// or starting with '.', at most max_task_id_length characters ("l1/relu", "synth/3f2a...").
/// The error ("id: REASON") names the id.
status check_task_id(std::string_view id);

/// DIR/ID, the folder for a task's files under `dir` ("l1/relu" -> DIR/l1/relu), or the error
/// of check_task_id: every path made from a task id goes through here, so none leaves `dir`.
result<std::string> task_dir(const std::string& dir, const std::string& id);

/// Every rule of the task format beyond JSON types: a well-formed id, unique input/output names
/// that are valid TorchScript identifiers, positive dims, distribution parameters that fit the
/// distribution and the dtype, variants that name known inputs with the input's rank, a reference
/// that defines forward; where a task has prepare: draws like inputs (names, shapes, inits), a
/// prepare that defines `prepare`, and no variants. The error names the field path ("inputs[1].shape[0]") and the reason,
/// without a file: callers prefix where the task came from.
status check_task(const task& t);

}  // namespace kforge::tasks
