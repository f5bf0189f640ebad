#include "sandbox/static_check.hpp"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>

#include "common/subprocess.hpp"
#include "sandbox/diagnostics.hpp"
#include "sandbox/scratch_dir.hpp"
#include "sandbox/source_lexer.hpp"

namespace kforge::sandbox {

namespace {

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool is_asm_keyword(const std::string& t) { return t == "asm" || t == "__asm__" || t == "__asm"; }
bool is_attribute_keyword(const std::string& t) {
  return t == "__attribute__" || t == "__attribute";
}

// Assembly text that enters the kernel: x86 syscall/sysenter/int 0x80, AArch64 svc.
bool makes_system_call(const std::string& asm_text) {
  const std::string t = lower(asm_text);
  if (t.find("syscall") != std::string::npos || t.find("sysenter") != std::string::npos)
    return true;
  for (std::size_t p = t.find("int"); p != std::string::npos; p = t.find("int", p + 3)) {
    std::size_t q = p + 3;
    while (q < t.size() && std::isspace(static_cast<unsigned char>(t[q]))) ++q;
    if (q < t.size() && t[q] == '$') ++q;
    if (t.compare(q, 4, "0x80") == 0 || t.compare(q, 3, "128") == 0) return true;
  }
  for (std::size_t p = t.find("svc"); p != std::string::npos; p = t.find("svc", p + 3)) {
    const bool word_start = p == 0 || !std::isalnum(static_cast<unsigned char>(t[p - 1]));
    const bool word_end = p + 3 >= t.size() || !std::isalnum(static_cast<unsigned char>(t[p + 3]));
    if (word_start && word_end) return true;
  }
  return false;
}

constexpr std::string_view load_time_attributes[] = {
    "constructor",    "destructor",  "section",           "init_priority",
    "ifunc",          "alias",       "weakref",           "__constructor__",
    "__destructor__", "__section__", "__init_priority__", "__ifunc__",
    "__alias__",      "__weakref__"};

enum class pass { raw, preprocessed };

class checker {
 public:
  checker(const lexed_source& src, const check_options& opt, pass p, std::vector<finding>& out)
      : src_(src), t_(src.tokens), opt_(opt), pass_(p), out_(out) {}

  void directives();
  void stray_hashes();
  void identifiers();
  void attributes();
  void pragma_operators();
  void asm_text();
  void asm_context();
  bool defines_entry_point() const;

 private:
  const token* at(std::size_t k) const { return k < t_.size() ? &t_[k] : nullptr; }
  bool is(std::size_t k, std::string_view text) const {
    const token* x = at(k);
    return x && (x->kind == token_kind::punct || x->kind == token_kind::identifier) &&
           x->text == text;
  }
  bool is_ident(std::size_t k) const { return at(k) && at(k)->kind == token_kind::identifier; }
  // Index just past the `)` matching the `(` at k (k itself if it is not a `(`).
  std::size_t skip_parens(std::size_t k) const {
    if (!is(k, "(")) return k;
    int depth = 0;
    for (; k < t_.size(); ++k) {
      if (is(k, "(")) ++depth;
      if (is(k, ")") && --depth == 0) return k + 1;
    }
    return k;
  }
  void add(rule r, int line, std::string what) {
    if (out_.size() < opt_.max_findings)
      out_.push_back({r, line, std::move(what), pass_ == pass::preprocessed});
  }
  void directive(std::size_t first, std::size_t end);

  const lexed_source& src_;
  const std::vector<token>& t_;
  const check_options& opt_;
  pass pass_;
  std::vector<finding>& out_;
};

void checker::directives() {
  for (std::size_t d = 0; d < src_.directive_start.size(); ++d) {
    const std::size_t first = src_.directive_start[d];
    std::size_t end = first;
    while (end < t_.size() && t_[end].directive == static_cast<int>(d)) ++end;
    directive(first, end);
  }
}

void checker::directive(std::size_t first, std::size_t end) {
  const int line = t_[first].line;
  if (first + 1 >= end) return;  // the null directive
  const token& name = t_[first + 1];
  auto text_from = [&](std::size_t k) {
    std::string s;
    for (; k < end; ++k) s += (s.empty() ? "" : " ") + t_[k].text;
    return s;
  };
  if (name.kind == token_kind::number) {  // GNU line marker `# 12 "file"`
    add(rule::forbidden_directive, line, "line marker `# " + name.text + "`");
    return;
  }
  const std::string& n = name.text;
  if (n == "include") {
    const token* h = at(first + 2);
    if (h && first + 2 < end &&
        (h->kind == token_kind::header_name || h->kind == token_kind::string)) {
      if (!include_allowed(h->text, opt_.libraries)) {
        const bool angled = h->kind == token_kind::header_name;
        add(rule::forbidden_include, line,
            "#include " + std::string(angled ? "<" : "\"") + h->text + (angled ? ">" : "\""));
      }
    } else {
      add(rule::forbidden_include, line, "computed #include " + text_from(first + 2));
    }
  } else if (n == "pragma") {
    if (!pragma_allowed(text_from(first + 2)))
      add(rule::forbidden_directive, line, "#pragma " + text_from(first + 2));
  } else if (n == "define") {
    // An object-like macro whose body holds `#` or `##` can forge a line marker in the
    // preprocessed output; pasting must join names, and must not spell a forbidden one.
    const std::size_t macro = first + 2;
    if (macro >= end) return;
    const bool function_like =
        macro + 1 < end && is(macro + 1, "(") && !at(macro + 1)->space_before;
    std::size_t body = function_like ? skip_parens(macro + 1) : macro + 1;
    for (std::size_t k = body; k < end; ++k) {
      if (is(k, "#") && (!function_like || !is_ident(k + 1)))
        add(rule::obfuscation, line, "`#` in the body of macro `" + at(macro)->text + "`");
      if (!is(k, "##")) continue;
      std::size_t a = k - 1, b = k + 1;
      while (a > body && is(a - 1, "##")) a -= 2;
      std::string pasted;
      bool words = true;
      for (std::size_t j = a; j < end; j += 2) {
        words &= t_[j].kind == token_kind::identifier || t_[j].kind == token_kind::number;
        pasted += t_[j].text;
        b = j;
        if (!is(j + 1, "##")) break;
      }
      if (!words)
        add(rule::obfuscation, line,
            "token pasting of punctuation in macro `" + at(macro)->text + "`");
      else if (forbidden_identifier(pasted, opt_.libraries))
        add(rule::obfuscation, line, "token pasting builds `" + pasted + "`");
      k = b;
    }
    // `#define ALIAS name` of a name forbidden in call form (the preprocessed pass sees the use).
    if (!function_like && body + 1 == end && is_ident(body))
      if (auto f = forbidden_identifier(t_[body].text, opt_.libraries))
        add(f->why, line, "`" + t_[body].text + "` (aliased by macro `" + at(macro)->text + "`)");
  } else if (n == "undef" || n == "if" || n == "ifdef" || n == "ifndef" || n == "elif" ||
             n == "elifdef" || n == "elifndef" || n == "else" || n == "endif" || n == "error" ||
             n == "warning") {
    // Conditionals and diagnostics change nothing the preprocessed pass does not see.
  } else {
    add(rule::forbidden_directive, line, "#" + n);
  }
}

void checker::stray_hashes() {
  for (const auto& tk : t_)
    if (tk.directive < 0 && tk.kind == token_kind::punct && (tk.text == "#" || tk.text == "##"))
      add(rule::obfuscation, tk.line, "`" + tk.text + "` outside a directive");
}

void checker::identifiers() {
  for (std::size_t k = 0; k < t_.size(); ++k) {
    const token& tk = t_[k];
    if (tk.kind != token_kind::identifier) continue;
    if (tk.directive >= 0) {  // the text of #error / #warning is a message, not code
      const std::size_t first = src_.directive_start[tk.directive];
      if (is(first + 1, "error") || is(first + 1, "warning")) continue;
    }
    if (tk.non_ascii) {
      add(rule::obfuscation, tk.line, "identifier `" + tk.text + "` is not plain ASCII");
      continue;
    }
    if (k > 0 && (is(k - 1, ".") || is(k - 1, "->"))) continue;  // a member, not the libc call
    bool std_qualified = false, global_qualified = false;
    if (k > 0 && is(k - 1, "::")) {
      if (k >= 2 && is_ident(k - 2)) {
        if (t_[k - 2].text != "std") continue;  // the candidate's own namespace
        std_qualified = true;
      } else {
        global_qualified = true;
      }
    }
    if (std_qualified)
      if (auto r = forbidden_std_member(tk.text)) {
        add(*r, tk.line, "`std::" + tk.text + "`");
        continue;
      }
    const auto f = forbidden_identifier(tk.text, opt_.libraries);
    if (!f) continue;
    bool hit = f->mode == match_mode::anywhere;
    if (!hit) {
      const bool in_same_directive = at(k + 1) && at(k + 1)->directive == tk.directive;
      const bool unary_address =
          k > 0 && is(k - 1, "&") &&
          !(k >= 2 && (at(k - 2)->kind == token_kind::identifier ||
                       at(k - 2)->kind == token_kind::number || is(k - 2, ")") || is(k - 2, "]")));
      hit = (is(k + 1, "(") && in_same_directive) || std_qualified || global_qualified ||
            unary_address;
    }
    if (hit) add(f->why, tk.line, "`" + std::string(std_qualified ? "std::" : "") + tk.text + "`");
  }
}

void checker::attributes() {
  auto flag_inside = [&](std::size_t from, std::size_t to) {
    for (std::size_t j = from; j < to; ++j)
      if (is_ident(j) && std::find(std::begin(load_time_attributes), std::end(load_time_attributes),
                                   t_[j].text) != std::end(load_time_attributes))
        add(rule::load_time_code, t_[j].line, "attribute `" + t_[j].text + "`");
  };
  for (std::size_t k = 0; k < t_.size(); ++k) {
    if (is_ident(k) && is_attribute_keyword(t_[k].text)) {
      const std::size_t end = skip_parens(k + 1);
      flag_inside(k + 1, end);
      k = end - 1;
    } else if (is(k, "[") && is(k + 1, "[")) {  // [[gnu::constructor]]
      std::size_t j = k + 2;
      while (j + 1 < t_.size() && !(is(j, "]") && is(j + 1, "]"))) ++j;
      flag_inside(k + 2, j);
      k = j;
    }
  }
}

void checker::pragma_operators() {
  for (std::size_t k = 0; k < t_.size(); ++k) {
    if (!is_ident(k) || (t_[k].text != "_Pragma" && t_[k].text != "__pragma")) continue;
    const token* s = at(k + 2);
    if (!is(k + 1, "(") || !s || s->kind != token_kind::string || !pragma_allowed(s->text))
      add(rule::forbidden_directive, t_[k].line,
          t_[k].text + "(" + (s && s->kind == token_kind::string ? "\"" + s->text + "\"" : "...") +
              ")");
  }
}

void checker::asm_text() {
  for (std::size_t k = 0; k < t_.size(); ++k) {
    if (!is_ident(k) || !is_asm_keyword(t_[k].text)) continue;
    std::size_t j = k + 1;
    while (is_ident(j)) ++j;  // volatile, __volatile__, goto, inline
    const std::size_t end = skip_parens(j);
    std::string text;
    for (std::size_t m = j; m < end; ++m)
      if (t_[m].kind == token_kind::string) text += t_[m].text;
    if (makes_system_call(text))
      add(rule::host_asm, t_[k].line, "assembly that makes a system call");
  }
}

void checker::asm_context() {
  // Object-like macros the candidate defines (DEVICE -> __device__ __forceinline__), so the raw
  // pass understands qualifiers spelled through them; the preprocessed pass has none left.
  std::map<std::string, std::vector<std::string>> macros;
  for (std::size_t d = 0; d < src_.directive_start.size(); ++d) {
    const std::size_t first = src_.directive_start[d];
    if (!is(first + 1, "define") || !is_ident(first + 2)) continue;
    const std::size_t name = first + 2;
    if (is(name + 1, "(") && !t_[name + 1].space_before) continue;  // function-like
    auto& body = macros[t_[name].text];
    for (std::size_t k = name + 1; k < t_.size() && t_[k].directive == static_cast<int>(d); ++k)
      if (is_ident(k)) body.push_back(t_[k].text);
  }
  bool dev = false, host = false;
  std::function<void(const std::string&, int)> qualifier = [&](const std::string& w, int depth) {
    dev |= w == "__device__" || w == "__global__";
    host |= w == "__host__";
    if (auto it = macros.find(w); it != macros.end() && depth < 8)
      for (const auto& x : it->second) qualifier(x, depth + 1);
  };

  // One entry per open brace: whether code there is device-only.
  std::vector<bool> device;
  std::size_t head = 0;  // first token of the current declaration head
  for (std::size_t k = 0; k < t_.size(); ++k) {
    const token& tk = t_[k];
    if (tk.directive >= 0) continue;
    if (is(k, "{")) {
      dev = host = false;
      for (std::size_t j = head; j < k; ++j) {
        if (t_[j].directive >= 0 || !is_ident(j)) continue;
        const std::string& w = t_[j].text;
        qualifier(w, 0);
        if (is_attribute_keyword(w)) {
          const std::size_t end = skip_parens(j + 1);
          for (std::size_t m = j + 1; m < end; ++m) {
            if (!is_ident(m)) continue;
            const std::string& a = t_[m].text;
            dev |= a == "device" || a == "global" || a == "__device__" || a == "__global__";
            host |= a == "host" || a == "__host__";
          }
          j = end - 1;
        }
      }
      device.push_back((!device.empty() && device.back()) || (dev && !host));
      head = k + 1;
    } else if (is(k, "}")) {
      if (!device.empty()) device.pop_back();
      head = k + 1;
    } else if (is(k, ";")) {
      head = k + 1;
    } else if (tk.kind == token_kind::identifier && is_asm_keyword(tk.text) &&
               (device.empty() || !device.back())) {
      add(rule::host_asm, tk.line, "inline assembly in host code");
    }
  }
}

bool checker::defines_entry_point() const {
  for (std::size_t k = 0; k < t_.size(); ++k) {
    if (!is_ident(k) || t_[k].text != "kf_forward" || t_[k].directive >= 0 || !is(k + 1, "("))
      continue;
    std::size_t j = skip_parens(k + 1);
    for (int steps = 0; j < t_.size() && steps < 64; ++steps) {
      if (is(j, "{")) return true;
      if (is(j, ";") || is(j, ",") || is(j, "=") || is(j, ")")) break;
      j = is(j, "(") ? skip_parens(j) : j + 1;
    }
  }
  return false;
}

// The lines of `pp` that line markers attribute to `path`, with their line numbers.
void candidate_lines(std::string_view pp, std::string_view path, std::string& text,
                     std::vector<int>& lines) {
  bool inside = false;
  int next = 1;
  std::size_t pos = 0;
  while (pos < pp.size()) {
    std::size_t eol = pp.find('\n', pos);
    if (eol == std::string_view::npos) eol = pp.size();
    const std::string_view l = pp.substr(pos, eol - pos);
    pos = eol + 1;
    // A line marker: `# 12 "file" flags` or `#line 12 "file"`.
    std::size_t p = 0;
    if (!l.empty() && l[0] == '#') {
      p = 1;
      while (p < l.size() && l[p] == ' ') ++p;
      if (l.compare(p, 4, "line") == 0) p += 4;
      while (p < l.size() && l[p] == ' ') ++p;
      if (p < l.size() && std::isdigit(static_cast<unsigned char>(l[p]))) {
        int n = 0;
        while (p < l.size() && std::isdigit(static_cast<unsigned char>(l[p])))
          n = n * 10 + (l[p++] - '0');
        while (p < l.size() && l[p] == ' ') ++p;
        if (p < l.size() && l[p] == '"') {
          std::string file;
          for (++p; p < l.size() && l[p] != '"'; ++p) {
            if (l[p] == '\\' && p + 1 < l.size()) ++p;
            file += l[p];
          }
          inside = file == path;
        }
        next = n;
        continue;
      }
    }
    if (inside) {
      text.append(l);
      text += '\n';
      lines.push_back(next);
    }
    ++next;
  }
}

static_verdict verdict_from(std::vector<finding> found, bool entry_point) {
  static_verdict v;
  if (!found.empty()) {
    v.status = static_status::rejected;
    v.reason = "rejected by " + describe(found.front());
    if (found.size() > 1) v.reason += " (and " + std::to_string(found.size() - 1) + " more)";
  } else if (!entry_point) {
    found.push_back({rule::missing_entry_point, 0, "no definition of kf_forward", false});
    v.status = static_status::link_error;
    v.reason = describe(found.front());
  }
  v.findings = std::move(found);
  return v;
}

struct preprocessed {
  bool timed_out = false;
  bool failed = false;  ///< nvcc -E exited non-zero (the source does not preprocess)
  std::string log;      ///< nvcc -E's output when it failed
  std::string text;
  std::string path;  ///< the candidate's path as the line markers spell it
};

result<preprocessed> preprocess(std::string_view source, const check_options& opt) {
  const toolchain& tc = *opt.preprocess_with;
  auto dir = scratch_dir::create(opt.scratch_root, "kforge-check-");
  if (!dir) return dir.err();
  preprocessed pp;
  pp.path = (*dir)->file("candidate.cu");
  const std::string out = (*dir)->file("candidate.ii");
  {
    std::ofstream f(pp.path, std::ios::binary);
    f.write(source.data(), static_cast<std::streamsize>(source.size()));
    if (!f) return error{"cannot write " + pp.path};
  }
  process_limits lim;
  lim.time = opt.preprocess_time_limit;
  lim.address_space_bytes = opt.preprocess_memory_bytes;
  lim.file_size_bytes = 256ull << 20;
  lim.env = {{"TMPDIR", (*dir)->path()}};
  lim.working_dir = (*dir)->path();
  std::vector<std::string> cmd = {tc.nvcc, "-E", "-O3"};
  const auto target = arch_flags(opt.arch);  // the build's view of the macros
  cmd.insert(cmd.end(), target.begin(), target.end());
  // nvcc -E preprocesses for the device; undoing its device-only macros gives the host compiler's
  // view, which is where host calls live.
  cmd.insert(cmd.end(), {"-I" + tc.abi_include, "-U__CUDA_ARCH__", "-UCUDA_DOUBLE_MATH_FUNCTIONS", "-o", out, pp.path});
  auto run = run_limited(cmd, lim);
  if (!run) return run.err();
  if (run->exit_code == 127 && run->output.find("cannot run") != std::string::npos)
    return error{"cannot run " + tc.nvcc + ": " + run->output};
  pp.timed_out = run->timed_out;
  pp.failed = !run->timed_out && run->exit_code != 0;
  if (pp.failed) pp.log = run->output;
  if (pp.timed_out || pp.failed) return pp;
  std::ifstream in(out, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  pp.text = ss.str();
  return pp;
}

// The verdict on a source nvcc -E refused: compile_error (static_check.hpp says why), with its
// first error, pinned on the candidate's line where nvcc -E names one.
static_verdict does_not_preprocess(const preprocessed& pp) {
  const auto diags = parse_diagnostics(pp.log, pp.path);
  const auto first = std::find_if(diags.begin(), diags.end(),
                                  [](const diagnostic& d) { return d.level == severity::error; });
  finding f{rule::preprocess_error, 0, "nvcc -E failed: " + last_line(pp.log), false};
  if (first != diags.end()) f = {rule::preprocess_error, first->line, first->message, false};
  static_verdict v;
  v.status = static_status::compile_error;
  v.reason = "the source does not preprocess for the static check (nvcc -E): " +
             (first != diags.end() ? summarize(*first) : f.what);
  v.findings.push_back(std::move(f));
  return v;
}

}  // namespace

std::string describe(const finding& f) {
  std::string s = "rule " + std::string(rule_name(f.why));
  if (f.line > 0) s += " at line " + std::to_string(f.line);
  if (f.after_preprocessing) s += " (after macro expansion)";
  return s + ": " + f.what + " (" + std::string(rule_summary(f.why)) + ")";
}

static_verdict check_preprocessed(std::string_view pp, std::string_view candidate_path,
                                  const check_options& options) {
  std::string text;
  std::vector<int> lines;
  candidate_lines(pp, candidate_path, text, lines);
  const lexed_source lexed = lex_source(text, &lines);
  std::vector<finding> found;
  checker c(lexed, options, pass::preprocessed, found);
  c.directives();  // only #pragma lines remain after preprocessing (from _Pragma too)
  c.identifiers();
  c.attributes();
  c.pragma_operators();
  c.asm_text();
  c.asm_context();
  return verdict_from(std::move(found), c.defines_entry_point());
}

static_verdict check_source(std::string_view source, const check_options& options) {
  const lexed_source raw = lex_source(source);
  std::vector<finding> found;
  checker c(raw, options, pass::raw, found);
  c.directives();
  c.stray_hashes();
  c.identifiers();
  c.attributes();
  c.pragma_operators();
  c.asm_text();
  if (!found.empty() || !options.preprocess_with) {
    c.asm_context();  // conservative without macro expansion: see the header
    return verdict_from(std::move(found), c.defines_entry_point());
  }
  auto pp = preprocess(source, options);
  if (!pp) {
    static_verdict v;
    v.status = static_status::infra_error;
    v.reason = "static check: preprocessing failed to run: " + pp.message();
    return v;
  }
  if (pp->timed_out) {
    found.push_back({rule::obfuscation, 0,
                     "preprocessing took longer than " +
                         std::to_string(options.preprocess_time_limit.count()) + " ms",
                     true});
    return verdict_from(std::move(found), true);
  }
  if (pp->failed) return does_not_preprocess(*pp);
  return check_preprocessed(pp->text, pp->path, options);
}

}  // namespace kforge::sandbox
