#include "corpus/repair_drill.hpp"

#include <cstdio>
#include <filesystem>
#include <functional>
#include <regex>
#include <thread>

#include "agent/observation.hpp"
#include "common/parallel.hpp"
#include "sandbox/pool.hpp"

namespace kforge::corpus {

namespace {

/// Offsets of the lines of `s` (their first characters).
std::vector<std::size_t> line_starts(const std::string& s) {
  std::vector<std::size_t> out{0};
  for (std::size_t i = 0; i + 1 < s.size(); ++i)
    if (s[i] == '\n') out.push_back(i + 1);
  return out;
}

template <class T>
const T& pick(const std::vector<T>& xs, std::mt19937_64& rng) {
  return xs[std::uniform_int_distribution<std::size_t>(0, xs.size() - 1)(rng)];
}

/// An indented statement's final ';' (inside a function body), one drawn.
std::optional<std::string> drop_semicolon(const std::string& src, std::mt19937_64& rng) {
  std::vector<std::size_t> ends;
  for (const auto start : line_starts(src)) {
    const auto stop = src.find('\n', start);
    const auto line = src.substr(start, (stop == std::string::npos ? src.size() : stop) - start);
    const auto last = line.find_last_not_of(" \t\r");
    if (line.rfind("  ", 0) == 0 && last != std::string::npos && line[last] == ';' &&
        line.find("for (") == std::string::npos && line.find("//") == std::string::npos)
      ends.push_back(start + last);
  }
  if (ends.empty()) return std::nullopt;
  std::string out = src;
  out.erase(pick(ends, rng), 1);
  return out;
}

/// One use (after its declaration) of a local name declared with an initializer, misspelt.
std::optional<std::string> undeclared_name(const std::string& src, std::mt19937_64& rng) {
  static const std::regex decl(R"(\b(?:int|int64_t|unsigned|float|double|size_t|auto)\s*\*?\s+([A-Za-z_]\w*)\s*=)");
  std::vector<std::pair<std::size_t, std::string>> uses;  // (offset, name)
  for (auto it = std::sregex_iterator(src.begin(), src.end(), decl); it != std::sregex_iterator(); ++it) {
    const std::string name = (*it)[1];
    const std::regex word("\\b" + name + "\\b");
    const auto from = static_cast<std::size_t>(it->position(0) + it->length(0));
    for (auto u = std::sregex_iterator(src.begin() + static_cast<std::ptrdiff_t>(from), src.end(), word);
         u != std::sregex_iterator(); ++u)
      uses.emplace_back(from + static_cast<std::size_t>(u->position(0)), name);
  }
  if (uses.empty()) return std::nullopt;
  const auto& [at, name] = pick(uses, rng);
  const std::string misspelt = name + (name.back() == 's' ? "z" : "s");  // "n" -> "ns", "rows" -> "rowsz"
  if (std::regex_search(src, std::regex("\\b" + misspelt + "\\b"))) return std::nullopt;
  std::string out = src;
  out.replace(at, name.size(), misspelt);
  return out;
}

std::optional<std::string> replace_once(const std::string& src, const std::string& from, const std::string& to) {
  const auto at = src.find(from);
  if (at == std::string::npos) return std::nullopt;
  std::string out = src;
  out.replace(at, from.size(), to);
  return out;
}

/// One match of `re` in `src` (drawn) replaced by what `with` makes of it.
std::optional<std::string> replace_one_match(const std::string& src, const std::regex& re,
                                             const std::function<std::string(const std::smatch&)>& with,
                                             std::mt19937_64& rng) {
  std::vector<std::smatch> matches;
  for (auto it = std::sregex_iterator(src.begin(), src.end(), re); it != std::sregex_iterator(); ++it)
    matches.push_back(*it);
  if (matches.empty()) return std::nullopt;
  const auto& m = pick(matches, rng);
  std::string out = src;
  out.replace(static_cast<std::size_t>(m.position(0)), static_cast<std::size_t>(m.length(0)), with(m));
  return out;
}

/// A ceiling division of a launch's work, `(n + 255) / 256` or `(work + threads - 1) / threads`,
/// made a floor: the last partial block (or, for less work than one block, every block) is lost.
std::optional<std::string> grid_rounded_down(const std::string& src, std::mt19937_64& rng) {
  static const std::regex ceil_div(R"(\(([A-Za-z_][\w.]*) \+ (?:\d+|[A-Za-z_]\w* - 1)\) / ([A-Za-z_]\w*|\d+))");
  return replace_one_match(src, ceil_div, [](const std::smatch& m) { return m.format("$1 / $2"); }, rng);
}

/// A sum's accumulator started at 1 instead of 0.
std::optional<std::string> sum_starts_at_one(const std::string& src, std::mt19937_64& rng) {
  static const std::regex start(R"(\b((?:float|double) acc = )0\.0f?;)");
  return replace_one_match(src, start, [](const std::smatch& m) { return m[1].str() + "1.0f;"; }, rng);
}

/// A float literal inside the element function kf_op, changed (0 becomes 1, others doubled).
std::optional<std::string> op_constant(const std::string& src, std::mt19937_64& rng) {
  const auto begin = src.find("void kf_op(");
  const auto end = begin == std::string::npos ? std::string::npos : src.find("\n}\n", begin);
  if (end == std::string::npos) return std::nullopt;
  static const std::regex literal(R"(\b(\d+\.\d*)f\b)");
  const auto body = replace_one_match(src.substr(begin, end - begin), literal, [](const std::smatch& m) {
    const double v = std::stod(m[1].str());
    char changed[32];
    std::snprintf(changed, sizeof changed, "%.6g", v == 0.0 ? 1.0 : 2.0 * v);
    std::string text = changed;
    if (text.find_first_of(".e") == std::string::npos) text += ".0";
    return text + "f";
  }, rng);
  if (!body) return std::nullopt;
  return src.substr(0, begin) + *body + src.substr(end);
}

/// Several threads judge at once; nvcc is most of the time.
int judge_threads() { return static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 8u)); }

}  // namespace

const char* to_string(breakage b) {
  switch (b) {
    case breakage::drop_semicolon: return "drop_semicolon";
    case breakage::undeclared_name: return "undeclared_name";
    case breakage::entry_point_name: return "entry_point_name";
    case breakage::no_include: return "no_include";
    case breakage::grid_rounded_down: return "grid_rounded_down";
    case breakage::sum_starts_at_one: return "sum_starts_at_one";
    case breakage::op_constant: return "op_constant";
  }
  return "?";
}

bool shows_only_when_run(breakage b) {
  return b == breakage::grid_rounded_down || b == breakage::sum_starts_at_one || b == breakage::op_constant;
}

std::optional<std::string> break_source(const std::string& source, breakage kind, std::mt19937_64& rng) {
  switch (kind) {
    case breakage::drop_semicolon: return drop_semicolon(source, rng);
    case breakage::undeclared_name: return undeclared_name(source, rng);
    case breakage::entry_point_name: return replace_once(source, "int kf_forward(", "int kf_foward(");
    case breakage::no_include: return replace_once(source, "#include <kforge/kernel_abi.h>\n", "");
    case breakage::grid_rounded_down: return grid_rounded_down(source, rng);
    case breakage::sum_starts_at_one: return sum_starts_at_one(source, rng);
    case breakage::op_constant: return op_constant(source, rng);
  }
  return std::nullopt;
}

result<std::vector<repair_drill>> repair_drills(const std::vector<drill_source>& sources, int count,
                                                std::uint64_t seed, const std::string& cache_dir, int gpu,
                                                repair_drill_tally* tally) {
  if (count <= 0 || sources.empty()) return std::vector<repair_drill>{};
  // Drawn one after another (the same seed gives the same drills), judged in parallel.
  std::mt19937_64 rng(seed);
  std::vector<breakage> kinds;
  for (const auto b : {breakage::drop_semicolon, breakage::undeclared_name, breakage::entry_point_name,
                       breakage::no_include, breakage::grid_rounded_down, breakage::sum_starts_at_one,
                       breakage::op_constant})
    if (gpu >= 0 || !shows_only_when_run(b)) kinds.push_back(b);
  struct draw {
    const drill_source* from;
    breakage kind;
    std::string broken;
  };
  std::vector<draw> draws;
  for (int i = 0, tries = 0; static_cast<int>(draws.size()) < count && tries < 4 * count; ++tries, ++i) {
    const auto& s = pick(sources, rng);
    const breakage kind = kinds[static_cast<std::size_t>(i) % kinds.size()];
    if (auto broken = break_source(s.variant.source, kind, rng)) draws.push_back({&s, kind, std::move(*broken)});
  }
  sandbox::pool_options po;
  po.compile_only = gpu < 0;
  if (gpu >= 0) po.gpus = {gpu};
  po.eval.compile.cache_dir = cache_dir;
  po.work_dir = cache_dir;
  std::error_code ec;
  std::filesystem::create_directories(cache_dir, ec);
  auto pool = sandbox::sandbox_pool::create(po);
  if (!pool) return error{"repair drills: the sandbox: " + pool.err().message};
  std::vector<wire::VerdictT> verdicts(draws.size());
  parallel_for(draws.size(), judge_threads(), [&](std::size_t i) {
    verdicts[i] = (*pool)->evaluate(*draws[i].from->task, draws[i].broken, seed);
  });
  std::vector<repair_drill> out;
  agent::turn_context ctx;
  ctx.max_turns = 2;
  for (std::size_t i = 0; i < draws.size(); ++i) {
    auto& v = verdicts[i];
    const auto status = v.status;
    if (status == wire::VerdictStatus::compiled || status == wire::VerdictStatus::ok ||
        status == wire::VerdictStatus::infra_error) {
      if (tally) ++tally->unbroken;
      continue;
    }
    const auto& d = draws[i];
    v.candidate = std::make_unique<wire::CandidateT>();
    v.candidate->source = d.broken;
    kernel_variant broken = d.from->variant;
    broken.source = d.broken;
    out.push_back({d.from->task->id, d.from->variant.name, to_string(d.kind), d.from->prompt, completion_text(broken),
                   agent::observation_template::embedded().render(v, ctx, agent::feedback_kinds{}),
                   completion_text(d.from->variant)});
    if (tally) ++tally->written;
  }
  return out;
}

}  // namespace kforge::corpus
