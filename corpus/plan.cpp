#include "corpus/plan.hpp"

#include <algorithm>
#include <set>

namespace kforge::corpus {
namespace {

using tasks::shape;

result<shape> broadcast(const shape& a, const shape& b) {
  shape out(std::max(a.size(), b.size()), 1);
  for (std::size_t i = 0; i < out.size(); ++i) {
    const auto x = i < a.size() ? a[a.size() - 1 - i] : 1;
    const auto y = i < b.size() ? b[b.size() - 1 - i] : 1;
    if (x != y && x != 1 && y != 1)
      return error{"shapes " + tasks::to_string(a) + " and " + tasks::to_string(b) +
                   " do not broadcast"};
    out[out.size() - 1 - i] = x == 1 ? y : x;
  }
  return out;
}

shape reduced(const shape& s, const std::vector<int>& dims, bool keep) {
  shape out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const bool r = std::find(dims.begin(), dims.end(), static_cast<int>(i)) != dims.end();
    if (!r)
      out.push_back(s[i]);
    else if (keep)
      out.push_back(1);
  }
  return out;
}

// Nodes reachable from `roots` backwards, stopping at (but including) `stop`.
std::vector<char> reachable(const graph& g, const std::vector<int>& roots, int stop = -1) {
  std::vector<char> seen(g.nodes.size(), 0);
  std::vector<int> todo = roots;
  while (!todo.empty()) {
    const int id = todo.back();
    todo.pop_back();
    if (seen[static_cast<std::size_t>(id)]) continue;
    seen[static_cast<std::size_t>(id)] = 1;
    if (id == stop) continue;
    for (int a : g.nodes[static_cast<std::size_t>(id)].args) todo.push_back(a);
  }
  return seen;
}

std::vector<std::vector<shape>> all_shape_sets(const tasks::task& t, const graph& g,
                                               std::string* why) {
  std::vector<std::vector<shape>> sets;
  std::vector<tasks::shape_choice> choices{std::nullopt};
  for (std::size_t v = 0; v < t.variants.size(); ++v) choices.push_back(v);
  for (const auto& c : choices) {
    auto s = infer_shapes(g, tasks::input_shapes(t, c));
    if (!s) {
      *why = (c ? "variant " + std::to_string(*c) : std::string("primary shapes")) + ": " +
             s.message();
      return {};
    }
    sets.push_back(std::move(*s));
  }
  return sets;
}

}  // namespace

result<std::vector<shape>> infer_shapes(const graph& g, const std::vector<shape>& inputs) {
  std::vector<shape> s(g.nodes.size());
  for (std::size_t i = 0; i < g.nodes.size(); ++i) {
    const auto& n = g.nodes[i];
    auto arg = [&](std::size_t k) -> const shape& {
      return s[static_cast<std::size_t>(n.args.at(k))];
    };
    switch (n.kind) {
      case node_kind::input:
        s[i] = inputs.at(static_cast<std::size_t>(n.input));
        break;
      case node_kind::constant:
        break;
      case node_kind::elementwise: {
        shape out;
        for (std::size_t k = 0; k < n.args.size(); ++k) {
          auto b = broadcast(out, arg(k));
          if (!b) return b.err();
          out = *b;
        }
        s[i] = out;
        break;
      }
      case node_kind::reduce:
      case node_kind::row_count:
        for (int d : n.dims)
          if (d >= static_cast<int>(arg(0).size()) && !arg(0).empty())
            return error{"a reduction over a dim the value does not have"};
        s[i] = reduced(arg(0), n.dims, n.keepdim);
        break;
      case node_kind::transpose:
        s[i] = arg(0);
        if (s[i].size() < 2) return error{"transpose of a value with fewer than 2 dims"};
        std::swap(s[i][s[i].size() - 1], s[i][s[i].size() - 2]);
        break;
      case node_kind::gemm: {
        const auto& a = arg(0);
        const auto& b = arg(1);
        if (a.size() < 2 || b.size() < 2) return error{"a matrix product of a 1-D value"};
        if (a.back() != b[b.size() - 2])
          return error{"matrix product of " + tasks::to_string(a) + " and " +
                       tasks::to_string(b)};
        auto batch = broadcast(shape(a.begin(), a.end() - 2), shape(b.begin(), b.end() - 2));
        if (!batch) return batch.err();
        s[i] = *batch;
        s[i].push_back(a[a.size() - 2]);
        s[i].push_back(b.back());
        break;
      }
    }
  }
  return s;
}

namespace {

// The part shared by row programs with and without a GEMM in front: `leaf_gemm` is the GEMM node
// treated as an input (or -1).
status plan_rows(plan& p, const std::vector<std::vector<shape>>& sets, int leaf_gemm) {
  const graph& g = p.g;
  const auto live = reachable(g, g.outputs, leaf_gemm);
  for (std::size_t i = 0; i < g.nodes.size(); ++i)
    if (live[i] && g.nodes[i].kind == node_kind::reduce) p.reductions.push_back(static_cast<int>(i));
  const auto& first = g.nodes[static_cast<std::size_t>(p.reductions.front())];
  const int arg0 = first.args[0];
  const auto dims = first.dims;
  p.iter_rank = g.nodes[static_cast<std::size_t>(arg0)].rank;
  if (dims.empty()) return unsupported("a reduction over no dims");
  for (std::size_t k = 1; k < dims.size(); ++k)
    if (dims[k] != dims[k - 1] + 1) return unsupported("a reduction over non-adjacent dims");
  p.d0 = dims.front();
  p.d1 = dims.back() + 1;
  for (int r : p.reductions) {
    const auto& n = g.nodes[static_cast<std::size_t>(r)];
    if (n.dims != dims || g.nodes[static_cast<std::size_t>(n.args[0])].rank != p.iter_rank)
      return unsupported("reductions over different dims");
    for (const auto& s : sets)
      if (s[static_cast<std::size_t>(n.args[0])] != s[static_cast<std::size_t>(arg0)])
        return unsupported("reductions of tensors of different shapes");
  }
  // Levels: full (F), row (one value per reduced row) or constant; a row value joins full ones
  // only with its reduced dims kept (keepdim), as broadcasting requires.
  p.levels.assign(g.nodes.size(), level::constant);
  std::vector<char> keep(g.nodes.size(), 1);
  for (std::size_t i = 0; i < g.nodes.size(); ++i) {
    if (!live[i]) continue;
    const auto& n = g.nodes[i];
    if (static_cast<int>(i) == leaf_gemm || n.kind == node_kind::input) {
      p.levels[i] = level::full;
      continue;
    }
    switch (n.kind) {
      case node_kind::constant:
        break;
      case node_kind::reduce:
      case node_kind::row_count:
        if (n.kind == node_kind::reduce &&
            p.levels[static_cast<std::size_t>(n.args[0])] != level::full)
          return unsupported("a reduction of a reduced value (two reduction levels)");
        if (n.dims != dims) return unsupported("reductions over different dims");
        p.levels[i] = level::row;
        keep[i] = n.keepdim;
        break;
      case node_kind::elementwise: {
        bool any_full = false, any_row = false;
        for (int a : n.args) {
          const auto l = p.levels[static_cast<std::size_t>(a)];
          any_full = any_full || l == level::full;
          any_row = any_row || l == level::row;
        }
        bool has_keep = false, has_flat = false;
        for (int a : n.args)
          if (p.levels[static_cast<std::size_t>(a)] == level::row)
            (keep[static_cast<std::size_t>(a)] ? has_keep : has_flat) = true;
        if (has_keep && has_flat)
          return unsupported("a reduced value with keepdim joined with one without");
        if (any_full && has_flat)
          return unsupported("a reduced value without keepdim broadcast against the full tensor");
        if (any_full)
          p.levels[i] = level::full;
        else if (any_row) {
          p.levels[i] = level::row;
          keep[i] = has_keep;
        }
        break;
      }
      default:
        return unsupported("a matrix product inside a row program");
    }
  }
  // Full-level values must broadcast into F, and inputs read at full level must give F itself.
  for (std::size_t k = 0; k < sets.size(); ++k) {
    const auto& s = sets[k];
    const auto& F = s[static_cast<std::size_t>(arg0)];
    shape bc;
    for (std::size_t i = 0; i < g.nodes.size(); ++i) {
      if (!live[i] || p.levels[i] != level::full) continue;
      auto b = broadcast(bc, s[i]);
      if (!b || s[i].size() > F.size()) return unsupported("a value larger than the reduced one");
      bc = *b;
      auto b2 = broadcast(F, s[i]);
      if (!b2 || *b2 != F) return unsupported("a value that does not broadcast into the reduced one");
    }
    shape leaf_bc;
    for (std::size_t i = 0; i < g.nodes.size(); ++i)
      if (live[i] && p.levels[i] == level::full &&
          (g.nodes[i].kind == node_kind::input || static_cast<int>(i) == leaf_gemm))
        leaf_bc = *broadcast(leaf_bc, s[i]);
    if (leaf_bc != F) return unsupported("the reduced tensor's shape is not that of its inputs");
    std::int64_t rows = 1, red = 1;
    for (int d = 0; d < static_cast<int>(F.size()); ++d)
      (d < p.d0 || d >= p.d1 ? rows : red) *= F[static_cast<std::size_t>(d)];
    p.max_row = std::max(p.max_row, red);
    if (k == 0) p.primary_rows = rows;
    for (int o : g.outputs) {
      const auto l = p.levels[static_cast<std::size_t>(o)];
      if (l == level::constant) return unsupported("a constant output");
      if (l == level::full && s[static_cast<std::size_t>(o)] != F)
        return unsupported("an output smaller than the reduced tensor");
      if (l == level::row && tasks::numel(s[static_cast<std::size_t>(o)]) != rows)
        return unsupported("a row output of the wrong size");
    }
  }
  for (int o : g.outputs) p.output_levels.push_back(p.levels[static_cast<std::size_t>(o)]);
  for (std::size_t i = 0; i < g.nodes.size(); ++i) {
    if (!live[i] || p.levels[i] != level::full) continue;
    if (static_cast<int>(i) == leaf_gemm) {
      p.leaf_operand[static_cast<int>(i)] = static_cast<int>(p.operands.size());
      p.operands.push_back(-1);
    } else if (g.nodes[i].kind == node_kind::input) {
      p.leaf_operand[static_cast<int>(i)] = static_cast<int>(p.operands.size());
      p.operands.push_back(g.nodes[i].input);
    }
  }
  return {};
}

// Elementwise outputs of one iteration shape: every output the same shape, the broadcast of the
// leaves it reads. `leaf_gemm` as in plan_rows.
status plan_map(plan& p, const std::vector<std::vector<shape>>& sets, int leaf_gemm) {
  const graph& g = p.g;
  const auto live = reachable(g, g.outputs, leaf_gemm);
  const int o0 = g.outputs.front();
  p.iter_rank = g.nodes[static_cast<std::size_t>(o0)].rank;
  for (const auto& s : sets) {
    for (int o : g.outputs) {
      if (g.nodes[static_cast<std::size_t>(o)].kind == node_kind::constant)
        return unsupported("a constant output");
      if (s[static_cast<std::size_t>(o)] != s[static_cast<std::size_t>(o0)])
        return unsupported("outputs of different shapes");
      if (g.nodes[static_cast<std::size_t>(o)].kind == node_kind::input)
        return unsupported("an output that is an input unchanged");
    }
    for (std::size_t i = 0; i < g.nodes.size(); ++i)
      if (live[i] && s[i].size() > s[static_cast<std::size_t>(o0)].size())
        return unsupported("a value larger than the output");
  }
  for (std::size_t i = 0; i < g.nodes.size(); ++i) {
    if (!live[i]) continue;
    const auto k = g.nodes[i].kind;
    if (static_cast<int>(i) == leaf_gemm) {
      p.leaf_operand[static_cast<int>(i)] = static_cast<int>(p.operands.size());
      p.operands.push_back(-1);
    } else if (k == node_kind::input) {
      p.leaf_operand[static_cast<int>(i)] = static_cast<int>(p.operands.size());
      p.operands.push_back(g.nodes[i].input);
    } else if (k == node_kind::transpose) {
      return unsupported("a transpose outside a matrix product");
    } else if (k == node_kind::gemm) {
      return unsupported("a matrix product inside an elementwise map");
    }
  }
  if (p.operands.empty() && leaf_gemm < 0) return unsupported("an output that reads no input");
  return {};
}

// Sets p.dense (and p.row_shaped) when every operand is a task input that has the shape the
// dense kernels index it with, at the primary shapes and every variant. A product staged into a
// row program is dense in the workspace: its row program is dense when it reduces the product's
// last dim alone (rows = batch x M, N along each) and its other operands are dense too (the task's
// inputs of the product are read through their strides, so they need not be operands); the
// strided row program around a staged product ran to 11-13 k characters, more than kforge-tiny
// writes in 3,072 tokens (bench/RESULTS.md, kforge-tiny v13, 2026-12-03).
void decide_dense(plan& p, const tasks::task& t, const std::vector<std::vector<shape>>& sets) {
  const bool staged = p.kind == plan_kind::gemm;
  if (staged && p.d0 != p.iter_rank - 1) return;
  if (!staged && (std::set<int>(p.operands.begin(), p.operands.end()).size() != t.inputs.size() ||
                  p.operands.size() != t.inputs.size()))
    return;
  const graph& g = p.g;
  std::vector<int> node_of(p.operands.size(), -1);
  for (const auto& [node, k] : p.leaf_operand) node_of[static_cast<std::size_t>(k)] = node;
  if (p.kind == plan_kind::rows || staged) {
    if (p.d1 != p.iter_rank) return;
    const auto f = static_cast<std::size_t>(g.nodes[static_cast<std::size_t>(p.reductions.front())].args[0]);
    p.row_shaped.assign(p.operands.size(), 0);
    bool any_full = false;
    for (std::size_t k = 0; k < p.operands.size(); ++k) {
      for (std::size_t v = 0; v < sets.size(); ++v) {
        const auto& F = sets[v][f];
        const auto& s = sets[v][static_cast<std::size_t>(node_of[k])];
        const shape row(F.begin() + p.d0, F.end());
        const char mode = s == F ? 0 : s == row ? 1 : 2;
        if (mode == 2 || (v > 0 && mode != p.row_shaped[k])) return;
        if (p.operands[k] < 0 && mode != 0) return;  // the product must be F itself
        p.row_shaped[k] = mode;
      }
      any_full = any_full || !p.row_shaped[k];
    }
    p.dense = any_full;
    return;
  }
  for (const auto& s : sets)
    for (std::size_t k = 0; k < p.operands.size(); ++k)
      if (s[static_cast<std::size_t>(node_of[k])] != s[static_cast<std::size_t>(g.outputs.front())]) return;
  p.dense = true;
}

result<gemm_operand> operand_of(const graph& g, int id) {
  gemm_operand o;
  const node* n = &g.nodes[static_cast<std::size_t>(id)];
  if (n->kind == node_kind::transpose) {
    o.transposed = true;
    n = &g.nodes[static_cast<std::size_t>(n->args[0])];
  }
  if (n->kind != node_kind::input)
    return unsupported("a matrix product of a computed value (only of inputs, maybe transposed)");
  o.input = n->input;
  o.rank = n->rank;
  return o;
}

}  // namespace

result<plan> make_plan(const tasks::task& t, graph g) {
  plan p;
  p.g = std::move(g);
  const graph& gr = p.g;
  std::string why;
  const auto sets = all_shape_sets(t, gr, &why);
  if (sets.empty()) return unsupported("shapes: " + why);
  for (std::size_t o = 0; o < gr.outputs.size(); ++o)
    if (sets[0][static_cast<std::size_t>(gr.outputs[o])] != t.outputs[o].shape)
      return unsupported("output '" + t.outputs[o].name + "' comes out as " +
                         tasks::to_string(sets[0][static_cast<std::size_t>(gr.outputs[o])]));
  const auto live = reachable(gr, gr.outputs);
  int gemms = 0, reductions = 0;
  for (std::size_t i = 0; i < gr.nodes.size(); ++i) {
    if (!live[i]) continue;
    if (gr.nodes[i].kind == node_kind::gemm) {
      ++gemms;
      p.gemm = static_cast<int>(i);
    }
    if (gr.nodes[i].kind == node_kind::reduce) ++reductions;
  }
  if (gemms > 1) return unsupported("more than one matrix product");
  if (gemms == 1) {
    const auto& n = gr.nodes[static_cast<std::size_t>(p.gemm)];
    auto a = operand_of(gr, n.args[0]);
    if (!a) return a.err();
    auto b = operand_of(gr, n.args[1]);
    if (!b) return b.err();
    p.a = *a;
    p.b = *b;
    p.kind = plan_kind::gemm;
    // Reductions upstream of the product would be in its operands, which are inputs.
    p.staged = reductions > 0;
    auto st = p.staged ? plan_rows(p, sets, p.gemm) : plan_map(p, sets, p.gemm);
    if (!st) return st.err();
    if (!p.staged)
      for (const auto& s : sets)
        if (s[static_cast<std::size_t>(gr.outputs.front())] != s[static_cast<std::size_t>(p.gemm)])
          return unsupported("an epilogue that changes the product's shape");
    if (p.staged) decide_dense(p, t, sets);
    return p;
  }
  if (reductions == 0) {
    p.kind = plan_kind::elementwise;
    auto st = plan_map(p, sets, -1);
    if (!st) return st.err();
    decide_dense(p, t, sets);
    return p;
  }
  p.kind = plan_kind::rows;
  auto st = plan_rows(p, sets, -1);
  if (!st) return st.err();
  // A block per row, with a million elements per row and too few rows to fill the GPU, runs for
  // seconds (an H200 took 395 ms for a 67 M-element sum of one row, 0.0007x eager): such a
  // reduction needs a grid-wide (split) reduction, which the writer does not write.
  if (p.max_row > (1 << 20) && p.primary_rows < 1024)
    return unsupported("a reduction of few, long rows (needs a grid-wide reduction)");
  decide_dense(p, t, sets);
  return p;
}

}  // namespace kforge::corpus
