// `kforge trainer-rank`: one data-parallel rank of the trainer in a process of its own, the
// child's side of stages/trainer_ranks.hpp: driven over fd 3 by the trainer that started it, or
// over ZeroMQ from rank 0 on another host (trainer.remote_ranks).
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "bus/socket.hpp"
#include "common/child_process.hpp"
#include "common/log.hpp"
#include "config/manifest.hpp"
#include "stages/policy_trainer_common.hpp"
#include "stages/policy_trainer_stage.hpp"

namespace kforge::pipeline {

using namespace policy_trainer_detail;

namespace {

// The child's side of stages/trainer_ranks.hpp.
class rank_process {
 public:
  nlohmann::json handle(const nlohmann::json& req) {
    const std::string op = req.value("op", "");
    if (op == "join") return join(req);
    if (op == "step") return step(req);
    if (op == "save_shard") return save_shard(req);
    if (op == "stop") return {{"ok", true}};
    return {{"ok", false}, {"reason", "unknown op '" + op + "'"}};
  }

 private:
  nlohmann::json join(const nlohmann::json& req) {
    if (trainer_) return failed("joined already");
    auto m = parse_manifest(req.at("manifest").get<std::string>(), "the trainer's manifest");
    if (!m) return failed(m.message());
    auto o = policy_trainer_stage_options_from(*m, req.at("run_dir").get<std::string>());
    if (!o) return failed(o.message());
    const int rank = req.at("rank").get<int>(), size = req.at("size").get<int>(), device = req.at("device").get<int>();
    o->devices = {device};
    auto dp = dp_options(*o);
    // A child of the trainer whose trainer died gives up its waits in the group (a remote rank's
    // watchdog ends its process instead).
    const pid_t parent = ::getppid();
    auto orphaned = [parent] { return ::getppid() != parent; };
    auto group = join_rank_group(req.at("collective").get<std::string>(), req.value("endpoint", ""),
                                 req.value("nccl_id", ""), rank, size, device, orphaned);
    if (!group) return failed(group.message());
    dp.group = *group;
    auto t = trainer::data_parallel_trainer::create(dp);
    if (!t) return failed(t.message());
    const std::string resume = req.value("resume_from", "");
    if (!resume.empty())
      if (auto s = (*t)->load_checkpoint(resume); !s) return failed("cannot resume from " + resume + ": " + s.message());
    trainer_ = std::move(*t);
    return {{"ok", true}, {"steps", trainer_->lead().steps()}};
  }

  nlohmann::json step(const nlohmann::json& req) {
    if (!trainer_) return failed("step before join");
    const std::string hex = req.at("batch").get<std::string>();
    std::vector<std::uint8_t> bytes(hex.size() / 2);
    if (!from_hex(hex, bytes.data(), bytes.size())) return failed("a malformed batch (not hex)");
    flatbuffers::Verifier v(bytes.data(), bytes.size());
    if (!v.VerifyBuffer<wire::TrainBatch>(nullptr)) return failed("a malformed batch (not a TrainBatch)");
    auto stats = trainer_->step(to_train_batch(*flatbuffers::GetRoot<wire::TrainBatch>(bytes.data())));
    if (!stats) return failed(stats.message());
    return {{"ok", true}, {"steps", trainer_->lead().steps()}, {"policy_version", stats->policy_version}};
  }

  // With trainer.shard_optimizer: this rank's optimiser shard into the checkpoint rank 0 is writing
  // (its temporary directory, committed by rank 0 once every shard is in).
  nlohmann::json save_shard(const nlohmann::json& req) {
    if (!trainer_) return failed("save_shard before join");
    if (auto s = trainer_->lead().save_optimizer_shard(req.at("dir").get<std::string>()); !s) return failed(s.message());
    return {{"ok", true}, {"steps", trainer_->lead().steps()}};
  }

  static nlohmann::json failed(const std::string& why) { return {{"ok", false}, {"reason", why}}; }

  std::unique_ptr<trainer::data_parallel_trainer> trainer_;
};

// Requests in, replies out (a request's number echoed), until stop or the end of the requests.
int serve_rank(const std::function<bool(std::string&)>& read, const std::function<bool(const std::string&)>& write) {
  rank_process rank;
  for (std::string line; read(line);) {
    const auto req = nlohmann::json::parse(line, nullptr, false);
    nlohmann::json reply;
    try {
      reply = req.is_object() ? rank.handle(req) : nlohmann::json{{"ok", false}, {"reason", "a malformed request"}};
    } catch (const std::exception& e) {  // a request missing a field
      reply = {{"ok", false}, {"reason", e.what()}};
    }
    if (req.is_object() && req.contains("seq")) reply["seq"] = req["seq"];
    if (!write(reply.dump())) return 1;
    if (req.is_object() && req.value("op", "") == "stop") return 0;
  }
  return 0;  // the trainer went away
}

}  // namespace

int trainer_rank_main(const std::string& connect, int device) {
  if (connect.empty()) {  // a child of the trainer: its channel is fd 3
    control_channel channel;
    return serve_rank([&](std::string& l) { return channel.read(l); },
                      [&](const std::string& s) { return channel.write(s); });
  }
  // A rank on another host: it says hello with its device and is then driven like a child.
  try {
    zmq::context_t ctx{1};
    zmq::socket_t socket{ctx, zmq::socket_type::dealer};
    socket.set(zmq::sockopt::linger, 1000);  // the stop reply gets out before the process ends
    // A fixed identity: after a reconnect rank 0 still knows whose replies these are.
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    socket.set(zmq::sockopt::routing_id, std::string(host) + "-" + std::to_string(::getpid()));
    socket.set(zmq::sockopt::heartbeat_ivl, 2000);  // a host that went away is noticed in 10 s
    socket.set(zmq::sockopt::heartbeat_timeout, 10000);
    socket.connect(connect);
    // Once rank 0 has spoken, losing the connection means it is gone, and this rank may be waiting
    // inside a step or a collective where no request can reach it: a watchdog ends the process
    // then (the run it belonged to is over), instead of leaving it to the silence limit.
    std::atomic<bool> heard{false}, done{false};
    zmq::socket_t events{ctx, zmq::socket_type::pair};
    const std::string watch = "inproc://kforge-trainer-rank-watch";
    if (zmq_socket_monitor(socket.handle(), watch.c_str(), ZMQ_EVENT_DISCONNECTED) != 0) throw zmq::error_t();
    events.connect(watch);
    std::thread watchdog([&] {
      try {
        zmq::pollitem_t item{events.handle(), 0, ZMQ_POLLIN, 0};
        while (!done) {
          if (zmq::poll(&item, 1, std::chrono::milliseconds(500)) <= 0) continue;
          std::vector<zmq::message_t> event;  // what happened does not matter, only that it did
          (void)bus::receive_within(events, event, 0, std::chrono::milliseconds(0));
          if (heard && !done) {
            kforge::log::error("kforge trainer-rank: rank 0 at " + connect + " went away: ending");
            std::_Exit(3);
          }
        }
      } catch (...) {  // the context is closing: nothing left to watch
      }
    });
    struct join_on_exit {
      std::atomic<bool>& done;
      std::thread& t;
      ~join_on_exit() {
        done = true;
        t.join();
      }
    } joiner{done, watchdog};
    const std::string hello = nlohmann::json{{"op", "hello"}, {"device", device}}.dump();
    kforge::log::info("kforge trainer-rank: waiting for rank 0 at " + connect + " (device " +
                      (device < 0 ? std::string("cpu") : "cuda:" + std::to_string(device)) + ")");
    // Rank 0 asks at least once per step; silent this long, it is gone (no orphan waits forever).
    const auto silence = 2 * std::chrono::milliseconds(rank_step_timeout) + std::chrono::milliseconds(rank_join_timeout);
    // Hello again every 2 s until rank 0 speaks: a rank 0 that started later, or again, hears it.
    const auto read = [&](std::string& line) {
      zmq::pollitem_t item{socket.handle(), 0, ZMQ_POLLIN, 0};
      for (auto waited = std::chrono::milliseconds(0); !heard && waited < silence; waited += std::chrono::seconds(2)) {
        socket.send(zmq::buffer(hello), zmq::send_flags::none);
        if (zmq::poll(&item, 1, std::chrono::milliseconds(2000)) > 0) heard = true;
      }
      if (!heard || zmq::poll(&item, 1, silence) <= 0) {
        kforge::log::error("kforge trainer-rank: rank 0 at " + connect + " has been silent for " +
                           std::to_string(std::chrono::duration_cast<std::chrono::minutes>(silence).count()) +
                           " minutes: ending");
        return false;
      }
      zmq::message_t m;
      (void)socket.recv(m);
      line = m.to_string();
      // Told to stop: rank 0 may close its socket right after the reply, which is no loss.
      if (line.find(R"("op":"stop")") != std::string::npos) done = true;
      return true;
    };
    const auto write = [&](const std::string& s) { return socket.send(zmq::buffer(s), zmq::send_flags::none).has_value(); };
    return serve_rank(read, write);
  } catch (const zmq::error_t& e) {
    kforge::log::error("kforge trainer-rank: " + connect + ": " + e.what());
    return 2;
  }
}

}  // namespace kforge::pipeline
