#pragma once
// A task's `prepare`: TorchScript that computes its inputs from its draws (docs/task-format.md),
// for inputs a generator derives from drawn tensors (a symmetric matrix, a boolean mask). make_inputs
// (tasks/inputs.hpp) draws the draws and calls this; reference.cpp, which already holds the
// TorchScript compiler, implements it, so no further translation unit includes LibTorch.

#include "common/result.hpp"
#include "tasks/task.hpp"
#include "tasks/tensor_list.hpp"

namespace kforge::tasks {

/// Runs t.prepare on `draws` (t.draws' tensors, in order, all on one device), compiled once per
/// distinct source in the process and run as the reference runs (no autograd, no graph
/// optimization, so the result is what eager PyTorch computes). The result has one tensor per
/// input with the input's dtype and shape, contiguous, none sharing memory with another; else an
/// error "task 'ID': prepare: ..." saying what differs.
result<tensor_list> run_prepare(const task& t, const tensor_list& draws);

}  // namespace kforge::tasks
