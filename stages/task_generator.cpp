#include "stages/task_generator.hpp"

#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>

#include "common/gpu_arch.hpp"
#include "common/log.hpp"
#include "common/text_file.hpp"
#include "sandbox/pool.hpp"
#include "tasks/builtin.hpp"
#include "tasks/task_parser.hpp"
#include "tasks/task_wire.hpp"

namespace kforge::pipeline {

task_generator_options task_generator_options_from(const manifest& m) {
  task_generator_options o;
  o.seed = static_cast<std::uint64_t>(m.run.seed);
  o.requests_per_step = static_cast<std::uint32_t>(m.buffer.groups_per_batch);
  o.group_size = static_cast<std::uint32_t>(m.sampler.group_size);
  o.temperature = static_cast<float>(m.sampler.temperature);
  o.top_p = static_cast<float>(m.sampler.top_p);
  o.max_new_tokens = static_cast<std::uint32_t>(m.sampler.max_new_tokens);
  o.curriculum.mode = m.tasks.sampling == task_sampling::uniform ? tasks::sampling_mode::uniform
                                                                 : tasks::sampling_mode::curriculum;
  o.curriculum.window = m.tasks.window;
  o.curriculum.floor = m.tasks.floor;
  o.curriculum.unseen_bonus = m.tasks.unseen_bonus;
  o.hardware = m.tasks.gpu;
  // The prompts say what the real sandbox compiles for: a set [sandbox] arch as it is ("auto" is
  // the GPU's own target, which make_task_generator settles once the facts are known).
  if (m.sandbox.backend == sandbox_backend::nvcc && m.sandbox.arch != auto_arch)
    o.hardware.build_arch = m.sandbox.arch;
  o.prompt_template_path = m.tasks.prompt_template;
  return o;
}

namespace {

// The target the prompts state under [sandbox] arch = "auto", as the pool resolves it
// (sandbox/pool.hpp resolve_arch). "" (derived from the stated facts) where they have a compute
// capability: the sandbox's first GPU's, or [tasks.gpu]'s, the user's word for the judging GPU.
// Else the sandbox's first GPU's, asked for it alone; with no sandbox GPU, the compile-only one.
std::string auto_build_arch(const gpu_facts& stated, const std::optional<gpu_facts>& sandbox_gpu) {
  if (stated.major > 0) return "";
  if (sandbox_gpu) return sandbox_gpu->arch();
  return std::string(default_arch);
}

}  // namespace

result<std::vector<tasks::task>> task_pool(const tasks_options& o) {
  result<std::vector<tasks::task>> pool = std::vector<tasks::task>{};
  if (o.source == task_source_kind::files) {
    if (o.files.empty()) return error{"tasks.source = \"files\": tasks.files names no task file"};
  } else {
    pool = tasks::builtin_tasks();
    if (!pool) return error{"built-in task library: " + pool.message()};
  }
  std::map<std::string, std::string> origin;  // id -> where it was first seen
  for (const auto& t : *pool) origin.emplace(t.id, t.provenance);
  for (std::size_t i = 0; i < o.files.size(); ++i) {
    const std::string key = "tasks.files[" + std::to_string(i) + "]";
    auto file = tasks::load_task_file(o.files[i]);
    if (!file) return error{key + ": " + file.message()};
    if (file->empty()) return error{key + ": " + o.files[i] + " holds no tasks"};
    for (auto& t : *file) {
      auto [it, fresh] = origin.emplace(t.id, o.files[i]);
      if (!fresh)
        return error{key + ": " + o.files[i] + ": task '" + t.id +
                     "' is already in the pool (from " + it->second + ")"};
      pool->push_back(std::move(t));
    }
  }
  return pool;
}

status check_task_generator(const manifest& m) {
  auto pool = task_pool(m.tasks);
  if (!pool) return pool.err();
  auto g = task_generator::create(std::move(pool).value(), task_generator_options_from(m));
  if (!g) return g.err();
  return {};
}

result<std::shared_ptr<task_generator>> make_task_generator(const manifest& m,
                                                            const std::string& state_file) {
  auto pool = task_pool(m.tasks);
  if (!pool) return pool.err();
  auto o = task_generator_options_from(m);
  o.state_file = state_file;
  // Without [tasks.gpu], the prompts describe the GPU the kernels will be judged on: the real
  // sandbox workers' first GPU, asked once at start-up (the sandbox needs that GPU's children to
  // work anyway). Compile-only or the stand-in sandbox: "unknown". Under arch = "auto" the
  // prompts' target is that GPU's too, so it is asked even with a [tasks.gpu] that names no
  // compute capability.
  if (m.sandbox.backend == sandbox_backend::nvcc) {
    const bool automatic = m.sandbox.arch == auto_arch;
    const auto gpus = stage_gpus(m, actor_kind::sandbox_worker);
    if (!gpus) return error{"task generator: " + gpus.message()};
    std::optional<gpu_facts> sandbox_gpu;
    if (!gpus->empty() && (o.hardware.name.empty() || (automatic && o.hardware.major <= 0))) {
      auto facts = sandbox::probe_gpu_facts(gpus->front());
      if (!facts) return error{"task generator: the prompts' GPU facts: " + facts.message()};
      sandbox_gpu = *facts;
    }
    const std::string build_arch = o.hardware.build_arch;
    if (o.hardware.name.empty() && sandbox_gpu) o.hardware = *sandbox_gpu;
    o.hardware.build_arch = automatic ? auto_build_arch(o.hardware, sandbox_gpu) : build_arch;
  }
  return task_generator::create(std::move(pool).value(), std::move(o));
}

result<std::shared_ptr<task_generator>> task_generator::create(std::vector<tasks::task> pool,
                                                               task_generator_options o) {
  const std::string where = "task generator: ";
  if (pool.empty()) return error{where + "the task pool is empty"};
  if (o.requests_per_step < 1) return error{where + "requests_per_step must be >= 1"};
  if (o.group_size < 1) return error{where + "group_size must be >= 1"};
  auto tmpl = o.prompt_template_path.empty()
                  ? result<tasks::prompt_template>(tasks::prompt_template::embedded())
                  : tasks::prompt_template::load(o.prompt_template_path);
  if (!tmpl) return error{where + tmpl.message()};
  auto cur = tasks::curriculum::create({}, o.curriculum, o.seed);
  if (!cur) return error{where + cur.message()};
  std::shared_ptr<task_generator> g(
      new task_generator(std::move(o), std::move(tmpl).value(), std::move(cur).value()));
  for (auto& t : pool)
    if (auto s = g->add(std::move(t)); !s) return error{where + s.message()};
  return g;
}

status task_generator::add(tasks::task t) {
  if (index_.count(t.id)) return error{"task '" + t.id + "' is already in the pool"};
  if (auto s = curriculum_.add_task(t.id); !s) return s;
  entry e;
  e.prompt = template_.render(t, options_.hardware);
  e.prompt_hash = tasks::prompt_hash(e.prompt);
  e.task = std::move(t);
  index_.emplace(e.task.id, pool_.size());
  pool_.push_back(std::move(e));
  return {};
}

result<std::vector<wire::GenerateRequestT>> task_generator::next(std::uint64_t step) {
  std::vector<wire::GenerateRequestT> out;
  for (const auto i : curriculum_.sample(options_.requests_per_step)) {
    const auto it = index_.find(curriculum_.id(i));
    if (it == index_.end())  // the two are filled together; a miss is a bug, reported as one
      return error{"task generator: curriculum task '" + curriculum_.id(i) +
                   "' is not in the pool"};
    const entry& e = pool_[it->second];
    wire::GenerateRequestT r;
    r.task = std::make_unique<wire::TaskT>(tasks::to_wire(e.task));
    r.prompt = e.prompt;
    r.prompt_hash = e.prompt_hash;
    r.group_size = options_.group_size;
    r.temperature = options_.temperature;
    r.top_p = options_.top_p;
    r.max_new_tokens = options_.max_new_tokens;
    r.step = step;
    r.gpu_registers_per_sm = static_cast<std::uint32_t>(std::max(0, options_.hardware.registers_per_sm));
    r.gpu_shared_per_sm = static_cast<std::uint64_t>(std::max<std::int64_t>(0, options_.hardware.shared_per_sm));
    out.push_back(std::move(r));
  }
  // Not saving it loses nothing now, only a resumed run's memory of it: said once.
  if (!options_.state_file.empty())
    if (auto s = write_text_file_atomically(options_.state_file, checkpoint()); !s && !told_) {
      kforge::log::warn("kforge task generator: curriculum state not saved: " + s.message() +
                        " (a resumed run would start it anew)");
      told_ = true;
    }
  return out;
}

status task_generator::add_task(const wire::Task& task, const actors::envelope_info& info) {
  std::unique_ptr<wire::TaskT> unpacked(task.UnPack());
  auto t = tasks::from_wire(*unpacked);
  const std::string from = " (from '" + std::string(info.sender) + "')";
  if (!t) return error{"task generator: " + t.message() + from};
  if (auto s = add(std::move(t).value()); !s) return error{"task generator: " + s.message() + from};
  return {};
}

status task_generator::observe(std::string_view task_id, bool passed, double reward) {
  if (auto s = curriculum_.observe(task_id, passed, reward); !s)
    return error{"task generator: " + s.message()};
  return {};
}

status task_generator::observe(const wire::Scored& scored) {
  if (scored.excluded() && scored.excluded()->size() > 0) return {};
  const auto* v = scored.verdict();
  const auto* c = v ? v->candidate() : nullptr;
  const auto* t = c ? c->task() : nullptr;
  if (!t || !t->id())
    return error{"task generator: a scored sample without verdict.candidate.task.id"};
  return observe(t->id()->string_view(), v->status() == wire::VerdictStatus::ok, scored.reward());
}

status task_generator::observe(const wire::Scored& scored, const actors::envelope_info& info) {
  if (auto s = observe(scored); !s)
    return error{s.message() + " (sample " + std::to_string(info.sample_id) + " from '" +
                 std::string(info.sender) + "')"};
  return {};
}

const std::string* task_generator::prompt_of(std::string_view id) const {
  const auto it = index_.find(std::string(id));
  return it == index_.end() ? nullptr : &pool_[it->second].prompt;
}

status task_generator::restore(std::string_view checkpoint, std::vector<std::string>* dropped) {
  std::string text(checkpoint);
  if (dropped) {  // leave out the tasks this pool lacks (ones that came over the bus)
    auto j = nlohmann::json::parse(text, nullptr, false);
    if (j.is_object() && j.contains("tasks") && j["tasks"].is_array()) {
      auto kept = nlohmann::json::array();
      for (auto& t : j["tasks"]) {
        const auto id = t.is_object() && t.contains("id") && t["id"].is_string()
                            ? t["id"].get<std::string>()
                            : std::string();
        if (!id.empty() && !index_.count(id))
          dropped->push_back(id);
        else
          kept.push_back(std::move(t));
      }
      j["tasks"] = std::move(kept);
      text = j.dump();
    }
  }
  auto c = tasks::curriculum::from_json(text);
  if (!c) return error{"task generator: " + c.message()};
  for (std::size_t i = 0; i < c->size(); ++i)
    if (!index_.count(c->id(i)))
      return error{"task generator: curriculum state: tasks[" + std::to_string(i) + "].id: task '" +
                   c->id(i) + "' is not in the pool"};
  for (const auto& e : pool_)
    if (!c->find(e.task.id))
      if (auto s = c->add_task(e.task.id); !s) return error{"task generator: " + s.message()};
  curriculum_ = std::move(c).value();
  return {};
}

}  // namespace kforge::pipeline
