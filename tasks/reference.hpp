#pragma once
// A task's reference: its TorchScript `forward` compiled with torch::jit::compile and run on the
// CPU or a CUDA device. LibTorch stays out of this header (reference.cpp holds it).
//
// Only builtin operators resolve when compiling from C++: `torch.relu`, `torch.layer_norm`,
// `torch.conv2d`, `torch.cross_entropy_loss`, ... (`torch.X` is aten::X); `torch.nn.functional`
// does not. `forward` must take exactly the task's inputs, named and ordered as in the task, all
// Tensors, and return a Tensor or a tuple of Tensors, one per task output.
//
// Runs use the graph executor with optimization off (no profiling, no fusion), so the reference
// executes the same aten kernels eager PyTorch would, and its time is the eager time. On CUDA,
// TF32 is turned off for cuBLAS and cuDNN (a process-wide setting): float32 tasks are held to
// float32 accuracy, and a reference computed in TF32 would miss its own tolerance.

#include <cstdint>
#include <memory>
#include <vector>

#include "common/result.hpp"
#include "tasks/task.hpp"
#include "tasks/tensor_list.hpp"

namespace kforge::tasks {

/// Median and spread of repeated runs.
struct timing {
  double median_ms = 0.0;
  double p25_ms = 0.0;
  double p75_ms = 0.0;
  int trials = 0;
};

/// A compiled reference. Movable, not copyable; use one from one thread at a time.
class reference {
 public:
  /// Compiles t.reference and checks forward's signature against t.inputs. Errors say
  /// "task 'ID': reference: ..." with TorchScript's own message (which names the source line).
  static result<reference> compile(const task& t);

  reference(reference&&) noexcept;
  reference& operator=(reference&&) noexcept;
  ~reference();

  /// Runs forward on `inputs` (all on one device; it runs there) without autograd. Checks the
  /// outputs against the task: their count and dtypes always, their shapes when the inputs have
  /// the primary shapes (a variant's output shapes are whatever the reference gives). Outputs are
  /// contiguous and never alias an input.
  result<tensor_list> run(const tensor_list& inputs) const;

  /// The output shapes at the given input shapes, found by running forward on meta tensors
  /// (shapes only: no memory, no arithmetic), so the primary shapes can be checked on a CPU in
  /// microseconds. An error when an operator has no meta implementation in this LibTorch.
  result<std::vector<shape>> output_shapes(const std::vector<shape>& input_shapes) const;

  /// Times run(): `warmup` untimed runs, then `trials` timed ones, each synchronized and, on CUDA,
  /// after flushing the L2 cache with a 256 MiB write. Wall-clock time per call.
  result<timing> time(const tensor_list& inputs, int warmup = 3, int trials = 30) const;

  const task& spec() const;

 private:
  struct impl;
  explicit reference(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

}  // namespace kforge::tasks
