#include "sandbox/ncu_profiler.hpp"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <sstream>

namespace kforge::sandbox {

namespace fs = std::filesystem;

const std::vector<std::string>& ncu_sections() {
  // SpeedOfLight: duration, DRAM and SM throughput; Occupancy: achieved occupancy; WarpStateStats:
  // the CPIStall rule naming the top stall; LaunchStats: the launch shape the rules refer to.
  static const std::vector<std::string> all = {"SpeedOfLight", "Occupancy", "WarpStateStats", "LaunchStats"};
  return all;
}

result<std::string> find_ncu(const std::string& configured) {
  std::vector<fs::path> candidates;
  if (!configured.empty()) {
    candidates.emplace_back(configured);
  } else {
    if (const char* env = std::getenv("KFORGE_NCU"); env && *env) candidates.emplace_back(env);
    if (const char* path = std::getenv("PATH")) {
      std::stringstream ss(path);
      for (std::string dir; std::getline(ss, dir, ':');)
        if (!dir.empty()) candidates.push_back(fs::path(dir) / "ncu");
    }
    candidates.emplace_back("/usr/local/cuda/bin/ncu");
  }
  std::string tried;
  for (const auto& c : candidates) {
    tried += (tried.empty() ? "" : ", ") + c.string();
    if (::access(c.c_str(), X_OK) == 0 && fs::is_regular_file(c)) return fs::absolute(c).string();
  }
  if (!configured.empty()) return error{"ncu not found at " + configured + " ([sandbox] ncu)"};
  return error{"ncu not found (looked at $KFORGE_NCU, PATH and /usr/local/cuda/bin: " + tried + ")"};
}

std::string ncu_install_dir(const std::string& ncu) {
  std::error_code ec;
  const fs::path real = fs::canonical(ncu, ec);
  return (ec ? fs::path(ncu) : real).parent_path().string();
}

std::vector<std::string> ncu_command(const std::string& ncu, const std::vector<std::string>& target,
                                     int max_launches) {
  std::vector<std::string> cmd = {ncu, "--csv", "--page", "details"};
  for (const auto& s : ncu_sections()) cmd.insert(cmd.end(), {"--section", s});
  // Only the kernels between the child's cudaProfilerStart and cudaProfilerStop: one call of the
  // candidate, never the probe or the child's own kernels. The launch count bounds the replays
  // (and so the GPU time) of a call that launches many kernels.
  cmd.insert(cmd.end(), {"--profile-from-start", "off", "--launch-count", std::to_string(max_launches),
                         "--target-processes", "application-only"});
  cmd.insert(cmd.end(), target.begin(), target.end());
  return cmd;
}

namespace {

/// The last `n` non-empty lines of `text` joined by " | ", for a skip reason that says what ncu
/// said (bounded: a candidate's own output may be among them).
std::string tail_lines(const std::string& text, std::size_t n) {
  std::vector<std::string> lines;
  std::stringstream ss(text);
  for (std::string line; std::getline(ss, line);)
    if (!line.empty() && line != "\r") lines.push_back(line);
  std::string out;
  for (std::size_t i = lines.size() > n ? lines.size() - n : 0; i < lines.size(); ++i)
    out += (out.empty() ? "" : " | ") + lines[i];
  return out.size() > 400 ? "..." + out.substr(out.size() - 400) : out;
}

/// ncu's own error line ("==ERROR== ..."), the first one, or "".
std::string first_error(const std::string& output) {
  const auto at = output.find("==ERROR==");
  if (at == std::string::npos) return "";
  const auto end = output.find('\n', at);
  return output.substr(at, end == std::string::npos ? std::string::npos : end - at);
}

}  // namespace

profile_outcome read_ncu_output(const std::string& output, bool timed_out, std::chrono::milliseconds limit) {
  profile_outcome out;
  if (timed_out) {
    out.skipped = "ncu ran past the profile's " + std::to_string(limit.count()) +
                  " ms limit (sandbox.profile_time_limit_s); killed, no profile";
    return out;
  }
  if (output.find("ERR_NVGPUCTRPERM") != std::string::npos ||
      output.find("does not have permission") != std::string::npos) {
    out.denied = true;
    out.skipped =
        "ncu may not read the GPU's performance counters on this host (ERR_NVGPUCTRPERM: the driver "
        "restricts them to administrators; see NVreg_RestrictProfilingToAdminUsers)";
    return out;
  }
  auto p = slowest_kernel(output);
  if (!p) {
    const std::string said = first_error(output);
    out.skipped = p.err().message + (said.empty() ? "; ncu's output ended: " + tail_lines(output, 3) : "; " + said);
    return out;
  }
  out.profile = std::move(*p);
  return out;
}

}  // namespace kforge::sandbox
