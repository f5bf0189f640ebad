#pragma once
// What a candidate's kf_forward was called with, in words, for the runtime failures a model reads
// to mend its kernel: a kernel that rejects the shapes of a task's variant says only "kf_forward
// returned 2", and without the shapes it was given a model repeats the same check.
#include <string>
#include <vector>

#include "tasks/task.hpp"

namespace kforge::sandbox {

/// "called with x float32 [37, 1000], w float32 [1000, 512]; outputs y float32 [37, 512]": the
/// task's names and dtypes with the shapes of this call (a variant's, not the task's primary ones).
/// At most `max_tensors` tensors are named, then "and N more"; a count that differs from the
/// task's uses positions for the names beyond it.
std::string describe_call(const tasks::task& t, const std::vector<tasks::shape>& inputs,
                          const std::vector<tasks::shape>& outputs, std::size_t max_tensors = 12);

}  // namespace kforge::sandbox
