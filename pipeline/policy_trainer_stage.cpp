#include "pipeline/policy_trainer_stage.hpp"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <thread>
#include <filesystem>
#include <functional>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <system_error>

#include <unistd.h>

#include "common/child_process.hpp"
#include "common/hex.hpp"
#include "common/subprocess.hpp"
#include "model/weights.hpp"
#include "pipeline/manifest.hpp"
#include "pipeline/trainer_ranks.hpp"
#include "pipeline/weights_publish.hpp"
#include "trainer/data_parallel_trainer.hpp"
#include "trainer/nccl_id.hpp"
#include "trainer/socket_group.hpp"

#include <zmq.hpp>
#if defined(KFORGE_WITH_CUDA)
#include "trainer/nccl_group.hpp"
#include "trainer/weight_broadcast.hpp"
#endif

namespace kforge::pipeline {

namespace fs = std::filesystem;

namespace {

/// The trainer-side view of a TrainBatch message (policy_trainer's plain structs).
trainer::train_batch to_train_batch(const wire::TrainBatch& batch) {
  trainer::train_batch out;
  out.step = batch.step();
  if (!batch.groups()) return out;
  for (const auto* g : *batch.groups()) {
    trainer::sample_group group;
    group.prompt_hash = g->prompt_hash();
    group.group_id = g->group_id();
    if (g->samples())
      for (const auto* s : *g->samples()) {
        trainer::train_sample t;
        t.reward = s->reward();
        t.policy_version = s->policy_version();
        if (s->excluded()) t.excluded = s->excluded()->str();
        const auto* c = s->verdict() ? s->verdict()->candidate() : nullptr;
        if (c && c->prompt_tokens()) t.prompt_tokens.assign(c->prompt_tokens()->begin(), c->prompt_tokens()->end());
        if (c && c->completion_tokens())
          t.completion_tokens.assign(c->completion_tokens()->begin(), c->completion_tokens()->end());
        if (c && c->logprobs()) t.logprobs.assign(c->logprobs()->begin(), c->logprobs()->end());
        group.samples.push_back(std::move(t));
      }
    out.groups.push_back(std::move(group));
  }
  return out;
}

nlohmann::json to_json(const trainer::policy_step_stats& s) {
  const auto& l = s.grpo.loss;
  const auto& a = s.grpo.advantages;
  return {{"step", s.step},
          {"batch_step", s.batch_step},
          {"policy_version", s.policy_version},
          {"stepped", s.grpo.stepped},
          {"loss", l.loss},
          {"policy_loss", l.policy_loss},
          {"kl_loss", l.kl_loss},
          {"kl", l.mean_kl},
          {"kl_coef_used", s.grpo.kl_coef},
          {"kl_coef", s.kl.coef},
          {"kl_window_mean", s.kl.window_mean},
          {"reward_mean", a.reward_mean},
          {"ratio_mean", l.mean_ratio},
          {"clip_fraction", l.clip_fraction},
          {"is_weight_mean", l.mean_is_weight},
          {"grad_norm", s.grpo.grad_norm},
          {"samples", s.grpo.samples},
          {"stale_samples", s.grpo.stale_samples},
          {"excluded_samples", s.excluded_samples},
          {"groups", a.groups},
          {"equal_groups", a.equal_groups},
          {"completion_tokens", s.completion_tokens},
          {"seconds", s.seconds},
          {"tokens_per_s", s.seconds > 0 ? static_cast<double>(s.completion_tokens) / s.seconds : 0.0}};
}

/// Drops the lines of `path` (train.jsonl) after step `step`: a run that died between checkpoints
/// logged steps its resume trains again, and the log keeps each step once.
status trim_log(const fs::path& path, std::int64_t step) {
  std::ifstream in(path);
  if (!in) return {};  // nothing logged yet
  std::string kept;
  bool trimmed = false;
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j.value("step", std::int64_t{0}) > step) {
      trimmed = true;
      continue;
    }
    kept += line + "\n";
  }
  in.close();
  if (!trimmed) return {};
  const fs::path tmp = path.string() + ".partial";
  std::ofstream(tmp, std::ios::trunc) << kept;
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec)
    return error{path.string() + ": cannot trim the steps after " + std::to_string(step) + ": " +
                 ec.message()};
  return {};
}

/// The TrainBatch as FlatBuffer bytes of its own, for the rank processes.
std::vector<std::uint8_t> batch_bytes(const wire::TrainBatch& batch) {
  wire::TrainBatchT t;
  batch.UnPackTo(&t);
  flatbuffers::FlatBufferBuilder fbb;
  fbb.Finish(wire::TrainBatch::Pack(fbb, &t));
  return {fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize()};
}

/// Every rank's data-parallel settings from the stage options (the devices and the trainer).
trainer::data_parallel_options dp_options(const policy_trainer_stage_options& o) {
  trainer::data_parallel_options dp;
  dp.model_dir = o.model_dir;
  for (int d : o.devices)
    dp.devices.push_back(d >= 0 ? at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(d)) : at::Device(at::kCPU));
  trainer::policy_trainer_options po;
  const auto& t = o.trainer;
  po.step.lr = t.lr;
  po.step.max_grad_norm = t.max_grad_norm;
  po.step.micro_batch_size = t.micro_batch;
  po.step.grpo.clip_eps_low = t.clip_eps_low;
  po.step.grpo.clip_eps_high = t.clip_eps_high;
  po.kl.initial_coef = t.kl_coef;
  po.kl.target_low = t.kl_target_low;
  po.kl.target_high = t.kl_target_high;
  po.kl.window = t.kl_window;
  po.kl.step = t.kl_step;
  po.bf16_compute = o.bf16_compute;
  po.temperature = o.temperature;
  po.seed = o.seed;
  po.source_dir = o.model_dir;
  dp.trainer = po;
  return dp;
}

/// How long a rank in a process of its own may take to join (load the model) or to step.
constexpr std::chrono::minutes rank_join_timeout{10};
constexpr std::chrono::minutes rank_step_timeout{30};

/// This process's rank of a group joined as `collective` says ("socket": at `endpoint`; "nccl":
/// with the unique id in hex), on CUDA device `device` (-1: the CPU). `give_up`: see socket_group.
result<std::shared_ptr<trainer::collective>> join_rank_group(const std::string& collective, const std::string& endpoint,
                                                             const std::string& nccl_id_hex, int rank, int size,
                                                             int device, std::function<bool()> give_up = {}) {
  if (collective == "socket")
    return trainer::make_socket_group(endpoint, rank, size, rank_step_timeout, std::move(give_up));
  if (collective != "nccl") return error{"unknown collective '" + collective + "'"};
#if defined(KFORGE_WITH_CUDA)
  trainer::nccl_id id;
  if (!from_hex(nccl_id_hex, id.bytes.data(), id.bytes.size())) return error{"a malformed NCCL unique id"};
  return trainer::make_nccl_group(id, rank, size, device);
#else
  (void)nccl_id_hex;
  (void)device;
  return error{"NCCL ranks need a kforge built with CUDA"};
#endif
}

class policy_trainer_stage final : public actors::trainer_logic {
 public:
  policy_trainer_stage(std::unique_ptr<trainer::data_parallel_trainer> t, policy_trainer_stage_options o,
                       std::unique_ptr<rank_processes> ranks)
      : trainer_(std::move(t)), o_(std::move(o)), ranks_(std::move(ranks)) {
    // A resumed trainer's checkpoint is the one it was loaded from.
    if (!o_.resume_from.empty()) last_checkpoint_ = static_cast<std::uint64_t>(trainer_->lead().steps());
  }

  status checkpoint() override { return save(static_cast<std::uint64_t>(trainer_->lead().steps())); }

  std::optional<std::uint64_t> checkpoint_step() const override { return last_checkpoint_; }

  result<wire::PolicyWeightsT> train(const wire::TrainBatch& batch,
                                     const actors::envelope_info&) override {
    result<trainer::policy_step_stats> stats = error{"not stepped"};
    if (ranks_) {  // the other ranks step in their processes, on the same batch
      const auto stepped = ranks_->step(
          batch_bytes(batch),
          [&]() -> status {
            stats = trainer_->step(to_train_batch(batch));
            return stats ? status{} : status{stats.err()};
          },
          [&] { return trainer_->lead().steps(); });
      if (!stepped) return stepped.err();
    } else {
      stats = trainer_->step(to_train_batch(batch));
    }
    if (!stats) return stats.err();
    const auto every = o_.trainer.checkpoint_every;
    if (every > 0 && stats->step % every == 0)
      if (auto s = save(static_cast<std::uint64_t>(stats->step)); !s) return s.err();
    const auto t0 = std::chrono::steady_clock::now();
    auto w = publish(stats->policy_version);
    const double publish_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const char* how = !w ? "failed" : w->transport == wire::WeightsTransport::nccl ? "nccl" : "file";
    if (auto s = log(*stats, how, publish_s); !s) {
      // An NCCL broadcast has started: the samplers must hear of it, or it waits for nobody.
      if (w && w->transport == wire::WeightsTransport::nccl) {
        std::cerr << "trainer: " << s.message() << std::endl;
        return w;
      }
      return s.err();
    }
    return w;
  }

 private:
  /// RUN_DIR/checkpoints/step-N for the current step N; nothing at step 0 (the base model is no
  /// state to resume) or when this step's checkpoint is already written.
  status save(std::uint64_t step) {
    if (step == 0 || last_checkpoint_ == step) return {};
    const auto dir = fs::path(o_.run_dir) / "checkpoints" / ("step-" + std::to_string(step));
    if (auto s = trainer_->save_checkpoint(dir.string()); !s) return s;
    last_checkpoint_ = step;
    return {};
  }

  status log(const trainer::policy_step_stats& s, const char* publish, double publish_s) {
    const auto path = fs::path(o_.run_dir) / "train.jsonl";
    std::ofstream out(path, std::ios::app);
    auto line = to_json(s);
    line["publish"] = publish;
    line["publish_seconds"] = publish_s;
    out << line.dump() << "\n";
    if (!out) return error{path.string() + ": cannot append the step's statistics"};
    return {};
  }

  // By NCCL while the channel works; by file otherwise, and for good once it has failed.
  result<wire::PolicyWeightsT> publish(std::uint64_t version) {
#if defined(KFORGE_WITH_CUDA)
    if (sender_) {
      auto b = sender_->publish(*trainer_->lead().compute_model(), version);
      if (b) {
        wire::PolicyWeightsT w;
        w.version = version;
        w.transport = wire::WeightsTransport::nccl;
        w.nccl_group = "weights";
        w.nccl_unique_id.assign(b->id.bytes.begin(), b->id.bytes.end());
        w.nccl_ranks = b->ranks;
        w.bytes = b->bytes;
        w.checksum = b->layout_hash;
        w.dtype = b->dtype;
        return w;
      }
      std::cerr << "trainer: NCCL weight publishing failed, weights go by file from version " << version << ": "
                << b.message() << std::endl;
      sender_.reset();
    }
#endif
    return publish_file(version);
  }

  result<wire::PolicyWeightsT> publish_file(std::uint64_t version) {
    const fs::path dir = fs::path(o_.run_dir) / "weights";
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) return error{dir.string() + ": cannot create: " + ec.message()};
    const auto name = [&](std::uint64_t v) { return dir / ("policy-v" + std::to_string(v) + ".safetensors"); };
    const fs::path path = name(version);
    const fs::path tmp = path.string() + ".partial";
    // The compute copy: bf16 when the trainer computes in bf16 (half the bytes to write and read,
    // and what a bf16 sampler would round the fp32 masters to anyway), else the fp32 policy.
    if (auto s = model::save_weights(*trainer_->lead().compute_model(), tmp.string()); !s) return s.err();
    fs::rename(tmp, path, ec);
    if (ec) return error{path.string() + ": cannot publish the weights: " + ec.message()};
    // Older files beyond keep_weights go; a sampler still reading one holds it open.
    if (version >= static_cast<std::uint64_t>(o_.keep_weights))
      fs::remove(name(version - static_cast<std::uint64_t>(o_.keep_weights)), ec);

    wire::PolicyWeightsT w;
    w.version = version;
    w.transport = wire::WeightsTransport::file;
    w.path = fs::absolute(path, ec).string();
    w.bytes = fs::file_size(path, ec);
    return w;
  }

  std::unique_ptr<trainer::data_parallel_trainer> trainer_;
  policy_trainer_stage_options o_;
  std::unique_ptr<rank_processes> ranks_;  ///< ranks 1..N-1 in processes of their own; null: none
  std::optional<std::uint64_t> last_checkpoint_;
#if defined(KFORGE_WITH_CUDA)
  std::unique_ptr<trainer::weight_sender> sender_;  ///< NCCL publishing; null: files

 public:
  void publish_by(std::unique_ptr<trainer::weight_sender> s) { sender_ = std::move(s); }
#endif
};

}  // namespace

result<std::shared_ptr<actors::trainer_logic>> make_policy_trainer_stage(
    const policy_trainer_stage_options& o) {
  if (o.model_dir.empty()) return error{"trainer: no model (sampler.model is empty)"};
  if (o.keep_weights < 1) return error{"trainer: keep_weights must be >= 1"};
  if (o.devices.empty()) return error{"trainer: no device"};
  auto dp = dp_options(o);
  std::unique_ptr<rank_processes> ranks;
  const auto remote = static_cast<int>(o.trainer.remote_ranks);
  if (o.trainer.ranks == trainer_ranks::processes && o.devices.size() + static_cast<std::size_t>(remote) > 1) {
    // Ranks 1..N-1 start and ask to join; this process joins as rank 0, which completes the group.
    rank_processes_options ro;
    ro.program = o.rank_program.empty() ? self_executable() : o.rank_program;
    ro.manifest_text = o.manifest_text;
    ro.run_dir = o.run_dir;
    ro.resume_from = o.resume_from;
    ro.devices = o.devices;
    ro.remote = remote;
    ro.remote_endpoint = o.trainer.rank_endpoint;
    ro.join_timeout = rank_join_timeout;
    ro.step_timeout = rank_step_timeout;
    if (o.devices.front() < 0) {
      ro.collective = "socket";
      static std::atomic<int> groups{0};  // several trainers in one process (tests) get an endpoint each
      ro.endpoint = "ipc:///tmp/kforge-trainer-ranks-" + std::to_string(::getpid()) + "-" +
                    std::to_string(groups++) + ".sock";
      if (remote > 0) {  // ranks on other hosts sum over tcp, on the port after rank_endpoint's
        const auto& e = o.trainer.rank_endpoint;
        const auto colon = e.rfind(':');
        ro.endpoint = e.substr(0, colon + 1) + std::to_string(std::stoi(e.substr(colon + 1)) + 1);
      }
    } else {
      ro.collective = "nccl";
#if defined(KFORGE_WITH_CUDA)
      auto id = trainer::new_nccl_id();
      if (!id) return error{"trainer: " + id.message()};
      ro.nccl_id = to_hex(id->bytes.data(), id->bytes.size());
#endif
    }
    if (remote > 0)
      std::cerr << "trainer: waiting up to " << rank_join_timeout.count() << " min for " << remote
                << " rank(s) from other hosts: start each there with kforge trainer-rank --connect "
                << ro.remote_endpoint << " --device N" << std::endl;
    auto started = rank_processes::start(ro);
    if (!started) return error{"trainer: " + started.message()};
    ranks = std::move(*started);
    auto group = join_rank_group(ro.collective, ro.endpoint, ro.nccl_id, 0, ranks->size(), o.devices.front(),
                                 ranks->failed());
    if (!group) {  // a child that failed first is the likelier cause: say both
      const auto theirs = ranks->failures_so_far();
      return error{"trainer: rank 0: " + group.message() + (theirs.empty() ? "" : "; " + theirs)};
    }
    dp.devices.erase(dp.devices.begin() + 1, dp.devices.end());  // this process: rank 0 only
    dp.group = *group;
  }
  auto pt = trainer::data_parallel_trainer::create(dp);
  if (!pt) return error{"trainer: " + pt.message()};
  if (!o.resume_from.empty()) {
    if (auto s = (*pt)->load_checkpoint(o.resume_from); !s)
      return error{"trainer: cannot resume from " + o.resume_from + ": " + s.message()};
    if (auto s = trim_log(fs::path(o.run_dir) / "train.jsonl", (*pt)->lead().steps()); !s)
      return error{"trainer: " + s.message()};
  }
  if (ranks) {
    if (auto s = ranks->joined((*pt)->lead().steps()); !s) return error{"trainer: " + s.message()};
    std::cerr << "trainer: ranks 1.." << ranks->size() - 1 << " joined from processes of their own ("
              << ranks->describe() << ")" << std::endl;
  }
  auto stage = std::make_shared<policy_trainer_stage>(std::move(*pt), o, std::move(ranks));
  if (o.publish_ranks > 0) {
#if defined(KFORGE_WITH_CUDA)
    if (o.devices.front() < 0) return error{"trainer: NCCL publishing needs the trainer on a GPU"};
    auto sender = trainer::weight_sender::create(o.devices.front(), o.publish_ranks, publish_timeout(o.trainer));
    if (!sender) return error{"trainer: " + sender.message()};
    stage->publish_by(std::move(*sender));
#else
    return error{"trainer: NCCL publishing asked for, and this kforge was built without CUDA"};
#endif
  }
  std::cerr << "trainer: new weights go to the samplers by "
            << (o.publish_ranks > 0 ? "NCCL broadcast (" + std::to_string(o.publish_ranks) + " ranks)" : "file")
            << ": " << o.publish_reason << std::endl;
  return std::shared_ptr<actors::trainer_logic>(std::move(stage));
}

result<policy_trainer_stage_options> policy_trainer_stage_options_from(const manifest& m,
                                                                       const std::string& run_dir) {
  policy_trainer_stage_options o;
  o.model_dir = m.sampler.model;
  const auto gpus = stage_gpus(m, actor_kind::trainer);
  if (!gpus) return error{"trainer: " + gpus.message()};
  // One rank per GPU of the group; on the CPU, trainer.cpu_ranks ranks.
  if (gpus->empty()) o.devices.assign(static_cast<std::size_t>(m.trainer.cpu_ranks), -1);
  else o.devices = *gpus;
  o.bf16_compute = m.trainer.compute == trainer_compute::bf16 ||
                   (m.trainer.compute == trainer_compute::automatic && !gpus->empty());
  o.run_dir = run_dir;
  o.trainer = m.trainer;
  o.manifest_text = m.text;
  o.temperature = m.sampler.temperature;
  o.seed = static_cast<std::uint64_t>(m.run.seed);
  o.keep_weights = static_cast<int>(m.buffer.max_staleness) + 2;
  auto plan = plan_weights_publish(m, trainer::nccl_built);
  if (!plan) return error{"trainer: " + plan.message()};
  o.publish_ranks = plan->nccl ? plan->ranks : 0;
  o.publish_reason = plan->reason;
  return o;
}

namespace {

// The child's side of pipeline/trainer_ranks.hpp.
class rank_process {
 public:
  nlohmann::json handle(const nlohmann::json& req) {
    const std::string op = req.value("op", "");
    if (op == "join") return join(req);
    if (op == "step") return step(req);
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
    auto group = join_rank_group(req.at("collective").get<std::string>(), req.value("endpoint", ""),
                                 req.value("nccl_id", ""), rank, size, device);
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

  static nlohmann::json failed(const std::string& why) { return {{"ok", false}, {"reason", why}}; }

  std::unique_ptr<trainer::data_parallel_trainer> trainer_;
};

}  // namespace

namespace {

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
          do {
            zmq::message_t f;
            (void)events.recv(f);
          } while (events.get(zmq::sockopt::rcvmore));
          if (heard && !done) {
            std::cerr << "kforge trainer-rank: rank 0 at " << connect << " went away: ending" << std::endl;
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
    std::cerr << "kforge trainer-rank: waiting for rank 0 at " << connect << " (device "
              << (device < 0 ? std::string("cpu") : "cuda:" + std::to_string(device)) << ")" << std::endl;
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
        std::cerr << "kforge trainer-rank: rank 0 at " << connect << " has been silent for "
                  << std::chrono::duration_cast<std::chrono::minutes>(silence).count() << " minutes: ending" << std::endl;
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
    std::cerr << "kforge trainer-rank: " << connect << ": " << e.what() << std::endl;
    return 2;
  }
}

}  // namespace kforge::pipeline
