#include "stages/policy_trainer_stage.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <memory>
#include <optional>
#include <system_error>
#include <utility>

#include <unistd.h>

#include "common/file_writer.hpp"
#include "common/gpu_use_lock.hpp"
#include "common/hex.hpp"
#include "common/log.hpp"
#include "common/subprocess.hpp"
#include "common/visible_gpus.hpp"
#include "model/weights.hpp"
#include "config/manifest.hpp"
#include "stages/policy_trainer_common.hpp"
#include "stages/trainer_ranks.hpp"
#include "config/weights_publish.hpp"
#include "trainer/data_parallel_trainer.hpp"
#include "trainer/nccl_id.hpp"
#if defined(KFORGE_WITH_CUDA)
#include "trainer/weight_broadcast.hpp"
#endif

namespace kforge::pipeline {

namespace fs = std::filesystem;
using namespace policy_trainer_detail;

namespace {

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
          {"split_episodes", s.split_episodes},
          {"whole_episodes", s.whole_episodes},
          {"groups", a.groups},
          {"equal_groups", a.equal_groups},
          {"draw_signal_groups", a.draw_signal_groups},
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
  if (auto s = write_file_atomically(path.string(), kept); !s)
    return error{"cannot trim the steps after " + std::to_string(step) + ": " + s.message()};
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

  status take_write_failure() override { return std::exchange(unwritten_, status{}); }

  result<wire::PolicyWeightsT> train(const wire::TrainBatch& batch,
                                     const actors::envelope_info&) override {
    auto stats = step(batch);
    if (!stats) return stats.err();
    const auto every = o_.trainer.checkpoint_every;
    if (every > 0 && stats->step % every == 0)
      if (auto s = save(static_cast<std::uint64_t>(stats->step)); !s) return s.err();
    const auto t0 = std::chrono::steady_clock::now();
    auto w = publish(stats->policy_version);
    const double publish_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const char* how = !w                                             ? "failed"
                      : w->transport == wire::WeightsTransport::nccl ? "nccl"
                      : o_.publish_adapters                          ? "adapters"
                                                                     : "file";
    if (auto s = log(*stats, how, publish_s); !s) {
      // An NCCL broadcast has started: the samplers must hear of it, or it waits for nobody.
      if (w && w->transport == wire::WeightsTransport::nccl) {
        kforge::log::error("trainer: " + s.message());
        return w;
      }
      return s.err();
    }
    return w;
  }

 private:
  /// One GRPO step on `batch`, every rank of the trainer, with this process's GPUs held.
  result<trainer::policy_step_stats> step(const wire::TrainBatch& batch) {
    const auto gpus = hold_gpus();
    if (!ranks_) return trainer_->step(to_train_batch(batch));
    result<trainer::policy_step_stats> stats = error{"not stepped"};
    const auto stepped = ranks_->step(  // the other ranks step in their processes, on the same batch
        batch_bytes(batch),
        [&]() -> status {
          stats = trainer_->step(to_train_batch(batch));
          return stats ? status{} : status{stats.err()};
        },
        [&] { return trainer_->lead().steps(); });
    if (!stepped) return stepped.err();
    return stats;
  }

  /// A host-wide shared use of the GPUs this process steps on, held through a GRPO step: a
  /// sandbox timing a kernel on one of them (one GPU for rollout, sandbox and trainer) times alone,
  /// as with the sampler's decode windows (common/gpu_use_lock.hpp). Taken in physical-id order;
  /// a timer holds one GPU only, so there is no cycle. The cost: a timer waits out a whole step
  /// (and, behind its gate, so do new shared users). Rank processes (trainer.ranks = "processes")
  /// step on their GPUs without it.
  std::vector<std::unique_ptr<gpu_use_lock>> hold_gpus() const {
    std::vector<std::string> gpus;  // by physical id: the same order in every process of the host
    for (int d : ranks_ ? std::vector<int>{o_.devices.front()} : o_.devices)
      if (d >= 0) gpus.push_back(physical_gpu(d));
    std::sort(gpus.begin(), gpus.end());
    std::vector<std::unique_ptr<gpu_use_lock>> held;
    for (const auto& g : gpus) held.push_back(std::make_unique<gpu_use_lock>(g, false));
    return held;
  }

  /// `s`, the outcome of writing one of this stage's results, kept for take_write_failure when it
  /// is the first failure since the last ask.
  template <class R>
  R written(R s) {
    if (!s && unwritten_) unwritten_ = s.err();
    return s;
  }

  /// RUN_DIR/checkpoints/step-N for the current step N; nothing at step 0 (the base model is no
  /// state to resume) or when this step's checkpoint is already written.
  status save(std::uint64_t step) {
    if (step == 0 || last_checkpoint_ == step) return {};
    const auto dir = fs::path(o_.run_dir) / "checkpoints" / ("step-" + std::to_string(step));
    // With trainer.shard_optimizer each rank process adds its optimiser shard before the commit.
    trainer::policy_trainer::shard_writer shards;
    if (ranks_)
      shards = [this](const std::string& tmp) { return ranks_->save_shards(tmp, trainer_->lead().steps()); };
    if (auto s = written(trainer_->save_checkpoint(dir.string(), shards)); !s) return s;
    last_checkpoint_ = step;
    return {};
  }

  status log(const trainer::policy_step_stats& s, const char* publish, double publish_s) {
    auto line = to_json(s);
    line["publish"] = publish;
    line["publish_seconds"] = publish_s;
    // One whole line per step, checked through the close.
    return written(append_to_file((fs::path(o_.run_dir) / "train.jsonl").string(), line.dump() + "\n"));
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
      kforge::log::warn("trainer: NCCL weight publishing failed, weights go by file from version " +
                        std::to_string(version) + ": " + b.message());
      sender_.reset();
    }
#endif
    return written(publish_file(version));
  }

  // The version's weights (weights/policy-vN.safetensors) or, with publish_adapters, its LoRA
  // adapters alone (the PEFT directory weights/adapter-vN): written aside and renamed, so a sampler
  // never reads half of one.
  result<wire::PolicyWeightsT> publish_file(std::uint64_t version) {
    const fs::path dir = fs::path(o_.run_dir) / "weights";
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) return error{dir.string() + ": cannot create: " + ec.message()};
    const bool adapters = o_.publish_adapters;
    const auto name = [&](std::uint64_t v) {
      return dir / (adapters ? "adapter-v" + std::to_string(v) : "policy-v" + std::to_string(v) + ".safetensors");
    };
    const fs::path path = name(version);
    const fs::path tmp = path.string() + ".partial";
    fs::remove_all(tmp, ec);
    // The compute copy: bf16 when the trainer computes in bf16 (half the bytes to write and read,
    // and what a bf16 sampler would round the fp32 masters to anyway), else the fp32 policy.
    const auto written = adapters ? trainer_->lead().save_adapters(tmp.string())
                                  : model::save_weights(*trainer_->lead().compute_model(), tmp.string());
    if (!written) return written.err();
    if (adapters) fs::remove_all(path, ec);  // a directory is not renamed over (a file is, at once)
    fs::rename(tmp, path, ec);
    if (ec) return error{path.string() + ": cannot publish " + (adapters ? "the adapters: " : "the weights: ") + ec.message()};
    // Older ones beyond keep_weights go; a sampler still reading one holds it open.
    if (version >= static_cast<std::uint64_t>(o_.keep_weights))
      fs::remove_all(name(version - static_cast<std::uint64_t>(o_.keep_weights)), ec);

    wire::PolicyWeightsT w;
    w.version = version;
    w.transport = wire::WeightsTransport::file;
    w.adapter = adapters;
    w.path = fs::absolute(path, ec).string();
    w.bytes = fs::file_size(adapters ? path / model::adapter_weights_file : path, ec);
    return w;
  }

  std::unique_ptr<trainer::data_parallel_trainer> trainer_;
  policy_trainer_stage_options o_;
  std::unique_ptr<rank_processes> ranks_;  ///< ranks 1..N-1 in processes of their own; null: none
  std::optional<std::uint64_t> last_checkpoint_;
  status unwritten_;  ///< the first result not written since take_write_failure last asked
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
      kforge::log::info("trainer: waiting up to " + std::to_string(rank_join_timeout.count()) + " min for " +
                        std::to_string(remote) +
                        " rank(s) from other hosts: start each there with kforge trainer-rank --connect " +
                        ro.remote_endpoint + " --device N");
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
    kforge::log::info("trainer: ranks 1.." + std::to_string(ranks->size() - 1) +
                      " joined from processes of their own (" + ranks->describe() + ")");
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
  kforge::log::info("trainer: new weights go to the samplers by " +
                    (o.publish_ranks > 0 ? "NCCL broadcast (" + std::to_string(o.publish_ranks) + " ranks)"
                                         : std::string("file")) +
                    ": " + o.publish_reason);
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
  o.publish_adapters = plan->adapters;
  o.publish_reason = plan->reason;
  return o;
}

}  // namespace kforge::pipeline
