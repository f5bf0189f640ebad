#include "stages/infra_error_log.hpp"

#include <filesystem>
#include <nlohmann/json.hpp>
#include <utility>

namespace kforge::pipeline {

using messages::text_of;

infra_error_log::infra_error_log(std::string run_dir, std::ostream& say)
    : path_(run_dir.empty() ? std::string() : path_in(run_dir)), say_(say) {}

std::string infra_error_log::path_in(const std::string& run_dir) {
  return (std::filesystem::path(run_dir) / "infra_errors.jsonl").string();
}

result<bool> infra_error_log::offer(const wire::Verdict& v, std::uint64_t version) {
  if (path_.empty() || v.status() != wire::VerdictStatus::infra_error) return false;
  auto w = write(v, version);
  if (!w && !write_told_) {
    say_ << "kforge reward: infra_error reason not kept: " << w.message() << "\n";
    write_told_ = true;
  }
  return w;
}

result<bool> infra_error_log::write(const wire::Verdict& v, std::uint64_t version) {
  if (!out_) {
    auto f = file_writer::open(path_, file_writer::mode::append);
    if (!f) return f.err();
    out_.emplace(std::move(*f));
  }
  const auto* c = v.candidate();
  const std::string task = c && c->task() ? text_of(c->task()->id()) : std::string();
  const nlohmann::json line = {{"task", task},
                               {"reason", text_of(v.reason())},
                               {"worker", text_of(v.worker())},
                               {"group_id", c ? c->group_id() : 0},
                               {"policy_version", version}};
  // dump's replace mode: a reason quoting a kernel's bytes must not make the line invalid JSON.
  if (auto s = out_->append(line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n"); !s)
    return s.err();
  if (!told_) {
    say_ << "kforge reward: an infra_error verdict (the sandbox's fault; the sample is left unscored) for "
         << task << ": " << text_of(v.reason()) << " (every one: " << path_ << ")\n";
    told_ = true;
  }
  return true;
}

}  // namespace kforge::pipeline
