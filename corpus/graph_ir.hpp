#pragma once
// A task's reference as a small dataflow graph of primitive ops: what the kernel writer plans and
// generates CUDA from. Lowering (corpus/torch_lowering.cpp, the one LibTorch translation unit of
// corpus/) walks the TorchScript graph of `forward` and expands composite ops into primitives:
// softmax into max, exp, sum and a division; layer_norm into two mean passes; linear into a
// matrix product and a bias add. Torch-free, so the planner and the emitters need no torch header.
//
// Ranks are static (a task's variants keep every input's rank); sizes are not, and the generated
// kernels read them from kf_tensor at run time.

#include <cstdint>
#include <string>
#include <vector>

#include "common/result.hpp"
#include "tasks/task.hpp"

namespace kforge::corpus {

enum class node_kind {
  input,        ///< task input `input`
  constant,     ///< a scalar `value`
  elementwise,  ///< `op` over args, broadcast as PyTorch does (right-aligned)
  reduce,       ///< `op` (sum, max, min, prod) of args[0] over `dims`
  row_count,    ///< the number of elements one reduction over `dims` of a rank-`rank` value sees
  transpose,    ///< args[0] with its last two dims swapped (only as a matrix product operand)
  gemm,         ///< batched matrix product args[0] @ args[1] (torch.matmul semantics, rank >= 2)
};

struct node {
  node_kind kind = node_kind::constant;
  /// elementwise: "add", "relu", "where", "gt", ... (corpus/cuda_expr.cpp lists them);
  /// reduce: "sum", "max", "min", "prod".
  std::string op;
  std::vector<int> args;
  /// Op constants in the op's order: a leaky slope, clamp bounds, softplus beta and threshold.
  std::vector<double> params;
  int input = -1;     ///< input: index into task.inputs
  double value = 0;   ///< constant
  /// reduce, row_count: the reduced dims of the argument, sorted, non-negative.
  std::vector<int> dims;
  bool keepdim = false;
  int rank = 0;           ///< rank of the value (0 for scalars)
  bool is_bool = false;   ///< a comparison's result (a predicate, not a float)
};

/// Nodes in topological order (args precede users); outputs in the task's output order.
struct graph {
  std::vector<node> nodes;
  std::vector<int> outputs;
};

/// The graph of `t.reference`, or an error "unsupported: <why>" naming the op or construct the
/// lowering does not know. Every input and output must be float32 (other dtypes are rejected).
/// In a build without LibTorch, always an error.
result<graph> lower_reference(const tasks::task& t);

/// "unsupported: " + why, the error every part of the writer returns for a task it cannot do.
inline error unsupported(const std::string& why) { return error{"unsupported: " + why}; }

}  // namespace kforge::corpus
