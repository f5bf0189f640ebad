#pragma once
// The head's other processes: each a `kforge worker` child on the run's manifest snapshot, logging
// to RUN_DIR/logs/PROCESS.log; started directly on the head's host, or on another node through a
// launcher's command (a Slurm job step: `srun ... kforge worker ...`, whose output srun brings back).

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/result.hpp"
#include "common/text_file.hpp"  // last_line_of: a worker's log ends with why it stopped
#include "config/manifest.hpp"
#include "runtime/process_runtime.hpp"

namespace kforge::pipeline {

struct worker_process {
  std::string name;
  pid_t pid = -1;
  bool running = true;
  bool required = true;  ///< the run cannot go on without it (required_process)
  std::string exit;      ///< how it ended, once it has
  /// Where it runs, for messages: empty on the head's host, e.g. "Slurm job step on node n2".
  std::string where;
  /// Started through a launcher: stopped with SIGTERM first, which srun passes on to the step
  /// (a launcher killed outright can leave its remote process running).
  bool launched = false;
};

/// Whether the run needs process `p` to the end: one hosting only sandbox workers may die (the
/// pool re-queues what they held and the other workers judge it); the loss of any other stage
/// stops the loop for good, so the run ends as failed at once rather than as stalled much later.
bool required_process(const process_spec& p);

/// Starts `kforge worker` for `process`. A resumed run's logs go on after the first run's.
/// `launcher` non-empty: the worker command line is appended to it (e.g. srun and its flags),
/// `where` says where that runs, and the launcher's own output goes to PROCESS.launch.log (the
/// launcher writes the worker's to PROCESS.log, which is made empty here unless resuming).
result<worker_process> spawn_worker(const std::string& manifest_path, const std::string& process,
                                    const std::string& run_dir, std::int64_t steps,
                                    const std::optional<resume_point>& resume,
                                    const std::vector<std::string>& launcher = {},
                                    const std::string& where = "");

/// Whether `w` has ended (without waiting); when it has, its `exit` says how.
bool reap_worker(worker_process& w);

/// Kills a worker still running and waits for it.
void kill_worker(worker_process& w, const std::string& why);

}  // namespace kforge::pipeline
