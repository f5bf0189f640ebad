// The one LibTorch translation unit of corpus/: a task's reference compiled with
// torch::jit::compile (as tasks/reference.cpp does) and its TorchScript graph walked node by node
// into the primitive graph of corpus/graph_ir.hpp. Walking the graph rather than the Python text
// means names, nesting, operator sugar (`x * 2`, `2 * x`, `torch.mul`) and default arguments are
// already resolved by TorchScript.
#include "corpus/graph_ir.hpp"

#ifdef KFORGE_CORPUS_WITH_TORCH
#include <torch/csrc/jit/api/function_impl.h>
#include <torch/jit.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>

namespace kforge::corpus {
namespace {

using torch::jit::Value;

/// What a TorchScript value is to the lowering: a tensor (a node of the graph) or a compile-time
/// scalar, list, None or string. `dynamic_int` is an int known only at run time (x.size(-1)):
/// enough for layer_norm's normalized_shape, whose length is all that matters.
struct val {
  enum class kind { tensor, number, boolean, none, string, list, dynamic_int, tuple } k = kind::none;
  int node = -1;
  double num = 0;
  bool is_int = false;
  bool b = false;
  std::string s;
  std::vector<val> elems;
};

class lowering {
 public:
  explicit lowering(const tasks::task& t) : task_(t) {}

  result<graph> run(const std::shared_ptr<torch::jit::Graph>& g) {
    const auto ins = g->inputs();
    if (ins.size() != task_.inputs.size())
      return unsupported("forward takes " + std::to_string(ins.size()) + " arguments");
    for (std::size_t i = 0; i < ins.size(); ++i) {
      node n;
      n.kind = node_kind::input;
      n.input = static_cast<int>(i);
      n.rank = static_cast<int>(task_.inputs[i].shape.size());
      val v;
      v.k = val::kind::tensor;
      v.node = add(std::move(n));
      values_[ins[i]] = v;
    }
    for (auto* n : g->nodes()) {
      auto st = lower_node(n);
      if (!st) return st.err();
    }
    const auto outs = g->outputs();
    if (outs.size() != 1) return unsupported("forward returns several values");
    auto ret = get(outs[0]);
    if (!ret) return ret.err();
    std::vector<val> rv = ret->k == val::kind::tuple ? ret->elems : std::vector<val>{*ret};
    if (rv.size() != task_.outputs.size())
      return unsupported("forward returns " + std::to_string(rv.size()) + " values");
    for (auto& v : rv) {
      auto id = tensor(v);
      if (!id) return id.err();
      if (g_.nodes[static_cast<std::size_t>(*id)].is_bool)
        return unsupported("a boolean output");
      g_.outputs.push_back(*id);
    }
    return g_;
  }

 private:
  int add(node n) {
    g_.nodes.push_back(std::move(n));
    return static_cast<int>(g_.nodes.size()) - 1;
  }
  const node& at(int id) const { return g_.nodes[static_cast<std::size_t>(id)]; }

  int constant(double v) {
    node n;
    n.kind = node_kind::constant;
    n.value = v;
    return add(std::move(n));
  }

  int ew(const std::string& op, std::vector<int> args, std::vector<double> params = {}) {
    node n;
    n.kind = node_kind::elementwise;
    n.op = op;
    for (int a : args) n.rank = std::max(n.rank, at(a).rank);
    n.args = std::move(args);
    n.params = std::move(params);
    static const std::set<std::string> predicates{"gt", "lt", "ge", "le", "eq", "ne",
                                                  "logical_and", "logical_or", "logical_not"};
    n.is_bool = predicates.count(n.op) > 0;
    return add(std::move(n));
  }

  int reduce(const std::string& op, int arg, std::vector<int> dims, bool keep) {
    node n;
    n.kind = node_kind::reduce;
    n.op = op;
    n.args = {arg};
    n.dims = std::move(dims);
    n.keepdim = keep;
    n.rank = keep ? at(arg).rank : at(arg).rank - static_cast<int>(n.dims.size());
    return add(std::move(n));
  }

  int count(int arg, const std::vector<int>& dims, bool keep) {
    node n;
    n.kind = node_kind::row_count;
    n.args = {arg};
    n.dims = dims;
    n.keepdim = keep;
    n.rank = keep ? at(arg).rank : at(arg).rank - static_cast<int>(dims.size());
    return add(std::move(n));
  }

  result<val> get(const Value* v) const {
    auto it = values_.find(v);
    if (it == values_.end()) return unsupported("a value the lowering did not produce");
    return it->second;
  }

  /// A tensor node for `v`: a tensor, or a number made into a constant node.
  result<int> tensor(const val& v) {
    if (v.k == val::kind::tensor) return v.node;
    if (v.k == val::kind::number) return constant(v.num);
    if (v.k == val::kind::boolean) return constant(v.b ? 1.0 : 0.0);
    return unsupported("a non-tensor value where a tensor is needed");
  }
  result<int> tensor_in(torch::jit::Node* n, std::size_t i) {
    if (i >= n->inputs().size()) return unsupported("missing argument");
    auto v = get(n->inputs()[i]);
    if (!v) return v.err();
    return tensor(*v);
  }
  result<double> number_in(torch::jit::Node* n, std::size_t i) {
    if (i >= n->inputs().size()) return unsupported("missing argument");
    auto v = get(n->inputs()[i]);
    if (!v) return v.err();
    if (v->k == val::kind::number) return v->num;
    if (v->k == val::kind::boolean) return v->b ? 1.0 : 0.0;
    return unsupported(std::string(n->kind().toQualString()) + " with a non-constant scalar");
  }
  bool is_none(torch::jit::Node* n, std::size_t i) {
    if (i >= n->inputs().size()) return true;
    auto v = get(n->inputs()[i]);
    return v && v->k == val::kind::none;
  }
  bool flag_in(torch::jit::Node* n, std::size_t i, bool dflt) {
    if (i >= n->inputs().size()) return dflt;
    auto v = get(n->inputs()[i]);
    if (!v) return dflt;
    if (v->k == val::kind::boolean) return v->b;
    if (v->k == val::kind::number) return v->num != 0;
    return dflt;
  }

  /// Dims argument (an int, an int list, or None/empty for all dims) normalized for rank `r`.
  result<std::vector<int>> dims_in(torch::jit::Node* n, std::size_t i, int r) {
    std::vector<int> d;
    val v;
    if (i < n->inputs().size()) {
      auto got = get(n->inputs()[i]);
      if (!got) return got.err();
      v = *got;
    }
    auto norm = [&](double x) -> result<int> {
      int k = static_cast<int>(x);
      if (k < 0) k += r;
      if (k < 0 || k >= std::max(r, 1)) return unsupported("a dim out of range");
      return k;
    };
    if (v.k == val::kind::none || (v.k == val::kind::list && v.elems.empty())) {
      for (int k = 0; k < r; ++k) d.push_back(k);
    } else if (v.k == val::kind::number) {
      auto k = norm(v.num);
      if (!k) return k.err();
      d.push_back(*k);
    } else if (v.k == val::kind::list) {
      for (const auto& e : v.elems) {
        if (e.k != val::kind::number) return unsupported("dims that are not constants");
        auto k = norm(e.num);
        if (!k) return k.err();
        d.push_back(*k);
      }
    } else {
      return unsupported("dims that are not constants");
    }
    std::sort(d.begin(), d.end());
    d.erase(std::unique(d.begin(), d.end()), d.end());
    if (r == 0) d.clear();
    return d;
  }

  void set(torch::jit::Node* n, int id, std::size_t out = 0) {
    val v;
    v.k = val::kind::tensor;
    v.node = id;
    values_[n->outputs()[out]] = v;
  }
  void set_val(torch::jit::Node* n, val v, std::size_t out = 0) { values_[n->outputs()[out]] = v; }

  static bool is_tensor_value(const Value* v) {
    return v->type()->kind() == c10::TypeKind::TensorType;
  }

  status lower_constant(torch::jit::Node* n) {
    auto iv = torch::jit::toIValue(n->output());
    if (!iv) return unsupported("a constant without a value");
    val v;
    if (iv->isNone()) {
      v.k = val::kind::none;
    } else if (iv->isBool()) {
      v.k = val::kind::boolean;
      v.b = iv->toBool();
    } else if (iv->isInt()) {
      v.k = val::kind::number;
      v.num = static_cast<double>(iv->toInt());
      v.is_int = true;
    } else if (iv->isDouble()) {
      v.k = val::kind::number;
      v.num = iv->toDouble();
    } else if (iv->isString()) {
      v.k = val::kind::string;
      v.s = iv->toStringRef();
    } else if (iv->isIntList()) {
      v.k = val::kind::list;
      for (auto x : iv->toIntVector()) {
        val e;
        e.k = val::kind::number;
        e.num = static_cast<double>(x);
        e.is_int = true;
        v.elems.push_back(e);
      }
    } else if (iv->isDoubleList()) {
      v.k = val::kind::list;
      for (auto x : iv->toDoubleVector()) {
        val e;
        e.k = val::kind::number;
        e.num = x;
        v.elems.push_back(e);
      }
    } else if (iv->isDevice()) {
      v.k = val::kind::none;
    } else {
      return unsupported("a constant of type " + iv->tagKind());
    }
    set_val(n, v);
    return {};
  }

  // Scalar arithmetic on constants (TorchScript folds little itself).
  status lower_scalar_arith(torch::jit::Node* n, const std::string& name) {
    std::vector<double> a;
    bool all_int = true;
    for (auto* in : n->inputs()) {
      auto v = get(in);
      if (!v) return v.err();
      if (v->k != val::kind::number) return unsupported("arithmetic on run-time sizes");
      a.push_back(v->num);
      all_int = all_int && v->is_int;
    }
    val r;
    r.k = val::kind::number;
    if (name == "neg" && a.size() == 1)
      r.num = -a[0];
    else if (a.size() != 2)
      return unsupported("scalar " + name);
    else if (name == "add")
      r.num = a[0] + a[1];
    else if (name == "sub")
      r.num = a[0] - a[1];
    else if (name == "mul")
      r.num = a[0] * a[1];
    else if (name == "div")
      r.num = a[0] / a[1], all_int = false;
    else if (name == "pow")
      r.num = std::pow(a[0], a[1]), all_int = false;
    else
      return unsupported("scalar " + name);
    r.is_int = all_int;
    set_val(n, r);
    return {};
  }

  status lower_node(torch::jit::Node* n) {
    const std::string q = n->kind().toQualString();
    if (n->kind() == c10::prim::Constant) return lower_constant(n);
    if (q == "prim::ListConstruct" || q == "prim::TupleConstruct") {
      val v;
      v.k = q == "prim::ListConstruct" ? val::kind::list : val::kind::tuple;
      for (auto* in : n->inputs()) {
        auto e = get(in);
        if (!e) return e.err();
        v.elems.push_back(*e);
      }
      set_val(n, v);
      return {};
    }
    if (q == "prim::TupleIndex") {
      auto t = get(n->inputs()[0]);
      auto i = number_in(n, 1);
      if (!t) return t.err();
      if (!i) return i.err();
      if (t->k != val::kind::tuple || *i < 0 || *i >= static_cast<double>(t->elems.size()))
        return unsupported("indexing a non-tuple");
      set_val(n, t->elems[static_cast<std::size_t>(*i)]);
      return {};
    }
    if (q == "prim::TupleUnpack") {
      auto t = get(n->inputs()[0]);
      if (!t) return t.err();
      if (t->k != val::kind::tuple || t->elems.size() != n->outputs().size())
        return unsupported("unpacking a non-tuple");
      for (std::size_t i = 0; i < t->elems.size(); ++i) set_val(n, t->elems[i], i);
      return {};
    }
    if (q == "aten::size") {
      val v;
      v.k = val::kind::dynamic_int;
      set_val(n, v);
      return {};
    }
    if (q.rfind("aten::", 0) != 0) return unsupported("TorchScript construct " + q);
    const std::string name = q.substr(6);

    // Scalar-only ops (no tensor operand): constant folding.
    bool any_tensor = false;
    for (auto* in : n->inputs()) any_tensor = any_tensor || is_tensor_value(in);
    if (!any_tensor && n->outputs().size() == 1 && !is_tensor_value(n->output()))
      return lower_scalar_arith(n, name);

    return lower_tensor_op(n, name);
  }

  status unary(torch::jit::Node* n, const std::string& op, std::vector<double> params = {}) {
    auto a = tensor_in(n, 0);
    if (!a) return a.err();
    set(n, ew(op, {*a}, std::move(params)));
    return {};
  }
  status binary(torch::jit::Node* n, const std::string& op) {
    auto a = tensor_in(n, 0);
    auto b = tensor_in(n, 1);
    if (!a) return a.err();
    if (!b) return b.err();
    set(n, ew(op, {*a, *b}));
    return {};
  }

  status lower_tensor_op(torch::jit::Node* n, const std::string& name) {
    // ---- elementwise: unary with no parameters, names as in corpus/cuda_expr.cpp
    static const std::set<std::string> plain_unary{
        "relu", "sigmoid", "tanh", "exp", "log", "sqrt", "rsqrt", "abs", "sin", "cos", "erf",
        "expm1", "log1p", "neg", "reciprocal", "square", "silu", "mish", "selu", "hardsigmoid",
        "hardswish", "log_sigmoid", "sign", "exp2", "log2", "tan", "atan", "floor", "ceil",
        "round", "trunc", "logical_not"};
    if (plain_unary.count(name)) return unary(n, name);
    if (name == "contiguous" || name == "clone" || name == "detach") {
      auto a = get(n->inputs()[0]);
      if (!a) return a.err();
      set_val(n, *a);
      return {};
    }
    if (name == "gelu") {
      std::string approx = "none";
      if (n->inputs().size() > 1) {
        auto v = get(n->inputs()[1]);
        if (v && v->k == val::kind::string) approx = v->s;
      }
      return unary(n, approx == "tanh" ? "gelu_tanh" : "gelu");
    }
    if (name == "leaky_relu") {
      double s = 0.01;
      if (n->inputs().size() > 1) {
        auto v = number_in(n, 1);
        if (!v) return v.err();
        s = *v;
      }
      return unary(n, "leaky_relu", {s});
    }
    if (name == "softplus") {
      auto beta = n->inputs().size() > 1 ? number_in(n, 1) : result<double>(1.0);
      auto th = n->inputs().size() > 2 ? number_in(n, 2) : result<double>(20.0);
      if (!beta) return beta.err();
      if (!th) return th.err();
      return unary(n, "softplus", {*beta, *th});
    }
    if (name == "elu") {
      auto alpha = n->inputs().size() > 1 ? number_in(n, 1) : result<double>(1.0);
      auto scale = n->inputs().size() > 2 ? number_in(n, 2) : result<double>(1.0);
      auto iscale = n->inputs().size() > 3 ? number_in(n, 3) : result<double>(1.0);
      if (!alpha || !scale || !iscale) return unsupported("elu with non-constant parameters");
      return unary(n, "elu", {*alpha, *scale, *iscale});
    }
    if (name == "celu") {
      auto alpha = n->inputs().size() > 1 ? number_in(n, 1) : result<double>(1.0);
      if (!alpha) return alpha.err();
      return unary(n, "elu", {*alpha, 1.0, 1.0 / *alpha});
    }
    if (name == "hardtanh") {
      auto lo = n->inputs().size() > 1 ? number_in(n, 1) : result<double>(-1.0);
      auto hi = n->inputs().size() > 2 ? number_in(n, 2) : result<double>(1.0);
      if (!lo || !hi) return unsupported("hardtanh with non-constant bounds");
      return unary(n, "clamp", {*lo, *hi});
    }
    if (name == "relu6") return unary(n, "clamp", {0.0, 6.0});
    if (name == "hardshrink" || name == "softshrink") {
      auto l = n->inputs().size() > 1 ? number_in(n, 1) : result<double>(0.5);
      if (!l) return l.err();
      return unary(n, name, {*l});
    }
    if (name == "threshold") {
      auto th = number_in(n, 1);
      auto v = number_in(n, 2);
      if (!th || !v) return unsupported("threshold with non-constant parameters");
      return unary(n, "threshold", {*th, *v});
    }
    if (name == "logit") {
      if (!is_none(n, 1)) return unsupported("logit with eps");
      return unary(n, "logit");
    }
    if (name == "clamp" || name == "clip" || name == "clamp_min" || name == "clamp_max") {
      auto a = tensor_in(n, 0);
      if (!a) return a.err();
      int cur = *a;
      const bool has_min = name != "clamp_max" && !is_none(n, 1);
      const bool has_max =
          name == "clamp_max" ? true : (name != "clamp_min" && !is_none(n, 2));
      const std::size_t max_at = name == "clamp_max" ? 1 : 2;
      for (std::size_t i : {std::size_t{1}, max_at}) {
        if (i < n->inputs().size() && is_tensor_value(n->inputs()[i]))
          return unsupported("clamp with tensor bounds");
      }
      if (has_min) {
        auto lo = number_in(n, 1);
        if (!lo) return lo.err();
        cur = ew("clamp_min", {cur}, {*lo});
      }
      if (has_max) {
        auto hi = number_in(n, max_at);
        if (!hi) return hi.err();
        cur = ew("clamp_max", {cur}, {*hi});
      }
      set(n, cur);
      return {};
    }
    if (name == "pow") {
      auto a = tensor_in(n, 0);
      auto b = tensor_in(n, 1);
      if (!a || !b) return unsupported("pow operands");
      set(n, ew("pow", {*a, *b}));
      return {};
    }
    // ---- binary
    if (name == "add" || name == "sub" || name == "rsub") {
      auto a = tensor_in(n, 0);
      auto b = tensor_in(n, 1);
      if (!a) return a.err();
      if (!b) return b.err();
      double alpha = 1.0;
      if (n->inputs().size() > 2) {
        auto al = number_in(n, 2);
        if (!al) return al.err();
        alpha = *al;
      }
      int x = *a, y = *b;
      if (name == "rsub") std::swap(x, y);
      if (alpha != 1.0) y = ew("mul", {y, constant(alpha)});
      set(n, ew(name == "add" ? "add" : "sub", {x, y}));
      return {};
    }
    if (name == "div") {
      if (n->inputs().size() > 2 && !is_none(n, 2)) return unsupported("div with rounding_mode");
      return binary(n, "div");
    }
    if (name == "true_divide") return binary(n, "div");
    if (name == "mul" || name == "multiply") return binary(n, "mul");
    if (name == "maximum" || name == "minimum" || name == "atan2" || name == "fmax" ||
        name == "fmin")
      return binary(n, name == "fmax" ? "maximum" : name == "fmin" ? "minimum" : name);
    if (name == "gt" || name == "lt" || name == "ge" || name == "le" || name == "eq" ||
        name == "ne" || name == "logical_and" || name == "logical_or")
      return binary(n, name);
    if (name == "greater") return binary(n, "gt");
    if (name == "less") return binary(n, "lt");
    if (name == "where") {
      if (n->inputs().size() != 3) return unsupported("where with one argument");
      auto c = tensor_in(n, 0);
      auto a = tensor_in(n, 1);
      auto b = tensor_in(n, 2);
      if (!c || !a || !b) return unsupported("where operands");
      set(n, ew("where", {*c, *a, *b}));
      return {};
    }
    if (name == "masked_fill") {
      auto x = tensor_in(n, 0);
      auto m = tensor_in(n, 1);
      auto v = tensor_in(n, 2);
      if (!x || !m || !v) return unsupported("masked_fill operands");
      set(n, ew("where", {*m, *v, *x}));
      return {};
    }
    if (name == "addcmul" || name == "addcdiv") {
      auto x = tensor_in(n, 0);
      auto y = tensor_in(n, 1);
      auto z = tensor_in(n, 2);
      auto v = n->inputs().size() > 3 ? number_in(n, 3) : result<double>(1.0);
      if (!x || !y || !z || !v) return unsupported(name + " operands");
      int p = ew(name == "addcmul" ? "mul" : "div", {*y, *z});
      set(n, ew("add", {*x, ew("mul", {constant(*v), p})}));
      return {};
    }
    if (name == "lerp") {
      auto x = tensor_in(n, 0);
      auto y = tensor_in(n, 1);
      auto w = tensor_in(n, 2);
      if (!x || !y || !w) return unsupported("lerp operands");
      set(n, ew("lerp", {*x, *y, *w}));
      return {};
    }
    if (name == "mse_loss" || name == "l1_loss" || name == "smooth_l1_loss" ||
        name == "huber_loss") {
      auto p = tensor_in(n, 0);
      auto t = tensor_in(n, 1);
      auto red = number_in(n, 2);
      if (!p || !t || !red) return unsupported(name + " operands");
      if (*red != 0) return unsupported(name + " with a reduction (only reduction=0, 'none')");
      const int d = ew("sub", {*p, *t});
      if (name == "mse_loss") {
        set(n, ew("mul", {d, d}));
      } else if (name == "l1_loss") {
        set(n, ew("abs", {d}));
      } else {
        auto beta = n->inputs().size() > 3 ? number_in(n, 3) : result<double>(1.0);
        if (!beta) return beta.err();
        set(n, ew(name, {d}, {*beta}));
      }
      return {};
    }
    // ---- reductions
    if (name == "sum" || name == "mean" || name == "amax" || name == "amin" ||
        name == "prod" || name == "logsumexp" || name == "nansum") {
      auto a = tensor_in(n, 0);
      if (!a) return a.err();
      if (at(*a).is_bool) return unsupported(name + " of a boolean tensor");
      const int r = at(*a).rank;
      const bool all = n->inputs().size() == 1 ||
                       (n->inputs().size() == 2 && (name == "sum" || name == "mean" ||
                                                    name == "prod"));  // (x, dtype)
      if (all && n->inputs().size() == 2 && !is_none(n, 1)) return unsupported(name + " with dtype");
      std::vector<int> dims;
      bool keep = false;
      if (all) {
        for (int k = 0; k < r; ++k) dims.push_back(k);
      } else {
        auto d = dims_in(n, 1, r);
        if (!d) return d.err();
        dims = *d;
        keep = flag_in(n, 2, false);
        if ((name == "sum" || name == "mean" || name == "prod") && n->inputs().size() > 3 &&
            !is_none(n, 3))
          return unsupported(name + " with dtype");
      }
      if (name == "sum" || name == "nansum") {
        set(n, reduce("sum", *a, dims, keep));
      } else if (name == "mean") {
        set(n, ew("div", {reduce("sum", *a, dims, keep), count(*a, dims, keep)}));
      } else if (name == "amax") {
        set(n, reduce("max", *a, dims, keep));
      } else if (name == "amin") {
        set(n, reduce("min", *a, dims, keep));
      } else if (name == "prod") {
        set(n, reduce("prod", *a, dims, keep));
      } else {  // logsumexp: max-shifted, as PyTorch computes it
        const int m = reduce("max", *a, dims, true);
        const int s = reduce("sum", ew("exp", {ew("sub", {*a, m})}), dims, keep);
        int mm = m;
        if (!keep) mm = squeeze_max(*a, dims);
        set(n, ew("add", {ew("log", {s}), mm}));
      }
      return {};
    }
    if (name == "var" || name == "std") {
      auto a = tensor_in(n, 0);
      if (!a) return a.err();
      const int r = at(*a).rank;
      std::vector<int> dims;
      double correction = 1.0;
      bool keep = false;
      // Overloads: (x, unbiased), (x, dims, unbiased, keepdim), (x, dims, *, correction, keepdim)
      if (n->inputs().size() == 2) {
        for (int k = 0; k < r; ++k) dims.push_back(k);
        correction = flag_in(n, 1, true) ? 1.0 : 0.0;
      } else {
        auto d = dims_in(n, 1, r);
        if (!d) return d.err();
        dims = *d;
        const auto schema = n->schema().overload_name();
        if (schema == "correction") {
          if (!is_none(n, 2)) {
            auto c = number_in(n, 2);
            if (!c) return c.err();
            correction = *c;
          }
        } else {
          correction = flag_in(n, 2, true) ? 1.0 : 0.0;
        }
        keep = flag_in(n, 3, false);
      }
      const int mu = ew("div", {reduce("sum", *a, dims, true), count(*a, dims, true)});
      const int d = ew("sub", {*a, mu});
      const int ss = reduce("sum", ew("mul", {d, d}), dims, keep);
      const int denom = ew("sub", {count(*a, dims, keep), constant(correction)});
      const int var = ew("div", {ss, denom});
      set(n, name == "var" ? var : ew("sqrt", {var}));
      return {};
    }
    if (name == "linalg_vector_norm" || name == "norm") {
      auto a = tensor_in(n, 0);
      if (!a) return a.err();
      const int r = at(*a).rank;
      double ord = 2.0;
      if (n->inputs().size() > 1) {
        auto o = number_in(n, 1);
        if (!o) return o.err();
        ord = *o;
      }
      std::vector<int> dims;
      for (int k = 0; k < r; ++k) dims.push_back(k);
      bool keep = false;
      if (n->inputs().size() > 2) {
        auto d = dims_in(n, 2, r);
        if (!d) return d.err();
        dims = *d;
        keep = flag_in(n, 3, false);
        if (n->inputs().size() > 4 && !is_none(n, 4)) return unsupported(name + " with dtype");
      }
      if (ord == 2.0) {
        set(n, ew("sqrt", {reduce("sum", ew("mul", {*a, *a}), dims, keep)}));
      } else if (ord == 1.0) {
        set(n, reduce("sum", ew("abs", {*a}), dims, keep));
      } else if (std::isinf(ord) && ord > 0) {
        set(n, reduce("max", ew("abs", {*a}), dims, keep));
      } else {
        return unsupported(name + " of order " + std::to_string(ord));
      }
      return {};
    }
    if (name == "softmax" || name == "log_softmax") {
      auto a = tensor_in(n, 0);
      if (!a) return a.err();
      auto d = dims_in(n, 1, at(*a).rank);
      if (!d) return d.err();
      if (n->inputs().size() > 2 && !is_none(n, 2)) return unsupported(name + " with dtype");
      const int m = reduce("max", *a, *d, true);
      const int sh = ew("sub", {*a, m});
      const int e = ew("exp", {sh});
      const int s = reduce("sum", e, *d, true);
      set(n, name == "softmax" ? ew("div", {e, s}) : ew("sub", {sh, ew("log", {s})}));
      return {};
    }
    if (name == "layer_norm") {
      auto a = tensor_in(n, 0);
      if (!a) return a.err();
      auto shp = get(n->inputs()[1]);
      if (!shp || shp->k != val::kind::list) return unsupported("layer_norm's normalized_shape");
      const int r = at(*a).rank;
      const int k = static_cast<int>(shp->elems.size());
      if (k < 1 || k > r) return unsupported("layer_norm's normalized_shape");
      std::vector<int> dims;
      for (int i = r - k; i < r; ++i) dims.push_back(i);
      double eps = 1e-5;
      if (n->inputs().size() > 4) {
        auto e = number_in(n, 4);
        if (!e) return e.err();
        eps = *e;
      }
      const int mu = ew("div", {reduce("sum", *a, dims, true), count(*a, dims, true)});
      const int xc = ew("sub", {*a, mu});
      const int var =
          ew("div", {reduce("sum", ew("mul", {xc, xc}), dims, true), count(*a, dims, true)});
      int y = ew("mul", {xc, ew("rsqrt", {ew("add", {var, constant(eps)})})});
      if (!is_none(n, 2)) {
        auto w = tensor_in(n, 2);
        if (!w) return w.err();
        y = ew("mul", {y, *w});
      }
      if (!is_none(n, 3)) {
        auto b = tensor_in(n, 3);
        if (!b) return b.err();
        y = ew("add", {y, *b});
      }
      set(n, y);
      return {};
    }
    // ---- matrix products
    if (name == "t" || name == "transpose" || name == "swapaxes") {
      auto a = tensor_in(n, 0);
      if (!a) return a.err();
      const int r = at(*a).rank;
      if (name != "t") {
        auto d0 = number_in(n, 1);
        auto d1 = number_in(n, 2);
        if (!d0 || !d1) return unsupported("transpose dims");
        int x = static_cast<int>(*d0), y = static_cast<int>(*d1);
        if (x < 0) x += r;
        if (y < 0) y += r;
        if (std::min(x, y) != r - 2 || std::max(x, y) != r - 1)
          return unsupported("a transpose other than of the last two dims");
      } else if (r != 2) {
        return unsupported("t() of a tensor that is not 2-D");
      }
      node t;
      t.kind = node_kind::transpose;
      t.args = {*a};
      t.rank = r;
      set(n, add(std::move(t)));
      return {};
    }
    if (name == "matmul" || name == "mm" || name == "bmm" || name == "linear") {
      auto a = tensor_in(n, 0);
      auto b = tensor_in(n, 1);
      if (!a || !b) return unsupported(name + " operands");
      int bb = *b;
      if (name == "linear") {
        node t;
        t.kind = node_kind::transpose;
        t.args = {bb};
        t.rank = at(bb).rank;
        bb = add(std::move(t));
      }
      if (at(*a).rank < 2 || at(bb).rank < 2) return unsupported(name + " of a 1-D operand");
      node g;
      g.kind = node_kind::gemm;
      g.args = {*a, bb};
      g.rank = std::max(at(*a).rank, at(bb).rank);
      int out = add(std::move(g));
      if (name == "linear" && !is_none(n, 2)) {
        auto bias = tensor_in(n, 2);
        if (!bias) return bias.err();
        out = ew("add", {out, *bias});
      }
      set(n, out);
      return {};
    }
    if (name == "addmm") {
      auto c = tensor_in(n, 0);
      auto a = tensor_in(n, 1);
      auto b = tensor_in(n, 2);
      if (!a || !b || !c) return unsupported("addmm operands");
      auto beta = n->inputs().size() > 3 ? number_in(n, 3) : result<double>(1.0);
      auto alpha = n->inputs().size() > 4 ? number_in(n, 4) : result<double>(1.0);
      if (!beta || !alpha) return unsupported("addmm with non-constant beta or alpha");
      node g;
      g.kind = node_kind::gemm;
      g.args = {*a, *b};
      g.rank = 2;
      const int p = add(std::move(g));
      set(n, ew("add", {ew("mul", {constant(*beta), *c}), ew("mul", {constant(*alpha), p})}));
      return {};
    }
    return unsupported("op aten::" + name);
  }

  // logsumexp without keepdim: the kept max reduced again without keepdim (a max of one value).
  int squeeze_max(int arg, const std::vector<int>& dims) { return reduce("max", arg, dims, false); }

  const tasks::task& task_;
  graph g_;
  std::map<const Value*, val> values_;
};

std::string torch_message(const std::exception& e) {
  std::string m = e.what();
  if (auto pos = m.find('\n'); pos != std::string::npos) m.resize(pos);
  return m;
}

}  // namespace

result<graph> lower_reference(const tasks::task& t) {
  for (const auto& in : t.inputs)
    if (in.type != tasks::dtype::float32)
      return unsupported("input '" + in.name + "' is " + std::string(tasks::to_string(in.type)) +
                         " (only float32 is written)");
  for (const auto& out : t.outputs)
    if (out.type != tasks::dtype::float32)
      return unsupported("output '" + out.name + "' is " +
                         std::string(tasks::to_string(out.type)) + " (only float32 is written)");
  try {
    auto unit = torch::jit::compile(t.reference);
    auto* fn = unit->find_function("forward");
    if (!fn) return unsupported("the reference defines no forward");
    auto g = torch::jit::toGraphFunction(*fn).graph();
    lowering l(t);
    return l.run(g);
  } catch (const std::exception& e) {
    return unsupported("the reference does not compile: " + torch_message(e));
  }
}

}  // namespace kforge::corpus

#else

namespace kforge::corpus {
result<graph> lower_reference(const tasks::task&) {
  return unsupported("this build has no LibTorch to read references with");
}
}  // namespace kforge::corpus

#endif
