#pragma once
// What kind of kernel a task's graph needs, decided before any code is written: a pure
// elementwise map, a row program (reductions over one contiguous run of dims, with elementwise
// work before, between and after them: sums, softmax, layer_norm, RMSNorm, variance), or a
// matrix product with an elementwise epilogue (optionally staged through the workspace into a
// row program: a GEMM followed by softmax or layer_norm). Anything else is "unsupported: why".
//
// The planner also checks, with static shape inference at the primary shapes and every variant,
// that the graph's broadcasting is what the generated kernels assume, so a kernel is never
// written for a task whose shapes it would get wrong.

#include <map>
#include <string>
#include <vector>

#include "common/result.hpp"
#include "corpus/graph_ir.hpp"
#include "tasks/task.hpp"

namespace kforge::corpus {

enum class plan_kind { elementwise, rows, gemm };

/// Where a value of the computation lives in a row program: a scalar constant, the full
/// iteration space F (shape of the reduced tensors), or one value per row R (after a reduction).
enum class level { constant, full, row };

/// One side of a matrix product: task input `input`, read transposed (last two dims swapped)
/// when `transposed`.
struct gemm_operand {
  int input = -1;
  bool transposed = false;
  int rank = 0;
};

struct plan {
  plan_kind kind = plan_kind::elementwise;
  graph g;
  /// Task inputs the elementwise / row part reads, by node id; the operand index is the position
  /// in `operands`. Operand -1 in `operands` stands for the GEMM result (gemm plans).
  std::map<int, int> leaf_operand;
  std::vector<int> operands;
  /// Rank of the iteration space (the outputs for elementwise, F for rows, the product's output
  /// for gemm).
  int iter_rank = 0;

  // rows: F = (outer = dims [0, d0), reduced = [d0, d1), inner = [d1, iter_rank)).
  int d0 = 0, d1 = 0;
  std::vector<int> reductions;  ///< reduce nodes, in order of computation
  std::vector<level> levels;    ///< per node
  std::vector<level> output_levels;
  /// Elements along one row, the most over the primary shapes and the variants: a row of
  /// millions (a whole-tensor sum) is no job for one thread, and float partial sums lose accuracy.
  std::int64_t max_row = 0;
  /// Rows at the primary shapes.
  std::int64_t primary_rows = 0;

  /// Every tensor can be addressed with flat indices (no strides, no broadcasting), so the writer
  /// emits the short dense kernels: an elementwise map whose inputs all have the output's shape,
  /// or a row program over the trailing dims (d1 == iter_rank) whose inputs are F itself or one
  /// row (F's dims [d0, iter_rank), shared by every row, like a layer_norm weight). Every task
  /// input must be an operand, except for a product staged into a row program, whose row program
  /// is dense when it reduces the product's last dim alone (decide_dense in plan.cpp). The
  /// kernels check at run time that tensors are contiguous.
  bool dense = false;
  /// rows + dense, per operand: 1 when it has one row's shape (read at the position in the row).
  std::vector<char> row_shaped;

  // gemm
  int gemm = -1;
  gemm_operand a, b;
  /// The product goes to the workspace and a row program reads it (else the epilogue is fused).
  bool staged = false;
};

/// The plan for `t`, lowered to `g`; an error "unsupported: ..." says why there is none.
result<plan> make_plan(const tasks::task& t, graph g);

/// Shapes of every node at the given input shapes (broadcasting, reductions, products), or an
/// error where the graph does not type-check there. Constants get [].
result<std::vector<tasks::shape>> infer_shapes(const graph& g,
                                               const std::vector<tasks::shape>& inputs);

}  // namespace kforge::corpus
