#include "trainer/data_parallel_trainer.hpp"

#include <algorithm>
#include <functional>
#include <optional>
#include <stdexcept>
#include <thread>

#include <ATen/detail/CUDAHooksInterface.h>

#include "model/weights.hpp"
#include "trainer/collective.hpp"
#if defined(KFORGE_WITH_CUDA)
#include "trainer/nccl_group.hpp"
#endif

namespace kforge::trainer {

namespace {

/// Runs f(r) for every rank, ranks >= 1 on threads of their own and rank 0 on the caller's (NCCL's
/// joins and collectives block until every rank has made them); the results in rank order. T is
/// a status or result: an exception out of f becomes that rank's error.
template <class T>
std::vector<T> on_every_rank(int ranks, const std::function<T(int)>& f) {
  std::vector<std::optional<T>> slots(static_cast<std::size_t>(ranks));  // T: a result, not default-constructible
  const auto guarded = [&](int r) {
    try {
      slots[static_cast<std::size_t>(r)].emplace(f(r));
    } catch (const std::exception& e) {
      slots[static_cast<std::size_t>(r)].emplace(error{e.what()});
    }
  };
  std::vector<std::thread> threads;
  for (int r = 1; r < ranks; ++r) threads.emplace_back(guarded, r);
  guarded(0);
  for (auto& t : threads) t.join();
  std::vector<T> out;
  for (auto& s : slots) out.push_back(std::move(*s));
  return out;
}

/// The first error among the ranks' results, named by rank; success when none failed.
template <class T>
status first_error(const std::vector<T>& results) {
  for (std::size_t r = 0; r < results.size(); ++r)
    if (!results[r]) return error{"rank " + std::to_string(r) + ": " + results[r].message()};
  return {};
}

}  // namespace

data_parallel_trainer::~data_parallel_trainer() {
  // All ranks at once: tearing down an NCCL communicator may wait for the group's other ranks.
  on_every_rank<status>(ranks(), [&](int r) -> status {
    ranks_[static_cast<std::size_t>(r)].reset();
    return {};
  });
}

result<std::unique_ptr<data_parallel_trainer>> data_parallel_trainer::create(const data_parallel_options& o) {
  const int n = static_cast<int>(o.devices.size());
  if (n == 0) return error{"data parallel: no device"};
  const bool cuda = o.devices.front().is_cuda();
  for (const auto& d : o.devices)
    if (d.is_cuda() != cuda) return error{"data parallel: the ranks' devices mix the CPU and CUDA"};
  if (cuda) {  // checked before any rank joins: a rank that cannot would leave the others waiting
    const int visible = at::detail::getCUDAHooks().getNumGPUs();
    std::vector<int> seen;
    for (const auto& d : o.devices) {
      const int i = d.index() < 0 ? 0 : d.index();
      if (i >= visible)
        return error{"data parallel: " + d.str() + " is not a device here (" + std::to_string(visible) + " visible)"};
      if (std::find(seen.begin(), seen.end(), i) != seen.end())
        return error{"data parallel: " + d.str() + " is given twice (one rank per GPU)"};
      seen.push_back(i);
    }
  }

  // How rank r joins its group: none for one rank; the threads of this process on the CPU; NCCL on
  // CUDA devices.
  std::function<result<std::shared_ptr<collective>>(int)> join = [](int) -> result<std::shared_ptr<collective>> {
    return std::shared_ptr<collective>();
  };
  if (o.group) {
    if (n != 1) return error{"data parallel: a joined group takes one device per process, not " + std::to_string(n)};
    join = [group = o.group](int) -> result<std::shared_ptr<collective>> { return group; };
  } else if (n > 1 && !cuda) {
    auto group = make_thread_group(n);
    join = [group](int r) -> result<std::shared_ptr<collective>> { return group[static_cast<std::size_t>(r)]; };
  } else if (n > 1) {
#if defined(KFORGE_WITH_CUDA)
    auto id = new_nccl_id();
    if (!id) return error{"data parallel: " + id.message()};
    nccl_group_options no;
    no.background_sums = o.in_process_background_sums;
    join = [id = *id, n, devices = o.devices, no](int r) {
      return make_nccl_group(id, r, n, devices[static_cast<std::size_t>(r)].index(), no);
    };
#else
    return error{"data parallel over " + std::to_string(n) +
                 " GPUs needs a build with NCCL (KFORGE_WITH_CUDA); this one has none"};
#endif
  }

  std::unique_ptr<data_parallel_trainer> dp(new data_parallel_trainer());
  dp->ranks_.resize(static_cast<std::size_t>(n));
  auto built = on_every_rank<status>(n, [&](int r) -> status {
    auto group = join(r);
    if (!group) return group.err();
    model::load_options lo;
    // fp32 weights and optimiser state: the master copy. A LoRA base in bf16 is frozen and kept in
    // bf16 (policy_trainer), so it is loaded so: no fp32 copy of it passes through the device.
    lo.dtype = o.trainer.lora && o.trainer.bf16_compute ? at::kBFloat16 : at::kFloat;
    lo.device = o.devices[static_cast<std::size_t>(r)];
    auto lm = model::load_causal_lm(o.model_dir, lo);
    if (!lm) return lm.err();
    for (auto& p : (*lm)->parameters(/*recurse=*/true)) p.set_requires_grad(true);
    auto opts = o.trainer;
    opts.group = *group;
    try {
      dp->ranks_[static_cast<std::size_t>(r)] = std::make_unique<policy_trainer>(std::move(*lm), opts);
    } catch (const std::exception& e) {  // invalid options
      return error{e.what()};
    }
    return {};
  });
  if (auto s = first_error(built); !s) return error{"data parallel: " + s.message()};
  return dp;
}

result<policy_step_stats> data_parallel_trainer::step(const train_batch& batch) {
  auto results = on_every_rank<result<policy_step_stats>>(
      ranks(), [&](int r) { return ranks_[static_cast<std::size_t>(r)]->step(batch); });
  if (auto s = first_error(results); !s) return s.err();
  return std::move(results.front());
}

status data_parallel_trainer::save_checkpoint(const std::string& dir, const policy_trainer::shard_writer& remote_shards) {
  if (ranks_.size() == 1) return lead().save_checkpoint(dir, remote_shards);
  // Ranks of this process: each writes its own optimiser shard (nothing without shard_optimizer);
  // no collective is involved, so one thread writes them in turn.
  return lead().save_checkpoint(dir, [this](const std::string& tmp) -> status {
    for (std::size_t r = 1; r < ranks_.size(); ++r)
      if (auto s = ranks_[r]->save_optimizer_shard(tmp); !s) return error{"rank " + std::to_string(r) + ": " + s.message()};
    return {};
  });
}

status data_parallel_trainer::load_checkpoint(const std::string& dir) {
  // One rank after another: the checkpoint also restores LibTorch's process-wide generators.
  for (std::size_t r = 0; r < ranks_.size(); ++r)
    if (auto s = ranks_[r]->load_checkpoint(dir); !s) return error{"rank " + std::to_string(r) + ": " + s.message()};
  return {};
}

}  // namespace kforge::trainer
