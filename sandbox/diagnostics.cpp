#include "sandbox/diagnostics.hpp"

#include <cxxabi.h>

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <regex>

namespace kforge::sandbox {

namespace {

std::vector<std::string_view> split_lines(std::string_view s) {
  std::vector<std::string_view> out;
  std::size_t pos = 0;
  while (pos < s.size()) {
    std::size_t eol = s.find('\n', pos);
    if (eol == std::string_view::npos) eol = s.size();
    std::string_view l = s.substr(pos, eol - pos);
    if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
    out.push_back(l);
    pos = eol + 1;
  }
  return out;
}

std::string base_name(std::string_view path) {
  const auto slash = path.find_last_of('/');
  return std::string(slash == std::string_view::npos ? path : path.substr(slash + 1));
}

std::string trim(std::string_view s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string_view::npos) return {};
  const auto e = s.find_last_not_of(" \t");
  return std::string(s.substr(b, e - b + 1));
}

severity level_of(const std::string& word) {
  if (word.find("warning") != std::string::npos) return severity::warning;
  if (word == "note" || word == "remark") return severity::note;
  return severity::error;  // error, fatal error, catastrophic error, internal error
}

constexpr std::size_t max_message = 600;

// libstdc++'s std::regex recurses per character: a megabyte-long line (EDG echoes a candidate's
// source line) would overflow the stack. No line worth parsing is this long.
constexpr std::size_t max_parsed_line = 2000;

std::string for_regex(std::string_view line) {
  return std::string(line.substr(0, max_parsed_line));
}

// Digits matched by a regex, clamped instead of throwing on overflow.
long long number(const std::ssub_match& m) {
  const long long v = std::strtoll(m.str().c_str(), nullptr, 10);
  return std::clamp<long long>(v, 0, std::numeric_limits<int>::max());
}

void clip(std::string& s) {
  if (s.size() > max_message) s = s.substr(0, max_message - 3) + "...";
}

}  // namespace

std::vector<diagnostic> parse_diagnostics(std::string_view log, std::string_view source_name,
                                          std::size_t max) {
  // EDG (cudafe++/cicc):   file.cu(12): error: identifier "x" is undefined
  //                        file.cu(10): warning #940-D: missing return statement ...
  static const std::regex edg(
      R"(^(.+)\((\d+)\): (error|warning|remark|note|catastrophic error|internal error))"
      R"((?: #(\d+(?:-[A-Z])?))?: (.*)$)");
  // gcc:                   file.cu:2:10: fatal error: x.h: No such file or directory
  static const std::regex gcc(
      R"(^(.+?):(\d+):(?:(\d+):)? (fatal error|error|warning|note): (.*?)(?: \[(-W[^\]]+)\])?$)");
  // ptxas:                 ptxas /tmp/x.ptx, line 27; error   : Unknown modifier '.instr'
  static const std::regex ptxas_at(R"(^ptxas (.+), line (\d+); (error|warning)\s*: (.*)$)");
  static const std::regex tool(
      R"(^(ptxas|nvlink|nvcc|cicc|fatbinary) (fatal|error|warning)\s*: (.*)$)");
  // ld:                    x.cpp:(.text+0x13): undefined reference to `foo'
  static const std::regex undefined_ref(R"(.*(undefined reference to .*)$)");
  static const std::regex ld_error(R"(^(?:\S*/)?ld(?:\.\w+)?: (?!.*: in function)(.*)$)");
  // as:                    /tmp/ccX.s:12: Error: no such instruction: `bogus'
  static const std::regex as_error(R"(^(\S+\.s):(\d+): (Error|Warning): (.*)$)");

  const std::string want = base_name(source_name);
  const auto lines = split_lines(log);
  std::vector<diagnostic> out;
  auto place = [&](diagnostic& d, const std::string& file, int line) {
    if (base_name(file) == want) {
      d.line = line;
    } else {
      d.message = base_name(file) + "(" + std::to_string(line) + "): " + d.message;
    }
  };
  std::smatch m;
  for (std::size_t i = 0; i < lines.size() && out.size() < max; ++i) {
    const std::string l = for_regex(lines[i]);
    diagnostic d;
    if (std::regex_match(l, m, edg)) {
      d.level = level_of(m[3]);
      d.code = m[4];
      d.message = m[5];
      place(d, m[1], static_cast<int>(number(m[2])));
      // Continuation: detail lines, then the source line and a caret line, up to a blank line.
      std::vector<std::string_view> body;
      std::size_t j = i + 1;
      for (; j < lines.size() && !trim(lines[j]).empty(); ++j) {
        if (std::regex_match(for_regex(lines[j]), edg)) break;
        body.push_back(lines[j]);
      }
      i = j - 1;
      std::size_t details = body.size();
      if (!body.empty() && trim(body.back()) == "^") {
        if (d.line > 0) d.column = std::max<int>(1, static_cast<int>(body.back().find('^')) - 1);
        details = body.size() >= 2 ? body.size() - 2 : 0;
      }
      for (std::size_t k = 0; k < details; ++k) d.message += "; " + trim(body[k]);
    } else if (std::regex_match(l, m, gcc) && m[1].str().find(' ') == std::string::npos) {
      d.level = level_of(m[4]);
      d.code = m[6];
      d.message = m[5];
      place(d, m[1], static_cast<int>(number(m[2])));
      if (d.line > 0 && m[3].matched) d.column = static_cast<int>(number(m[3]));
    } else if (std::regex_match(l, m, ptxas_at)) {
      d.level = level_of(m[3]);
      d.code = "ptxas";
      d.message = "PTX line " + m[2].str() + ": " + m[4].str();
    } else if (std::regex_match(l, m, tool)) {
      d.level = m[2] == "warning" ? severity::warning : severity::error;
      d.code = m[1];
      d.message = m[3];
    } else if (std::regex_match(l, m, as_error)) {
      d.level = m[3] == "Warning" ? severity::warning : severity::error;
      d.code = "as";
      d.message = m[4];
    } else if (std::regex_match(l, m, undefined_ref)) {
      d.code = "ld";
      d.message = m[1];
    } else if (std::regex_match(l, m, ld_error)) {
      d.code = "ld";
      d.message = m[1];
      if (d.message.rfind("warning:", 0) == 0) d.level = severity::warning;
    } else {
      continue;  // gcc's excerpts, "N errors detected", "compilation terminated.", remarks
    }
    clip(d.message);
    out.push_back(std::move(d));
  }
  return out;
}

std::vector<resource_usage> parse_ptxas_usage(std::string_view log) {
  static const std::regex entry(R"(ptxas info\s*: Compiling entry function '([^']+)')");
  static const std::regex props(R"(ptxas info\s*: Function properties for (\S+))");
  static const std::regex frame(
      R"((\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads)");
  static const std::regex used(R"(ptxas info\s*: Used (\d+) registers)");
  static const std::regex smem(R"((\d+) bytes smem)");

  std::vector<resource_usage> all;
  std::vector<bool> is_entry;
  std::map<std::string, std::size_t> index;
  auto slot = [&](const std::string& name) {
    auto [it, fresh] = index.emplace(name, all.size());
    if (fresh) {
      all.push_back({name});
      is_entry.push_back(false);
    }
    return it->second;
  };
  std::size_t current = SIZE_MAX, props_of = SIZE_MAX;
  std::smatch m;
  for (const auto line : split_lines(log)) {
    const std::string l = for_regex(line);
    if (std::regex_search(l, m, entry)) {
      current = slot(m[1]);
      is_entry[current] = true;
    } else if (std::regex_search(l, m, props)) {
      props_of = slot(m[1]);
    } else if (std::regex_search(l, m, frame)) {
      if (props_of == SIZE_MAX) continue;
      all[props_of].stack_bytes = number(m[1]);
      all[props_of].spill_store_bytes = number(m[2]);
      all[props_of].spill_load_bytes = number(m[3]);
    } else if (std::regex_search(l, m, used)) {
      const std::size_t target = current != SIZE_MAX ? current : props_of;
      if (target == SIZE_MAX) continue;
      all[target].registers = static_cast<int>(number(m[1]));
      if (std::regex_search(l, m, smem)) all[target].shared_bytes = number(m[1]);
    }
  }
  std::vector<resource_usage> out;
  for (std::size_t k = 0; k < all.size(); ++k) {
    const auto& r = all[k];
    if (!is_entry[k] && r.stack_bytes == 0 && r.spill_store_bytes == 0 && r.spill_load_bytes == 0)
      continue;
    out.push_back(r);
    out.back().kernel = demangle(r.kernel);
  }
  return out;
}

std::string demangle(const std::string& symbol) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> d(
      abi::__cxa_demangle(symbol.c_str(), nullptr, nullptr, &status), std::free);
  return status == 0 && d ? std::string(d.get()) : symbol;
}

std::string last_line(std::string_view log) {
  while (!log.empty() && (log.back() == '\n' || log.back() == ' ')) log.remove_suffix(1);
  const auto nl = log.find_last_of('\n');
  return std::string(nl == std::string_view::npos ? log : log.substr(nl + 1));
}

std::string summarize(const diagnostic& d) {
  std::string s;
  if (d.line > 0) s = "line " + std::to_string(d.line) + ": ";
  if (d.code == "ptxas" || d.code == "ld" || d.code == "as" || d.code == "nvlink" ||
      d.code == "nvcc")
    s += d.code + ": ";
  return s + d.message;
}

}  // namespace kforge::sandbox
