#pragma once
// Input tensors of a task drawn from its init specs and a seed.
//
// Determinism: input k of task T for seed S is drawn by a fresh generator of the target device
// seeded with input_seed(T.id, S, name_k) (FNV-1a; stable across processes and hosts), so it does
// not depend on other inputs, on the order of calls, on threads, or on torch's global RNG state.
// The same (task, seed, shapes, device kind) gives bit-identical tensors in any process on the same
// device model and LibTorch build. CPU and CUDA use different generators (mt19937 and Philox), so
// the values differ between them; draw on the CPU and copy (`copy_to`) where both must agree.
// float16 and bfloat16 inputs are drawn in float32 and rounded; bool inputs use randint in [0, 2)
// or a constant. A task with `prepare` draws its draws the same way (seeded by the draw's name) and
// its inputs are prepare's result on them (tasks/prepare.hpp), equally deterministic.

#include <cstdint>
#include <string_view>

#include "common/result.hpp"
#include "tasks/task.hpp"
#include "tasks/tensor_list.hpp"

namespace kforge::tasks {

/// The generator seed of one input: FNV-1a over (task id, seed, input name), folded to 32 bits
/// (the CPU generator keeps only 32 bits of its seed; folding keeps all 64 of ours in play).
std::uint64_t input_seed(std::string_view task_id, std::uint64_t seed, std::string_view input);

/// All inputs of `t` at the chosen shapes, in input order.
result<tensor_list> make_inputs(const task& t, std::uint64_t seed, shape_choice which,
                                const device& dev);

/// Input `index` alone (a list of one), drawn exactly as make_inputs draws it. For a task with
/// prepare, every draw is drawn and prepare run: derived inputs exist only together.
result<tensor_list> make_input(const task& t, std::size_t index, std::uint64_t seed,
                               shape_choice which, const device& dev);

/// The same tensors on another device (copies).
result<tensor_list> copy_to(const tensor_list& list, const device& dev);

}  // namespace kforge::tasks
