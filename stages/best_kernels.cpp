#include "stages/best_kernels.hpp"

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "common/text_file.hpp"
#include "stages/reward.hpp"

namespace kforge::pipeline {

namespace fs = std::filesystem;

namespace {

nlohmann::json describe(const wire::Verdict& v, const std::string& task, double speedup,
                        std::uint64_t version, const std::string& stem) {
  const auto* c = v.candidate();
  const auto* ct = v.candidate_timing();
  const auto* bt = v.baseline_timing();
  nlohmann::json resources = nlohmann::json::array();
  if (v.resources())
    for (const auto* r : *v.resources())
      resources.push_back({{"kernel", messages::text_of(r->kernel())},
                           {"registers", r->registers()},
                           {"shared_bytes", r->shared_bytes()},
                           {"spill_store_bytes", r->spill_store_bytes()},
                           {"spill_load_bytes", r->spill_load_bytes()}});
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  return {{"task", task},
          {"speedup", speedup},
          {"candidate_ms", ct->median_ms()},
          {"candidate_iqr_ms", ct->iqr_ms()},
          {"baseline_ms", bt->median_ms()},
          {"baseline_iqr_ms", bt->iqr_ms()},
          {"trials", ct->trials()},
          {"policy_version", version},
          {"group_id", c ? c->group_id() : 0},
          {"group_index", c ? c->group_index() : 0},
          {"code_hash", c ? c->code_hash() : 0},
          {"source", stem + ".cu"},
          {"written_unix_s", std::chrono::duration<double>(now).count()},
          {"verdict",
           {{"status", wire::EnumNameVerdictStatus(v.status())},
            {"reason", messages::text_of(v.reason())},
            {"checks", v.checks()},
            {"audit", messages::text_of(v.audit())},
            {"worker", messages::text_of(v.worker())},
            {"compile_ms", v.compile_ms()},
            {"verify_ms", v.verify_ms()},
            {"time_ms", v.time_ms()},
            {"resources", resources}}}};
}

}  // namespace

best_kernels::best_kernels(std::string run_dir)
    : dir_(run_dir.empty() ? std::string() : (fs::path(run_dir) / "best").string()) {}

std::string best_kernels::file_stem(const std::string& task_id) {
  std::string out;
  for (char ch : task_id) {
    const bool plain = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                       (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' || ch == '-';
    out += ch == '/' ? std::string("__") : std::string(1, plain ? ch : '_');
  }
  if (out.empty() || out[0] == '.') out.insert(out.begin(), '_');  // never hidden, never ".."
  return out;
}

double best_kernels::best_for(const std::string& task) {
  if (auto it = best_.find(task); it != best_.end()) return it->second;
  double best = 0;
  // An unreadable or foreign file counts as no best: the next correct kernel replaces it.
  if (auto text = read_text_file((fs::path(dir_) / (file_stem(task) + ".json")).string())) {
    const auto j = nlohmann::json::parse(*text, nullptr, false);
    if (j.is_object() && j.value("task", std::string()) == task && j.contains("speedup") &&
        j["speedup"].is_number())
      best = j["speedup"].get<double>();
  }
  best_[task] = best;
  return best;
}

result<bool> best_kernels::offer(const wire::Verdict& v, std::uint64_t version) {
  if (dir_.empty() || v.status() != wire::VerdictStatus::ok) return false;
  const double speedup = reference_speedup(v);
  const auto* c = v.candidate();
  if (speedup <= 0 || !c || !c->task() || !c->task()->id()) return false;
  const std::string task = c->task()->id()->str();
  if (speedup <= best_for(task)) return false;

  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) return error{dir_ + ": cannot create: " + ec.message()};
  const auto stem = file_stem(task);
  // The source first: a .json always names a .cu at least as new as itself.
  const fs::path dir(dir_);
  if (auto s = write_text_file_atomically((dir / (stem + ".cu")).string(), messages::text_of(c->source())); !s)
    return s.err();
  if (auto s = write_text_file_atomically((dir / (stem + ".json")).string(),
                                describe(v, task, speedup, version, stem).dump(2) + "\n");
      !s)
    return s.err();
  best_[task] = speedup;
  return true;
}

}  // namespace kforge::pipeline
