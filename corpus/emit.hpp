#pragma once
// The CUDA writers behind corpus/kernel_writer.hpp, one per plan kind, and the pieces of source
// they share (the broadcast-stride helper, argument checks). Internal to corpus/.

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "common/result.hpp"
#include "corpus/kernel_writer.hpp"
#include "corpus/plan.hpp"
#include "tasks/task.hpp"

namespace kforge::corpus::detail {

result<std::vector<kernel_variant>> emit_elementwise(const tasks::task& t, const plan& p);
result<std::vector<kernel_variant>> emit_dense_map(const tasks::task& t, const plan& p);
result<std::vector<kernel_variant>> emit_rows(const tasks::task& t, const plan& p);
result<std::vector<kernel_variant>> emit_gemm(const tasks::task& t, const plan& p);

/// The head of every kernel file: a comment naming the task and the variant, the ABI include.
std::string file_head(const tasks::task& t, const std::string& variant);

/// Host code: kf_check_args (counts and float32 dtypes) and kf_bcast (an operand's strides
/// aligned right to an iteration shape, 0 where it broadcasts; non-zero return when the shapes
/// do not broadcast).
std::string host_helpers(const tasks::task& t);

/// Host code: kf_grid(work, threads), the blocks for `work` items at `threads` per block, at
/// most `max_blocks` (the kernels that call it loop over what a capped grid leaves).
std::string grid_helper(int max_blocks);

/// The host statement returning 1 unless kf_forward got the task's input and output counts.
std::string count_check(const tasks::task& t);

/// The opening of kf_forward up to and including `(void)workspace;`.
std::string forward_head();

/// The map's per-element device function, written once at the top of a map kernel file:
/// `kf_op(float x0, ..., float& y0, ...)` computes every output from one element of each operand.
/// Every variant calls it, so the task's ops appear once in the file, right after the
/// explanation that restates them (a small policy wrote a different op in each of vec4's four
/// lanes when each lane spelled them out: kforge-tiny v6, 2026-12-02).
result<std::string> op_function(const tasks::task& t, const plan& p);

/// "kf_op(<operand 0>, ..., <output 0>, ...);"
std::string op_call(const tasks::task& t, const plan& p, const std::function<std::string(std::size_t)>& operand,
                    const std::function<std::string(std::size_t)>& output);

/// The four lanes of a float4 step, one kf_op call per line at `indent`: operand k read as
/// `a<k>.x` (.y, .z, .w), output j stored to `r<j>.x`.
std::string float4_lanes(const tasks::task& t, const plan& p, const std::string& indent);

/// Host code of the dense kernels: kf_dense(t, n), true for a float32 contiguous tensor of n
/// elements.
std::string dense_helper();

/// Host statements declaring `in<k>` (const float*) for every operand and `out<j>` (float*) for
/// every output of `t`: the pointers the dense kernels take.
std::string dense_pointers(const tasks::task& t, const plan& p);

/// Host statements that fill `it.st[k]` for every operand of `p` that is a task input (the GEMM
/// result in the workspace is the caller's), returning 3 when an input does not broadcast.
std::string fill_operand_strides(const plan& p, const std::string& it, const std::string& indent);

/// Host statements that set `ptrs.in[k]` for every operand that is a task input.
std::string fill_operand_pointers(const plan& p, const std::string& ptrs,
                                  const std::string& indent);

/// "leaky ReLU: x>0 ? x : slope*x; GELU (erf form): ...": the formulas of the elementwise op kinds
/// `g` uses (describe_ops), joined by "; "; empty when it uses none.
std::string op_formulas(const graph& g);

/// Every node id of `g` in order.
std::vector<int> all_nodes(const graph& g);

}  // namespace kforge::corpus::detail
