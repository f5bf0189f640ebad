#pragma once
// A private temporary directory (mode 0700, unique name) removed with everything in it when the
// last owner lets go. Compiles and preprocessing runs write only there, so concurrent workers never
// see each other's files and a killed nvcc leaves nothing behind in /tmp.

#include <memory>
#include <string>

#include "common/result.hpp"

namespace kforge::sandbox {

class scratch_dir {
 public:
  /// Creates `root`/`prefix`XXXXXX (root empty: the system temporary directory).
  static result<std::shared_ptr<scratch_dir>> create(const std::string& root,
                                                     const std::string& prefix);
  ~scratch_dir();
  scratch_dir(const scratch_dir&) = delete;
  scratch_dir& operator=(const scratch_dir&) = delete;

  const std::string& path() const noexcept { return path_; }
  /// Stops owning the directory (it was renamed away): the destructor leaves the name alone, which
  /// another process's mkdtemp may have taken by then.
  void release() noexcept { path_.clear(); }
  /// `path()/name`.
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  explicit scratch_dir(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

}  // namespace kforge::sandbox
