#include "runtime/run_directory.hpp"

#include <filesystem>
#include <sstream>
#include <system_error>

#include "common/file_writer.hpp"
#include "stages/infra_error_log.hpp"
#if defined(KFORGE_HAVE_TORCH)
#include "trainer/checkpoint.hpp"
#endif

namespace kforge::pipeline {

namespace fs = std::filesystem;

namespace {

constexpr const char* overrides_marker = "# kforge run overrides:";

/// The newest complete checkpoint under RUN_DIR/checkpoints: a directory named exactly step-N (a
/// save in progress is step-N.tmp, one being replaced step-N.old) holding all of
/// trainer/checkpoint.hpp's files. nullopt when there is none.
std::optional<resume_point> newest_checkpoint(const fs::path& run_dir) {
  std::optional<resume_point> best;
  std::error_code ec;
  for (fs::directory_iterator it(run_dir / "checkpoints", ec), end; !ec && it != end;
       it.increment(ec)) {
    const auto name = it->path().filename().string();
    if (name.rfind("step-", 0) != 0 || name.size() == 5 ||
        name.find_first_not_of("0123456789", 5) != std::string::npos)
      continue;
    bool whole = it->is_directory();
    for (const char* f : {"model.safetensors", "optimizer.pt", "trainer_state.json"})
      whole = whole && fs::exists(it->path() / f);
    if (name.size() > 5 + 18) continue;  // more digits than a step count has
    const auto step = std::stoull(name.substr(5));
    if (whole && (!best || step > best->step)) best = resume_point{step, it->path().string()};
  }
  return best;
}

/// The checkpoint's own record of its step, read before anything of the run directory is moved:
/// one whose trainer_state.json is unreadable or holds another step than its name says stops the
/// resume here, not after the last leg's files were moved aside for a leg that cannot start.
status check_checkpoint(const resume_point& at) {
#if defined(KFORGE_HAVE_TORCH)
  auto st = trainer::read_checkpoint_state(at.checkpoint);
  if (!st) return st.err();
  return {};
#else
  return error{at.checkpoint + ": this kforge is built without LibTorch, so it has no trainer to "
               "resume"};
#endif
}

/// Moves `from` to `to` unless `to` exists: the files of the leg that ended at a checkpoint stay
/// under their before-step names when a leg resumed from it stops and is resumed again.
void move_aside(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  if (fs::exists(to, ec) || ec) return;
  fs::rename(from, to, ec);  // a file the last leg did not write (ENOENT) leaves nothing to move
}

/// The snapshot's text without the overrides lines, and the steps they record applied to `m`:
/// the first run's --steps is part of what it was asked to do.
status drop_overrides(manifest& m, const std::string& run_dir) {
  std::istringstream lines(m.text);
  std::string text;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(overrides_marker, 0) != 0) {
      text += line + "\n";
      continue;
    }
    const auto at = line.find("steps = ");
    if (at == std::string::npos) continue;
    try {
      m.run.steps = std::stoll(line.substr(at + 8));
    } catch (const std::exception&) {
      return error{"--resume " + run_dir + ": manifest.toml: a bad overrides line (no step count "
                   "after \"steps = \"): " + line};
    }
  }
  while (text.size() >= 2 && text.compare(text.size() - 2, 2, "\n\n") == 0) text.pop_back();
  m.text = text;
  return {};
}

}  // namespace

result<resumed_run> open_resumed_run(const std::string& run_dir, std::optional<std::int64_t> steps) {
  const auto snapshot = fs::path(run_dir) / "manifest.toml";
  if (!fs::exists(snapshot))
    return error{"--resume " + run_dir + ": no manifest.toml there (not a run directory?)"};
  auto loaded = load_manifest(snapshot.string());
  if (!loaded) return error{"--resume " + run_dir + ": " + loaded.message()};
  resumed_run r{std::move(*loaded), {}};
  auto& m = r.m;
  if (auto s = drop_overrides(m, run_dir); !s) return s.err();
  m.run.run_dir = run_dir;
  if (steps) m.run.steps = *steps;
  if (m.sampler.model.empty())
    return error{"--resume " + run_dir +
                 ": this run's sampler has no model (sampler.model is empty), so its trainer was "
                 "the stand-in, which keeps no state; resume needs the real trainer"};
  auto at = newest_checkpoint(run_dir);
  if (!at)
    return error{"--resume " + run_dir + ": no complete checkpoint under " +
                 (fs::path(run_dir) / "checkpoints").string()};
  if (auto s = check_checkpoint(*at); !s) return error{"--resume " + run_dir + ": " + s.message()};
  if (at->step >= static_cast<std::uint64_t>(m.run.steps))
    return error{"--resume " + run_dir + ": nothing to do: already at step " +
                 std::to_string(at->step) + " of " + std::to_string(m.run.steps) +
                 " (raise it with --steps)"};
  r.at = std::move(*at);
  return r;
}

result<std::string> prepare_run_directory(const manifest& m, bool overridden,
                                          const std::optional<resume_point>& resume) {
  const auto& dir = m.run.run_dir;
  std::error_code ec;
  for (const char* sub : {"", "recordings", "logs"}) fs::create_directories(fs::path(dir) / sub, ec);
  if (ec) return error{"cannot create run directory " + dir + ": " + ec.message()};
  // The snapshot first: a directory it cannot be written to stops the run before anything in it
  // is moved.
  const auto snapshot = (fs::path(dir) / "manifest.toml").string();
  std::string text = m.text;
  // Command-line overrides reach the other processes as worker options, not through this file;
  // --resume reads them back from this line.
  if (overridden)
    text += "\n" + std::string(overrides_marker) + " steps = " + std::to_string(m.run.steps) +
            ", run_dir = \"" + dir + "\"\n";
  if (auto s = write_file_atomically(snapshot, text); !s) return s.err();
  if (resume) {
    // The first run's recordings and summary stay, next to this leg's.
    const auto leg = "before-step-" + std::to_string(resume->step);
    move_aside(fs::path(dir) / "recordings", fs::path(dir) / ("recordings-" + leg));
    fs::create_directories(fs::path(dir) / "recordings", ec);
    move_aside(fs::path(dir) / "summary.json", fs::path(dir) / ("summary-" + leg + ".json"));
    move_aside(infra_error_log::path_in(dir), fs::path(dir) / ("infra_errors-" + leg + ".jsonl"));
  } else {
    fs::remove(infra_error_log::path_in(dir), ec);  // an earlier run's, into the same directory
  }
  return snapshot;
}

}  // namespace kforge::pipeline
