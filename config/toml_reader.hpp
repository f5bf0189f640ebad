#pragma once
// Internal to the manifest (not part of kforge::manifest's interface): reads a toml++ tree key by
// key, collecting every problem as "FILE:LINE:COL: key: reason" so one run of `kforge run` shows
// all of them, and reporting keys nobody asked for so a typo is an error, not an ignored setting.

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <toml++/toml.h>

#include "common/result.hpp"

namespace kforge::pipeline::detail {

/// The problems found so far in one source.
class diagnostics {
 public:
  explicit diagnostics(std::string source) : source_(std::move(source)) {}

  /// Records `key: reason` at `where` (nullptr or an unknown region: no line:column).
  void add(const toml::source_region* where, std::string_view key, std::string_view reason);
  void add(const toml::node* where, std::string_view key, std::string_view reason) {
    add(where ? &where->source() : nullptr, key, reason);
  }
  bool empty() const noexcept { return lines_.empty(); }
  const std::string& source() const noexcept { return source_; }
  /// All problems as one error, one per line.
  error to_error() const;

 private:
  struct line {
    std::uint32_t row = 0;  // 0: no position; listed after the others
    std::uint32_t column = 0;
    std::string text;
  };
  std::string source_;
  std::vector<line> lines_;
};

/// "an integer", "a string", ... for messages.
std::string_view type_name(const toml::node& n);
/// `parent.key`, quoting keys that are not bare TOML keys.
std::string join_key(std::string_view parent, std::string_view key);

/// A closed or open interval for floating-point settings.
struct real_range {
  double lo = -std::numeric_limits<double>::infinity();
  double hi = std::numeric_limits<double>::infinity();
  bool lo_open = false;
  bool hi_open = false;
};
inline real_range above(double lo) { return {lo, std::numeric_limits<double>::infinity(), true}; }
inline real_range at_least(double lo) { return {lo}; }

/// One table of the manifest. Every read_* leaves `out` unchanged when the key is absent (the
/// default applies) and returns whether a valid value was stored.
class table_reader {
 public:
  table_reader(diagnostics& d, const toml::table& t, std::string path)
      : d_(d), t_(t), path_(std::move(path)) {}

  const std::string& path() const noexcept { return path_; }
  std::string key(std::string_view k) const { return join_key(path_, k); }
  const toml::table& table() const noexcept { return t_; }
  diagnostics& diag() noexcept { return d_; }

  /// The node at `k` (marked as known), or nullptr.
  const toml::node* take(std::string_view k);
  /// Records a problem with the value at `k`.
  void fail(std::string_view k, std::string_view reason);

  bool read(std::string_view k, std::string& out);
  bool read(std::string_view k, bool& out);
  bool read(std::string_view k, std::int64_t& out, std::int64_t lo,
            std::int64_t hi = std::numeric_limits<std::int64_t>::max());
  bool read(std::string_view k, int& out, std::int64_t lo,
            std::int64_t hi = std::numeric_limits<int>::max());
  /// Accepts integers too: `alpha = 2` means 2.0.
  bool read(std::string_view k, double& out, real_range r);

  /// An array of distinct strings, each one of `known`; at least one. Returns whether the key
  /// was given and valid.
  bool read_names(std::string_view k, std::vector<std::string>& out, const std::vector<std::string>& known);

  /// A string that must be one of `choices`.
  template <class E>
  bool read_choice(std::string_view k, E& out,
                   std::initializer_list<std::pair<std::string_view, E>> choices) {
    std::string s;
    if (!read(k, s)) return false;
    std::string list;
    for (const auto& [name, value] : choices) {
      if (name == s) {
        out = value;
        return true;
      }
      list += (list.empty() ? "\"" : ", \"") + std::string(name) + "\"";
    }
    fail(k, "must be one of " + list + ", got \"" + s + "\"");
    return false;
  }

  /// The sub-table at `k`, or nullptr (absent, or not a table: reported).
  const toml::table* subtable(std::string_view k);
  /// Reports every key of the table that no take()/read() asked for.
  void finish();

 private:
  diagnostics& d_;
  const toml::table& t_;
  std::string path_;
  std::vector<std::string> taken_;
};

}  // namespace kforge::pipeline::detail
