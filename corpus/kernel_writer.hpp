#pragma once
// The corpus kernel writer: for a task, several correct CUDA kernels in the candidate ABI
// (docs/kernel-abi.md), each with a short English explanation of its approach, for pretraining the
// policy on kernels the project wrote itself. Families, in the order they were added:
// elementwise maps with broadcasting (naive, grid-stride, float4), row programs for reductions,
// softmax, layer_norm and RMSNorm (thread per row, block tree, warp shuffle), and matrix products
// with an elementwise epilogue (naive, 16x16 shared-memory tiles), staged through the workspace
// into a row program when a reduction follows.
//
// Every kernel reads shapes and strides from kf_tensor at run time, so one source serves the
// primary shapes and every variant. Only float32 tasks are written; anything else comes back as
// an error "unsupported: <why>".

#include <string>
#include <vector>

#include "common/result.hpp"
#include "tasks/task.hpp"

namespace kforge::corpus {

struct kernel_variant {
  std::string name;         ///< "naive", "grid_stride", "vec4", "block_tree", "tiled16", ...
  std::string explanation;  ///< one paragraph: what the kernel computes and how it is parallel
  std::string source;       ///< the complete .cu file
};

/// The variants for `t`, or an error "unsupported: <why>".
result<std::vector<kernel_variant>> write_kernels(const tasks::task& t);

/// "y = torch.silu(x); return y": the statements of forward's body joined by "; "; empty where
/// the body cannot be quoted on one line.
std::string reference_body(const tasks::task& t);

/// "The reference computes `<reference_body>`.", which every explanation opens with (a copy
/// drill's whole completion); empty with the body.
std::string restated_reference(const tasks::task& t);

/// What the policy learns to answer: the explanation, a blank line, one ```cuda block.
std::string completion_text(const kernel_variant& v);

/// The short reason of an "unsupported: ..." error, for counting (the text up to the first
/// quote, digit or parenthesis, so "op aten::foo" and "input 'x' is bfloat16" group by kind).
std::string reason_key(const std::string& message);

}  // namespace kforge::corpus
