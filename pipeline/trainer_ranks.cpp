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
    p->children_.push_back(std::move(*c));
  }
  p->replies_.resize(p->children_.size());
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
    auto& child = p->children_[static_cast<std::size_t>(r - 1)];
    auto& reply = p->replies_[static_cast<std::size_t>(r - 1)];
    p->threads_.emplace_back([&child, &reply, line = join.dump(), t = o.join_timeout] { reply = child.request(line, t); });
  }
  return p;
}

rank_processes::~rank_processes() {
  if (!threads_.empty()) {
    // Requests still in flight (rank 0 never joined, so their joins wait for it): end the children,
    // which ends those requests, instead of waiting out their time limits.
    for (auto& c : children_)
      if (c.running()) ::killpg(c.pid(), SIGKILL);
    for (auto& t : threads_) t.join();
    return;  // the child_process handles reap them
  }
  for (auto& c : children_)
    if (c.running()) (void)c.request(json{{"op", "stop"}}.dump(), std::chrono::seconds(10));
}

void rank_processes::send_all(const std::string& request, std::chrono::milliseconds timeout) {
  for (std::size_t i = 0; i < children_.size(); ++i)
    threads_.emplace_back([this, i, &request, timeout] { replies_[i] = children_[i].request(request, timeout); });
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

status rank_processes::joined() { return collect("join"); }

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
  const std::string request = json{{"op", "step"}, {"batch", to_hex(batch.data(), batch.size())}}.dump();
  send_all(request, o_.step_timeout);  // `request` outlives the threads: collect() joins them below
  const status mine = local();
  const status theirs = collect("step");
  if (!mine) return mine;
  if (!theirs) return theirs;
  const std::int64_t want = local_step();
  for (std::size_t i = 0; i < replies_.size(); ++i) {
    const json reply = json::parse(replies_[i].json, nullptr, false);
    if (reply.value("steps", std::int64_t{-1}) != want)
      return error{"trainer rank " + std::to_string(i + 1) + " is at step " +
                   std::to_string(reply.value("steps", std::int64_t{-1})) + ", rank 0 at " + std::to_string(want)};
  }
  return {};
}

}  // namespace kforge::pipeline
