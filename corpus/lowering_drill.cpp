#include "corpus/lowering_drill.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdio>
#include <map>
#include <set>
#include <utility>

#include "corpus/kernel_writer.hpp"

namespace kforge::corpus {
namespace {

// TorchScript spellings the writer lowers, by the arguments they take. A call is renamed only
// within its group, so the scrambled reference still compiles and lowers (most of the time: a
// draw the writer rejects is counted and skipped).
constexpr std::array<const char*, 31> kOneTensor = {
    "relu", "sigmoid", "tanh", "exp", "log", "sqrt", "rsqrt", "abs", "sin", "cos", "atan",
    "erf", "expm1", "log1p", "neg", "reciprocal", "square", "floor", "ceil", "round", "trunc",
    "sign", "silu", "mish", "selu", "hardsigmoid", "gelu", "softplus", "elu", "celu", "logit"};
constexpr std::array<const char*, 7> kTensorNumber = {
    "leaky_relu", "hardshrink", "softshrink", "clamp_min", "clamp_max", "pow", "celu"};
constexpr std::array<const char*, 2> kTensorTwoNumbers = {"clamp", "threshold"};
constexpr std::array<const char*, 7> kTwoTensors = {"maximum", "minimum", "atan2", "mul",
                                                    "add",     "sub",     "div"};
// Reductions over dims, renamed whatever their arguments (dim, keepdim): v12 wrote a sum for
// `torch.amin(x, -1, keepdim=True)`. prod takes one dim, not a list: such a draw does not compile
// and is skipped.
constexpr std::array<const char*, 5> kReductions = {"sum", "mean", "amax", "amin", "prod"};

template <std::size_t N>
bool contains(const std::array<const char*, N>& names, const std::string& name) {
  for (const char* n : names)
    if (name == n) return true;
  return false;
}

template <std::size_t N>
std::string pick(const std::array<const char*, N>& names, std::mt19937_64& rng) {
  return names[rng() % N];
}

// `a` without its leading and trailing spaces (a call argument as call_arguments gives it).
std::string trimmed(std::string a) {
  while (!a.empty() && a.front() == ' ') a.erase(0, 1);
  while (!a.empty() && a.back() == ' ') a.pop_back();
  return a;
}

bool is_number(std::string s) {
  s = trimmed(std::move(s));
  if (!s.empty() && s.front() == '-') s.erase(0, 1);
  return !s.empty() && std::isdigit(static_cast<unsigned char>(s.front())) &&
         number_end(s, 0) == s.size();
}

// The top-level arguments of the call whose '(' is at s[open], or nothing when it is unclosed.
std::vector<std::string> call_arguments(const std::string& s, std::size_t open) {
  std::vector<std::string> args(1);
  int depth = 0;
  for (std::size_t i = open + 1; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '(' || c == '[') ++depth;
    if (c == ')' || c == ']') {
      if (depth == 0) return c == ')' ? args : std::vector<std::string>{};
      --depth;
    }
    if (c == ',' && depth == 0)
      args.emplace_back();
    else
      args.back() += c;
  }
  return {};
}

// The name a call becomes: one of its group (a reduction another reduction, arguments kept), or
// itself when its name or arguments fit no group (keyword arguments of an elementwise call, lerp,
// where, norms, softmax).
std::string renamed(const std::string& name, const std::vector<std::string>& args,
                    std::mt19937_64& rng) {
  if (contains(kReductions, name)) return pick(kReductions, rng);
  for (const auto& a : args)
    if (a.find('=') != std::string::npos) return name;
  const bool known = contains(kOneTensor, name) || contains(kTensorNumber, name) ||
                     contains(kTensorTwoNumbers, name) || contains(kTwoTensors, name);
  if (!known) return name;
  if (args.size() == 1) return pick(kOneTensor, rng);
  if (args.size() == 2) return is_number(args[1]) ? pick(kTensorNumber, rng) : pick(kTwoTensors, rng);
  if (args.size() == 3 && is_number(args[1]) && is_number(args[2]))
    return pick(kTensorTwoNumbers, rng);
  return name;
}

// A float of the same form: copy drills' decimals stay below 10; references also write 20.0 or
// 12.5 (threshold's value, softplus's threshold), which v11 copied as 2.0.
std::string random_float_like(const std::string& old, std::mt19937_64& rng) {
  if (old.find_first_of("eE") != std::string::npos || rng() % 2 == 0)
    return random_number_like(old, rng);
  const int whole = 10 + static_cast<int>(rng() % 90);
  const int tenth = static_cast<int>(rng() % 10);
  char buf[16];
  std::snprintf(buf, sizeof buf, "%d.%d", whole, tenth);
  return buf;
}

// A bare name: letters, digits and '_', not starting with a digit (an input or a value).
bool is_name(const std::string& a) {
  return !a.empty() && !std::isdigit(static_cast<unsigned char>(a.front())) &&
         std::all_of(a.begin(), a.end(), word_char);
}

std::string swap_operator_operands(const std::string& s, std::mt19937_64& rng) {
  std::string out;
  std::size_t i = 0;  // s[0, i) is in out
  for (std::size_t k = 1; k + 2 < s.size(); ++k) {
    if (s[k] != ' ' || s[k + 2] != ' ' || std::string("+-*/").find(s[k + 1]) == std::string::npos)
      continue;
    std::size_t a = k;
    while (a > i && word_char(s[a - 1])) --a;
    std::size_t b = k + 3;
    while (b < s.size() && word_char(s[b])) ++b;
    const std::string left = s.substr(a, k - a), right = s.substr(k + 3, b - k - 3);
    const bool attribute = a > 0 && s[a - 1] == '.';
    const bool called = b < s.size() && (s[b] == '(' || s[b] == '.' || s[b] == '[');
    if (!is_name(left) || !is_name(right) || attribute || called || rng() % 2) continue;
    out += s.substr(i, a - i) + right + s.substr(k, 3) + left;
    i = b;
    k = b - 1;
  }
  return out + s.substr(i);
}

std::string swap_call_operands(const std::string& s, std::mt19937_64& rng) {
  std::string out;
  std::size_t i = 0;
  for (std::size_t at = s.find("torch."); at != std::string::npos; at = s.find("torch.", at + 1)) {
    std::size_t j = at + 6;
    while (j < s.size() && word_char(s[j])) ++j;
    if (j >= s.size() || s[j] != '(' || !contains(kTwoTensors, s.substr(at + 6, j - at - 6))) continue;
    const auto args = call_arguments(s, j);
    if (args.size() != 2 || !is_name(trimmed(args[0])) || !is_name(trimmed(args[1])) || rng() % 2) continue;
    out += s.substr(i, j + 1 - i) + trimmed(args[1]) + ", " + trimmed(args[0]) + ")";
    i = j + 1 + args[0].size() + 1 + args[1].size() + 1;  // past "a, b)"
    at = i - 1;
  }
  return out + s.substr(i);
}

// `s` with the two operands of each two-tensor call of bare names, and of each operator between
// spaces with a bare name on either side, swapped with even odds: v13 wrote atan2f(x0, x1) for
// `torch.atan2(y, x)` of inputs (x, y), and `(x0 - v1)` for `(x - y)`; the order of operands is
// another thing to read, not recall. (A swap next to an operator that binds tighter changes the
// math, `a * b + c` to `a * c + b`: the drill is another task, lowered as written.)
std::string swap_operands(const std::string& s, std::mt19937_64& rng) {
  return swap_operator_operands(swap_call_operands(s, rng), rng);
}

std::string scramble_map_body_tokens(const std::string& s, std::mt19937_64& rng) {
  return scramble_tokens(
      s, rng,
      [&](std::size_t i, std::size_t j) {
        const std::string word = s.substr(i, j - i);
        const bool called = i >= 6 && s.compare(i - 6, 6, "torch.") == 0 && j < s.size() && s[j] == '(';
        return called ? renamed(word, call_arguments(s, j), rng) : word;
      },
      [&](const std::string& number) {
        // Integers stay: they may be dims (`x.size(-1)`) or exponents the writer expands.
        return number.find_first_of(".eE") == std::string::npos ? number : random_float_like(number, rng);
      });
}

std::string scramble_map_body(const std::string& s, std::mt19937_64& rng) {
  return swap_operands(scramble_map_body_tokens(s, rng), rng);
}

// The completion up to the end of the function that holds the task's math: a map's kf_op and the
// map kernel after it (which calls it, or kf_point that does), a matrix product's fused epilogue kf_store (whose layout code
// comes before it), or a row program's kernel (reductions, norms, softmax; after the product
// where one comes first); empty when the variant has none of them. A map's kernel is part of the
// drill because its parameters follow kf_op's inputs: v14 wrote a one-input kf_map after a
// correct two-input kf_op for every sample of `torch.maximum(x, y)`.
std::string cut_after_op(const std::string& completion) {
  struct cut {
    const char* head;
    bool with_kernel;  ///< also the next __global__ function (a map's kernel)
  };
  for (const cut c : {cut{"__device__ __forceinline__ void kf_op(", true},
                      cut{"__device__ __forceinline__ void kf_store(const kf_epi_args& e, int64_t i, float acc) {\n", false},
                      cut{"__global__ void kf_rows_kernel(", false}}) {
    const auto op = completion.find(c.head);
    if (op == std::string::npos) continue;
    auto end = completion.find("\n}\n", op);
    if (end == std::string::npos) return {};
    if (const auto kernel = completion.find("__global__ void ", end);
        c.with_kernel && kernel != std::string::npos) {
      const auto kernel_end = completion.find("\n}\n", kernel);
      if (kernel_end != std::string::npos) end = kernel_end;
    }
    return completion.substr(0, end + 3);
  }
  return {};
}

// Names an input may take. v12 wrote `torch.matmul(a, b)`'s B as read transposed, the layout of
// the corpus's `torch.linear(x, w)`, and v11 read `y` as x0: with the names redrawn, which operand
// is which and how it is laid out can only come from the reference.
constexpr std::array<const char*, 28> kInputNames = {
    "a", "b", "c", "x", "w", "z", "q", "k", "v", "m", "p", "s", "t", "u",
    "h", "g", "x1", "x2", "in0", "in1", "lhs", "rhs", "mat", "bias", "scale", "weight", "inp", "src"};

bool has_word(const std::string& s, const std::string& w) {
  for (auto at = s.find(w); at != std::string::npos; at = s.find(w, at + 1)) {
    const bool start = at == 0 || !word_char(s[at - 1]);
    const bool end = at + w.size() >= s.size() || !word_char(s[at + w.size()]);
    if (start && end) return true;
  }
  return false;
}

// `t` with every input renamed (signature, body, input specs, variants); names already in the
// reference are not drawn. Words after a '.' (attributes such as `x.t()`) are not names.
tasks::task rename_inputs(tasks::task t, std::mt19937_64& rng) {
  std::map<std::string, std::string> to;
  std::set<std::string> taken;
  for (const auto& in : t.inputs) {
    std::string name;
    for (int tries = 0; tries < 20 && name.empty(); ++tries) {
      const std::string n = kInputNames[rng() % kInputNames.size()];
      if (!taken.count(n) && !has_word(t.reference, n)) name = n;
    }
    if (name.empty()) return t;  // no free name: the task as it was
    taken.insert(name);
    to[in.name] = name;
  }
  std::string ref;
  for (std::size_t i = 0; i < t.reference.size();) {
    if (!word_char(t.reference[i])) {
      ref += t.reference[i++];
      continue;
    }
    std::size_t j = i;
    while (j < t.reference.size() && word_char(t.reference[j])) ++j;
    const std::string word = t.reference.substr(i, j - i);
    const auto it = to.find(word);
    const bool attribute = i > 0 && t.reference[i - 1] == '.';
    ref += it != to.end() && !attribute ? it->second : word;
    i = j;
  }
  t.reference = std::move(ref);
  for (auto& in : t.inputs) in.name = to[in.name];
  for (auto& v : t.variants) {
    std::map<std::string, tasks::shape> shapes;
    for (auto& [name, shape] : v.shapes) shapes[to.count(name) ? to[name] : name] = shape;
    v.shapes = std::move(shapes);
  }
  return t;
}

}  // namespace

bool has_drill_cut(const std::string& text) { return !cut_after_op(text).empty(); }

std::string scramble_map_reference(const std::string& reference, std::mt19937_64& rng) {
  return with_body_scrambled(reference, [&](const std::string& b) { return scramble_map_body(b, rng); });
}

std::vector<drill_record> lowering_drills(const std::vector<tasks::task>& pool,
                                          const tasks::prompt_template& tmpl,
                                          const tasks::hardware_context& hw,
                                          const tasks::synth::exclusion_list& exclude, int count,
                                          std::uint64_t seed, lowering_drill_tally* tally) {
  std::vector<drill_record> out;
  lowering_drill_tally local;
  lowering_drill_tally& n = tally ? *tally : local;
  if (pool.empty()) return out;
  std::mt19937_64 rng(seed);
  for (int k = 0; k < count; ++k) {
    tasks::task t = pool[rng() % pool.size()];
    if (rng() % 2 == 0) t = rename_inputs(std::move(t), rng);
    t.reference = scramble_map_reference(t.reference, rng);
    const std::string source_id = t.id;
    t.id = "lowering/" + std::to_string(k);
    t.description = "A task to restate.";  // its own would name the ops it no longer has
    if (exclude.match(t, "lowering drill")) {
      ++n.excluded;
      continue;
    }
    auto ks = write_kernels(t);
    std::vector<std::string> cuts;  // one per variant: their explanations differ, kf_op does not
    if (ks)
      for (const auto& v : *ks)
        if (auto cut = cut_after_op(completion_text(v)); !cut.empty()) cuts.push_back(std::move(cut));
    if (cuts.empty()) {
      ++n.unsupported;
      continue;
    }
    out.push_back({t.id + "/" + source_id, task_section(tmpl, t, hw), cuts[rng() % cuts.size()]});
    ++n.written;
  }
  return out;
}

}  // namespace kforge::corpus
