#include "pipeline/infra_error_log.hpp"

#include <filesystem>
#include <nlohmann/json.hpp>

namespace kforge::pipeline {

namespace {
std::string str(const flatbuffers::String* s) { return s ? s->str() : std::string(); }
}  // namespace

infra_error_log::infra_error_log(std::string run_dir)
    : path_(run_dir.empty() ? std::string() : path_in(run_dir)) {}

std::string infra_error_log::path_in(const std::string& run_dir) {
  return (std::filesystem::path(run_dir) / "infra_errors.jsonl").string();
}

result<bool> infra_error_log::offer(const wire::Verdict& v, std::uint64_t version) {
  if (path_.empty() || v.status() != wire::VerdictStatus::infra_error) return false;
  if (!out_.is_open()) {
    out_.open(path_, std::ios::binary | std::ios::app);
    if (!out_) return error{path_ + ": cannot open for appending"};
  }
  const auto* c = v.candidate();
  const nlohmann::json line = {{"task", c && c->task() ? str(c->task()->id()) : std::string()},
                               {"reason", str(v.reason())},
                               {"worker", str(v.worker())},
                               {"group_id", c ? c->group_id() : 0},
                               {"policy_version", version}};
  // dump's replace mode: a reason quoting a kernel's bytes must not make the line invalid JSON.
  out_ << line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
  out_.flush();
  if (!out_) return error{path_ + ": cannot write"};
  return true;
}

}  // namespace kforge::pipeline
