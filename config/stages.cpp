#include "config/stages.hpp"

namespace kforge::pipeline {
namespace {

constexpr std::array<std::string_view, actor_kind_count> actor_names = {
    "task_generator", "sampler", "sandbox_pool", "sandbox_worker", "reward", "buffer", "trainer"};

constexpr std::array<link_info, link_count> links = {{
    {link::tasks, "tasks", "push/pull", actor_kind::task_generator, actor_kind::sampler, false},
    {link::candidates, "candidates", "push/pull", actor_kind::sampler, actor_kind::sandbox_pool,
     false},
    {link::sandbox_workers, "sandbox_workers", "router/dealer", actor_kind::sandbox_pool,
     actor_kind::sandbox_worker, false},
    {link::verdicts, "verdicts", "push/pull", actor_kind::sandbox_pool, actor_kind::reward, false},
    {link::scored, "scored", "push/pull", actor_kind::reward, actor_kind::buffer, false},
    {link::batches, "batches", "push/pull", actor_kind::buffer, actor_kind::trainer, false},
    {link::weights, "weights", "pub/sub", actor_kind::trainer, actor_kind::sampler, false},
    {link::control, "control", "pub/sub", actor_kind::trainer, actor_kind::trainer, true},
    {link::metrics, "metrics", "push/pull", actor_kind::trainer, actor_kind::trainer, true},
    {link::feedback, "feedback", "push/pull", actor_kind::reward, actor_kind::task_generator,
     false},
    {link::observations, "observations", "push/pull", actor_kind::reward, actor_kind::sampler, false},
}};

}  // namespace

std::string_view to_string(actor_kind k) noexcept { return actor_names[static_cast<int>(k)]; }

std::optional<actor_kind> actor_kind_from_string(std::string_view name) noexcept {
  for (std::size_t i = 0; i < actor_names.size(); ++i)
    if (actor_names[i] == name) return static_cast<actor_kind>(i);
  return std::nullopt;
}

bool uses_gpu(actor_kind k) noexcept {
  return k == actor_kind::sampler || k == actor_kind::sandbox_worker || k == actor_kind::trainer;
}

bool is_singleton(actor_kind k) noexcept { return !uses_gpu(k); }

const link_info& info(link l) noexcept { return links[static_cast<int>(l)]; }

std::string_view to_string(link l) noexcept { return info(l).name; }

std::optional<link> link_from_string(std::string_view name) noexcept {
  for (const auto& li : links)
    if (li.name == name) return li.id;
  return std::nullopt;
}

}  // namespace kforge::pipeline
