#include "stages/trainer_ranks.hpp"

#include <signal.h>

#include <algorithm>
#include <cerrno>

#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "bus/socket.hpp"
#include "common/bind_address.hpp"
#include "common/hex.hpp"

namespace kforge::pipeline {

using json = nlohmann::json;
using clock_type = std::chrono::steady_clock;

namespace {

/// Why a rank's reply is not a success ("" when it is): how its process failed, or the reason
/// it gave (its raw text when it sent no JSON object).
std::string reply_failure(const child_reply& r) {
  if (r.failure != child_failure::none) return r.detail;
  const json reply = json::parse(r.json, nullptr, false);
  if (!reply.is_object()) return r.json;
  return reply.value("ok", false) ? std::string() : reply.value("reason", r.json);
}

}  // namespace

// Rank 0's side of the ranks on other hosts: a ROUTER socket they connect to. Used by one thread
// at a time (start() on the caller's, then each request on a thread of its own).
struct rank_processes::remote_link {
  zmq::context_t ctx{1};
  zmq::socket_t socket{ctx, zmq::socket_type::router};
  zmq::socket_t events{ctx, zmq::socket_type::pair};  ///< the socket's disconnects (zmq_socket_monitor)
  std::vector<std::string> ids;  ///< routing id of remote rank j
  std::vector<int> devices;      ///< its device, from its hello
  std::atomic<bool> abort{false};

  // Binds `endpoint` (the interface it names) and waits for `count` hellos (a rank resends its hello
  // until it hears from rank 0: repeats are dropped) from ranks of rank 0's kind (`cpu`).
  status accept(const std::string& endpoint, int count, bool cpu, std::chrono::milliseconds timeout) {
    try {
      socket.set(zmq::sockopt::linger, 0);
      socket.set(zmq::sockopt::router_mandatory, true);
      // A rank whose process ends drops its connection at once; one whose host goes away misses
      // heartbeats for 10 s. Either way a request in flight fails then, not at its time limit.
      socket.set(zmq::sockopt::heartbeat_ivl, 2000);
      socket.set(zmq::sockopt::heartbeat_timeout, 10000);
      static std::atomic<int> monitors{0};
      const std::string watch = "inproc://kforge-remote-ranks-" + std::to_string(monitors++);
      if (zmq_socket_monitor(socket.handle(), watch.c_str(), ZMQ_EVENT_DISCONNECTED) != 0) throw zmq::error_t();
      events.connect(watch);
      socket.bind(bind_address(endpoint));
      const auto deadline = clock_type::now() + timeout;
      while (static_cast<int>(ids.size()) < count) {
        auto m = receive(deadline, /*drops_fail=*/false);  // a rank may reconnect before its hello
        if (!m) return error{std::to_string(ids.size()) + " of " + std::to_string(count) + " remote rank(s) said hello at " +
                             endpoint + " (start them with kforge trainer-rank --connect " + endpoint + " --device N): " +
                             m.message()};
        const json hello = json::parse(m->second, nullptr, false);
        // Anything else that reaches the port (any program on the network it listens on) is not a rank.
        if (!hello.is_object() || !hello.contains("op") || hello["op"] != "hello" || !hello.contains("device") ||
            !hello["device"].is_number_integer())
          continue;
        if (std::find(ids.begin(), ids.end(), m->first) != ids.end()) continue;
        const int device = hello["device"].get<int>();
        if ((device < 0) != cpu)
          return error{"a rank from another host came with " + std::string(device < 0 ? "the CPU" : "a GPU") +
                       " (--device " + std::to_string(device) + ") to a group of " + (cpu ? "CPU" : "GPU") + " ranks"};
        ids.push_back(m->first);
        devices.push_back(device);
      }
      return {};
    } catch (const zmq::error_t& e) {
      return error{"remote ranks at " + endpoint + ": " + e.what()};
    }
  }

  // The next [id, text] message, or an error at the deadline, when aborted, or (drops_fail) when
  // a remote rank's connection drops.
  result<std::pair<std::string, std::string>> receive(clock_type::time_point deadline, bool drops_fail = true) {
    zmq::pollitem_t items[] = {{socket.handle(), 0, ZMQ_POLLIN, 0}, {events.handle(), 0, ZMQ_POLLIN, 0}};
    for (;;) {
      if (abort) return error{"stopped"};
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock_type::now());
      if (left.count() <= 0) return error{"no answer in time"};
      try {
        if (zmq::poll(items, 2, std::min(left, std::chrono::milliseconds(200))) <= 0) continue;
      } catch (const zmq::error_t& e) {  // a signal (Ctrl-C at the head): poll again
        if (e.num() != EINTR) throw;
        continue;
      }
      if (items[1].revents & ZMQ_POLLIN) {
        std::vector<zmq::message_t> event;  // its frames (event id and value, the peer) are not kept
        (void)bus::receive_within(events, event, 0, std::chrono::milliseconds(0));
        if (drops_fail) return error{"a remote rank's connection dropped (its process ended, or its host went away)"};
      }
      if (items[0].revents & ZMQ_POLLIN) break;
    }
    std::vector<zmq::message_t> frames;
    const auto parts = bus::receive_within(socket, frames, 2, std::chrono::milliseconds(0));
    if (!parts) return error{parts.message()};
    if (*parts != 2) return std::make_pair(std::string(), std::string());  // not ours: ignored
    return std::make_pair(frames[0].to_string(), frames[1].to_string());
  }

  // Request j to remote rank j, all numbered `number` (rank_processes numbers its requests), then
  // their replies into `replies` (done[j] set as each arrives; `failed` when one is not a
  // success); those that do not answer in time get a timeout. Never throws (it runs on threads of
  // its own and in the destructor): a failure of the socket itself is every unanswered rank's.
  void request_all(const std::vector<std::string>& requests, std::int64_t number, std::chrono::milliseconds timeout,
                   child_reply* replies, std::atomic<bool>* done, std::atomic<bool>& failed) noexcept {
    std::vector<bool> answered(ids.size(), false);
    try {
      request_all(requests, number, timeout, replies, done, failed, answered);
    } catch (const std::exception& e) {
      for (std::size_t j = 0; j < ids.size(); ++j)
        if (!answered[j]) {
          replies[j] = {child_failure::died, std::string("the remote ranks' socket failed: ") + e.what(), ""};
          done[j] = true;
        }
      failed = true;
    }
  }

  void request_all(const std::vector<std::string>& requests, std::int64_t number, std::chrono::milliseconds timeout,
                   child_reply* replies, std::atomic<bool>* done, std::atomic<bool>& failed, std::vector<bool>& answered) {
    for (std::size_t j = 0; j < ids.size(); ++j) {
      try {
        socket.send(zmq::buffer(ids[j]), zmq::send_flags::sndmore);
        socket.send(zmq::buffer(requests[j]), zmq::send_flags::none);
      } catch (const zmq::error_t& e) {
        replies[j] = {child_failure::died, std::string("unreachable: ") + e.what(), ""};
        answered[j] = true;
        failed = true;
        done[j] = true;
      }
    }
    const auto deadline = clock_type::now() + timeout;
    for (std::size_t left = std::count(answered.begin(), answered.end(), false); left > 0;) {
      auto m = receive(deadline);
      if (!m) {
        const bool late = m.message() == "no answer in time";
        for (std::size_t j = 0; j < ids.size(); ++j)
          if (!answered[j]) {
            replies[j] = late ? child_reply{child_failure::timeout, "no answer within " + std::to_string(timeout.count()) + " ms", ""}
                              : child_reply{child_failure::died, m.message(), ""};
            done[j] = true;
          }
        failed = true;
        return;
      }
      const auto at = std::find(ids.begin(), ids.end(), m->first);
      const json reply = json::parse(m->second, nullptr, false);
      if (at == ids.end() || !reply.is_object() || reply.value("seq", std::int64_t{-1}) != number) continue;  // late or foreign
      const auto j = static_cast<std::size_t>(at - ids.begin());
      if (answered[j]) continue;
      answered[j] = true;
      --left;
      replies[j] = {child_failure::none, "", m->second};
      if (!reply_failure(replies[j]).empty()) failed = true;
      done[j] = true;
    }
  }
};

rank_processes::rank_processes(rank_processes_options o) : o_(std::move(o)) {}

result<std::unique_ptr<rank_processes>> rank_processes::start(const rank_processes_options& o) {
  if (o.devices.empty() || o.devices.size() + static_cast<std::size_t>(std::max(0, o.remote)) < 2)
    return error{"trainer ranks: processes need 2 or more ranks"};
  std::unique_ptr<rank_processes> p(new rank_processes(o));
  const int local = static_cast<int>(o.devices.size());
  const int size = local + std::max(0, o.remote);
  for (int r = 1; r < local; ++r) {
    child_options co;  // the trainer's environment (CUDA, LibTorch threads): a rank is trusted code
    co.max_output = 256 << 10;
    auto c = child_process::start({o.program, "trainer-rank"}, co);
    if (!c) return error{"trainer rank " + std::to_string(r) + ": cannot start " + o.program + ": " + c.message()};
    p->pids_.push_back(c->pid());
    p->children_.push_back(std::move(*c));
  }
  // Sized before the remote ranks are awaited: a failed wait ends in the destructor, which uses them.
  p->replies_.resize(static_cast<std::size_t>(size - 1));
  p->done_ = std::make_unique<std::atomic<bool>[]>(p->replies_.size());
  if (o.remote > 0) {
    p->remote_ = std::make_unique<remote_link>();
    if (auto s = p->remote_->accept(o.remote_endpoint, o.remote, o.devices.front() < 0, o.join_timeout); !s)
      return error{"trainer ranks: " + s.message()};
  }
  std::vector<std::string> joins;  // one request, numbered once, with each rank's own fields
  const std::int64_t number = ++p->seq_;
  for (int r = 1; r < size; ++r) {
    json join = {{"op", "join"},
                 {"seq", number},
                 {"rank", r},
                 {"size", size},
                 {"device", p->device_of(static_cast<std::size_t>(r))},
                 {"manifest", o.manifest_text},
                 {"run_dir", o.run_dir},
                 {"resume_from", o.resume_from},
                 {"collective", o.collective},
                 {"endpoint", o.endpoint},
                 {"nccl_id", o.nccl_id}};
    joins.push_back(join.dump());
  }
  for (std::size_t i = 0; i < p->children_.size(); ++i)
    p->send_one(i, std::make_shared<const std::string>(joins[i]), o.join_timeout);
  if (p->remote_)
    p->send_remote({joins.begin() + static_cast<std::ptrdiff_t>(p->children_.size()), joins.end()}, number,
                   o.join_timeout);
  return p;
}

int rank_processes::device_of(std::size_t rank) const {
  if (rank < o_.devices.size()) return o_.devices[rank];
  return remote_ ? remote_->devices.at(rank - o_.devices.size()) : -1;
}

void rank_processes::send_remote(std::vector<std::string> requests, std::int64_t number,
                                 std::chrono::milliseconds timeout) {
  const std::size_t first = children_.size();
  for (std::size_t j = 0; j < requests.size(); ++j) done_[first + j] = false;
  threads_.emplace_back([this, first, requests = std::move(requests), number, timeout] {
    remote_->request_all(requests, number, timeout, &replies_[first], &done_[first], *failed_);
  });
}

rank_processes::~rank_processes() {
  if (!threads_.empty()) {
    // Requests still in flight (rank 0 never joined, so their joins wait for it): end the children,
    // which ends those requests, instead of waiting out their time limits. By the process groups
    // noted at start: the handles belong to the request threads until they are joined.
    for (const pid_t pid : pids_) ::killpg(pid, SIGKILL);
    if (remote_) remote_->abort = true;
    for (auto& t : threads_) t.join();
    return;  // the child_process handles reap them
  }
  const std::int64_t number = ++seq_;
  const std::string stop = json{{"op", "stop"}, {"seq", number}}.dump();
  for (auto& c : children_)
    if (c.running()) (void)c.request(stop, std::chrono::seconds(10));
  if (remote_)  // ranks on other hosts end on their own too when rank 0 goes away
    remote_->request_all(std::vector<std::string>(remote_->ids.size(), stop), number, std::chrono::seconds(10),
                         replies_.data() + children_.size(), done_.get() + children_.size(), *failed_);
}

void rank_processes::send_one(std::size_t i, std::shared_ptr<const std::string> request,
                              std::chrono::milliseconds timeout) {
  done_[i] = false;
  threads_.emplace_back([this, i, request = std::move(request), timeout] {
    replies_[i] = children_[i].request(*request, timeout);
    if (!reply_failure(replies_[i]).empty()) *failed_ = true;
    done_[i] = true;  // after the reply is written: failures_so_far reads it then
  });
}

void rank_processes::send_all(json request, std::chrono::milliseconds timeout) {
  *failed_ = false;
  request["seq"] = ++seq_;
  // Written once for every rank; shared, so it outlives a caller that throws.
  const auto line = std::make_shared<const std::string>(request.dump());
  for (std::size_t i = 0; i < children_.size(); ++i) send_one(i, line, timeout);
  if (remote_) send_remote(std::vector<std::string>(remote_->ids.size(), *line), seq_, timeout);
}

status rank_processes::collect(const char* what) {
  for (auto& t : threads_) t.join();
  threads_.clear();
  for (std::size_t i = 0; i < replies_.size(); ++i) {
    const auto why = reply_failure(replies_[i]);
    if (why.empty()) continue;
    // A process that failed may have said why on its output (a local child's is at hand).
    const bool ended = replies_[i].failure != child_failure::none && i < children_.size();
    return error{"trainer rank " + std::to_string(i + 1) + " " + what + ": " + why +
                 (ended ? " " + children_[i].take_output() : "")};
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
    const auto why = reply_failure(replies_[i]);
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
  for (std::size_t i = 0; i < replies_.size(); ++i) {
    const int d = device_of(i + 1);
    out += (i ? ", " : "") + std::string("rank ") + std::to_string(i + 1) + ": " +
           (i < children_.size() ? "pid " + std::to_string(children_[i].pid()) : std::string("another host")) + " on " +
           (d < 0 ? "cpu" : "cuda:" + std::to_string(d));
  }
  return out + ", summing over " + (o_.collective == "socket" ? "a ZeroMQ socket" : "NCCL");
}

status rank_processes::save_shards(const std::string& dir, std::int64_t steps) {
  if (broken_) return error{"the trainer's rank processes failed at an earlier step: no checkpoint of their state"};
  send_all({{"op", "save_shard"}, {"dir", dir}}, o_.step_timeout);
  if (auto s = collect("optimiser shard"); !s) return s;
  return check_steps(steps);  // a shard of another step would resume another run
}

status rank_processes::step(const std::vector<std::uint8_t>& batch, const std::function<status()>& local,
                            const std::function<std::int64_t()>& local_step) {
  if (broken_)
    return error{"the trainer's rank processes failed at an earlier step, so the ranks may differ: restart "
                 "the run (kforge run --resume continues it from its last checkpoint)"};
  for (std::size_t i = 0; i < children_.size(); ++i)  // (a remote rank that ended shows at its reply)
    if (!children_[i].running()) {
      broken_ = true;
      return error{"trainer rank " + std::to_string(i + 1) + " has ended: " + children_[i].take_output()};
    }
  send_all({{"op", "step"}, {"batch", to_hex(batch.data(), batch.size())}}, o_.step_timeout);
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
