#include "pipeline/trainer_ranks.hpp"

#include <signal.h>

#include <nlohmann/json.hpp>

#include "common/hex.hpp"

namespace kforge::pipeline {

using json = nlohmann::json;

result<std::unique_ptr<rank_processes>> rank_processes::start(const rank_processes_options& o) {
  if (o.devices.size() < 2) return error{"trainer ranks: processes need 2 or more ranks"};
  std::unique_ptr<rank_processes> p(new rank_processes(o));
  const int size = static_cast<int>(o.devices.size());
  for (int r = 1; r < size; ++r) {
    child_options co;  // the trainer's environment (CUDA, LibTorch threads): a rank is trusted code
    co.max_output = 256 << 10;
    auto c = child_process::start({o.program, "trainer-rank"}, co);
    if (!c) return error{"trainer rank " + std::to_string(r) + ": cannot start " + o.program + ": " + c.message()};
    p->pids_.push_back(c->pid());
    p->children_.push_back(std::move(*c));
  }
  p->replies_.resize(p->children_.size());
  p->done_ = std::make_unique<std::atomic<bool>[]>(p->children_.size());
  std::vector<std::string> joins;
  for (int r = 1; r < size; ++r) {
    json join = {{"op", "join"},
                 {"rank", r},
                 {"size", size},
                 {"device", o.devices[static_cast<std::size_t>(r)]},
                 {"manifest", o.manifest_text},
                 {"run_dir", o.run_dir},
                 {"resume_from", o.resume_from},
                 {"collective", o.collective},
                 {"endpoint", o.endpoint},
                 {"nccl_id", o.nccl_id},
                 {"timeout_ms", o.join_timeout.count()}};
    joins.push_back(join.dump());
  }
  for (std::size_t i = 0; i < joins.size(); ++i) p->send_one(i, std::make_shared<const std::string>(joins[i]), o.join_timeout);
  return p;
}

rank_processes::~rank_processes() {
  if (!threads_.empty()) {
    // Requests still in flight (rank 0 never joined, so their joins wait for it): end the children,
    // which ends those requests, instead of waiting out their time limits. By the process groups
    // noted at start: the handles belong to the request threads until they are joined.
    for (const pid_t pid : pids_) ::killpg(pid, SIGKILL);
    for (auto& t : threads_) t.join();
    return;  // the child_process handles reap them
  }
  for (auto& c : children_)
    if (c.running()) (void)c.request(json{{"op", "stop"}}.dump(), std::chrono::seconds(10));
}

void rank_processes::send_one(std::size_t i, std::shared_ptr<const std::string> request,
                              std::chrono::milliseconds timeout) {
  done_[i] = false;
  threads_.emplace_back([this, i, request = std::move(request), timeout] {
    replies_[i] = children_[i].request(*request, timeout);
    const auto reply = nlohmann::json::parse(replies_[i].json, nullptr, false);
    if (replies_[i].failure != child_failure::none || !reply.is_object() || !reply.value("ok", false)) *failed_ = true;
    done_[i] = true;  // after the reply is written: failures_so_far reads it then
  });
}

void rank_processes::send_all(const std::string& request, std::chrono::milliseconds timeout) {
  *failed_ = false;
  const auto shared = std::make_shared<const std::string>(request);  // outlives a caller that throws
  for (std::size_t i = 0; i < children_.size(); ++i) send_one(i, shared, timeout);
}

status rank_processes::collect(const char* what) {
  for (auto& t : threads_) t.join();
  threads_.clear();
  for (std::size_t i = 0; i < replies_.size(); ++i) {
    const std::string rank = "trainer rank " + std::to_string(i + 1);
    const auto& r = replies_[i];
    if (r.failure != child_failure::none)
      return error{rank + " " + what + ": " + r.detail + " " + children_[i].take_output()};
    const json reply = json::parse(r.json, nullptr, false);
    if (reply.is_discarded() || !reply.value("ok", false))
      return error{rank + " " + what + ": " + (reply.is_discarded() ? r.json : reply.value("reason", r.json))};
  }
  return {};
}

status rank_processes::joined(std::int64_t steps) {
  if (auto s = collect("join"); !s) return s;
  return check_steps(steps);
}

std::string rank_processes::failures_so_far() const {
  std::string out;
  for (std::size_t i = 0; i < replies_.size(); ++i) {
    if (!done_[i]) continue;
    const auto& r = replies_[i];
    const json reply = json::parse(r.json, nullptr, false);
    std::string why;
    if (r.failure != child_failure::none) why = r.detail;
    else if (!reply.is_object() || !reply.value("ok", false)) why = reply.is_object() ? reply.value("reason", r.json) : r.json;
    if (!why.empty()) out += (out.empty() ? "" : "; ") + std::string("trainer rank ") + std::to_string(i + 1) + ": " + why;
  }
  return out;
}

status rank_processes::check_steps(std::int64_t steps) const {
  for (std::size_t i = 0; i < replies_.size(); ++i) {
    const json reply = json::parse(replies_[i].json, nullptr, false);
    const auto theirs = reply.value("steps", std::int64_t{-1});
    if (theirs != steps)
      return error{"trainer rank " + std::to_string(i + 1) + " is at step " + std::to_string(theirs) +
                   ", rank 0 at " + std::to_string(steps)};
  }
  return {};
}

std::string rank_processes::describe() const {
  std::string out;
  for (std::size_t i = 0; i < children_.size(); ++i) {
    const int d = o_.devices[i + 1];
    out += (i ? ", " : "") + std::string("rank ") + std::to_string(i + 1) + ": pid " +
           std::to_string(children_[i].pid()) + " on " + (d < 0 ? "cpu" : "cuda:" + std::to_string(d));
  }
  return out + ", summing over " + (o_.collective == "socket" ? "a ZeroMQ socket" : "NCCL");
}

status rank_processes::step(const std::vector<std::uint8_t>& batch, const std::function<status()>& local,
                            const std::function<std::int64_t()>& local_step) {
  if (broken_)
    return error{"the trainer's rank processes failed at an earlier step, so the ranks may differ: restart "
                 "the run (kforge run --resume continues it from its last checkpoint)"};
  for (std::size_t i = 0; i < children_.size(); ++i)
    if (!children_[i].running()) {
      broken_ = true;
      return error{"trainer rank " + std::to_string(i + 1) + " has ended: " + children_[i].take_output()};
    }
  send_all(json{{"op", "step"}, {"batch", to_hex(batch.data(), batch.size())}}.dump(), o_.step_timeout);
  status mine;
  try {
    mine = local();
  } catch (const std::exception& e) {  // the request threads are joined below either way
    mine = error{std::string("rank 0: ") + e.what()};
  }
  const status theirs = collect("step");
  status s = !theirs ? theirs : !mine ? mine : check_steps(local_step());
  if (!s) broken_ = true;
  return s;
}

}  // namespace kforge::pipeline
