// Pass 1 of manifest validation: each table on its own (known keys, types, ranges).

#include <algorithm>
#include <cctype>

#include "common/gpu_arch.hpp"
#include "config/endpoint_check.hpp"
#include "config/manifest_internal.hpp"

namespace kforge::pipeline::detail {
namespace {

std::string known_kinds() {
  std::string s;
  for (auto k : all_actor_kinds) s += (s.empty() ? "" : ", ") + std::string(to_string(k));
  return s;
}

std::string known_links() {
  std::string s;
  for (auto l : all_links) s += (s.empty() ? "" : ", ") + std::string(to_string(l));
  return s;
}

void read_run(table_reader r, run_options& o) {
  if (r.read("name", o.name) && !is_plain_name(o.name))
    r.fail("name", "must be non-empty and use only letters, digits, '_', '-' and '.' (it names the "
                   "run directory), got \"" + o.name + "\"");
  r.read_choice("mode", o.mode, {{"sync", run_mode::sync}, {"async", run_mode::async}});
  r.read("steps", o.steps, 1);
  r.read("seed", o.seed, 0);
  if (r.read("run_dir", o.run_dir)) {
    if (o.run_dir.empty()) r.fail("run_dir", "must not be empty");
  } else {
    o.run_dir = "runs/" + o.name;
  }
  r.read("progress", o.progress);
  r.read("stall_timeout_s", o.stall_timeout_s, above(0));
  r.read("time_limit_s", o.time_limit_s, at_least(0));
  r.read("metrics_port", o.metrics_port, 0, 65535);
  r.finish();
}

// toml::table is ordered by key, but "auto" groups share GPUs out in the order they are written.
std::vector<std::pair<const toml::key*, const toml::node*>> in_file_order(const toml::table& t) {
  std::vector<std::pair<const toml::key*, const toml::node*>> out;
  for (auto&& [k, v] : t) out.emplace_back(&k, &v);
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    const auto& x = a.first->source().begin;
    const auto& y = b.first->source().begin;
    return x.line != y.line ? x.line < y.line : x.column < y.column;
  });
  return out;
}

void read_gpu_groups(diagnostics& d, const toml::table& t, std::vector<gpu_group>& out) {
  for (auto [kp, vp] : in_file_order(t)) {
    const toml::key& k = *kp;
    const toml::node& v = *vp;
    const std::string key = join_key("gpu_groups", k.str());
    gpu_group g;
    g.name = std::string(k.str());
    if (g.name.empty()) {
      d.add(&k.source(), key, "a GPU group needs a non-empty name");
      continue;
    }
    if (v.is_string() && v.as_string()->get() == "auto") {
      g.automatic = true;
    } else if (const toml::array* a = v.as_array()) {
      for (const toml::node& e : *a) {
        if (!e.is_integer() || e.as_integer()->get() < 0) {
          d.add(&e, key, "GPU indices must be integers >= 0");
          continue;
        }
        const int gpu = static_cast<int>(e.as_integer()->get());
        if (std::find(g.gpus.begin(), g.gpus.end(), gpu) != g.gpus.end())
          d.add(&e, key, "GPU " + std::to_string(gpu) + " is listed twice");
        else
          g.gpus.push_back(gpu);
      }
    } else {
      d.add(&v, key, "expected an array of GPU indices (e.g. [0, 1]; [] for CPU only) or \"auto\", got " +
                         std::string(v.is_string() ? "\"" + v.as_string()->get() + "\""
                                                   : std::string(type_name(v))));
      continue;
    }
    out.push_back(std::move(g));
  }
}

void read_actor(table_reader r, actor_kind kind, actor_spec& a) {
  a.kind = kind;
  r.read("count", a.count, 1, max_actor_count);
  if (r.read("gpu_group", a.gpu_group)) {
    if (a.gpu_group.empty())
      r.fail("gpu_group", "must not be empty (leave the key out for an actor without a GPU)");
    else if (!uses_gpu(kind))
      r.fail("gpu_group", "a " + std::string(to_string(kind)) +
                              " runs on the CPU; only sampler, sandbox_worker and trainer take "
                              "a gpu_group");
  }
  r.finish();
}

void read_process(table_reader r, process_spec& p) {
  if (!r.read("name", p.name)) {
    if (!r.table().contains("name"))
      r.diag().add(&r.table(), r.key("name"), "missing: every process needs a unique name");
  } else if (!is_plain_name(p.name)) {
    r.fail("name", "must be non-empty and use only letters, digits, '_', '-' and '.' (it is given "
                   "on the command line as --process NAME), got \"" + p.name + "\"");
  }
  if (r.read("node", p.node) && p.node.empty())
    r.fail("node", "must not be empty (\"local\" for the head's host)");
  r.read("head", p.head);
  const bool has_actors = r.table().contains("actors");
  const toml::table* actors = r.subtable("actors");  // reports a wrong type
  if (!has_actors) {
    r.diag().add(&r.table(), r.key("actors"),
                 "missing: a process must host at least one actor (" + known_kinds() + ")");
  } else if (actors && actors->empty()) {
    r.diag().add(actors, r.key("actors"),
                 "empty: a process must host at least one actor (" + known_kinds() + ")");
  } else if (actors) {
    const std::string path = r.key("actors");
    for (auto&& [k, v] : *actors) {
      const std::string key = join_key(path, k.str());
      const auto kind = actor_kind_from_string(k.str());
      if (!kind) {
        r.diag().add(&k.source(), key, "unknown actor kind (known: " + known_kinds() + ")");
      } else if (!v.is_table()) {
        r.diag().add(&v, key,
                     "expected a table such as { count = 1 }, got " + std::string(type_name(v)));
      } else {
        actor_spec a;
        read_actor(table_reader(r.diag(), *v.as_table(), key), *kind, a);
        p.actors.push_back(std::move(a));
      }
    }
    // Pipeline order (task_generator first) reads better in summary() than the table's key order.
    std::sort(p.actors.begin(), p.actors.end(),
              [](const actor_spec& a, const actor_spec& b) { return a.kind < b.kind; });
  }
  r.finish();
}

void read_processes(diagnostics& d, const toml::node& n, std::vector<process_spec>& out) {
  const toml::array* a = n.as_array();
  if (!a || !a->is_array_of_tables()) {
    d.add(&n, "process",
          "expected an array of tables (write each process as [[process]]), got " +
              std::string(type_name(n)));
    return;
  }
  for (std::size_t i = 0; i < a->size(); ++i) {
    process_spec p;
    read_process(table_reader(d, *a->get(i)->as_table(), "process[" + std::to_string(i) + "]"), p);
    out.push_back(std::move(p));
  }
}

void read_endpoints(diagnostics& d, const toml::table& t,
                    std::array<endpoint_spec, link_count>& out) {
  for (auto&& [k, v] : t) {
    const std::string key = join_key("endpoints", k.str());
    const auto l = link_from_string(k.str());
    if (!l) {
      d.add(&k.source(), key, "unknown link (known: " + known_links() + ")");
      continue;
    }
    if (!v.is_string()) {
      d.add(&v, key, "expected a string such as \"tcp://host:5555\", got " +
                         std::string(type_name(v)));
      continue;
    }
    const std::string address = v.as_string()->get();
    if (auto parts = check_endpoint(address); !parts.ok()) {
      d.add(&v, key, parts.message());
      continue;
    }
    out[static_cast<int>(*l)].address = address;
  }
}

void read_record(table_reader r, record_options& o) {
  if (const toml::node* n = r.take("links")) {
    if (n->is_string() && n->as_string()->get() == "all") {
      o.links.assign(all_links.begin(), all_links.end());
    } else if (const toml::array* a = n->as_array()) {
      o.links.clear();
      for (const toml::node& e : *a) {
        const auto l = e.is_string() ? link_from_string(e.as_string()->get()) : std::nullopt;
        if (!l)
          r.diag().add(&e, r.key("links"), "unknown link (known: " + known_links() + ")");
        else if (std::find(o.links.begin(), o.links.end(), *l) == o.links.end())
          o.links.push_back(*l);
      }
    } else {
      r.fail("links", "expected an array of link names or \"all\", got " +
                          std::string(type_name(*n)));
    }
  }
  std::int64_t max_bytes = static_cast<std::int64_t>(o.max_bytes);
  if (r.read("max_bytes", max_bytes, 4096)) o.max_bytes = static_cast<std::uint64_t>(max_bytes);
  r.finish();
}

// "9.0" -> (9, 0): how nvidia-smi and the CUDA docs write a compute capability.
bool parse_compute_capability(const std::string& s, int& major, int& minor) {
  const auto dot = s.find('.');
  if (dot == std::string::npos || dot == 0 || dot + 1 == s.size() || dot > 2 || s.size() - dot > 3)
    return false;
  for (std::size_t i = 0; i < s.size(); ++i)
    if (i != dot && !std::isdigit(static_cast<unsigned char>(s[i]))) return false;
  major = std::stoi(s.substr(0, dot));
  minor = std::stoi(s.substr(dot + 1));
  return major > 0;
}

// [tasks.gpu]: what the prompts say about the GPU. Every key is optional; absent reads "unknown".
void read_task_gpu(table_reader r, gpu_facts& g) {
  if (r.read("name", g.name) && g.name.empty())
    r.fail("name", "must not be empty (leave the key out for \"unknown\")");
  std::string cc;
  if (r.read("compute_capability", cc) && !parse_compute_capability(cc, g.major, g.minor))
    r.fail("compute_capability", "expected MAJOR.MINOR such as \"9.0\", got \"" + cc + "\"");
  r.read("sm_count", g.sm_count, 1);
  r.read("shared_per_block", g.shared_per_block, 1);
  r.read("shared_per_block_optin", g.shared_per_block_optin, 1);
  r.read("shared_per_sm", g.shared_per_sm, 1);
  r.read("registers_per_sm", g.registers_per_sm, 1);
  r.read("l2_bytes", g.l2_bytes, 1);
  r.read("memory_bytes", g.memory_bytes, 1);
  r.read("memory_bandwidth_gbs", g.memory_bandwidth_gbs, above(0));
  r.finish();
}

void read_tasks(table_reader r, tasks_options& o) {
  r.read_choice("source", o.source,
                {{"builtin", task_source_kind::builtin},
                 {"files", task_source_kind::files},
                 {"stand-in", task_source_kind::stand_in}});
  bool files_bad = false;  // already an error of its own: no second one about an empty pool
  if (const toml::node* n = r.take("files")) {
    if (const toml::array* a = n->as_array()) {
      for (std::size_t i = 0; i < a->size(); ++i) {
        const toml::node& e = *a->get(i);
        const std::string key = r.key("files") + "[" + std::to_string(i) + "]";
        if (e.is_string() && !e.as_string()->get().empty()) {
          o.files.push_back(e.as_string()->get());
          continue;
        }
        files_bad = true;
        r.diag().add(&e, key, e.is_string() ? "must not be empty"
                                            : "expected a file path (a string), got " + std::string(type_name(e)));
      }
    } else {
      files_bad = true;
      r.fail("files", "expected an array of task file paths, got " + std::string(type_name(*n)));
    }
  }
  if (o.source == task_source_kind::files && o.files.empty() && !files_bad)
    r.fail("files", "must name at least one task file: tasks.source = \"files\" makes the pool of them alone");
  r.read_choice("sampling", o.sampling,
                {{"curriculum", task_sampling::curriculum}, {"uniform", task_sampling::uniform}});
  std::int64_t window = static_cast<std::int64_t>(o.window);
  if (r.read("window", window, 1, static_cast<std::int64_t>(max_curriculum_window))) o.window = static_cast<std::size_t>(window);
  r.read("floor", o.floor, at_least(0));
  r.read("unseen_bonus", o.unseen_bonus, at_least(0));
  r.read("prompt_template", o.prompt_template);
  if (const toml::table* t = r.subtable("gpu"))
    read_task_gpu(table_reader(r.diag(), *t, r.key("gpu")), o.gpu);
  r.finish();
}

void read_sampler_server(table_reader r, sampler_server& o) {
  o.enabled = true;
  r.read("command", o.command);
  r.read("port", o.port, 1, 65535);
  r.read("count", o.count, 0, 1024);
  r.read("ready_timeout_s", o.ready_timeout_s, above(0));
  if (o.command.find("{port}") == std::string::npos)
    r.diag().add(r.table().get("command"), r.key("command"),
                 o.command.empty() ? "missing: the command line that starts one server"
                                   : "must contain {port}: each server listens on its own port");
  r.finish();
}

void read_sampler(table_reader r, sampler_options& o) {
  r.read_choice("backend", o.backend,
                {{"engine", sampler_backend::engine}, {"openai", sampler_backend::openai}});
  r.read("group_size", o.group_size, 2, max_group_size);
  r.read("temperature", o.temperature, above(0));
  r.read("top_p", o.top_p, real_range{0, 1, true, false});
  r.read("max_new_tokens", o.max_new_tokens, 1, max_new_tokens_limit);
  r.read("batch_requests", o.batch_requests, 1, max_batch_requests);
  r.read("batch_turns_with_groups", o.batch_turns_with_groups);
  r.read("model", o.model);
  r.read("server_url", o.server_url);
  if (const toml::node* n = r.take("server_urls")) {
    const toml::array* a = n->as_array();
    bool ok = a != nullptr && !a->empty();
    if (ok)
      for (const auto& e : *a) {
        const auto* s = e.as_string();
        if (s == nullptr || s->get().empty()) {
          ok = false;
          break;
        }
        o.server_urls.push_back(s->get());
      }
    if (!ok) {
      o.server_urls.clear();
      r.fail("server_urls", "must be a non-empty array of URL strings");
    }
  }
  r.read("require_gpu", o.require_gpu);
  r.read("stand_in_repeat_every", o.stand_in_repeat_every, 0);
  r.read_choice("adapter_api", o.adapter_api,
                {{"sglang", server_adapter_api::sglang}, {"vllm", server_adapter_api::vllm}});
  if (const toml::table* t = r.subtable("server")) read_sampler_server(table_reader(r.diag(), *t, r.key("server")), o.server);
  if (o.server.enabled && o.backend != sampler_backend::openai)
    r.diag().add(r.table().get("server"), r.key("server"),
                 "starts inference servers for backend = \"openai\"; the engine backend runs the model itself");
  if (o.backend == sampler_backend::openai && o.server_url.empty() && o.server_urls.empty() && !o.server.enabled)
    r.diag().add(r.table().get("backend"), r.key("server_url"),
                 "missing: backend \"openai\" needs the server's base URL (or server_urls, or [sampler.server])");
  r.finish();
}

void read_reward(table_reader r, reward_options& o) {
  r.read("alpha", o.alpha, at_least(0));
  r.read("correctness_weight", o.correctness_weight, at_least(0));
  r.read("speed_weight", o.speed_weight, at_least(0));
  r.read("baseline_switch_speedup", o.baseline_switch_speedup, at_least(1));
  r.read("baseline_check_every", o.baseline_check_every, 1);
  if (o.correctness_weight == 0 && o.speed_weight == 0)
    r.fail("speed_weight", "correctness_weight and speed_weight are both 0: every reward would be 0");
  if (r.read("compiled_reward", o.compiled_reward, at_least(0)) &&
      o.compiled_reward > o.correctness_weight)
    r.fail("compiled_reward", "must not exceed correctness_weight (" +
                                  std::to_string(o.correctness_weight) +
                                  "): an unverified kernel cannot earn more than a correct one");
  r.read_choice("baseline", o.baseline,
                {{"eager", reward_baseline::eager}, {"compile", reward_baseline::compile}});
  const bool has_file = r.read("baselines", o.baselines);
  if (o.baseline == reward_baseline::compile && o.baselines.empty())
    r.fail("baselines", "missing: baseline = \"compile\" needs the file of eager and torch.compile times "
                        "(kforge tasks baseline --against compile --out FILE)");
  // A file that would be ignored is a mistake waiting to be trained on.
  if (has_file && o.baseline == reward_baseline::eager)
    r.fail("baselines", "only read with baseline = \"compile\" (set it, or remove this key)");
  r.finish();
}

void read_agent(table_reader r, agent_options& o) {
  r.read("max_turns", o.max_turns, 1, 16);
  r.read("target_speedup", o.target_speedup, at_least(0));
  std::int64_t n = 0;
  if (r.read("max_tokens", n, 0)) o.max_tokens = static_cast<std::size_t>(n);
  if (r.read("observation_max_tokens", n, 16)) o.observation_max_tokens = static_cast<std::size_t>(n);
  r.read_choice("reward", o.reward,
                {{"best", episode_reward_kind::best},
                 {"last", episode_reward_kind::last},
                 {"discounted", episode_reward_kind::discounted},
                 {"turn_returns", episode_reward_kind::turn_returns}});
  r.read("discount", o.discount, real_range{0, 1});
  r.read_names("feedback", o.feedback, agent_feedback_kinds());
  r.read("observation_template", o.observation_template);
  r.finish();
}

void read_buffer(table_reader r, buffer_options& o) {
  r.read("max_staleness", o.max_staleness, 0);
  r.read("groups_per_batch", o.groups_per_batch, 1, max_groups_per_batch);
  o.dedup_set = r.read_choice("dedup", o.dedup,
                {{"group", dedup_scope::group}, {"run", dedup_scope::run}, {"off", dedup_scope::off}});
  r.finish();
}

void read_lora(table_reader r, trainer_lora& o) {
  o.enabled = true;
  r.read("rank", o.rank, 1, 4096);
  r.read("alpha", o.alpha, above(0));
  r.read("dropout", o.dropout, real_range{0, 1, false, true});
  r.read_names("targets", o.targets, lora_projection_names());
  r.finish();
}

void read_trainer(table_reader r, trainer_options& o) {
  r.read("lr", o.lr, above(0));
  r.read("kl_coef", o.kl_coef, at_least(0));
  const bool low = r.read("kl_target_low", o.kl_target_low, at_least(0));
  const bool high = r.read("kl_target_high", o.kl_target_high, above(0));
  if ((low || high) && o.kl_target_low >= o.kl_target_high)
    r.fail(high ? "kl_target_high" : "kl_target_low",
           "the KL target band is empty: kl_target_low must be < kl_target_high");
  r.read("kl_window", o.kl_window, 1, max_kl_window);
  r.read("kl_step", o.kl_step, above(1));
  r.read("clip_eps_low", o.clip_eps_low, real_range{0, 1, true, true});
  r.read("clip_eps_high", o.clip_eps_high, above(0));
  r.read_choice("group_baseline", o.baseline, {{"kept", group_baseline::kept}, {"draws", group_baseline::draws}});
  r.read("micro_batch", o.micro_batch, 1, max_micro_batch);
  r.read("max_grad_norm", o.max_grad_norm, at_least(0));
  r.read("checkpoint_every", o.checkpoint_every, 0);
  r.read("cpu_ranks", o.cpu_ranks, 1, 64);  // each rank holds a whole copy of the model
  r.read_choice("ranks", o.ranks, {{"threads", trainer_ranks::threads}, {"processes", trainer_ranks::processes}});
  r.read("remote_ranks", o.remote_ranks, 0, 1024);
  if (r.read("rank_endpoint", o.rank_endpoint)) {
    const auto e = check_endpoint(o.rank_endpoint);
    if (!e) r.fail("rank_endpoint", e.message());
    else if (e->scheme != "tcp") r.fail("rank_endpoint", "must be tcp://HOST:PORT (ranks on other hosts reach it)");
    else if (e->host == "*" || e->host == "0.0.0.0")
      r.fail("rank_endpoint", "must name a host the other ranks can reach, not a wildcard (rank 0 listens on the address it names)");
    else if (e->port >= 65535) r.fail("rank_endpoint", "CPU ranks also use PORT + 1: PORT must be < 65535");
  }
  if (o.remote_ranks > 0 && o.ranks != trainer_ranks::processes)
    r.fail("remote_ranks", "ranks on other hosts are processes: set trainer.ranks = \"processes\"");
  if (o.remote_ranks > 0 && o.rank_endpoint.empty())
    r.fail("remote_ranks", "needs trainer.rank_endpoint = \"tcp://HOST:PORT\", where those ranks connect");
  r.read("overlap_grad_reduce", o.overlap_grad_reduce);
  r.read_choice("compute", o.compute,
                {{"auto", trainer_compute::automatic}, {"bf16", trainer_compute::bf16}, {"fp32", trainer_compute::fp32}});
  r.read_choice("publish", o.publish,
                {{"auto", weights_publish::automatic},
                 {"file", weights_publish::file},
                 {"nccl", weights_publish::nccl},
                 {"adapters", weights_publish::adapters}});
  r.read("publish_timeout_s", o.publish_timeout_s, above(0));
  if (const toml::table* t = r.subtable("lora")) read_lora(table_reader(r.diag(), *t, r.key("lora")), o.lora);
  r.read("activation_checkpointing", o.activation_checkpointing);
  // Refused rather than ignored: LoRA's optimiser state is a few MB, so sharding it would only add
  // two collectives a step, and a setting that silently does nothing misleads.
  if (r.read("shard_optimizer", o.shard_optimizer) && o.shard_optimizer && o.lora.enabled)
    r.fail("shard_optimizer", "shards full fine-tuning's optimiser state; with trainer.lora only the small adapters "
                              "train and their state is not sharded: remove one of the two");
  r.finish();
}

void read_sandbox(table_reader r, sandbox_options& o) {
  r.read_choice("backend", o.backend,
                {{"stand-in", sandbox_backend::stand_in}, {"nvcc", sandbox_backend::nvcc}});
  r.read("runners_per_gpu", o.runners_per_gpu, 1, max_runners_per_gpu);
  r.read("reference_servers", o.reference_servers, 0, 64);
  if (r.read("arch", o.arch) && o.arch != auto_arch && !valid_arch(o.arch))
    r.fail("arch", "expected \"auto\" (the sandbox GPU's architecture) or one nvcc target such as "
                   "\"sm_80\", \"sm_89\", \"sm_90a\", \"sm_100a\", got \"" + o.arch + "\"");
  r.read("cache_dir", o.cache_dir);
  r.read("timeout_s", o.timeout_s, above(0));
  // docs/sandbox.md: the median of at least 30 trials, or the timing is not honest.
  r.read("trials", o.trials, 30, max_trials);
  r.read("slow_cutoff", o.slow_cutoff, at_least(0));
  r.read("confine", o.confine);
  r.read("confirm_speedup", o.confirm_speedup, at_least(0));
  r.read("compile_jobs", o.compile_jobs, 1, max_compile_jobs);
  r.read_choice("reuse_verdicts", o.reuse_verdicts,
                {{"off", verdict_reuse_scope::off}, {"group", verdict_reuse_scope::group},
                 {"task", verdict_reuse_scope::task}});
  r.read("stand_in_ms", o.stand_in_ms, 0);
  r.read_choice("profile", o.profile,
                {{"off", sandbox_profile_mode::off}, {"episodes", sandbox_profile_mode::episodes},
                 {"always", sandbox_profile_mode::always}});
  if (r.read("profile_time_limit_s", o.profile_time_limit_s, above(0)) && o.profile_time_limit_s > 600)
    r.fail("profile_time_limit_s", "must be at most 600 (a profile holds the GPU exclusively)");
  r.read("ncu", o.ncu);
  r.finish();
}

}  // namespace

bool is_plain_name(std::string_view s) {
  return !s.empty() && s != "." && s != ".." && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
  });
}

void read_manifest(const toml::table& root, diagnostics& d, manifest& m) {
  table_reader r(d, root, "");
  if (const toml::table* t = r.subtable("run"))
    read_run(table_reader(d, *t, "run"), m.run);
  else
    m.run.run_dir = "runs/" + m.run.name;
  if (const toml::table* t = r.subtable("gpu_groups")) read_gpu_groups(d, *t, m.gpu_groups);
  if (const toml::node* n = r.take("process")) read_processes(d, *n, m.processes);
  if (const toml::table* t = r.subtable("endpoints")) read_endpoints(d, *t, m.endpoints);
  if (const toml::table* t = r.subtable("record")) read_record(table_reader(d, *t, "record"), m.record);
  if (const toml::table* t = r.subtable("tasks")) read_tasks(table_reader(d, *t, "tasks"), m.tasks);
  if (const toml::table* t = r.subtable("sampler")) read_sampler(table_reader(d, *t, "sampler"), m.sampler);
  if (const toml::table* t = r.subtable("reward")) read_reward(table_reader(d, *t, "reward"), m.reward);
  if (const toml::table* t = r.subtable("buffer")) read_buffer(table_reader(d, *t, "buffer"), m.buffer);
  if (const toml::table* t = r.subtable("trainer")) read_trainer(table_reader(d, *t, "trainer"), m.trainer);
  if (const toml::table* t = r.subtable("sandbox")) read_sandbox(table_reader(d, *t, "sandbox"), m.sandbox);
  if (const toml::table* t = r.subtable("agent")) read_agent(table_reader(d, *t, "agent"), m.agent);
  r.finish();
}

}  // namespace kforge::pipeline::detail
