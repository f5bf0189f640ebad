#pragma once
// Elementwise ops of corpus/graph_ir.hpp as CUDA float32 expressions, written to match PyTorch's
// CUDA kernels closely enough for a task's tolerance (GELU's erf form, softplus's threshold 20,
// SELU's constants, lerp's two-sided form), and the emitter that turns a set of graph nodes into
// straight-line code (one `const float` per node, so shared subexpressions are computed once).

#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/result.hpp"
#include "corpus/graph_ir.hpp"

namespace kforge::corpus {

/// A parenthesised float literal that round-trips float32, in the shortest form ("(0.5f)",
/// "(1e-6f)", "(20.0f)"); infinities and NaN as bit patterns ("__int_as_float(0x7f800000)").
std::string float_literal(double v);

/// Whether the expression writer knows elementwise op `op`.
bool known_elementwise(const std::string& op);

/// One line per elementwise op kind used in `g`, in English ("GELU (erf form): 0.5*x*(1+erf(x/
/// sqrt 2))"), for the explanations.
std::vector<std::string> describe_ops(const graph& g, const std::vector<int>& nodes);

/// `code` with its values (identifiers v1, v2, ...) renamed v1, v2, ... in the order they first
/// appear. For code written by several emitters sharing a counter, where one writes into a block
/// placed before code another wrote earlier (a row program's per-row values ahead of a pass). Every
/// name must be unique in `code` and declared before it is used, as expr_emitter writes them. Purely
/// lexical: a `v3` in a comment or string would be renamed too (row programs have none).
std::string renumber_values(const std::string& code);

/// Straight-line code for graph nodes. Leaves (inputs, gemm results, reductions, row counts) are
/// bound by the caller through `bind`; constants are inlined. Values are named v1, v2, ... in the
/// order they are written (not by node id), so a kernel's names are consecutive and the same
/// shape of code reads the same in every task; emitters writing into one kernel share `counter`
/// so their names never collide.
class expr_emitter {
 public:
  expr_emitter(const graph& g, std::string indent) : expr_emitter(g, std::move(indent), own_) {}
  expr_emitter(const graph& g, std::string indent, int& counter)
      : g_(g), indent_(std::move(indent)), counter_(counter) {}
  expr_emitter(const expr_emitter&) = delete;
  expr_emitter& operator=(const expr_emitter&) = delete;

  /// Makes node `id` available as the C expression `expr` (a variable or a literal).
  void bind(int id, std::string expr) { names_[id] = std::move(expr); }
  bool bound(int id) const { return names_.count(id) > 0; }

  /// Emits the statements computing node `id` (and whatever it needs that is not bound yet) into
  /// `code` and returns the name of its value. An unbound leaf is asked of `leaf`, which returns
  /// an expression for it (or an error).
  result<std::string> value(int id, std::string& code,
                            const std::function<result<std::string>(int)>& leaf);

  /// The value as a float (a predicate becomes 1.0f or 0.0f).
  result<std::string> float_value(int id, std::string& code,
                                  const std::function<result<std::string>(int)>& leaf);

 private:
  std::string next_name() { return "v" + std::to_string(++counter_); }

  const graph& g_;
  std::string indent_;
  int own_ = 0;
  int& counter_;
  std::map<int, std::string> names_;
};

}  // namespace kforge::corpus
