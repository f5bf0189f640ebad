#pragma once
// The pipeline manifest: which processes run where, the stage actors each hosts, the GPU groups they
// use, the bus endpoints between them, what to record, and the RL settings of every stage.
//
// A manifest is a TOML file; config/default_manifest.toml (embedded in the binary) documents every
// key. In short:
//
//   [run]         name, mode = "sync"|"async", steps, seed, run_dir (default "runs/<name>"), progress,
//                 stall_timeout_s, time_limit_s
//   [gpu_groups]  NAME = [gpu indices] | "auto"   ([] = CPU only; "auto" = decided at run time from
//                 the visible GPUs, see resolve_gpu_groups). A GPU may be in one group only.
//   [[process]]   name (unique), node ("local" = spawned by the head; anything else = a node where a
//                 user runs `kforge worker --manifest FILE --process NAME`), head (bool; default: the
//                 first process), and [process.actors] KIND = { count = N, gpu_group = "NAME" } for
//                 KIND in task_generator, sampler, sandbox_pool, sandbox_worker, reward, buffer,
//                 trainer. gpu_group only on sampler, sandbox_worker and trainer.
//   [endpoints]   LINK = "inproc://..."|"ipc://..."|"tcp://HOST:PORT" for each link in stages.hpp;
//                 a link left out gets inproc:// when both ends share a process, ipc:// under
//                 run_dir when they share this host, and must be given when they do not.
//   [record]      links = [LINK, ...] | "all", max_bytes (per recording file)
//   [tasks]       source = "builtin"|"files"|"stand-in", files, sampling and curriculum knobs, prompt
//                 template, [tasks.gpu] (the GPU the prompts describe)
//   [sampler] [reward] [buffer] [trainer] [sandbox]   see config/options/*.hpp
//
// Loading validates everything before anything starts; an error names the file, the key (dotted
// path with line:column) and the reason. Unknown keys are errors, never ignored.

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.hpp"
#include "config/options/agent_options.hpp"
#include "config/options/buffer_options.hpp"
#include "config/options/reward_options.hpp"
#include "config/options/run_options.hpp"
#include "config/options/sampler_options.hpp"
#include "config/options/sandbox_options.hpp"
#include "config/options/tasks_options.hpp"
#include "config/options/trainer_options.hpp"
#include "config/stages.hpp"

namespace kforge::pipeline {

/// A named set of GPU indices (ordinals among the visible devices).
struct gpu_group {
  std::string name;
  /// true for `NAME = "auto"`: the GPUs are chosen at run time (resolve_gpu_groups).
  bool automatic = false;
  /// The GPUs of an explicit group; empty means the group's actors run on the CPU.
  std::vector<int> gpus;
};

/// The most actors of one kind in one process. Each is a thread (a sampler also a model): more
/// than this is a typo, and would abort on allocation rather than fail the manifest.
inline constexpr int max_actor_count = 256;

/// `count` actors of one kind in one process. In [1, max_actor_count].
struct actor_spec {
  actor_kind kind = actor_kind::task_generator;
  int count = 1;
  /// Name of a [gpu_groups] entry; empty: the actor uses no GPU.
  std::string gpu_group;
};

/// One OS process of the topology.
struct process_spec {
  std::string name;
  /// "local": spawned by the head on its host. Otherwise a node name; someone runs
  /// `kforge worker --manifest FILE --process NAME` there.
  std::string node = "local";
  /// The process `kforge run` runs in; it spawns the local processes and owns control/metrics.
  bool head = false;
  /// At most one entry per kind, in file order.
  std::vector<actor_spec> actors;

  /// Whether the head spawns this process on its own host.
  bool is_local() const noexcept { return node == "local"; }
  /// The entry for `k`, or nullptr when this process hosts none.
  const actor_spec* find(actor_kind k) const noexcept;
  /// How many actors of kind `k` this process hosts.
  int count(actor_kind k) const noexcept;
};

/// The endpoint of one link.
struct endpoint_spec {
  link id = link::tasks;
  std::string address;
  /// true when the manifest left it out and it was derived (inproc:// or ipc:// under run_dir).
  bool derived = false;
};

/// Which links are recorded (messages/recording.hpp) and how large each file may grow.
struct record_options {
  std::vector<link> links;
  std::uint64_t max_bytes = std::uint64_t{1} << 30;
};

/// A validated manifest. Build it with parse_manifest, load_manifest or default_manifest only: they
/// guarantee the invariants (one head, every stage hosted, known GPU groups, endpoints set).
struct manifest {
  /// File name, or "<default manifest>" for the embedded one; used in messages.
  std::string source;
  /// The TOML text it was read from, for the run directory's snapshot and for spawned processes.
  std::string text;

  run_options run;
  std::vector<gpu_group> gpu_groups;     ///< in file order
  std::vector<process_spec> processes;   ///< in file order
  std::array<endpoint_spec, link_count> endpoints;  ///< indexed by link
  record_options record;

  tasks_options tasks;
  sampler_options sampler;
  reward_options reward;
  buffer_options buffer;
  trainer_options trainer;
  sandbox_options sandbox;
  agent_options agent;

  /// The process named `name`, or nullptr (e.g. for `kforge worker --process NAME`).
  const process_spec* find_process(std::string_view name) const noexcept;
  /// The head process (exactly one exists in a validated manifest).
  const process_spec& head() const noexcept;
  /// The processes hosting at least one actor of kind `k`, in file order.
  std::vector<const process_spec*> hosts(actor_kind k) const;
  /// Whether the run uses link `l`: all but observations always; observations only with
  /// multi-turn episodes ([agent] max_turns > 1). An unused link needs no endpoint and is not opened.
  bool uses(link l) const noexcept { return l != link::observations || agent.max_turns > 1; }
  /// The processes holding one end or the other of link `l`, in file order.
  std::vector<const process_spec*> processes_on(link l) const;
  /// The group named `name`, or nullptr.
  const gpu_group* find_gpu_group(std::string_view name) const noexcept;
  /// The endpoint of link `l`.
  const std::string& endpoint(link l) const noexcept { return endpoints[static_cast<int>(l)].address; }
  /// Total actors of kind `k` across all processes.
  int count(actor_kind k) const noexcept;
  /// A readable multi-line description (run, GPU groups, processes and their actors, endpoints,
  /// recording); `kforge run` prints it before starting.
  std::string summary() const;
};

/// Parses and validates manifest text. `source_name` is used in error messages (usually the path).
result<manifest> parse_manifest(std::string_view text, std::string_view source_name);

/// The endpoint of link `l`, which joins processes on different nodes and was left out: only a
/// launcher that knows the nodes' addresses can name it (launch/slurm_placement.hpp). `m` has its
/// processes and GPU groups checked. An error's message is the reason; the caller adds the key.
using cross_node_endpoint = std::function<result<std::string>(link l, const manifest& m)>;
/// parse_manifest, with the endpoints of links across nodes that the text leaves out derived by
/// `derive` instead of being an error.
result<manifest> parse_manifest(std::string_view text, std::string_view source_name,
                                const cross_node_endpoint& derive);
/// Reads, parses and validates the manifest file at `path`.
result<manifest> load_manifest(const std::string& path);
/// The embedded default manifest's TOML text (config/default_manifest.toml).
std::string_view default_manifest_text() noexcept;
/// The embedded default, parsed: everything in one local process named "head".
result<manifest> default_manifest();

/// GPU indices per group name for a host with `visible_gpus` GPUs. Explicit groups keep their
/// GPUs (an index >= visible_gpus is an error). "auto" groups share out the GPUs no explicit group
/// names, in file order, as evenly as possible with earlier groups taking the remainder; when there
/// are fewer free GPUs than auto groups, every auto group gets all of them (sharing is the only way
/// to run then); with none free they get none (CPU / compile-only).
result<std::map<std::string, std::vector<int>>> resolve_gpu_groups(const manifest& m,
                                                                   int visible_gpus);

/// The GPUs the actors of kind `k` use on this host: the group named by the first process hosting
/// `k` with a gpu_group, resolved against the GPUs this process sees (common/visible_gpus.hpp).
/// Empty — run on the CPU — when the kind names no group, the group is CPU-only or there is no
/// GPU. An error when the groups cannot be resolved here (a GPU index this host does not have):
/// never a silent fall-back to the CPU. One place, so the sampler, the sandbox and the trainer
/// agree.
result<std::vector<int>> stage_gpus(const manifest& m, actor_kind k);

/// sampler.require_gpu on this host: an error naming the sampler's GPU group when an engine
/// sampler with a model would run on the CPU here; ok otherwise (also for the stand-in and
/// openai samplers, which need no GPU of their own).
status check_sampler_gpu(const manifest& m);

/// How many steps of requests run ahead of the policy version: 1 in sync mode (step s waits for
/// the weights of step s - 1), 1 + buffer.max_staleness in async mode. The step driver releases by
/// it and the head's refill_policy counts what was released by it.
std::uint64_t step_lookahead(const manifest& m);

/// Empty when the manifest sets [buffer] dedup; else a note that the buffer deduplicates within
/// each group, as it has since the key was added, while a run made before then deduplicated across
/// the whole run (what to add to its manifest.toml to continue or replay it as it ran).
std::string dedup_left_out_note(const manifest& m);

}  // namespace kforge::pipeline
