#pragma once
// Lowering drills: kernel records of elementwise tasks whose references are scrambled into other
// elementwise chains, cut right after kf_op, the device function that holds the task's math, and
// the map kernel that calls it.
//
// Why: kforge-tiny v11 (bench/RESULTS.md, 2026-12-02) restated 313 of 456 held-out references
// exactly and then wrote the wrong math in kf_op for a third of the elementwise tasks:
// `log1pf` became `expm1f`, `x * y` became `(x0 * x0)`, `threshold(x, 0.1, 20.0)` took 2.0. The
// corpus shows each function in few places (synthesis puts log1p only after a positive-valued
// op), so the model recalls a nearby chain instead of translating the one in front of it. A drill
// takes a map task of the corpus, replaces each torch call by another the writer lowers with the
// same kind of arguments (one tensor; a tensor and numbers; two tensors), each float by a random
// one and each spaced binary operator by a random one, lowers it with the writer, and keeps the
// completion up to the end of kf_op and of the map kernel after it, whose parameters follow
// kf_op's inputs ("prefix_only": no end of turn is learnt there). v12 (made with drills cut
// after kf_op, 2026-12-03) passed those maps; its matrix products still took the layout of
// `torch.linear`'s weight for `torch.matmul(a, b)` and added an epilogue the reference does not
// have, and its row programs summed for `amin` or squared a normalized value. So matrix products
// with a fused epilogue are drilled too, cut after kf_store (the layout code comes before it), and
// row programs, cut after kf_rows_kernel, with their reductions (sum, mean, amax, amin, prod)
// redrawn as well; and half the drills rename the task's inputs first, so that operand order and
// layout are read from the reference rather than recalled from the names.
//
// Drills whose reference or op skeleton matches a task of the exclusion list (the held-out
// tasks) are dropped, as synthesis drops them: a drill may not teach a held-out kernel.

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "corpus/copy_drill.hpp"
#include "tasks/prompt.hpp"
#include "tasks/synth.hpp"
#include "tasks/task.hpp"

namespace kforge::corpus {

/// `reference` with, in forward's body, every `torch.NAME(...)` call of an elementwise function
/// renamed to a random one with arguments of the same kind (a reduction over dims to another
/// reduction, its arguments kept), every decimal or exponent-form
/// number replaced by a random one of its kind (integers, which may be dims, stay), and every
/// binary operator between spaces replaced by a random one; then the two operands of each
/// two-tensor call of bare names, and of each spaced operator between bare names, swapped with
/// even odds (operand order is read from the reference, not recalled). Calls it does not know
/// stay.
std::string scramble_map_reference(const std::string& reference, std::mt19937_64& rng);

/// Whether a drill of `text` (a kernel source or a completion) has an end to be cut at: a map's
/// kf_op, a product's fused kf_store or a row program's kernel. What makes a task a drill's source.
bool has_drill_cut(const std::string& text);

struct lowering_drill_tally {
  int written = 0;
  int excluded = 0;     ///< matched the exclusion list
  int unsupported = 0;  ///< the writer could not lower the scrambled reference
};

/// Up to `count` drills from `pool`: tasks the writer lowers through kf_op (maps), a matrix
/// product's fused kf_store or a row program's kf_rows_kernel; seeded; `count` draws are made, so fewer records come back where draws
/// fail (a product staged into a row program has no epilogue to cut after).
std::vector<drill_record> lowering_drills(const std::vector<tasks::task>& pool,
                                          const tasks::prompt_template& tmpl,
                                          const tasks::hardware_context& hw,
                                          const tasks::synth::exclusion_list& exclude, int count,
                                          std::uint64_t seed, lowering_drill_tally* tally = nullptr);

}  // namespace kforge::corpus
