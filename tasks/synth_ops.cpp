#include "tasks/synth_ops.hpp"

#include <algorithm>
#include <cmath>

#include "common/hash.hpp"

namespace kforge::tasks::synth {

using tasks::to_string;

// ---- rng and dims --------------------------------------------------------------------------

std::uint64_t mix(std::uint64_t seed, std::uint64_t k) {
  std::uint64_t z = seed + 0x9e3779b97f4a7c15ull * (k + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

std::uint64_t rng::next() {
  state_ += 0x9e3779b97f4a7c15ull;
  std::uint64_t z = state_;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

std::int64_t rng::uniform(std::int64_t lo, std::int64_t hi) {
  if (hi <= lo) return lo;
  const auto span = static_cast<std::uint64_t>(hi - lo) + 1;
  return lo + static_cast<std::int64_t>(next() % span);
}

double rng::unit() { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0); }

int dim_table::add(role r, sizes n) {
  dims_.push_back({r, n});
  return static_cast<int>(dims_.size()) - 1;
}

int dim_table::one() {
  for (std::size_t i = 0; i < dims_.size(); ++i)
    if (dims_[i].r == role::one) return static_cast<int>(i);
  return add(role::one, {1, 1, 1});
}

int dim_table::fixed(std::int64_t k) {
  for (std::size_t i = 0; i < dims_.size(); ++i)
    if (dims_[i].r == role::fixed && dims_[i].n[0] == k) return static_cast<int>(i);
  return add(role::fixed, {k, k, k});
}

shape eval(const dim_table& d, const sym_shape& s, std::size_t set) {
  shape out;
  out.reserve(s.size());
  for (int sym : s) out.push_back(d.size(sym, set));
  return out;
}

std::int64_t numel(const dim_table& d, const sym_shape& s, std::size_t set) {
  std::int64_t n = 1;
  for (int sym : s) n *= d.size(sym, set);
  return n;
}

std::string_view to_string(layout l) {
  switch (l) {
    case layout::matrix: return "mat";
    case layout::sequence: return "seq";
    case layout::image: return "img";
  }
  return "?";
}

namespace {

using ops = std::vector<op_def>;

init_spec normal(double std) { return {distribution::normal, 0.0, std, 0.0, 1.0, 0.0}; }
init_spec uniform(double low, double high) {
  return {distribution::uniform, 0.0, 1.0, low, high, 0.0};
}
// Weights drawn so a dot product over `fan_in` terms keeps the scale of its inputs (PyTorch's
// default Linear/Conv init bound, 1/sqrt(fan_in), at the primary shapes).
init_spec fan_in_uniform(std::int64_t fan_in) {
  const double a = 1.0 / std::sqrt(static_cast<double>(fan_in));
  return uniform(-a, a);
}

std::string name(const char* letter, const chain_state& s) {
  return letter + std::to_string(s.index);
}

bool is_data_dim(const dim_table& d, int sym) {
  const auto r = d.role_of(sym);
  return r != role::one && r != role::fixed;
}

// Sizes at least `n` in every size set.
bool at_least(const dim_table& d, int sym, std::int64_t n) {
  for (std::size_t k = 0; k < size_sets; ++k)
    if (d.size(sym, k) < n) return false;
  return true;
}

// The output is small enough to keep runs in bounds (memory on the GPU, time on the CPU).
bool fits(const chain_state& s, const sym_shape& out) {
  return numel(*s.dims, out, primary) <= max_primary_numel &&
         numel(*s.dims, out, medium) <= max_medium_numel;
}

// Dimensions a reduction, scan or softmax may run over: data dimensions of size >= 2 everywhere.
std::vector<int> reducible_dims(const chain_state& s) {
  std::vector<int> out;
  for (std::size_t i = 0; i < s.cur.size(); ++i)
    if (is_data_dim(*s.dims, s.cur[i]) && at_least(*s.dims, s.cur[i], 2))
      out.push_back(static_cast<int>(i));
  return out;
}

std::string ordinal_dim(int d) { return "dim " + std::to_string(d); }

// A new dimension of output channels.
int new_channels(chain_state& s, rng& r) {
  static const std::vector<std::int64_t> primary_sizes{16, 32, 64, 128, 256};
  static const std::vector<std::int64_t> medium_sizes{4, 8, 12, 16};
  static const std::vector<std::int64_t> small_sizes{4, 8};
  return s.dims->add(role::channels,
                     {r.pick(primary_sizes), r.pick(medium_sizes), r.pick(small_sizes)});
}

// A window over one spatial dimension: (n + 2 pad - k) / stride + 1 in each size set, or nothing
// where some set gets fewer than 2 outputs.
std::optional<int> window(chain_state& s, int sym, std::int64_t k, std::int64_t stride,
                          std::int64_t pad) {
  if (stride == 1 && 2 * pad == k - 1) return sym;  // "same" padding keeps the symbol
  sizes n{};
  for (std::size_t set = 0; set < size_sets; ++set) {
    const auto in = s.dims->size(sym, set);
    if (in + 2 * pad < k) return std::nullopt;
    n[set] = (in + 2 * pad - k) / stride + 1;
    if (n[set] < 2) return std::nullopt;
  }
  return s.dims->add(role::spatial, n);
}

bool image_value(const chain_state& s) {
  return s.cur.size() == 4 && s.dims->role_of(s.cur[1]) == role::channels &&
         s.dims->role_of(s.cur[2]) == role::spatial && s.dims->role_of(s.cur[3]) == role::spatial;
}

// ---- elementwise ---------------------------------------------------------------------------

// One form of a unary op: signature parameters ("" for none), expression, phrase.
struct form {
  std::string params, expr, phrase;
};

// Ops whose values are > 0 (sigmoid's also < 1): the only ones a log, rsqrt, reciprocal or logit
// may follow, so a chain never feeds a function values outside its domain (NaN or inf outputs
// would be dropped as degenerate anyway, at the cost of the draw).
bool positive_values(std::string_view op) {
  return op == "sigmoid" || op == "exp" || op == "softplus";
}
bool non_negative_values(std::string_view op) {
  return positive_values(op) || op == "relu" || op == "abs" || op == "square";
}

// Which values an op's input must hold.
enum class domain { any, non_negative, positive, unit_interval };

bool in_domain(domain d, std::string_view prev) {
  switch (d) {
    case domain::any: return true;
    case domain::non_negative: return non_negative_values(prev);
    case domain::positive: return positive_values(prev);
    case domain::unit_interval: return prev == "sigmoid";
  }
  return false;
}

void add_unary(ops& v, std::string_view op, int weight, std::vector<form> forms,
               domain needs = domain::any) {
  v.push_back({op, category::elementwise, weight,
               [op, needs, forms = std::move(forms)](chain_state& s, rng& r) -> std::optional<step> {
                 if (s.prev_op == op || !in_domain(needs, s.prev_op)) return std::nullopt;
                 const auto& f = r.pick(forms);
                 step st;
                 st.op = std::string(op);
                 st.signature = f.params.empty() ? st.op : st.op + "(" + f.params + ")";
                 st.expr = f.expr;
                 st.phrase = f.phrase;
                 st.cat = category::elementwise;
                 st.out = s.cur;
                 return st;
               }});
}

// A scale input `s<i>` multiplied into a value of rank >= 2 whose last dimension holds data; its
// shape (`dims`) says along which dimensions it broadcasts.
void add_scale(ops& v, std::string_view op, int weight, std::string signature, std::string phrase,
               std::string (*expr)(const std::string&), sym_shape (*dims)(chain_state&),
               init_spec init) {
  v.push_back({op, category::elementwise, weight,
               [=](chain_state& s, rng&) -> std::optional<step> {
                 if (s.cur.size() < 2 || !is_data_dim(*s.dims, s.cur.back()) || s.prev_op == op)
                   return std::nullopt;
                 step st;
                 st.op = std::string(op);
                 st.signature = signature;
                 const auto sc = name("s", s);
                 st.expr = expr(sc);
                 st.phrase = phrase + sc;
                 st.cat = category::elementwise;
                 st.params.push_back({sc, dims(s), init});
                 st.out = s.cur;
                 return st;
               }});
}

void add_elementwise(ops& v) {
  add_unary(v, "relu", 3, {{"", "torch.relu($)", "ReLU"}});
  add_unary(v, "leaky_relu", 2,
            {{"0.01", "torch.leaky_relu($, 0.01)", "leaky ReLU (slope 0.01)"},
             {"0.2", "torch.leaky_relu($, 0.2)", "leaky ReLU (slope 0.2)"}});
  add_unary(v, "gelu", 3,
            {{"", "torch.gelu($)", "GELU"},
             {"tanh", "torch.gelu($, approximate='tanh')", "GELU (tanh approximation)"}});
  add_unary(v, "silu", 2, {{"", "torch.silu($)", "SiLU"}});
  add_unary(v, "mish", 1, {{"", "torch.mish($)", "Mish"}});
  add_unary(v, "sigmoid", 2, {{"", "torch.sigmoid($)", "sigmoid"}});
  add_unary(v, "tanh", 2, {{"", "torch.tanh($)", "tanh"}});
  add_unary(v, "softplus", 1, {{"", "torch.softplus($)", "softplus"}});
  add_unary(v, "elu", 1, {{"", "torch.elu($)", "ELU"}});
  add_unary(v, "selu", 1, {{"", "torch.selu($)", "SELU"}});
  add_unary(v, "hardtanh", 1, {{"", "torch.hardtanh($)", "hardtanh (clamp to [-1, 1])"}});
  add_unary(v, "hardsigmoid", 1, {{"", "torch.hardsigmoid($)", "hard sigmoid"}});
  add_unary(v, "hardswish", 1, {{"", "torch.hardswish($)", "hard swish"}});
  add_unary(v, "abs", 1, {{"", "torch.abs($)", "absolute value"}});
  add_unary(v, "square", 1, {{"", "torch.square($)", "square"}});
  add_unary(v, "exp", 1, {{"", "torch.exp($)", "exp"}});
  add_unary(v, "log1p_abs", 1, {{"", "torch.log1p(torch.abs($))", "log(1 + |v|)"}});
  add_unary(v, "sin", 1, {{"", "torch.sin($)", "sine"}});
  add_unary(v, "erf", 1, {{"", "torch.erf($)", "erf"}});
  add_unary(v, "clamp", 2,
            {{"-0.5,0.5", "torch.clamp($, -0.5, 0.5)", "clamp to [-0.5, 0.5]"},
             {"0,6", "torch.clamp($, 0.0, 6.0)", "clamp to [0, 6]"},
             {"-2,2", "torch.clamp($, -2.0, 2.0)", "clamp to [-2, 2]"}});
  add_unary(v, "scale", 2,
            {{"0.5", "torch.mul($, 0.5)", "multiply by 0.5"},
             {"0.5", "$ * 0.5", "multiply by 0.5"},
             {"2", "torch.mul($, 2.0)", "multiply by 2"},
             {"-1.5", "torch.mul($, -1.5)", "multiply by -1.5"},
             {"0.125", "torch.mul($, 0.125)", "multiply by 0.125"}});
  add_unary(v, "shift", 1,
            {{"1", "torch.add($, 1.0)", "add 1"},
             {"-0.5", "torch.sub($, 0.5)", "subtract 0.5"},
             {"1", "$ + 1.0", "add 1"},
             {"1-", "1.0 - $", "subtract from 1"}});

  // The rest of the elementwise functions the corpus writer lowers (corpus/torch_lowering.cpp),
  // in the spellings references use, operators included: a policy trained on synthesized tasks
  // otherwise never sees expm1 or `x / (1 + torch.abs(x))` written out.
  add_unary(v, "expm1", 1, {{"", "torch.expm1($)", "exp(v) - 1"}});
  add_unary(v, "softsign", 1,
            {{"", "$ / (1 + torch.abs($))", "softsign"},
             {"", "torch.div($, torch.add(torch.abs($), 1.0))", "softsign"}});
  add_unary(v, "threshold", 1,
            {{"0,-1", "torch.threshold($, 0.0, -1.0)", "threshold at 0 (else -1)"},
             {"0.5,0", "torch.threshold($, 0.5, 0.0)", "threshold at 0.5 (else 0)"},
             {"-0.2,2", "torch.threshold($, -0.2, 2.0)", "threshold at -0.2 (else 2)"}});
  add_unary(v, "hardshrink", 1,
            {{"", "torch.hardshrink($)", "hard shrink (0.5)"},
             {"0.25", "torch.hardshrink($, 0.25)", "hard shrink (0.25)"}});
  add_unary(v, "softshrink", 1,
            {{"", "torch.softshrink($)", "soft shrink (0.5)"},
             {"0.2", "torch.softshrink($, 0.2)", "soft shrink (0.2)"}});
  add_unary(v, "celu", 1,
            {{"", "torch.celu($)", "CELU"}, {"0.5", "torch.celu($, 0.5)", "CELU (alpha 0.5)"}});
  add_unary(v, "pow", 1,
            {{"2", "torch.pow($, 2.0)", "square (pow 2)"},
             {"3", "torch.pow($, 3.0)", "cube"},
             {"sq", "$ * $", "square"}});
  add_unary(v, "neg", 1, {{"", "torch.neg($)", "negate"}, {"", "-$", "negate"}});
  add_unary(v, "cos", 1, {{"", "torch.cos($)", "cosine"}});
  add_unary(v, "atan", 1, {{"", "torch.atan($)", "arctangent"}});
  // Offered more often than they apply: most values are not in their domain.
  add_unary(v, "sqrt", 2, {{"", "torch.sqrt($)", "square root"}}, domain::non_negative);
  add_unary(v, "rsqrt", 3, {{"", "torch.rsqrt($)", "reciprocal square root"}}, domain::positive);
  add_unary(v, "log", 3, {{"", "torch.log($)", "natural log"}}, domain::positive);
  add_unary(v, "log1p", 3, {{"", "torch.log1p($)", "log(1 + v)"}}, domain::non_negative);
  add_unary(v, "reciprocal", 3,
            {{"", "torch.reciprocal($)", "reciprocal"}, {"", "1.0 / $", "reciprocal"}},
            domain::positive);
  // The same functions on any value, made safe the way references do it.
  add_unary(v, "sqrt_abs", 1, {{"", "torch.sqrt(torch.abs($))", "sqrt(|v|)"}});
  add_unary(v, "rsqrt_abs1", 1, {{"", "torch.rsqrt(torch.abs($) + 1.0)", "1 / sqrt(|v| + 1)"}});
  add_unary(v, "log_abs1", 1, {{"", "torch.log(torch.abs($) + 1.0)", "log(|v| + 1)"}});
  add_unary(v, "recip_abs1", 1, {{"", "1.0 / (torch.abs($) + 1.0)", "1 / (|v| + 1)"}});
  add_unary(v, "logit", 6, {{"", "torch.logit($)", "logit"}}, domain::unit_interval);

  // A second operand of the current shape, joined elementwise.
  struct join {
    std::string_view op, fn, phrase;
    int weight;
  };
  // `fn` is the call with `$` and `@` (the second input), or an operator expression.
  for (const auto& j : {join{"add", "torch.add($, @)|$ + @", "add", 2},
                        join{"sub", "torch.sub($, @)|$ - @", "subtract", 2},
                        join{"mul", "torch.mul($, @)|$ * @", "multiply by", 2},
                        join{"maximum", "torch.maximum($, @)", "elementwise maximum with", 2},
                        join{"minimum", "torch.minimum($, @)", "elementwise minimum with", 1},
                        join{"atan2", "torch.atan2($, @)|torch.atan2(@, $)", "atan2 with", 1},
                        join{"sqdiff", "($ - @) * ($ - @)|torch.square($ - @)",
                             "squared difference with", 1},
                        join{"mse", "torch.mse_loss($, @, 0)", "squared error (no reduction) against", 1},
                        join{"smooth_l1", "torch.smooth_l1_loss($, @, 0, 1.0)|torch.smooth_l1_loss($, @, 0, 0.5)",
                             "smooth L1 loss (no reduction) against", 1}}) {
    std::vector<std::string> spellings;  // fn split at '|', once
    for (std::string_view rest = j.fn; !rest.empty();) {
      const auto bar = rest.find('|');
      spellings.emplace_back(rest.substr(0, bar));
      rest = bar == std::string_view::npos ? "" : rest.substr(bar + 1);
    }
    v.push_back({j.op, category::elementwise, j.weight,
                 [j, spellings](chain_state& s, rng& r) -> std::optional<step> {
                   if (s.data_inputs >= 3) return std::nullopt;
                   step st;
                   st.op = std::string(j.op);
                   st.signature = st.op + "(z)";
                   const auto z = name("z", s);
                   st.expr = r.pick(spellings);
                   for (auto at = st.expr.find('@'); at != std::string::npos; at = st.expr.find('@'))
                     st.expr.replace(at, 1, z);
                   st.phrase = std::string(j.phrase) + " a second input " + z;
                   st.cat = category::elementwise;
                   st.params.push_back({z, s.cur, normal(1.0), true});
                   st.out = s.cur;
                   return st;
                 }});
  }

  // Two more inputs: the end point z and the weight w of a linear interpolation.
  v.push_back({"lerp", category::elementwise, 1,
               [](chain_state& s, rng&) -> std::optional<step> {
                 if (s.data_inputs >= 2) return std::nullopt;
                 step st;
                 st.op = "lerp";
                 st.signature = "lerp(z,w)";
                 const auto z = name("z", s), w = name("w", s);
                 st.expr = "torch.lerp($, " + z + ", " + w + ")";
                 st.phrase = "interpolate toward a second input " + z + " by weights " + w;
                 st.cat = category::elementwise;
                 st.params.push_back({z, s.cur, normal(1.0), true});
                 st.params.push_back({w, s.cur, uniform(0.0, 1.0), true});
                 st.out = s.cur;
                 return st;
               }});

  // A mask input m in [0, 1): values where m passes a cut are replaced by a constant.
  v.push_back({"masked_fill", category::elementwise, 1,
               [](chain_state& s, rng& r) -> std::optional<step> {
                 if (s.data_inputs >= 3) return std::nullopt;
                 struct cut {
                   std::string_view test, fill, phrase, sig;  // sig: no '>' (it joins steps)
                 };
                 static const std::vector<cut> cuts{
                     {"> 0.5", "0.0", "set to 0 where m > 0.5", "gt0.5,0"},
                     {"< 0.25", "-1.0", "set to -1 where m < 0.25", "lt0.25,-1"},
                     {"> 0.9", "1.0", "set to 1 where m > 0.9", "gt0.9,1"}};
                 const auto& c = r.pick(cuts);
                 step st;
                 st.op = "masked_fill";
                 const auto m = name("m", s);
                 st.signature = "masked_fill(" + std::string(c.sig) + ")";
                 st.expr = "torch.masked_fill($, " + m + " " + std::string(c.test) + ", " +
                           std::string(c.fill) + ")";
                 st.phrase = std::string(c.phrase).replace(c.phrase.find(" m "), 3, " " + m + " ");
                 st.cat = category::elementwise;
                 st.params.push_back({m, s.cur, uniform(0.0, 1.0), true});
                 st.out = s.cur;
                 return st;
               }});

  v.push_back({"residual", category::elementwise, 3,
               [](chain_state& s, rng&) -> std::optional<step> {
                 if (s.index == 1 || s.cur != s.x || s.prev_op == "residual") return std::nullopt;
                 step st;
                 st.op = "residual";
                 st.signature = "add(x)";
                 st.expr = "torch.add($, %)";
                 st.phrase = "add the input x back (residual)";
                 st.cat = category::elementwise;
                 st.out = s.cur;
                 return st;
               }});

  // A bias per channel (images) or per last-dimension feature.
  v.push_back({"bias", category::elementwise, 3,
               [](chain_state& s, rng&) -> std::optional<step> {
                 if (s.cur.size() < 2 || s.prev_op == "bias") return std::nullopt;
                 step st;
                 st.op = "bias";
                 st.cat = category::elementwise;
                 const auto b = name("b", s);
                 if (image_value(s)) {
                   const int one = s.dims->one();
                   st.signature = "bias(c)";
                   st.phrase = "add a per-channel bias " + b;
                   st.params.push_back({b, {s.cur[1], one, one}, uniform(-0.5, 0.5)});
                 } else {
                   if (!is_data_dim(*s.dims, s.cur.back())) return std::nullopt;
                   st.signature = "bias(last)";
                   st.phrase = "add a bias " + b + " over the last dimension";
                   st.params.push_back({b, {s.cur.back()}, uniform(-0.5, 0.5)});
                 }
                 st.expr = "torch.add($, " + b + ")";
                 st.out = s.cur;
                 return st;
               }});

  // A scale per row: one value per position of every dimension but the last, broadcast along it.
  add_scale(v, "scale_rows", 1, "mul(rows)", "multiply each row by its scale ",
            [](const std::string& sc) { return "$ * " + sc; },
            [](chain_state& s) {
              sym_shape dims = s.cur;
              dims.back() = s.dims->one();
              return dims;
            },
            normal(1.0));
  add_scale(v, "scale_features", 2, "mul(s)", "multiply by a per-feature scale ",
            [](const std::string& sc) { return "torch.mul($, " + sc + ")"; },
            [](chain_state& s) { return sym_shape{s.cur.back()}; }, uniform(0.5, 1.5));
}

// ---- reductions, scans, softmax ------------------------------------------------------------

struct reduction {
  std::string_view op, fn, phrase;
  tol_hint tol;
};

// The call as people write it, in one of three spellings picked by `pick` (a hash, so the chain's
// random draws stay as they were): the catalogue's `torch.sum(x, [1], False)`, or with an int dim
// and keepdim by keyword only when kept (`torch.sum(x, 1)`, `torch.amin(x, 1, keepdim=True)`), or
// the same with the dim counted from the end (`torch.amin(x, -1, keepdim=True)`). The built-in
// tasks use the latter two, which synthesized tasks never did: a policy trained on these misread
// `keepdim=True` as a number. var keeps its positional form (its `unbiased` comes first).
std::string reduction_call(const reduction& red, int d, int rank, bool keep, std::uint64_t pick) {
  const int spelling = red.op == "var" ? 0 : static_cast<int>(pick % 3);
  std::string e = std::string(red.fn);
  if (spelling == 0) {
    e.replace(e.find('D'), 1, std::to_string(d));
    e.replace(e.find('K'), 1, keep ? "True" : "False");
    return e;
  }
  const int dim = spelling == 2 ? d - rank : d;
  // "torch.op($, [D], K)" or "torch.argop($, D, K)" -> "torch.op($, DIM" + keepdim + ")"
  e = e.substr(0, e.find(", ")) + ", " + std::to_string(dim) + (keep ? ", keepdim=True" : "") + ")";
  return e;
}

void add_reductions(ops& v) {
  for (const auto& red :
       {reduction{"sum", "torch.sum($, [D], K)", "sum", tol_hint::sums},
        reduction{"mean", "torch.mean($, [D], K)", "mean", tol_hint::none},
        reduction{"amax", "torch.amax($, [D], K)", "max", tol_hint::none},
        reduction{"amin", "torch.amin($, [D], K)", "min", tol_hint::none},
        reduction{"logsumexp", "torch.logsumexp($, [D], K)", "log-sum-exp", tol_hint::sums},
        reduction{"var", "torch.var($, [D], True, K)", "unbiased variance", tol_hint::none},
        reduction{"argmax", "torch.argmax($, D, K)", "argmax", tol_hint::none},
        reduction{"argmin", "torch.argmin($, D, K)", "argmin", tol_hint::none}}) {
    const bool arg = red.op.substr(0, 3) == "arg";
    v.push_back(
        {red.op, category::reduction, arg ? 1 : 2,
         [red, arg](chain_state& s, rng& r) -> std::optional<step> {
           if (s.cur.size() < 2) return std::nullopt;
           // Saturating ops tie many elements, and which index argmax picks among ties is up to
           // the implementation.
           if (arg && (s.prev_op == "clamp" || s.prev_op == "hardtanh" ||
                       s.prev_op == "hardsigmoid" || s.prev_op == "relu"))
             return std::nullopt;
           const auto dims = reducible_dims(s);
           if (dims.empty()) return std::nullopt;
           const int d = r.pick(dims);
           const bool keep = r.chance(0.5);
           step st;
           st.op = std::string(red.op);
           st.signature = st.op + "(" + std::to_string(d) + (keep ? ",keep" : "") + ")";
           st.expr = reduction_call(red, d, static_cast<int>(s.cur.size()), keep,
                                    fnv1a64(st.signature + "|" + s.prev_op + "|" + std::to_string(s.index)));
           st.phrase = std::string(red.phrase) + " over " + ordinal_dim(d) +
                       (keep ? " (kept as size 1)" : "");
           st.cat = category::reduction;
           st.tol = red.tol;
           st.out = s.cur;
           if (keep)
             st.out[static_cast<std::size_t>(d)] = s.dims->one();
           else
             st.out.erase(st.out.begin() + d);
           if (arg) {
             st.out_type = dtype::int64;
             st.terminal = true;
           }
           return st;
         }});
  }

  struct along {
    std::string_view op, fn, phrase;
    tol_hint tol;
    double passes;
  };
  for (const auto& a : {along{"cumsum", "torch.cumsum($, D)", "cumulative sum", tol_hint::sums, 1},
                        along{"softmax", "torch.softmax($, D)", "softmax", tol_hint::probabilities,
                              2},
                        along{"log_softmax", "torch.log_softmax($, D)", "log-softmax",
                              tol_hint::none, 2}}) {
    v.push_back({a.op, category::reduction, 2, [a](chain_state& s, rng& r) -> std::optional<step> {
                   if (s.prev_op == a.op) return std::nullopt;
                   const auto dims = reducible_dims(s);
                   if (dims.empty()) return std::nullopt;
                   // Mostly the last dimension, as models use them.
                   const int d = r.chance(0.6) && std::find(dims.begin(), dims.end(),
                                                            static_cast<int>(s.cur.size()) - 1) !=
                                                      dims.end()
                                     ? static_cast<int>(s.cur.size()) - 1
                                     : r.pick(dims);
                   step st;
                   st.op = std::string(a.op);
                   st.signature = st.op + "(" + std::to_string(d) + ")";
                   st.expr = std::string(a.fn);
                   st.expr.replace(st.expr.find('D'), 1, std::to_string(d));
                   st.phrase = std::string(a.phrase) + " over " + ordinal_dim(d);
                   st.cat = category::reduction;
                   st.tol = a.tol;
                   st.passes = a.passes;
                   st.out = s.cur;
                   return st;
                 }});
  }
}

// ---- normalization -------------------------------------------------------------------------

void affine(step& st, chain_state& s, int features) {
  const auto g = name("g", s), b = name("b", s);
  st.params.push_back({g, {features}, uniform(0.5, 1.5)});
  st.params.push_back({b, {features}, uniform(-0.5, 0.5)});
}

void add_normalization(ops& v) {
  v.push_back({"layer_norm", category::normalization, 3,
               [](chain_state& s, rng& r) -> std::optional<step> {
                 if (s.prev_op == "layer_norm" || !is_data_dim(*s.dims, s.cur.back()) ||
                     !at_least(*s.dims, s.cur.back(), 2))
                   return std::nullopt;
                 step st;
                 st.op = "layer_norm";
                 st.cat = category::normalization;
                 st.passes = 2;
                 st.out = s.cur;
                 if (r.chance(0.7)) {
                   affine(st, s, s.cur.back());
                   st.signature = "layer_norm(affine)";
                   st.expr = "torch.layer_norm($, [$.size(-1)], " + st.params[0].name + ", " +
                             st.params[1].name + ", 1e-5)";
                   st.phrase = "LayerNorm over the last dimension (weight " + st.params[0].name +
                               ", bias " + st.params[1].name + ")";
                 } else {
                   st.signature = "layer_norm";
                   st.expr = "torch.layer_norm($, [$.size(-1)])";
                   st.phrase = "LayerNorm over the last dimension (no affine)";
                 }
                 return st;
               }});

  v.push_back({"rms_norm", category::normalization, 2,
               [](chain_state& s, rng&) -> std::optional<step> {
                 if (s.prev_op == "rms_norm" || !is_data_dim(*s.dims, s.cur.back()) ||
                     !at_least(*s.dims, s.cur.back(), 2))
                   return std::nullopt;
                 step st;
                 st.op = "rms_norm";
                 st.signature = "rms_norm";
                 const auto g = name("g", s);
                 st.expr = "$ * torch.rsqrt(torch.mean($ * $, [-1], True) + 1e-6) * " + g;
                 st.phrase = "RMSNorm over the last dimension (eps 1e-6, weight " + g + ")";
                 st.cat = category::normalization;
                 st.passes = 2;
                 st.params.push_back({g, {s.cur.back()}, uniform(0.5, 1.5)});
                 st.out = s.cur;
                 return st;
               }});

  v.push_back({"group_norm", category::normalization, 2,
               [](chain_state& s, rng& r) -> std::optional<step> {
                 if (!image_value(s) || s.prev_op == "group_norm") return std::nullopt;
                 std::vector<std::int64_t> groups;
                 for (std::int64_t g : {2, 4, 8}) {
                   bool divides = true;
                   for (std::size_t set = 0; set < size_sets; ++set)
                     divides = divides && s.dims->size(s.cur[1], set) % g == 0;
                   if (divides) groups.push_back(g);
                 }
                 if (groups.empty()) return std::nullopt;
                 const auto g = r.pick(groups);
                 step st;
                 st.op = "group_norm";
                 st.cat = category::normalization;
                 st.passes = 2;
                 st.out = s.cur;
                 const auto gs = std::to_string(g);
                 if (r.chance(0.7)) {
                   affine(st, s, s.cur[1]);
                   st.signature = "group_norm(" + gs + ",affine)";
                   st.expr = "torch.group_norm($, " + gs + ", " + st.params[0].name + ", " +
                             st.params[1].name + ", 1e-5)";
                   st.phrase = "GroupNorm with " + gs + " groups (weight " + st.params[0].name +
                               ", bias " + st.params[1].name + ")";
                 } else {
                   st.signature = "group_norm(" + gs + ")";
                   st.expr = "torch.group_norm($, " + gs + ", None, None, 1e-5)";
                   st.phrase = "GroupNorm with " + gs + " groups (no affine)";
                 }
                 return st;
               }});

  v.push_back(
      {"batch_norm", category::normalization, 2,
       [](chain_state& s, rng& r) -> std::optional<step> {
         const bool ok_rank = s.cur.size() == 2 || image_value(s);
         if (!ok_rank || s.prev_op == "batch_norm" || !is_data_dim(*s.dims, s.cur[1]))
           return std::nullopt;
         for (std::size_t set = 0; set < size_sets; ++set)
           if (numel(*s.dims, s.cur, set) / s.dims->size(s.cur[1], set) < 2) return std::nullopt;
         step st;
         st.op = "batch_norm";
         st.cat = category::normalization;
         st.passes = 2;
         st.out = s.cur;
         if (r.chance(0.7)) {
           affine(st, s, s.cur[1]);
           st.signature = "batch_norm(affine)";
           st.expr = "torch.batch_norm($, " + st.params[0].name + ", " + st.params[1].name +
                     ", None, None, True, 0.1, 1e-5, False)";
           st.phrase = "BatchNorm over dim 1 with batch statistics (weight " + st.params[0].name +
                       ", bias " + st.params[1].name + ")";
         } else {
           st.signature = "batch_norm";
           st.expr = "torch.batch_norm($, None, None, None, None, True, 0.1, 1e-5, False)";
           st.phrase = "BatchNorm over dim 1 with batch statistics (no affine)";
         }
         return st;
       }});
}

// ---- gemm ----------------------------------------------------------------------------------

void add_gemm(ops& v) {
  v.push_back({"linear", category::gemm, 6, [](chain_state& s, rng& r) -> std::optional<step> {
                 if (s.cur.size() < 2 || s.cur.size() > 3) return std::nullopt;
                 const int k = s.cur.back();
                 if (!is_data_dim(*s.dims, k) || !at_least(*s.dims, k, 2)) return std::nullopt;
                 const int f = feature_dim(*s.dims, r);
                 step st;
                 st.op = "linear";
                 st.cat = category::gemm;
                 st.out = s.cur;
                 st.out.back() = f;
                 if (!fits(s, st.out)) return std::nullopt;
                 const auto w = name("w", s);
                 st.params.push_back({w, {f, k}, fan_in_uniform(s.dims->size(k, primary))});
                 const bool bias = r.chance(0.8);
                 if (bias) {
                   const auto b = name("b", s);
                   st.params.push_back({b, {f}, uniform(-0.5, 0.5)});
                   st.expr = "torch.linear($, " + w + ", " + b + ")";
                 } else {
                   st.expr = "torch.linear($, " + w + ")";
                 }
                 st.signature = bias ? "linear(b)" : "linear";
                 st.phrase = std::string("linear layer (v @ ") + w + "^T" +
                             (bias ? " + " + st.params[1].name : std::string()) + ")";
                 st.flop_factor = 2.0;
                 st.flop_dims = s.cur;
                 st.flop_dims.push_back(f);
                 return st;
               }});

  v.push_back({"matmul", category::gemm, 3, [](chain_state& s, rng& r) -> std::optional<step> {
                 if (s.cur.size() < 2 || s.cur.size() > 3 || s.data_inputs >= 3)
                   return std::nullopt;
                 const int k = s.cur.back();
                 if (!is_data_dim(*s.dims, k) || !at_least(*s.dims, k, 2)) return std::nullopt;
                 const int f = feature_dim(*s.dims, r);
                 step st;
                 st.op = "matmul";
                 st.signature = "matmul(z)";
                 st.cat = category::gemm;
                 st.out = s.cur;
                 st.out.back() = f;
                 if (!fits(s, st.out)) return std::nullopt;
                 const auto z = name("z", s);
                 st.params.push_back(
                     {z,
                      {k, f},
                      normal(1.0 / std::sqrt(static_cast<double>(s.dims->size(k, primary)))),
                      true});
                 st.expr = "torch.matmul($, " + z + ")";
                 st.phrase = "matrix product with a second input " + z;
                 st.flop_factor = 2.0;
                 st.flop_dims = s.cur;
                 st.flop_dims.push_back(f);
                 return st;
               }});

  // Scores of a sequence against itself, as attention computes them: [B, T, D] -> [B, T, T].
  v.push_back({"gram", category::gemm, 2, [](chain_state& s, rng&) -> std::optional<step> {
                 if (s.cur.size() != 3 || s.prev_op == "gram") return std::nullopt;
                 for (int sym : s.cur)
                   if (!is_data_dim(*s.dims, sym) || !at_least(*s.dims, sym, 2))
                     return std::nullopt;
                 step st;
                 st.op = "gram";
                 st.signature = "gram";
                 st.cat = category::gemm;
                 st.out = {s.cur[0], s.cur[1], s.cur[1]};
                 if (!fits(s, st.out)) return std::nullopt;
                 st.expr = "torch.matmul($, torch.transpose($, 1, 2))";
                 st.phrase = "batched product with its own transpose (v @ v^T per batch)";
                 st.flop_factor = 2.0;
                 st.flop_dims = {s.cur[0], s.cur[1], s.cur[1], s.cur[2]};
                 return st;
               }});
}

// ---- conv and pooling ----------------------------------------------------------------------

void add_conv(ops& v) {
  v.push_back({"conv2d", category::conv, 6, [](chain_state& s, rng& r) -> std::optional<step> {
                 if (!image_value(s)) return std::nullopt;
                 static const std::vector<std::int64_t> kernels{1, 3, 3, 5};
                 const auto k = r.pick(kernels);
                 const std::int64_t stride = r.chance(0.3) ? 2 : 1;
                 const auto pad = k / 2;
                 const auto h = window(s, s.cur[2], k, stride, pad);
                 const auto w_ = h ? window(s, s.cur[3], k, stride, pad) : std::nullopt;
                 if (!h || !w_) return std::nullopt;
                 const int c = s.cur[1];
                 const int f = new_channels(s, r);
                 step st;
                 st.op = "conv2d";
                 st.cat = category::conv;
                 st.out = {s.cur[0], f, *h, *w_};
                 if (!fits(s, st.out)) return std::nullopt;
                 const int ks = s.dims->fixed(k);
                 const auto w = name("w", s);
                 st.params.push_back(
                     {w, {f, c, ks, ks}, fan_in_uniform(s.dims->size(c, primary) * k * k)});
                 const bool bias = r.chance(0.7);
                 std::string b = "None";
                 if (bias) {
                   b = name("b", s);
                   st.params.push_back({b, {f}, uniform(-0.5, 0.5)});
                 }
                 const auto ss = std::to_string(stride), ps = std::to_string(pad),
                            kk = std::to_string(k);
                 st.expr = "torch.conv2d($, " + w + ", " + b + ", [" + ss + ", " + ss + "], [" +
                           ps + ", " + ps + "])";
                 st.signature = "conv2d(k" + kk + ",s" + ss + (bias ? ",b" : "") + ")";
                 st.phrase = "2-D convolution " + kk + "x" + kk + ", stride " + ss +
                             ", padding " + ps + " (weight " + w +
                             (bias ? ", bias " + b : std::string()) + ")";
                 st.flop_factor = 2.0;
                 st.flop_dims = st.out;
                 st.flop_dims.insert(st.flop_dims.end(), {c, ks, ks});
                 return st;
               }});

  for (const auto& [op, fn, phrase] :
       {std::array<std::string_view, 3>{"max_pool2d", "torch.max_pool2d", "max pool"},
        std::array<std::string_view, 3>{"avg_pool2d", "torch.avg_pool2d", "average pool"}}) {
    v.push_back({op, category::other, 2,
                 [op = op, fn = fn, phrase = phrase](chain_state& s,
                                                     rng& r) -> std::optional<step> {
                   if (!image_value(s) || s.prev_op == op) return std::nullopt;
                   const std::int64_t k = r.chance(0.7) ? 2 : 3;
                   const std::int64_t stride = 2;
                   const auto h = window(s, s.cur[2], k, stride, 0);
                   const auto w = h ? window(s, s.cur[3], k, stride, 0) : std::nullopt;
                   if (!h || !w) return std::nullopt;
                   step st;
                   st.op = std::string(op);
                   const auto ks = std::to_string(k), ss = std::to_string(stride);
                   st.signature = st.op + "(k" + ks + ",s" + ss + ")";
                   st.expr = std::string(fn) + "($, [" + ks + ", " + ks + "], [" + ss + ", " + ss +
                             "])";
                   st.phrase = std::string(phrase) + " " + ks + "x" + ks + ", stride " + ss;
                   st.cat = category::other;
                   st.out = {s.cur[0], s.cur[1], *h, *w};
                   return st;
                 }});
  }
}

// ---- layout --------------------------------------------------------------------------------

void add_layout(ops& v) {
  v.push_back({"transpose", category::other, 2, [](chain_state& s, rng& r) -> std::optional<step> {
                 if (s.cur.size() < 2 || s.prev_op == "transpose") return std::nullopt;
                 std::vector<std::pair<int, int>> pairs;
                 for (std::size_t a = 0; a < s.cur.size(); ++a)
                   for (std::size_t b = a + 1; b < s.cur.size(); ++b)
                     if (is_data_dim(*s.dims, s.cur[a]) && is_data_dim(*s.dims, s.cur[b]) &&
                         s.cur[a] != s.cur[b])
                       pairs.emplace_back(static_cast<int>(a), static_cast<int>(b));
                 if (pairs.empty()) return std::nullopt;
                 // Mostly the last two dimensions, the common case.
                 const int n = static_cast<int>(s.cur.size());
                 auto p = pairs.back();
                 if (p != std::make_pair(n - 2, n - 1) || r.chance(0.4)) p = r.pick(pairs);
                 step st;
                 st.op = "transpose";
                 const auto a = std::to_string(p.first), b = std::to_string(p.second);
                 st.signature = "transpose(" + a + "," + b + ")";
                 st.expr = "torch.transpose($, " + a + ", " + b + ")";
                 st.phrase = "swap dims " + a + " and " + b + " (the output is contiguous)";
                 st.cat = category::other;
                 st.out = s.cur;
                 std::swap(st.out[static_cast<std::size_t>(p.first)],
                           st.out[static_cast<std::size_t>(p.second)]);
                 return st;
               }});
}

ops build() {
  ops v;
  add_elementwise(v);
  add_reductions(v);
  add_normalization(v);
  add_gemm(v);
  add_conv(v);
  add_layout(v);
  return v;
}

}  // namespace

int feature_dim(dim_table& d, rng& r) {
  static const std::vector<std::int64_t> primary_sizes{256, 512, 768, 1024, 2048, 4096, 8192};
  return d.add(role::features, {r.pick(primary_sizes), r.uniform(65, 300), r.uniform(4, 33)});
}

const std::vector<op_def>& catalogue() {
  static const ops all = build();
  return all;
}

}  // namespace kforge::tasks::synth
