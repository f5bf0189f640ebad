#include "tasks/prompt.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>

#include "common/hash.hpp"
#include "common/text.hpp"

// Written by cmake/embed_text.cmake (tasks/CMakeLists.txt reuses it, hence the namespace).
namespace kforge::pipeline::detail {
extern const char tasks_prompt_template_data[];
extern const std::size_t tasks_prompt_template_size;
extern const char tasks_kernel_abi_data[];
extern const std::size_t tasks_kernel_abi_size;
}  // namespace kforge::pipeline::detail

namespace kforge::tasks {

namespace {

constexpr const char* unknown = "unknown";

std::string format_number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

std::string format_fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  std::string s = buf;
  if (s.find('.') != std::string::npos) {
    while (s.back() == '0') s.pop_back();
    if (s.back() == '.') s.pop_back();
  }
  return s;
}

/// "48 KiB (49152 bytes)": the exact count matters for shared memory, the unit for reading.
std::string format_bytes(std::int64_t b, bool exact) {
  if (b <= 0) return unknown;
  constexpr double kib = 1024.0, mib = kib * 1024, gib = mib * 1024;
  const auto v = static_cast<double>(b);
  std::string s;
  if (v >= gib) s = format_fixed(v / gib, 1) + " GiB";
  else if (v >= mib) s = format_fixed(v / mib, 1) + " MiB";
  else if (v >= kib) s = format_fixed(v / kib, 1) + " KiB";
  else return std::to_string(b) + " bytes";
  if (exact) s += " (" + std::to_string(b) + " bytes)";
  return s;
}

std::string or_unknown(std::int64_t v) { return v > 0 ? std::to_string(v) : unknown; }

std::string_view kf_name(dtype t) {
  switch (t) {
    case dtype::float32: return "KF_FLOAT32";
    case dtype::float16: return "KF_FLOAT16";
    case dtype::bfloat16: return "KF_BFLOAT16";
    case dtype::int32: return "KF_INT32";
    case dtype::int64: return "KF_INT64";
    case dtype::boolean: return "KF_BOOL";
  }
  return "KF_FLOAT32";
}

std::string describe_init(const init_spec& i) {
  switch (i.dist) {
    case distribution::normal:
      return "normal(mean " + format_number(i.mean) + ", std " + format_number(i.std) + ")";
    case distribution::uniform:
      return "uniform in [" + format_number(i.low) + ", " + format_number(i.high) + ")";
    case distribution::randint:
      return "random integers in [" + format_number(i.low) + ", " + format_number(i.high) + ")";
    case distribution::constant:
      return "the constant " + format_number(i.value);
  }
  return unknown;
}

std::string tensor_line(std::size_t index, const std::string& name, dtype type, const shape& s) {
  return "- [" + std::to_string(index) + "] `" + name + "`: " + std::string(to_string(type)) +
         " (" + std::string(kf_name(type)) + "), shape " + to_string(s) + " (" +
         std::to_string(numel(s)) + " elements)";
}

std::string join_names(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

bool ident_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

/// A placeholder at `text[i]` ("{{ name }}"): its name and the index just past it, or empty.
std::string_view placeholder_at(std::string_view text, std::size_t i, std::size_t& end) {
  if (text.compare(i, 2, "{{") != 0) return {};
  std::size_t j = i + 2;
  while (j < text.size() && text[j] == ' ') ++j;
  if (j >= text.size() || !ident_start(text[j])) return {};
  const std::size_t name_begin = j;
  while (j < text.size() && ident_char(text[j])) ++j;
  const std::size_t name_end = j;
  while (j < text.size() && text[j] == ' ') ++j;
  if (text.compare(j, 2, "}}") != 0) return {};
  end = j + 2;
  return text.substr(name_begin, name_end - name_begin);
}

/// Values for every known placeholder, used to check a template before any task exists.
std::map<std::string, std::string> placeholder_probe() {
  std::map<std::string, std::string> v;
  for (const auto& n : prompt_placeholders()) v[n] = "";
  return v;
}

}  // namespace

std::string_view default_prompt_template() {
  return {pipeline::detail::tasks_prompt_template_data,
          pipeline::detail::tasks_prompt_template_size};
}

std::string_view kernel_abi_header() {
  return {pipeline::detail::tasks_kernel_abi_data, pipeline::detail::tasks_kernel_abi_size};
}

const std::vector<std::string>& prompt_placeholders() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n = {
        // The task.
        "task_id", "category", "description", "reference", "inputs", "outputs", "input_names",
        "output_names", "num_inputs", "num_outputs", "variants", "tolerance", "atol", "rtol",
        "libraries",
        // The ABI.
        "kernel_abi",
        // The GPU.
        "gpu_name", "compute_capability", "arch", "sm_count", "shared_per_block",
        "shared_per_block_optin", "shared_per_sm", "registers_per_sm", "l2_size", "memory_size",
        "memory_bandwidth"};
    std::sort(n.begin(), n.end());
    return n;
  }();
  return names;
}

result<std::string> render_template(std::string_view text,
                                    const std::map<std::string, std::string>& values,
                                    std::string_view origin) {
  std::string out;
  out.reserve(text.size() * 2);
  std::vector<std::string> missing;  // "{{foo}} (line 3)"
  std::size_t line = 1;
  for (std::size_t i = 0; i < text.size();) {
    std::size_t end = 0;
    const auto name = placeholder_at(text, i, end);
    if (name.empty()) {
      if (text[i] == '\n') ++line;
      out += text[i++];
      continue;
    }
    const auto it = values.find(std::string(name));
    if (it == values.end()) missing.push_back("{{" + std::string(name) + "}} (line " +
                                              std::to_string(line) + ")");
    else out += it->second;
    i = end;
  }
  if (!missing.empty()) {
    std::string known;
    for (const auto& [k, v] : values) known += (known.empty() ? "" : ", ") + k;
    return error{std::string(origin) + ": unknown placeholder" + (missing.size() > 1 ? "s " : " ") +
                 join_names(missing) + "; known: " + known};
  }
  return out;
}

std::map<std::string, std::string> prompt_values(const task& t, const hardware_context& hw) {
  std::map<std::string, std::string> v;
  v["task_id"] = t.id;
  v["category"] = std::string(to_string(t.category));
  v["description"] = std::string(trim(t.description));
  v["reference"] = std::string(trim(t.reference));

  std::vector<std::string> in_names, out_names;
  std::string inputs, outputs;
  for (std::size_t i = 0; i < t.inputs.size(); ++i) {
    const auto& in = t.inputs[i];
    inputs += (i ? "\n" : "") + tensor_line(i, in.name, in.type, in.shape) +
              (t.prepare.empty() ? ", filled with " + describe_init(in.init)
                                 : std::string(", computed by prepare (below)"));
    in_names.push_back(in.name);
  }
  // Derived inputs (symmetric, triangular, a mask): what they hold is part of the problem, and a
  // kernel may rely on it, so the prompt shows the draws and prepare's source.
  if (!t.prepare.empty()) {
    inputs += "\nprepare computes the inputs from these draws:";
    for (std::size_t i = 0; i < t.draws.size(); ++i) {
      const auto& d = t.draws[i];
      inputs += "\n" + tensor_line(i, d.name, d.type, d.shape) + ", filled with " +
                describe_init(d.init);
    }
    inputs += "\n" + std::string(trim(t.prepare));
  }
  for (std::size_t i = 0; i < t.outputs.size(); ++i) {
    const auto& o = t.outputs[i];
    outputs += (i ? "\n" : "") + tensor_line(i, o.name, o.type, o.shape);
    out_names.push_back(o.name);
  }
  v["inputs"] = inputs;
  v["outputs"] = outputs;
  v["input_names"] = join_names(in_names);
  v["output_names"] = join_names(out_names);
  v["num_inputs"] = std::to_string(t.inputs.size());
  v["num_outputs"] = std::to_string(t.outputs.size());

  std::string variants;
  for (std::size_t k = 0; k < t.variants.size(); ++k) {
    const auto shapes = input_shapes(t, k);
    std::string line = "- variant " + std::to_string(k + 1) + ":";
    for (std::size_t i = 0; i < t.inputs.size() && i < shapes.size(); ++i)
      line += std::string(i ? "," : "") + " " + t.inputs[i].name + " " + to_string(shapes[i]);
    variants += (k ? "\n" : "") + line;
  }
  v["variants"] = variants.empty() ? "- (none: only the primary shapes)" : variants;
  v["atol"] = format_number(t.tolerance.atol);
  v["rtol"] = format_number(t.tolerance.rtol);
  v["tolerance"] = "atol = " + v["atol"] + ", rtol = " + v["rtol"];
  v["libraries"] =
      t.allow_cublas
          ? "This task also allows cuBLAS (cublas_v2.h, cublasLt.h): bind it to the given stream."
          : "No CUDA library beyond the runtime (no cuBLAS, cuDNN, cuFFT, cuRAND, NVRTC, ...).";
  v["kernel_abi"] = std::string(trim(kernel_abi_header()));

  v["gpu_name"] = hw.name.empty() ? unknown : hw.name;
  const bool cc = hw.major > 0;
  v["compute_capability"] =
      cc ? std::to_string(hw.major) + "." + std::to_string(hw.minor) : unknown;
  // The target the sandbox compiles for (sm_90a on an H100, not sm_90: its wgmma needs the `a`).
  v["arch"] = hw.arch().empty() ? unknown : hw.arch();
  v["sm_count"] = or_unknown(hw.sm_count);
  v["shared_per_block"] = format_bytes(hw.shared_per_block, true);
  v["shared_per_block_optin"] = format_bytes(hw.shared_per_block_optin, true);
  v["shared_per_sm"] = format_bytes(hw.shared_per_sm, true);
  v["registers_per_sm"] = or_unknown(hw.registers_per_sm);
  v["l2_size"] = format_bytes(hw.l2_bytes, true);
  v["memory_size"] = format_bytes(hw.memory_bytes, false);
  v["memory_bandwidth"] =
      hw.memory_bandwidth_gbs > 0 ? format_fixed(hw.memory_bandwidth_gbs, 0) + " GB/s" : unknown;
  return v;
}

prompt_template prompt_template::embedded() {
  return prompt_template(std::string(default_prompt_template()),
                         "prompt template <embedded tasks/prompt_template.txt>");
}

result<prompt_template> prompt_template::from_text(std::string text, std::string origin) {
  auto check = render_template(text, placeholder_probe(), origin);
  if (!check) return check.err();
  return prompt_template(std::move(text), std::move(origin));
}

result<prompt_template> prompt_template::load(const std::string& path) {
  const std::string origin = "prompt template " + path;
  std::ifstream in(path, std::ios::binary);
  if (!in) return error{origin + ": cannot open the file"};
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return error{origin + ": read failed"};
  if (ss.str().empty()) return error{origin + ": the file is empty"};
  return from_text(ss.str(), origin);
}

std::string prompt_template::render(const task& t, const hardware_context& hw) const {
  // Checked at construction against the same names prompt_values fills, so this cannot fail.
  auto r = render_template(text_, prompt_values(t, hw), origin_);
  return r.ok() ? std::move(r).value() : r.message();
}

std::string build_prompt(const task& t, const hardware_context& hw) {
  return prompt_template::embedded().render(t, hw);
}

std::uint64_t prompt_hash(std::string_view prompt) noexcept { return fnv1a64(prompt); }

namespace {

/// A line as a Markdown fence sees it: the backticks after its leading blanks, and the rest
/// trimmed (the info string of an opening fence).
struct fence_line {
  std::size_t ticks = 0;
  std::string info;
  /// Opens a fenced block: three or more backticks, and no backtick after them (that is inline
  /// code, not a fence).
  bool opens() const { return ticks >= 3 && info.find('`') == std::string::npos; }
};

fence_line parse_fence_line(std::string_view line) {
  std::size_t b = 0;
  while (b < line.size() && (line[b] == ' ' || line[b] == '\t')) ++b;
  fence_line f;
  while (b + f.ticks < line.size() && line[b + f.ticks] == '`') ++f.ticks;
  f.info = std::string(trim(line.substr(b + f.ticks)));
  return f;
}

/// A fenced block of a completion: its language (lower case), its body, whether it was closed.
struct fenced_block {
  std::string lang;
  std::string body;
  bool closed = false;
};

/// Every fenced block of `text`, in order (a fence opens where a line opens one outside a block).
std::vector<fenced_block> fenced_blocks(std::string_view text) {
  std::vector<fenced_block> blocks;
  bool open = false;
  std::size_t fence_len = 0;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    const std::size_t nl = text.find('\n', pos);
    const std::size_t end = nl == std::string_view::npos ? text.size() : nl;
    const std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;

    const fence_line f = parse_fence_line(line);
    if (open) {
      if (f.ticks >= fence_len && f.info.empty()) {
        blocks.back().closed = true;
        open = false;
      } else {
        blocks.back().body.append(line).push_back('\n');
      }
    } else if (f.opens()) {
      std::string lang = f.info.substr(0, f.info.find_first_of(" \t{"));
      std::transform(lang.begin(), lang.end(), lang.begin(),
                     [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
      blocks.push_back({lang, "", false});
      open = true;
      fence_len = f.ticks;
    }
    if (nl == std::string_view::npos) break;
  }
  return blocks;
}

/// The kernel among `blocks` (extract_kernel_source's rule), or what was found instead.
result<std::string> kernel_of(const std::vector<fenced_block>& blocks) {
  static const std::set<std::string> code_langs = {"", "cuda", "cu", "cpp", "c++", "cxx", "c"};
  bool unclosed_candidate = false;
  std::size_t other_with_entry = 0;
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) {
    if (it->body.find("kf_forward") == std::string::npos) continue;
    if (!code_langs.count(it->lang)) {
      ++other_with_entry;
      continue;
    }
    if (!it->closed) {
      unclosed_candidate = true;
      continue;
    }
    return it->body;
  }
  if (unclosed_candidate)
    return error{"completion: the fenced block defining kf_forward is never closed with ``` "
                 "(the completion may have been cut off)"};
  if (blocks.empty())
    return error{"completion: no fenced code block (```cuda ... ```) in the completion"};
  std::string msg = "completion: none of its " + std::to_string(blocks.size()) +
                    " fenced block(s) is a ```cuda, ```cpp or ``` block mentioning kf_forward";
  if (other_with_entry > 0)
    msg += " (" + std::to_string(other_with_entry) +
           " block(s) in another language mention it)";
  return error{msg};
}

}  // namespace

result<std::string> extract_kernel_source(std::string_view completion) {
  return kernel_of(fenced_blocks(completion));
}

std::optional<std::string> fenced_answer_problem(std::string_view text) {
  const auto blocks = fenced_blocks(text);
  if (blocks.empty()) return std::nullopt;  // bare code, or prose: for the compiler to judge
  auto kernel = kernel_of(blocks);
  if (kernel) return std::nullopt;
  return kernel.message();
}

}  // namespace kforge::tasks
