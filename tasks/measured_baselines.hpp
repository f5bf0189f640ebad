#pragma once
// The file `kforge tasks baseline --against compile` writes (tasks/baselines/measure_baselines.py):
// one JSON line per task with its eager and torch.compile times on one device, as measured by the
// GPU host's Python torch. `kforge eval --baselines` and `[reward] baseline = "compile"` read it
// here. Times from that harness are not compared with the sandbox's directly: only the ratio
// compile / eager of one line is used, applied to the eager time the sandbox measured itself
// (docs/kernelbench.md says why).

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/result.hpp"

namespace kforge::tasks {

/// One line of the file.
struct measured_baseline {
  std::string id;
  std::string device;   ///< torch.cuda.get_device_name(), the name the sandbox's GPU facts carry; "cpu"
  std::string torch;    ///< the torch version that measured it
  std::string mode;     ///< torch.compile mode; "" for a line measured with --eager-only
  std::string shapes;   ///< "primary" (what the sandbox times) or "smallest"
  bool ok = false;
  std::string error;    ///< why the task was not measured (ok false)
  double eager_ms = 0;  ///< median; 0 when not measured
  double compile_ms = 0;
  double compile_s = 0; ///< the first compiled call, compilation included

  /// compile_ms / eager_ms: what multiplies a speedup over eager into one over torch.compile;
  /// nullopt unless both were measured, at the primary shapes, and the line is ok.
  std::optional<double> compile_over_eager() const;
};

/// The lines of one file, and the compile ratios of one device.
struct measured_baselines {
  std::string file;
  std::vector<measured_baseline> lines;

  /// The device names the file holds, in order of first appearance.
  std::vector<std::string> devices() const;
  /// Task id -> compile_over_eager() for the lines of `device` that have one.
  std::map<std::string, double> compile_ratios(const std::string& device) const;
  /// The mode and torch version of `device`'s lines ("" when it has none).
  std::string mode_of(const std::string& device) const;
  std::string torch_of(const std::string& device) const;
};

/// Reads and checks the file: every line an object with id, device, ok and (when ok) eager_ms;
/// a task at most once per device; one torch.compile mode per device (a file is one run: measure
/// another mode into another file). Errors name the file and line.
result<measured_baselines> read_measured_baselines(const std::string& path);

}  // namespace kforge::tasks
