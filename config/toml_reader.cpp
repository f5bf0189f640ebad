#include "config/toml_reader.hpp"

#include <algorithm>
#include <cctype>
#include <sstream>

namespace kforge::pipeline::detail {
namespace {

// Enough for a whole bad file; past this the rest is noise.
constexpr std::size_t max_lines = 25;

std::string number(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

std::string describe(const real_range& r) {
  const bool has_lo = r.lo != -std::numeric_limits<double>::infinity();
  const bool has_hi = r.hi != std::numeric_limits<double>::infinity();
  if (has_lo && has_hi)
    return "must be in " + std::string(r.lo_open ? "(" : "[") + number(r.lo) + ", " + number(r.hi) +
           (r.hi_open ? ")" : "]");
  if (has_lo) return std::string("must be ") + (r.lo_open ? "> " : ">= ") + number(r.lo);
  return std::string("must be ") + (r.hi_open ? "< " : "<= ") + number(r.hi);
}

}  // namespace

void diagnostics::add(const toml::source_region* where, std::string_view key,
                      std::string_view reason) {
  line l;
  l.text = source_;
  if (where && where->begin.line > 0) {
    l.row = where->begin.line;
    l.column = where->begin.column;
    l.text += ":" + std::to_string(l.row) + ":" + std::to_string(l.column);
  }
  l.text += ": ";
  if (!key.empty()) l.text += std::string(key) + ": ";
  l.text += reason;
  lines_.push_back(std::move(l));
}

error diagnostics::to_error() const {
  // In file order, whatever order the checks ran in.
  std::vector<line> sorted = lines_;
  std::stable_sort(sorted.begin(), sorted.end(), [](const line& a, const line& b) {
    if ((a.row == 0) != (b.row == 0)) return b.row == 0;
    return a.row != b.row ? a.row < b.row : a.column < b.column;
  });
  std::string msg;
  for (std::size_t i = 0; i < sorted.size() && i < max_lines; ++i) {
    if (i) msg += '\n';
    msg += sorted[i].text;
  }
  if (lines_.size() > max_lines)
    msg += "\n" + source_ + ": ... and " + std::to_string(lines_.size() - max_lines) +
           " more problems";
  return error{msg};
}

std::string_view type_name(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::table: return "a table";
    case toml::node_type::array: return "an array";
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a float";
    case toml::node_type::boolean: return "a boolean";
    case toml::node_type::date: return "a date";
    case toml::node_type::time: return "a time";
    case toml::node_type::date_time: return "a date-time";
    default: return "nothing";
  }
}

std::string join_key(std::string_view parent, std::string_view key) {
  const bool bare = !key.empty() && std::all_of(key.begin(), key.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
  });
  std::string k = bare ? std::string(key) : "\"" + std::string(key) + "\"";
  return parent.empty() ? k : std::string(parent) + "." + k;
}

const toml::node* table_reader::take(std::string_view k) {
  if (std::find(taken_.begin(), taken_.end(), k) == taken_.end()) taken_.emplace_back(k);
  return t_.get(k);
}

void table_reader::fail(std::string_view k, std::string_view reason) {
  const toml::node* n = t_.get(k);
  d_.add(n ? n : &t_, key(k), reason);
}

bool table_reader::read(std::string_view k, std::string& out) {
  const toml::node* n = take(k);
  if (!n) return false;
  if (!n->is_string()) {
    fail(k, "expected a string, got " + std::string(type_name(*n)));
    return false;
  }
  out = n->as_string()->get();
  return true;
}

bool table_reader::read_names(std::string_view k, std::vector<std::string>& out,
                              const std::vector<std::string>& known) {
  const toml::node* n = take(k);
  if (!n) return false;
  const toml::array* a = n->as_array();
  if (a == nullptr) {
    fail(k, "expected an array of names, got " + std::string(type_name(*n)));
    return false;
  }
  std::string list;
  for (const auto& name : known) list += (list.empty() ? "\"" : ", \"") + name + "\"";
  std::vector<std::string> names;
  bool ok = true;
  for (std::size_t i = 0; i < a->size(); ++i) {
    const toml::node& e = *a->get(i);
    const std::string at = key(k) + "[" + std::to_string(i) + "]";
    if (!e.is_string() || std::find(known.begin(), known.end(), e.as_string()->get()) == known.end()) {
      d_.add(&e, at, "expected one of " + list);
      ok = false;
    } else if (std::find(names.begin(), names.end(), e.as_string()->get()) != names.end()) {
      d_.add(&e, at, "\"" + e.as_string()->get() + "\" named twice");
      ok = false;
    } else {
      names.push_back(e.as_string()->get());
    }
  }
  if (a->empty()) {
    fail(k, "must name at least one of " + list);
    return false;
  }
  if (ok) out = std::move(names);
  return ok;
}

bool table_reader::read(std::string_view k, bool& out) {
  const toml::node* n = take(k);
  if (!n) return false;
  if (!n->is_boolean()) {
    fail(k, "expected a boolean (true or false), got " + std::string(type_name(*n)));
    return false;
  }
  out = n->as_boolean()->get();
  return true;
}

bool table_reader::read(std::string_view k, std::int64_t& out, std::int64_t lo, std::int64_t hi) {
  const toml::node* n = take(k);
  if (!n) return false;
  if (!n->is_integer()) {
    fail(k, "expected an integer, got " + std::string(type_name(*n)));
    return false;
  }
  const std::int64_t v = n->as_integer()->get();
  if (v < lo || v > hi) {
    std::string why = hi == std::numeric_limits<std::int64_t>::max() ||
                              hi == std::numeric_limits<int>::max()
                          ? "must be >= " + std::to_string(lo)
                          : "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
    fail(k, why + ", got " + std::to_string(v));
    return false;
  }
  out = v;
  return true;
}

bool table_reader::read(std::string_view k, int& out, std::int64_t lo, std::int64_t hi) {
  std::int64_t v = out;
  if (!read(k, v, lo, hi)) return false;
  out = static_cast<int>(v);
  return true;
}

bool table_reader::read(std::string_view k, double& out, real_range r) {
  const toml::node* n = take(k);
  if (!n) return false;
  double v = 0;
  if (n->is_floating_point())
    v = n->as_floating_point()->get();
  else if (n->is_integer())
    v = static_cast<double>(n->as_integer()->get());
  else {
    fail(k, "expected a number, got " + std::string(type_name(*n)));
    return false;
  }
  const bool ok = (r.lo_open ? v > r.lo : v >= r.lo) && (r.hi_open ? v < r.hi : v <= r.hi);
  if (!ok) {  // also catches nan, which fails every comparison
    fail(k, describe(r) + ", got " + number(v));
    return false;
  }
  out = v;
  return true;
}

const toml::table* table_reader::subtable(std::string_view k) {
  const toml::node* n = take(k);
  if (!n) return nullptr;
  if (!n->is_table()) {
    fail(k, "expected a table, got " + std::string(type_name(*n)));
    return nullptr;
  }
  return n->as_table();
}

void table_reader::finish() {
  for (auto&& [k, v] : t_) {
    if (std::find(taken_.begin(), taken_.end(), k.str()) != taken_.end()) continue;
    std::string known;
    for (const auto& t : taken_) known += (known.empty() ? "" : ", ") + t;
    d_.add(&k.source(), key(k.str()),
           "unknown key" + (known.empty() ? std::string() : " (known here: " + known + ")"));
  }
}

}  // namespace kforge::pipeline::detail
