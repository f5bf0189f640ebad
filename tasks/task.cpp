#include "tasks/task.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <set>
#include <sstream>

namespace kforge::tasks {
namespace {

constexpr std::array<std::string_view, 6> dtype_text{"float32", "float16", "bfloat16",
                                                     "int32",   "int64",   "bool"};
constexpr std::array<std::string_view, 7> category_text{
    "elementwise", "reduction", "normalization", "gemm", "conv", "fused", "other"};
constexpr std::array<std::string_view, 4> distribution_text{"normal", "uniform", "randint",
                                                            "constant"};

template <class Enum, std::size_t N>
std::optional<Enum> find_name(const std::array<std::string_view, N>& names, std::string_view s) {
  for (std::size_t i = 0; i < N; ++i)
    if (names[i] == s) return static_cast<Enum>(i);
  return std::nullopt;
}

template <std::size_t N>
std::string join(const std::array<std::string_view, N>& names) {
  std::string out;
  for (std::size_t i = 0; i < N; ++i) {
    if (i) out += i + 1 == N ? " or " : ", ";
    out += names[i];
  }
  return out;
}

error field_error(const std::string& field, const std::string& reason) {
  return error{field + ": " + reason};
}

// TorchScript parameter names: what `def forward(...)` can declare.
bool is_identifier(std::string_view s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

bool is_task_id_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.' ||
         c == '/';
}

status check_shape(const shape& s, const std::string& field) {
  for (std::size_t i = 0; i < s.size(); ++i)
    if (s[i] <= 0)
      return field_error(field + "[" + std::to_string(i) + "]",
                         "dimension " + std::to_string(s[i]) + " is not positive");
  if (s.size() > 8) return field_error(field, "more than 8 dimensions (the kernel ABI's limit)");
  return {};
}

bool is_whole(double v) { return std::isfinite(v) && std::floor(v) == v; }

status check_init(const input_spec& in, const std::string& field) {
  const auto& init = in.init;
  const std::string dist(to_string(init.dist));
  auto finite = [&](double v, const char* key) -> status {
    if (!std::isfinite(v)) return field_error(field + "." + key, "must be a finite number");
    return {};
  };
  switch (init.dist) {
    case distribution::normal:
      if (!is_floating(in.type))
        return field_error(field + ".dist", "normal needs a floating dtype, input is " +
                                                std::string(to_string(in.type)));
      if (auto s = finite(init.mean, "mean"); !s) return s;
      if (auto s = finite(init.std, "std"); !s) return s;
      if (!(init.std > 0)) return field_error(field + ".std", "must be positive");
      return {};
    case distribution::uniform:
      if (!is_floating(in.type))
        return field_error(field + ".dist", "uniform needs a floating dtype, input is " +
                                                std::string(to_string(in.type)) +
                                                " (use randint)");
      if (auto s = finite(init.low, "low"); !s) return s;
      if (auto s = finite(init.high, "high"); !s) return s;
      if (!(init.high > init.low)) return field_error(field + ".high", "must be greater than low");
      return {};
    case distribution::randint:
      if (!is_whole(init.low)) return field_error(field + ".low", "must be an integer for randint");
      if (!is_whole(init.high))
        return field_error(field + ".high", "must be an integer for randint");
      if (!(init.high > init.low)) return field_error(field + ".high", "must be greater than low");
      if (in.type == dtype::boolean && (init.low < 0 || init.high > 2))
        return field_error(field, "randint for bool must lie within [0, 2)");
      return {};
    case distribution::constant:
      if (auto s = finite(init.value, "value"); !s) return s;
      if (!is_floating(in.type) && !is_whole(init.value))
        return field_error(field + ".value", "must be an integer for dtype " +
                                                 std::string(to_string(in.type)));
      return {};
  }
  return field_error(field + ".dist", "unknown distribution");
}

}  // namespace

std::string_view to_string(dtype t) { return dtype_text.at(static_cast<std::size_t>(t)); }
std::string_view to_string(category c) { return category_text.at(static_cast<std::size_t>(c)); }
std::string_view to_string(distribution d) {
  return distribution_text.at(static_cast<std::size_t>(d));
}
std::optional<dtype> parse_dtype(std::string_view s) { return find_name<dtype>(dtype_text, s); }
std::optional<category> parse_category(std::string_view s) {
  return find_name<category>(category_text, s);
}
std::optional<distribution> parse_distribution(std::string_view s) {
  return find_name<distribution>(distribution_text, s);
}
std::string dtype_names() { return join(dtype_text); }
std::string category_names() { return join(category_text); }
std::string distribution_names() { return join(distribution_text); }

bool is_floating(dtype t) {
  return t == dtype::float32 || t == dtype::float16 || t == dtype::bfloat16;
}

std::size_t element_size(dtype t) {
  switch (t) {
    case dtype::float32: return 4;
    case dtype::float16: return 2;
    case dtype::bfloat16: return 2;
    case dtype::int32: return 4;
    case dtype::int64: return 8;
    case dtype::boolean: return 1;
  }
  return 0;
}

std::int64_t primary_bytes(const task& t) {
  std::int64_t bytes = 0;
  for (const auto* specs : {&t.inputs, &t.draws})
    for (const auto& in : *specs) bytes += numel(in.shape) * static_cast<std::int64_t>(element_size(in.type));
  for (const auto& out : t.outputs) bytes += numel(out.shape) * static_cast<std::int64_t>(element_size(out.type));
  return bytes;
}

std::int64_t numel(const shape& s) {
  std::int64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}

std::string to_string(const shape& s) {
  std::ostringstream out;
  out << '[';
  for (std::size_t i = 0; i < s.size(); ++i) out << (i ? ", " : "") << s[i];
  out << ']';
  return out.str();
}

tolerance default_tolerance(const std::vector<output_spec>& outputs) {
  const bool half = std::any_of(outputs.begin(), outputs.end(), [](const output_spec& o) {
    return o.type == dtype::float16 || o.type == dtype::bfloat16;
  });
  return half ? tolerance{1e-2, 1e-2} : tolerance{1e-4, 1e-4};
}

std::vector<shape> input_shapes(const task& t, shape_choice which) {
  std::vector<shape> out;
  out.reserve(t.inputs.size());
  for (const auto& in : t.inputs) {
    const shape* s = &in.shape;
    if (which && *which < t.variants.size()) {
      const auto& v = t.variants[*which].shapes;
      if (auto it = v.find(in.name); it != v.end()) s = &it->second;
    }
    out.push_back(*s);
  }
  return out;
}

shape_choice smallest_shapes(const task& t) {
  auto total = [&](shape_choice c) {
    std::int64_t n = 0;
    for (const auto& s : input_shapes(t, c)) n += numel(s);
    return n;
  };
  shape_choice best;
  std::int64_t best_n = total(std::nullopt);
  for (std::size_t i = 0; i < t.variants.size(); ++i) {
    const auto n = total(i);
    if (n < best_n) {
      best = i;
      best_n = n;
    }
  }
  return best;
}

// Ids become folders under an output folder (OUT/l1/relu/s0.cu), file names, metric labels and
// prompt headers: a safe alphabet, and names that neither climb out of a folder nor hide in it.
status check_task_id(std::string_view id) {
  if (id.empty()) return field_error("id", "must not be empty");
  if (id.size() > max_task_id_length)
    return field_error("id", "is " + std::to_string(id.size()) + " characters long, more than " +
                                 std::to_string(max_task_id_length));
  const std::string quoted = "'" + std::string(id) + "'";
  if (!std::all_of(id.begin(), id.end(), is_task_id_char))
    return field_error("id", quoted + " may only hold letters, digits and _ - . /");
  for (std::size_t start = 0; start <= id.size();) {
    const auto end = std::min(id.find('/', start), id.size());
    const auto name = id.substr(start, end - start);
    if (name.empty())
      return field_error("id", quoted + " has an empty name: '/' may only separate names");
    if (name.front() == '.')
      return field_error("id", quoted + " has a name starting with '.': ids name folders inside "
                                        "an output folder, never '..' or hidden ones");
    start = end + 1;
  }
  return status::success();
}

result<std::string> task_dir(const std::string& dir, const std::string& id) {
  if (auto s = check_task_id(id); !s) return s.err();
  return (std::filesystem::path(dir) / id).string();
}

status check_task(const task& t) {
  if (auto s = check_task_id(t.id); !s) return s;
  if (t.inputs.empty()) return field_error("inputs", "a task needs at least one input");
  if (t.outputs.empty()) return field_error("outputs", "a task needs at least one output");

  std::set<std::string> names;
  for (std::size_t i = 0; i < t.inputs.size(); ++i) {
    const auto& in = t.inputs[i];
    const std::string field = "inputs[" + std::to_string(i) + "]";
    if (!is_identifier(in.name))
      return field_error(field + ".name", "'" + in.name + "' is not a valid identifier");
    if (!names.insert(in.name).second)
      return field_error(field + ".name", "duplicate name '" + in.name + "'");
    if (auto s = check_shape(in.shape, field + ".shape"); !s) return s;
    // Inputs that prepare computes are not drawn: their init is unused.
    if (!t.prepare.empty()) continue;
    if (auto s = check_init(in, field + ".init"); !s) return s;
  }
  if (t.prepare.empty() && !t.draws.empty())
    return field_error("draws", "given without prepare (prepare computes the inputs from them)");
  if (!t.prepare.empty()) {
    if (t.draws.empty()) return field_error("draws", "prepare needs at least one draw");
    // Draw names are prepare's parameters; they seed each draw's generator as input names do.
    std::set<std::string> draw_names;
    for (std::size_t i = 0; i < t.draws.size(); ++i) {
      const auto& d = t.draws[i];
      const std::string field = "draws[" + std::to_string(i) + "]";
      if (!is_identifier(d.name))
        return field_error(field + ".name", "'" + d.name + "' is not a valid identifier");
      if (!draw_names.insert(d.name).second)
        return field_error(field + ".name", "duplicate name '" + d.name + "'");
      if (auto s = check_shape(d.shape, field + ".shape"); !s) return s;
      if (auto s = check_init(d, field + ".init"); !s) return s;
    }
    if (t.prepare.find("def prepare(") == std::string::npos)
      return field_error("prepare", "must define `def prepare(...)`");
    // A variant would need draws of other shapes, which the inputs' shapes do not determine.
    if (!t.variants.empty())
      return field_error("variants", "a task with prepare has no shape variants (its draws have "
                                     "one set of shapes)");
  }
  for (std::size_t i = 0; i < t.outputs.size(); ++i) {
    const auto& out = t.outputs[i];
    const std::string field = "outputs[" + std::to_string(i) + "]";
    if (!is_identifier(out.name))
      return field_error(field + ".name", "'" + out.name + "' is not a valid identifier");
    if (!names.insert(out.name).second)
      return field_error(field + ".name", "duplicate name '" + out.name +
                                              "' (input and output names share one namespace)");
    if (auto s = check_shape(out.shape, field + ".shape"); !s) return s;
  }

  if (t.reference.find("def forward(") == std::string::npos)
    return field_error("reference", "must define `def forward(...)`");

  if (!std::isfinite(t.tolerance.atol) || t.tolerance.atol < 0)
    return field_error("tolerance.atol", "must be a finite number >= 0");
  if (!std::isfinite(t.tolerance.rtol) || t.tolerance.rtol < 0)
    return field_error("tolerance.rtol", "must be a finite number >= 0");

  for (std::size_t v = 0; v < t.variants.size(); ++v) {
    const std::string field = "variants[" + std::to_string(v) + "]";
    if (t.variants[v].shapes.empty())
      return field_error(field, "a variant must name at least one input");
    for (const auto& [name, s] : t.variants[v].shapes) {
      auto it = std::find_if(t.inputs.begin(), t.inputs.end(),
                             [&](const input_spec& in) { return in.name == name; });
      if (it == t.inputs.end())
        return field_error(field + "." + name, "no input is named '" + name + "'");
      if (auto st = check_shape(s, field + "." + name); !st) return st;
      if (s.size() != it->shape.size())
        return field_error(field + "." + name,
                           "has rank " + std::to_string(s.size()) + " but input '" + name +
                               "' has rank " + std::to_string(it->shape.size()));
    }
  }
  return {};
}

}  // namespace kforge::tasks
