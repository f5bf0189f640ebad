#pragma once
// The on-disk compile cache (layout and guarantees: compiler.hpp). Entries are immutable once in
// place; there is no eviction yet — the directory is disposable and may be deleted between runs.

#include <optional>
#include <string>
#include <string_view>

#include "common/result.hpp"
#include "sandbox/compiler.hpp"

namespace kforge::sandbox {

class compile_cache {
 public:
  explicit compile_cache(std::string dir) : dir_(std::move(dir)) {}

  const std::string& dir() const noexcept { return dir_; }
  std::string entry_path(const std::string& key) const { return dir_ + "/" + key; }

  /// The stored result for `key`, if there is a complete entry whose source equals `source`.
  /// `library` points into the entry.
  std::optional<compile_result> find(const std::string& key, std::string_view source) const;

  /// Whether this outcome may be stored: deterministic results only (not timeouts, not out of
  /// memory, not infra errors).
  static bool cacheable(const compile_result& r);

  /// Writes result.json into `staging` (which already holds candidate.cu and, if built, kernel.so)
  /// and renames it to entry_path(key). True: `staging` became the entry. False: another process
  /// stored the same key first; its entry stands and `staging` is still the caller's to remove.
  result<bool> publish(const std::string& key, std::string_view source, const std::string& staging,
                       const compile_result& r) const;

 private:
  std::string dir_;
};

/// result.json text for a result, and back (for the cache; also handy in tests).
std::string to_json(const compile_result& r);
result<compile_result> compile_result_from_json(std::string_view text);

}  // namespace kforge::sandbox
