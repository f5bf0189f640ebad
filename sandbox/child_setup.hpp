#pragma once
// How the supervisor starts its two kinds of child (runner.hpp): the options of the process, and
// for candidate children the confinement (common/confinement.hpp) and the scratch layout it sees.
//
// A candidate child's scratch directory holds three folders:
//   lib/    the libraries it is to load, copied there by the supervisor (owned by the supervisor,
//           read-only to the child): a child cannot swap the next candidate's library or the probe
//   work/   its working directory, HOME and TMPDIR, where output files go (the child's own)
//   .root/  the mount point its new root is built on
// The reference server runs only trusted code (task references): it gets the scrubbed
// environment and limits, not the confinement.
#include <memory>
#include <string>

#include "common/child_process.hpp"
#include "common/confinement.hpp"
#include "common/result.hpp"
#include "sandbox/scratch_dir.hpp"

namespace kforge::sandbox {

struct run_options;

/// The environment, limits and nonce of every sandbox child, working in `dir`.
child_options sandbox_child_options(const run_options& o, const std::string& dir);

/// What this host grants a candidate child, probed once per process: everything, or what it can
/// (run_options::confine false: nothing, and that is the only thing missing).
const confinement_support& candidate_confinement(bool wanted);

/// One line for banners and summaries: "confinement: ...; not granted: ...".
std::string describe_candidate_confinement(bool wanted);

/// A candidate child's scratch directory (the layout above).
class candidate_scratch {
 public:
  static result<candidate_scratch> create(const std::string& root);
  const std::string& work() const noexcept { return work_; }
  const std::string& lib() const noexcept { return lib_; }
  /// The child's options: sandbox_child_options in work/, confined where the host allows.
  child_options options(const run_options& o) const;
  /// Copies `library` to lib/`name` (replacing an earlier copy) and returns the copy's path.
  result<std::string> stage(const std::string& library, const std::string& name) const;

 private:
  std::shared_ptr<scratch_dir> dir_;
  std::string lib_, work_, root_;
};

}  // namespace kforge::sandbox
