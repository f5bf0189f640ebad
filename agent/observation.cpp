#include "agent/observation.hpp"

#include "config/options/agent_options.hpp"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

#include "agent/compiler_messages.hpp"
#include "common/text.hpp"
#include "sandbox/verdict_encoding.hpp"
#include "sandbox/verdict_json.hpp"
#include "tasks/prompt.hpp"

namespace kforge::pipeline::detail {
// Written by cmake/embed_text.cmake from agent/observation_template.txt.
extern const unsigned char observation_template_data[];
extern const std::size_t observation_template_size;
}  // namespace kforge::pipeline::detail

namespace kforge::agent {

namespace {

/// Each section with the placeholders it may use.
const std::vector<std::pair<std::string, std::vector<std::string>>>& sections() {
  static const std::vector<std::pair<std::string, std::vector<std::string>>> all = {
      {"header", {"turn", "status"}},
      {"compile_errors", {"error_count", "more", "errors"}},
      {"rejected", {"reason"}},
      {"wrong_answer", {"reason", "max_abs_error", "max_rel_error", "first_bad_index"}},
      {"hack_suspected", {"reason"}},
      {"runtime_error", {"reason", "output"}},
      {"timeout", {"reason"}},
      {"infra_error", {"reason"}},
      {"correct", {"candidate_ms", "baseline_ms", "speedup", "best"}},
      {"profile", {"kernel", "duration_us", "occupancy", "dram", "sm", "stalls"}},
      {"resources", {"resources"}},
      {"next_fix", {}},
      {"next_faster", {}},
  };
  return all;
}

constexpr std::size_t max_errors_listed = 5;
constexpr std::size_t max_output_chars = 800;
constexpr std::size_t max_source_line_chars = 160;

std::string num(double x, const char* format = "%.3g") {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, x);
  return buf;
}

/// Line `n` (1-based) of `source`, trimmed and cut short; "" when there is none.
std::string source_line(const std::string& source, int n) {
  if (n <= 0) return {};
  std::istringstream in(source);
  std::string line;
  for (int i = 0; i < n; ++i)
    if (!std::getline(in, line)) return {};
  line = std::string(trim(line));
  if (line.size() > max_source_line_chars) line = line.substr(0, max_source_line_chars) + " ...";
  return line;
}

std::string status_words(wire::VerdictStatus s) {
  switch (s) {
    case wire::VerdictStatus::ok: return "correct";
    case wire::VerdictStatus::compile_error: return "compile error";
    case wire::VerdictStatus::link_error: return "link error";
    case wire::VerdictStatus::rejected: return "rejected";
    case wire::VerdictStatus::runtime_error: return "runtime error";
    case wire::VerdictStatus::timeout: return "timeout";
    case wire::VerdictStatus::wrong_answer: return "wrong answer";
    case wire::VerdictStatus::hack_suspected: return "suspected hack";
    case wire::VerdictStatus::infra_error: return "not judged (a sandbox error)";
    case wire::VerdictStatus::compiled: return "built, not run (no GPU)";
  }
  return "unknown";
}

/// The build's errors: at most max_errors_listed, each with its line, what it means and the line
/// of source it points at.
std::map<std::string, std::string> compile_error_values(const wire::VerdictT& v) {
  const std::string source = v.candidate ? v.candidate->source : std::string();
  std::vector<const wire::DiagnosticT*> errors;
  for (const auto& d : v.diagnostics)
    if (d && d->severity == wire::Severity::error) errors.push_back(d.get());
  std::string list;
  for (std::size_t i = 0; i < errors.size() && i < max_errors_listed; ++i) {
    const auto& d = *errors[i];
    list += "- " + (d.line > 0 ? "line " + std::to_string(d.line) + ": " : std::string()) + d.message;
    if (const auto why = explain_diagnostic(d.code, d.message); !why.empty()) list += " (" + why + ")";
    if (const auto at = source_line(source, d.line); !at.empty()) list += "\n    " + at;
    list += "\n";
  }
  if (errors.empty()) list = "- " + v.reason + "\n";
  const std::size_t n = std::max<std::size_t>(errors.size(), 1);
  return {{"error_count", std::to_string(n)},
          {"more", n > max_errors_listed ? ", the first " + std::to_string(max_errors_listed) + " below" : ""},
          {"errors", std::string(trim(list))}};
}

/// Each kernel's registers, shared memory and spills, and with the GPU's facts how many threads
/// its registers and blocks its shared memory leave room for on one SM.
std::string resources_text(const wire::VerdictT& v, const gpu_facts& gpu) {
  std::string out;
  for (const auto& r : v.resources) {
    if (!r) continue;
    out += "- " + r->kernel + ": " + std::to_string(r->registers) + " registers per thread, " +
           std::to_string(r->shared_bytes) + " B static shared memory";
    if (r->spill_store_bytes > 0 || r->spill_load_bytes > 0)
      out += ", spills " + std::to_string(r->spill_store_bytes) + " B stored / " +
             std::to_string(r->spill_load_bytes) + " B loaded to local memory (slow)";
    if (gpu.registers_per_sm > 0 && r->registers > 0)
      out += "; its registers leave room for " +
             std::to_string(std::min(2048, gpu.registers_per_sm / r->registers / 32 * 32)) +
             " resident threads per SM";
    if (gpu.shared_per_sm > 0 && r->shared_bytes > 0)
      out += ", its shared memory for " + std::to_string(gpu.shared_per_sm / r->shared_bytes) +
             " resident blocks per SM";
    out += "\n";
  }
  return std::string(trim(out));
}

std::map<std::string, std::string> correct_values(const wire::VerdictT& v, const turn_context& ctx) {
  const double cand = v.candidate_timing ? v.candidate_timing->median_ms : 0;
  const double base = v.baseline_timing ? v.baseline_timing->median_ms : 0;
  const double speedup = sandbox::speedup_of(v);
  std::string best = ctx.best_speedup <= 0      ? "the episode's first correct kernel"
                     : speedup > ctx.best_speedup ? "faster than the episode's best so far, " +
                                                        num(ctx.best_speedup, "%.2f") + "x"
                                                  : "the episode's best so far is " +
                                                        num(ctx.best_speedup, "%.2f") + "x";
  return {{"candidate_ms", num(cand, "%.4g")}, {"baseline_ms", num(base, "%.4g")},
          {"speedup", num(speedup, "%.2f")}, {"best", best}};
}

std::map<std::string, std::string> profile_values(const kernel_profile& p) {
  std::string stalls;
  for (const auto& [name, pct] : p.stalls)
    stalls += (stalls.empty() ? "" : ", ") + name + " (" + num(pct, "%.0f") + " %)";
  return {{"kernel", p.kernel},
          {"duration_us", num(p.duration_us, "%.4g")},
          {"occupancy", num(p.achieved_occupancy_pct, "%.0f")},
          {"dram", num(p.dram_throughput_pct, "%.0f")},
          {"sm", num(p.sm_throughput_pct, "%.0f")},
          {"stalls", stalls.empty() ? "nothing in particular" : stalls}};
}

std::string tail_of(const std::string& s, std::size_t n) {
  return s.size() <= n ? s : "... " + s.substr(s.size() - n);
}

}  // namespace

const std::vector<std::string>& feedback_kinds::names() { return agent_feedback_kinds(); }

result<feedback_kinds> feedback_kinds::parse(const std::vector<std::string>& kinds) {
  feedback_kinds k;
  k.compile = k.resources = k.correctness = k.runtime = k.timing = k.profile = false;
  bool* flags[] = {&k.compile, &k.resources, &k.correctness, &k.runtime, &k.timing, &k.profile};
  for (const auto& name : kinds) {
    const auto& all = names();
    const auto it = std::find(all.begin(), all.end(), name);
    if (it == all.end()) {
      std::string known;
      for (const auto& n : all) known += (known.empty() ? "" : ", ") + n;
      return error{"unknown feedback kind \"" + name + "\" (known: " + known + ")"};
    }
    *flags[it - all.begin()] = true;
  }
  return k;
}

const std::vector<std::string>& observation_template::section_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const auto& [name, placeholders] : sections()) n.push_back(name);
    return n;
  }();
  return names;
}

result<observation_template> observation_template::from_text(const std::string& text,
                                                             const std::string& origin) {
  const auto& names = section_names();
  std::vector<std::string> found(names.size());
  std::vector<int> start(names.size(), 0);
  int current = -1, line_no = 0;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    if (line.size() > 4 && line.rfind("[[", 0) == 0 && line.compare(line.size() - 2, 2, "]]") == 0) {
      const auto name = line.substr(2, line.size() - 4);
      const auto it = std::find(names.begin(), names.end(), name);
      if (it == names.end()) return error{origin + ":" + std::to_string(line_no) + ": unknown section [[" + name + "]]"};
      current = static_cast<int>(it - names.begin());
      if (start[current] != 0) return error{origin + ":" + std::to_string(line_no) + ": section [[" + name + "]] again"};
      start[current] = line_no;
      continue;
    }
    if (current < 0) {
      if (!trim(line).empty() && line[0] != '#')
        return error{origin + ":" + std::to_string(line_no) + ": text before the first [[section]]"};
      continue;
    }
    found[current] += line + "\n";
  }
  std::vector<std::string> missing;
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (start[i] == 0) {
      missing.push_back("[[" + names[i] + "]]");
      continue;
    }
    found[i] = std::string(trim(found[i]));
    std::map<std::string, std::string> probe;
    for (const auto& p : sections()[i].second) probe[p] = "";
    if (auto r = tasks::render_template(found[i], probe, origin + ": section [[" + names[i] + "]] at line " +
                                                            std::to_string(start[i]));
        !r)
      return r.err();
  }
  if (!missing.empty()) {
    std::string list;
    for (const auto& m : missing) list += (list.empty() ? "" : ", ") + m;
    return error{origin + ": missing section(s) " + list};
  }
  return observation_template(std::move(found));
}

observation_template observation_template::embedded() {
  static const observation_template t = [] {
    const std::string text(reinterpret_cast<const char*>(pipeline::detail::observation_template_data),
                           pipeline::detail::observation_template_size);
    auto checked = from_text(text, "agent/observation_template.txt");
    // The embedded file is checked by the tests; a broken one is a build defect.
    if (!checked) throw std::logic_error(checked.message());
    return *checked;
  }();
  return t;
}

result<observation_template> observation_template::load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return error{"observation template " + path + ": cannot read it"};
  std::stringstream ss;
  ss << in.rdbuf();
  return from_text(ss.str(), "observation template " + path);
}

std::string observation_template::render(const wire::VerdictT& v, const turn_context& ctx,
                                         const feedback_kinds& kinds) const {
  // Rendered sections by their place in section_names(): the template's order, not the order of
  // the calls below.
  std::map<std::size_t, std::string> parts;
  auto add = [&](const std::string& section, const std::map<std::string, std::string>& values) {
    const auto& names = section_names();
    const auto i = static_cast<std::size_t>(std::find(names.begin(), names.end(), section) - names.begin());
    auto r = tasks::render_template(sections_.at(i), values, "observation section " + section);
    parts[i] = r ? *r : r.message();  // checked at load: only a missing value lands here
  };
  const std::map<std::string, std::string> reason = {{"reason", v.reason}};
  add("header", {{"turn", std::to_string(ctx.turn)}, {"status", status_words(v.status)}});
  using S = wire::VerdictStatus;
  switch (v.status) {
    case S::compile_error:
    case S::link_error:
      if (kinds.compile) add("compile_errors", compile_error_values(v));
      break;
    case S::rejected:
      if (kinds.compile) add("rejected", reason);
      break;
    case S::wrong_answer:
      if (kinds.correctness)
        add("wrong_answer", {{"reason", v.reason},
                             {"max_abs_error", num(v.max_abs_error)},
                             {"max_rel_error", num(v.max_rel_error)},
                             {"first_bad_index", std::to_string(v.first_bad_index)}});
      break;
    case S::hack_suspected:
      if (kinds.correctness) add("hack_suspected", reason);
      break;
    case S::runtime_error:
      if (kinds.runtime)
        add("runtime_error", {{"reason", v.reason},
                              {"output", v.output.empty() ? "" : "\nWhat it printed:\n" + tail_of(v.output, max_output_chars)}});
      break;
    case S::timeout:
      if (kinds.runtime) add("timeout", reason);
      break;
    case S::infra_error:
      add("infra_error", reason);
      break;
    case S::ok:
      if (kinds.timing) add("correct", correct_values(v, ctx));
      if (kinds.profile) {
        // The turn's own profile where the caller gives one, else the one the sandbox sent.
        if (const auto p = ctx.profile ? ctx.profile : sandbox::profile_of(v)) add("profile", profile_values(*p));
      }
      break;
    case S::compiled:
      break;
  }
  const bool built = v.status != S::compile_error && v.status != S::link_error && v.status != S::rejected;
  if (kinds.resources && built && !v.resources.empty())
    add("resources", {{"resources", resources_text(v, ctx.gpu)}});
  add(v.status == S::ok ? "next_faster" : "next_fix", {});
  std::string out;
  for (const auto& [i, p] : parts)
    if (!p.empty()) out += (out.empty() ? "" : "\n\n") + p;
  return out + "\n";
}

}  // namespace kforge::agent
