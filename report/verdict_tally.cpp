#include "report/verdict_tally.hpp"

#include <algorithm>
#include <filesystem>

#include "messages/recording.hpp"
#include "stages/reward.hpp"

namespace kforge::pipeline {

namespace fs = std::filesystem;

namespace {

/// The recordings of the "verdicts" link in RUN_DIR/recordings and RUN_DIR/recordings-* (a resumed
/// run's earlier legs), sorted so the tally does not depend on directory order.
std::vector<fs::path> verdict_recordings(const fs::path& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& sub : fs::directory_iterator(dir, ec)) {
    const auto name = sub.path().filename().string();
    if (!sub.is_directory(ec) || (name != "recordings" && name.rfind("recordings-", 0) != 0)) continue;
    for (const auto& f : fs::directory_iterator(sub.path(), ec)) {
      const auto file = f.path().filename().string();
      if (file.rfind("verdicts@", 0) == 0 && f.path().extension() == ".kfrec") out.push_back(f.path());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

nlohmann::json line_of(const wire::Verdict& v) {
  const auto* task = v.candidate() ? v.candidate()->task() : nullptr;
  nlohmann::json j{{"task", task && task->id() ? task->id()->str() : std::string()},
                   {"category", task && task->category() ? task->category()->str() : std::string()},
                   {"status", wire::EnumNameVerdictStatus(v.status())}};
  if (const double s = reference_speedup(v); s > 0) j["speedup"] = s;
  return j;
}

}  // namespace

result<std::optional<verdict_tally>> read_verdict_tally(const std::string& run_dir) {
  const auto files = verdict_recordings(run_dir);
  if (files.empty()) return std::optional<verdict_tally>();
  verdict_tally t;
  for (const auto& f : files) {
    auto reader = messages::recording_reader::open(f.string());
    if (!reader) return reader.err();
    t.files.push_back(f.string());
    for (;;) {
      auto rec = reader->next();
      if (!rec) {  // a torn last record: what came before it stands
        t.torn.push_back(rec.message());
        break;
      }
      if (!*rec) break;
      if (const auto* v = (*rec)->env.as<wire::Verdict>()) t.lines.push_back(line_of(*v));
    }
  }
  return std::optional<verdict_tally>(std::move(t));
}

}  // namespace kforge::pipeline
