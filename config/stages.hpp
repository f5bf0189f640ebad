#pragma once
// The vocabulary of a topology: the stage actors a process can host and the bus links between them,
// following the data flow in docs/architecture.md.

#include <array>
#include <cstddef>
#include <optional>
#include <string_view>

namespace kforge::pipeline {

/// A stage actor a process can host.
enum class actor_kind {
  task_generator,
  sampler,
  sandbox_pool,    ///< the broker in front of the sandbox workers
  sandbox_worker,
  reward,
  buffer,
  trainer,
};
inline constexpr std::size_t actor_kind_count = 7;
inline constexpr std::array<actor_kind, actor_kind_count> all_actor_kinds = {
    actor_kind::task_generator, actor_kind::sampler, actor_kind::sandbox_pool,
    actor_kind::sandbox_worker, actor_kind::reward,  actor_kind::buffer,
    actor_kind::trainer};

/// The manifest's spelling, e.g. "sandbox_pool".
std::string_view to_string(actor_kind k) noexcept;
/// Inverse of to_string; nullopt for an unknown name.
std::optional<actor_kind> actor_kind_from_string(std::string_view name) noexcept;
/// Whether the kind may be given a GPU group. The other kinds hold pipeline-wide state (task pool,
/// broker queue, baselines, dedup set) and run on the CPU.
bool uses_gpu(actor_kind k) noexcept;
/// Whether the pipeline needs exactly one of this kind (it owns state every sample must see).
bool is_singleton(actor_kind k) noexcept;

/// One bus link: a named socket pair between stages.
enum class link {
  tasks,            ///< task_generator -> sampler
  candidates,       ///< sampler -> sandbox_pool frontend
  sandbox_workers,  ///< sandbox_pool backend <-> sandbox_worker (load-balancing broker)
  verdicts,         ///< sandbox_pool -> reward
  scored,           ///< reward -> buffer
  batches,          ///< buffer -> trainer
  weights,          ///< trainer PUB -> samplers
  control,          ///< head PUB -> every process
  metrics,          ///< every process -> head
  feedback,         ///< reward -> task_generator: every scored sample, for the curriculum
  observations,     ///< reward -> sampler: a scored turn whose episode goes on
};
inline constexpr std::size_t link_count = 11;
// Newer links come last so the older ones keep their index (endpoints are indexed by link).
inline constexpr std::array<link, link_count> all_links = {
    link::tasks,   link::candidates, link::sandbox_workers, link::verdicts, link::scored,
    link::batches, link::weights,    link::control,         link::metrics,  link::feedback,
    link::observations};

/// What the manifest needs to know about a link to place and check its endpoint.
struct link_info {
  link id;
  std::string_view name;     ///< key under [endpoints], e.g. "verdicts"
  std::string_view pattern;  ///< socket pattern, for people reading summary()
  actor_kind from;           ///< sending end (unused when every_process)
  actor_kind to;             ///< receiving end (unused when every_process)
  bool every_process;        ///< control and metrics join the head with every process
};

/// Description of one link.
const link_info& info(link l) noexcept;
/// The manifest's spelling, e.g. "sandbox_workers".
std::string_view to_string(link l) noexcept;
/// Inverse of to_string; nullopt for an unknown name.
std::optional<link> link_from_string(std::string_view name) noexcept;

}  // namespace kforge::pipeline
