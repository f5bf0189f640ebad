#include "tasks/synth.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>

#include "common/hash.hpp"
#include "tasks/builtin.hpp"
#include "tasks/task_parser.hpp"

namespace kforge::tasks::synth {

using tasks::to_string;

std::string_view to_string(reject_reason r) {
  switch (r) {
    case reject_reason::duplicate: return "duplicate signature";
    case reject_reason::contaminated: return "contaminated (--exclude)";
    case reject_reason::size: return "size outside bound (estimated time)";
    case reject_reason::does_not_run: return "does not compile or run";
    case reject_reason::shape_mismatch: return "output shape differs from the rules";
    case reject_reason::nan_inf: return "NaN or Inf";
    case reject_reason::nondeterministic: return "not deterministic";
    case reject_reason::constant: return "constant output";
    case reject_reason::near_zero: return "near zero (within atol)";
    case reject_reason::input_independent: return "output ignores an input";
    case reject_reason::modifies_input: return "modifies an input";
    case reject_reason::runtime: return "runtime outside window (measured)";
  }
  return "?";
}

namespace {

// x's symbols for a layout, sized for the primary shapes before the batch is scaled.
sym_shape make_input(dim_table& d, layout l, rng& r) {
  switch (l) {
    case layout::matrix: {
      static const std::vector<std::int64_t> rows{1024, 2048, 4096, 8192};
      const int m = d.add(role::rows, {r.pick(rows), r.uniform(97, 300), r.uniform(3, 17)});
      return {m, feature_dim(d, r)};
    }
    case layout::sequence: {
      static const std::vector<std::int64_t> batch{2, 4, 8, 16};
      static const std::vector<std::int64_t> seq{128, 256, 512, 1024, 2048};
      const int b = d.add(role::batch, {r.pick(batch), r.uniform(2, 3), 2});
      const int t = d.add(role::seq, {r.pick(seq), r.uniform(33, 130), r.uniform(3, 17)});
      return {b, t, feature_dim(d, r)};
    }
    case layout::image: {
      static const std::vector<std::int64_t> batch{4, 8, 16, 32};
      static const std::vector<std::int64_t> channels{3, 16, 32, 64, 128};
      static const std::vector<std::int64_t> medium_channels{4, 8, 12, 16};
      static const std::vector<std::int64_t> small_channels{4, 8};
      static const std::vector<std::int64_t> spatial{28, 32, 56, 64, 112, 128, 224};
      const int b = d.add(role::batch, {r.pick(batch), 2, 2});
      const auto c_primary = r.pick(channels);
      const int c = c_primary == 3 ? d.add(role::channels, {3, 3, 3})
                                   : d.add(role::channels, {c_primary, r.pick(medium_channels),
                                                            r.pick(small_channels)});
      const sizes hw{r.pick(spatial), r.uniform(17, 40), r.uniform(8, 13)};
      const int h = d.add(role::spatial, hw);
      // Mostly square images, held in two symbols so H and W stay distinct dimensions.
      const int w = d.add(role::spatial, r.chance(0.7) ? hw
                                                       : sizes{r.pick(spatial), r.uniform(17, 40),
                                                               r.uniform(8, 13)});
      return {b, c, h, w};
    }
  }
  return {};
}

// Every tensor of the program (x, each parameter, each op's output) within the memory limit at
// the primary shapes.
bool within_memory(const program& p) {
  if (numel(p.dims, p.x, primary) > max_primary_numel) return false;
  for (const auto& st : p.steps) {
    if (numel(p.dims, st.out, primary) > max_primary_numel) return false;
    for (const auto& prm : st.params)
      if (numel(p.dims, prm.dims, primary) > max_primary_numel) return false;
  }
  return true;
}

// Scales x's first dimension by powers of two toward `target_ms`, up to a batch of 1024 (rows of
// a matrix: 65536); a chain still too fast then is left to the size filter.
void scale_batch(program& p, double target_ms) {
  const int b = p.x.front();
  const std::int64_t cap = p.dims.role_of(b) == role::rows ? 65536 : 1024;
  for (int i = 0; i < 12 && p.estimate_ms() < target_ms / std::sqrt(2.0); ++i) {
    const auto n = p.dims.size(b, primary);
    if (2 * n > cap) break;
    p.dims.set_size(b, primary, 2 * n);
    if (!within_memory(p)) {
      p.dims.set_size(b, primary, n);
      break;
    }
  }
  for (int i = 0; i < 12 && p.estimate_ms() > target_ms * std::sqrt(2.0); ++i) {
    const auto n = p.dims.size(b, primary);
    if (n < 2) break;
    p.dims.set_size(b, primary, n / 2);
  }
}

std::string hex(std::uint64_t v, int digits) {
  static const char* d = "0123456789abcdef";
  std::string s(static_cast<std::size_t>(digits), '0');
  for (int i = digits - 1; i >= 0; --i, v >>= 4) s[static_cast<std::size_t>(i)] = d[v & 15];
  return s;
}

std::string substitute(const std::string& expr, const std::string& cur) {
  std::string out;
  for (char c : expr) {
    if (c == '$')
      out += cur;
    else if (c == '%')
      out += "x";
    else
      out += c;
  }
  return out;
}

bool ident_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

}  // namespace

// ---- program -------------------------------------------------------------------------------

std::string program::signature() const {
  std::string s(to_string(layout));
  s += ':';
  for (std::size_t i = 0; i < steps.size(); ++i) s += (i ? ">" : "") + steps[i].signature;
  return s;
}

shape program::output_shape(std::size_t set) const {
  return eval(dims, steps.empty() ? x : steps.back().out, set);
}

double program::estimate_ms(std::size_t set, const cost_model& m) const {
  double ms = 0.0;
  const sym_shape* cur = &x;
  for (const auto& st : steps) {
    auto in = static_cast<double>(numel(dims, *cur, set));
    auto out = static_cast<double>(numel(dims, st.out, set));
    double params = 0.0;
    for (const auto& prm : st.params) params += static_cast<double>(numel(dims, prm.dims, set));
    const double bytes = 4.0 * (st.passes * in + out + params);
    double flops = st.flop_factor;
    for (int sym : st.flop_dims) flops *= static_cast<double>(dims.size(sym, set));
    ms += std::max(bytes / m.bytes_per_ms, flops / m.flops_per_ms) + m.launch_ms;
    cur = &st.out;
  }
  return ms;
}

program generate(std::uint64_t seed, const generate_options& opt) {
  rng r(seed);
  program p;
  p.seed = seed;
  const auto pick_layout = r.uniform(0, 9);
  p.layout = pick_layout < 4 ? layout::matrix : pick_layout < 7 ? layout::sequence : layout::image;
  p.x = make_input(p.dims, p.layout, r);

  const auto& ops = catalogue();
  // Draws an op by weight among those `allowed`.
  auto draw = [&](bool heavy_only) -> const op_def& {
    auto allowed = [&](const op_def& op) {
      return !heavy_only || op.cat == category::gemm || op.cat == category::conv;
    };
    int total = 0;
    for (const auto& op : ops)
      if (allowed(op)) total += op.weight;
    auto ticket = r.uniform(0, total - 1);
    for (const auto& op : ops) {
      if (!allowed(op)) continue;
      if (ticket < op.weight) return op;
      ticket -= op.weight;
    }
    return ops.front();
  };
  const int max_ops = std::clamp(opt.max_ops, 1, 5);
  const auto n_ops = r.uniform(1, max_ops);
  // GEMMs and convolutions apply only to some shapes and would be rare by weight alone; the
  // kernels worth learning are mostly built around one, so a chain often starts with one.
  const bool heavy_first = r.chance(0.45);

  chain_state s;
  s.dims = &p.dims;
  s.layout = p.layout;
  s.x = p.x;
  s.cur = p.x;
  for (int i = 1; i <= n_ops; ++i) {
    s.index = i;
    std::optional<step> made;
    for (int attempt = 0; attempt < 64 && !made; ++attempt)
      made = draw(i == 1 && heavy_first && attempt < 8).make(s, r);
    if (!made) break;  // nothing applies to this value: the chain ends here
    for (const auto& prm : made->params)
      if (prm.operand) ++s.data_inputs;
    s.prev_op = made->op;
    s.cur = made->out;
    const bool terminal = made->terminal;
    p.steps.push_back(std::move(*made));
    if (terminal) break;
  }

  // A target time log-uniform inside the window (a margin from its edges, as the estimate is
  // rough), then the batch scaled toward it.
  const double lo = std::log(opt.min_ms * 1.5), hi = std::log(opt.max_ms / 1.5);
  scale_batch(p, std::exp(lo + (hi - lo) * r.unit()));
  return p;
}

task render(const program& p) {
  task t;
  t.inputs.push_back({"x", eval(p.dims, p.x, primary), dtype::float32,
                      {distribution::normal, 0.0, 1.0, 0.0, 1.0, 0.0}});
  std::vector<sym_shape> input_dims{p.x};
  std::string args = "x", body, phrases;
  std::vector<std::string> exprs;  // each step's expression, of x (the first) or y
  bool sums = false;
  for (std::size_t i = 0; i < p.steps.size(); ++i) {
    const auto& st = p.steps[i];
    for (const auto& prm : st.params) {
      t.inputs.push_back({prm.name, eval(p.dims, prm.dims, primary), dtype::float32, prm.init});
      input_dims.push_back(prm.dims);
      args += ", " + prm.name;
    }
    exprs.push_back(substitute(st.expr, i == 0 ? "x" : "y"));
    phrases += (i ? ", then " : "") + st.phrase;
    sums = sums || st.tol == tol_hint::sums;
  }
  // Two ways of writing the same chain, as people write references: every step assigned to y and
  // y returned, or the last step returned directly (`return torch.tanh(x)` for one op). Picked by
  // the chain's text, so a seed gives the same tasks; a policy trained on synthesized tasks then
  // meets both forms.
  std::string joined;
  for (const auto& e : exprs) joined += e + "\n";
  const bool return_last = (fnv1a64(joined) & 1) != 0;
  for (std::size_t i = 0; i + (return_last ? 1 : 0) < exprs.size(); ++i) body += "    y = " + exprs[i] + "\n";
  body += "    return " + (return_last ? exprs.back() : std::string("y")) + "\n";
  t.reference = "def forward(" + args + "):\n" + body;

  const auto& last = p.steps.back();
  t.outputs.push_back({"out", p.output_shape(primary), last.out_type});
  t.tolerance = default_tolerance(t.outputs);
  if (last.tol == tol_hint::probabilities)
    t.tolerance.atol = 1e-6;
  else if (sums)
    t.tolerance.atol = std::max(t.tolerance.atol, 1e-3);

  for (std::size_t set : {medium, small}) {
    variant v;
    for (std::size_t i = 0; i < t.inputs.size(); ++i)
      v.shapes[t.inputs[i].name] = eval(p.dims, input_dims[i], set);
    t.variants.push_back(std::move(v));
  }

  const auto sig = p.signature();
  std::string key = sig;
  for (const auto& in : t.inputs) key += "|" + to_string(in.shape);
  t.id = "synth/" + hex(fnv1a64(key), 12);
  t.category = p.steps.size() == 1 ? last.cat : category::fused;
  t.description = "Synthesized chain of " + std::to_string(p.steps.size()) +
                  (p.steps.size() == 1 ? " op" : " ops") + " on x " + to_string(t.inputs[0].shape) +
                  ": " + phrases + ".";
  t.provenance = "synth:" + std::to_string(p.seed) + ":" + sig;
  return t;
}

// ---- contamination -------------------------------------------------------------------------

std::optional<std::string> provenance_signature(const task& t) {
  const std::string prefix = "synth:";
  if (t.provenance.rfind(prefix, 0) != 0) return std::nullopt;
  const auto colon = t.provenance.find(':', prefix.size());
  if (colon == std::string::npos) return std::nullopt;
  return t.provenance.substr(colon + 1);
}

std::string normalized_reference(const std::string& source) {
  // Drop comments.
  std::string src;
  for (std::size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '#') {
      while (i < source.size() && source[i] != '\n') ++i;
      if (i == source.size()) break;
    }
    src += source[i];
  }
  std::map<std::string, std::string> rename;
  // forward's arguments, in order (annotations such as `x: Tensor` dropped).
  if (auto pos = src.find("def forward("); pos != std::string::npos) {
    pos += 12;
    const auto end = src.find(')', pos);
    int n = 0;
    std::string arg;
    auto flush = [&] {
      std::string name;
      for (char c : arg) {
        if (c == ':') break;
        if (!std::isspace(static_cast<unsigned char>(c))) name += c;
      }
      if (!name.empty() && !rename.count(name)) rename[name] = "a" + std::to_string(n++);
      arg.clear();
    };
    for (auto i = pos; i < end && end != std::string::npos; ++i) {
      if (src[i] == ',')
        flush();
      else
        arg += src[i];
    }
    flush();
  }
  // Assigned variables, in order of first assignment.
  int v = 0;
  std::size_t line_start = 0;
  while (line_start < src.size()) {
    auto i = line_start;
    while (i < src.size() && (src[i] == ' ' || src[i] == '\t')) ++i;
    const auto name_start = i;
    while (i < src.size() && ident_char(src[i])) ++i;
    const std::string name = src.substr(name_start, i - name_start);
    while (i < src.size() && src[i] == ' ') ++i;
    if (!name.empty() && ident_start(name[0]) && i + 1 < src.size() && src[i] == '=' &&
        src[i + 1] != '=' && !rename.count(name))
      rename[name] = "v" + std::to_string(v++);
    const auto nl = src.find('\n', line_start);
    line_start = nl == std::string::npos ? src.size() : nl + 1;
  }
  std::string out;
  for (std::size_t i = 0; i < src.size();) {
    if (ident_start(src[i]) && (i == 0 || (!ident_char(src[i - 1]) && src[i - 1] != '.'))) {
      auto j = i;
      while (j < src.size() && ident_char(src[j])) ++j;
      const auto word = src.substr(i, j - i);
      auto it = rename.find(word);
      out += it == rename.end() ? word : it->second;
      // Keep a separator between words ("return y"), nothing else of the whitespace.
      if (j < src.size() && src[j] == ' ' && j + 1 < src.size() && ident_char(src[j + 1]))
        out += ' ';
      i = j;
    } else {
      if (!std::isspace(static_cast<unsigned char>(src[i]))) out += src[i];
      ++i;
    }
  }
  return out;
}

std::string op_skeleton(const task& t) {
  static const std::map<std::string, std::string> arithmetic{
      {"add", "add"}, {"sub", "sub"}, {"mul", "mul"}, {"div", "div"}, {"true_divide", "div"}};
  std::vector<std::string> ops;
  std::string src;
  for (std::size_t i = 0; i < t.reference.size(); ++i) {  // without comments
    if (t.reference[i] == '#')
      while (i < t.reference.size() && t.reference[i] != '\n') ++i;
    if (i < t.reference.size()) src += t.reference[i];
  }
  // The last character before `i` that is not a space.
  auto before = [&](std::size_t i) -> char {
    while (i > 0 && std::isspace(static_cast<unsigned char>(src[i - 1]))) --i;
    return i == 0 ? '\0' : src[i - 1];
  };
  for (std::size_t i = 0; i < src.size();) {
    const char c = src[i];
    if (ident_start(c)) {
      auto j = i;
      while (j < src.size() && ident_char(src[j])) ++j;
      if (src.compare(i, j - i, "torch") == 0 && j < src.size() && src[j] == '.' &&
          (i == 0 || src[i - 1] != '.')) {
        auto k = j + 1;
        while (k < src.size() && ident_char(src[k])) ++k;
        auto name = src.substr(j + 1, k - j - 1);
        auto it = arithmetic.find(name);
        if (!name.empty()) ops.push_back(it == arithmetic.end() ? name : it->second);
        j = k;
      }
      i = j;
      continue;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) {  // a number, exponent included (1e-5)
      while (i < src.size() && (std::isalnum(static_cast<unsigned char>(src[i])) ||
                                src[i] == '.' ||
                                ((src[i] == '-' || src[i] == '+') &&
                                 (src[i - 1] == 'e' || src[i - 1] == 'E'))))
        ++i;
      continue;
    }
    if (c == '*' && i + 1 < src.size() && src[i + 1] == '*') {
      ops.emplace_back("pow");
      i += 2;
      continue;
    }
    const char prev = before(i);
    // A binary operator follows a value (a name, a number, a closing bracket); a sign does not.
    const bool binary = ident_char(prev) || prev == ')' || prev == ']' || prev == '.';
    if (binary && (c == '+' || c == '-' || c == '*' || c == '/' || c == '@') &&
        !(i + 1 < src.size() && src[i + 1] == '=')) {
      ops.emplace_back(c == '+'   ? "add"
                       : c == '-' ? "sub"
                       : c == '*' ? "mul"
                       : c == '/' ? "div"
                                  : "matmul");
    }
    ++i;
  }
  std::sort(ops.begin(), ops.end());
  std::string s = std::to_string(t.inputs.size()) + ":";
  for (std::size_t i = 0; i < ops.size(); ++i) s += (i ? "," : "") + ops[i];
  return s;
}

void exclusion_list::add(const task& t) {
  ++count_;
  if (auto sig = provenance_signature(t)) signatures_.emplace(*sig, t.id);
  references_.emplace(normalized_reference(t.reference), t.id);
  skeletons_.emplace(op_skeleton(t), t.id);
}

status exclusion_list::add_file(const std::string& path) {
  if (path == "builtin") {
    auto all = builtin_tasks();
    if (!all) return all.err();
    for (const auto& t : *all) add(t);
    return {};
  }
  task_set_reader reader;
  reader.add_file(path);
  if (!reader.errors().empty()) {
    const auto n = reader.errors().size();
    return error{reader.errors().front().message +
                 (n > 1 ? " (and " + std::to_string(n - 1) + " more errors)" : std::string())};
  }
  for (const auto& t : reader.tasks()) add(t);
  return {};
}

std::optional<std::string> exclusion_list::match(const task& t,
                                                 const std::string& signature) const {
  if (auto it = signatures_.find(signature); it != signatures_.end())
    return "same signature as '" + it->second + "'";
  if (auto it = references_.find(normalized_reference(t.reference)); it != references_.end())
    return "same reference as '" + it->second + "'";
  const auto sk = op_skeleton(t);
  if (auto it = skeletons_.find(sk); it != skeletons_.end())
    return "same op skeleton (" + sk + ") as '" + it->second + "'";
  return std::nullopt;
}

// ---- static filter -------------------------------------------------------------------------

static_filter::static_filter(exclusion_list exclude, double min_ms, double max_ms, double slack)
    : exclude_(std::move(exclude)), min_ms_(min_ms / slack), max_ms_(max_ms * slack) {}

std::optional<reject_reason> static_filter::admit(const program& p, const task& t,
                                                  std::string* why) {
  const auto sig = p.signature();
  if (!seen_.insert(sig).second) {
    if (why) *why = "signature " + sig + " seen before";
    return reject_reason::duplicate;
  }
  if (auto m = exclude_.match(t, sig)) {
    if (why) *why = *m;
    return reject_reason::contaminated;
  }
  const double est = p.estimate_ms();
  if (est < min_ms_ || est > max_ms_) {
    if (why) {
      char buf[128];
      std::snprintf(buf, sizeof buf, "estimated %.3f ms, outside [%.3g, %.3g] ms", est, min_ms_,
                    max_ms_);
      *why = buf;
    }
    return reject_reason::size;
  }
  return std::nullopt;
}

}  // namespace kforge::tasks::synth
