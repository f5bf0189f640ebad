#include "config/weights_publish.hpp"

#include <algorithm>

#include "common/visible_gpus.hpp"
#include "config/manifest.hpp"

namespace kforge::pipeline {

namespace {

// The GPUs of the group that actors of kind `k` name (the first such entry, as stage_gpus reads it).
std::vector<int> group_of(const manifest& m, const std::map<std::string, std::vector<int>>& groups, actor_kind k) {
  for (const auto* p : m.hosts(k))
    if (const auto* a = p->find(k); a && !a->gpu_group.empty()) {
      const auto it = groups.find(a->gpu_group);
      return it == groups.end() ? std::vector<int>{} : it->second;
    }
  return {};
}

// Empty when NCCL can carry the weights, else why not.
std::string why_not_nccl(const manifest& m, const std::map<std::string, std::vector<int>>& groups, bool nccl_built) {
  // The broadcast sends the model's parameters as they lie; with LoRA the samplers need the
  // adapters merged into them, which the trainer writes to a file.
  if (m.trainer.lora.enabled) return "trainer.lora is set: the samplers get the merged weights by file";
  if (!nccl_built) return "this kforge was built without CUDA and NCCL";
  if (m.sampler.model.empty()) return "the stand-in sampler has no weights";
  if (m.sampler.backend != sampler_backend::engine) return "the samplers are not engines";
  const auto trainer = group_of(m, groups, actor_kind::trainer);
  const auto rollout = group_of(m, groups, actor_kind::sampler);
  if (trainer.empty()) return "the trainer runs on the CPU";
  if (rollout.empty()) return "the samplers run on the CPU";
  std::map<std::string, std::string> node_process;  // a node's sampler process
  const std::string trainer_node = m.hosts(actor_kind::trainer).front()->node;
  for (const auto* p : m.hosts(actor_kind::sampler)) {
    // Another node may have no NCCL network to the trainer's, and resolves its "auto" groups from
    // its own GPUs: only an explicit "nccl" vouches for both.
    if (p->node != trainer_node && m.trainer.publish != weights_publish::nccl)
      return "the sampler of process " + p->name + " is on another node (trainer.publish = \"nccl\" to use NCCL there)";
    if (p->count(actor_kind::sampler) > 1)
      return "process " + p->name + " hosts " + std::to_string(p->count(actor_kind::sampler)) +
             " samplers, which share one GPU";
    if (auto [it, fresh] = node_process.emplace(p->node, p->name); !fresh)
      return "processes " + it->second + " and " + p->name + " put their samplers on the same GPU of node " + p->node;
    if (p->node == trainer_node && std::find(trainer.begin(), trainer.end(), rollout.front()) != trainer.end())
      return "the sampler of process " + p->name + " shares GPU " + std::to_string(rollout.front()) +
             " with the trainer";
  }
  return {};
}

}  // namespace

result<weights_publish_plan> plan_weights_publish(const manifest& m,
                                                  const std::map<std::string, std::vector<int>>& groups,
                                                  bool nccl_built) {
  weights_publish_plan plan;
  if (m.trainer.publish == weights_publish::adapters) {
    if (!m.trainer.lora.enabled)
      return error{m.source + ": trainer.publish = \"adapters\" publishes LoRA adapters: set [trainer] lora"};
    if (m.sampler.model.empty())
      return error{m.source + ": trainer.publish = \"adapters\": the stand-in sampler has no model to load them into"};
    plan.adapters = true;
    plan.reason = "trainer.publish = \"adapters\": each version's LoRA adapters, applied unmerged by the samplers";
    return plan;
  }
  if (m.trainer.publish == weights_publish::file) {
    plan.reason = "trainer.publish = \"file\"";
    return plan;
  }
  if (auto why = why_not_nccl(m, groups, nccl_built); !why.empty()) {
    if (m.trainer.publish == weights_publish::nccl)
      return error{m.source + ": trainer.publish = \"nccl\" cannot be used: " + why};
    plan.reason = why;
    return plan;
  }
  plan.nccl = true;
  plan.ranks = 1;
  for (const auto* p : m.hosts(actor_kind::sampler)) plan.sampler_rank[p->name] = plan.ranks++;
  plan.reason = "every sampler is an engine on a GPU of its own";
  return plan;
}

result<weights_publish_plan> plan_weights_publish(const manifest& m, bool nccl_built) {
  auto groups = resolve_gpu_groups(m, visible_gpu_count());
  if (!groups) return groups.err();
  return plan_weights_publish(m, *groups, nccl_built);
}

std::chrono::milliseconds publish_timeout(const trainer_options& t) {
  return std::chrono::milliseconds(static_cast<std::int64_t>(t.publish_timeout_s * 1000));
}

}  // namespace kforge::pipeline
