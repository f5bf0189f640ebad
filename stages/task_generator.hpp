#pragma once
// The real task source: a pool of tasks (the built-in library, task files, synthesized
// tasks that arrive on the bus), sampled uniformly or by the curriculum (tasks/curriculum.hpp),
// each request carrying the task's prompt (tasks/prompt.hpp) rendered once for the pool's GPU.
// Feedback comes through observe(): one call per scored candidate, from whoever sees the scores.
//
// Plain C++ behind actors::task_source: the task generator actor calls next() and add_task() one
// at a time; observe() must be called from the same actor (or under the same serialisation).

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "actors/logic_interfaces.hpp"
#include "config/manifest.hpp"
#include "config/options/tasks_options.hpp"
#include "tasks/curriculum.hpp"
#include "tasks/prompt.hpp"
#include "tasks/task.hpp"

namespace kforge::pipeline {

struct task_generator_options {
  /// Seed of the curriculum's generator (run.seed).
  std::uint64_t seed = 0;
  /// GRPO groups requested per trainer step (buffer.groups_per_batch). >= 1.
  std::uint32_t requests_per_step = 8;
  /// Sampling settings copied into every request (the [sampler] table).
  std::uint32_t group_size = 8;
  float temperature = 0.8f;
  float top_p = 1.0f;
  std::uint32_t max_new_tokens = 2048;
  /// Uniform or curriculum sampling and its window/floor/bonus.
  tasks::curriculum_options curriculum;
  /// The GPU the prompts describe; fields left 0/empty read "unknown" in the prompt.
  tasks::hardware_context hardware;
  /// A user's prompt template file; empty: the embedded tasks/prompt_template.txt.
  std::string prompt_template_path;
  /// Where next() writes the curriculum's state (checkpoint()) after each step's draw, so that a
  /// resumed run goes on with it (make_task_source); empty: nowhere.
  std::string state_file;
};

/// Options from the manifest's [run], [sampler], [buffer] and [tasks] tables.
task_generator_options task_generator_options_from(const manifest& m);

/// The pool [tasks] asks for: the built-in library (not with source "files", which needs a file),
/// then the tasks of each file in `files`. An
/// error names the file's key (tasks.files[i]) for an unreadable file, a bad task, a file with no
/// tasks, or an id already in the pool (and where that id came from).
result<std::vector<tasks::task>> task_pool(const tasks_options& o);

class task_generator final : public actors::task_source {
 public:
  /// A generator over `pool` (non-empty, unique ids). An error when the pool is empty, an id
  /// repeats, an option is out of range or the template file does not load.
  static result<std::shared_ptr<task_generator>> create(std::vector<tasks::task> pool,
                                                        task_generator_options o);

  /// requests_per_step requests: distinct tasks while the pool allows, prompt and sampling
  /// settings filled in, `step` recorded.
  result<std::vector<wire::GenerateRequestT>> next(std::uint64_t step) override;

  /// A task from the bus (a synthesizer) joins the pool, unseen. An error when it fails the task
  /// checks or its id is already in the pool.
  status add_task(const wire::Task& task, const actors::envelope_info& info) override;

  /// One result of task `task_id`: whether the candidate was correct, and its reward.
  status observe(std::string_view task_id, bool passed, double reward);
  /// The same from a scored sample: passed = verdict ok, reward = scored.reward. An excluded
  /// sample (e.g. infra_error) is no evidence about the task and is ignored.
  status observe(const wire::Scored& scored);
  /// The feedback link's entry (actors::task_source): observe(scored), the error naming the
  /// sample and its sender.
  status observe(const wire::Scored& scored, const actors::envelope_info& info) override;

  std::size_t pool_size() const noexcept { return pool_.size(); }
  const tasks::curriculum& curriculum() const noexcept { return curriculum_; }
  /// The prompt and its hash for task `id` (nullptr when unknown).
  const std::string* prompt_of(std::string_view id) const;

  /// The curriculum's state (tasks::curriculum::to_json) for a checkpoint.
  std::string checkpoint() const { return curriculum_.to_json(); }
  /// Restores a checkpoint: the stats, generator state and options saved in it. Pool tasks the
  /// checkpoint does not know start unseen; a checkpoint task not in the pool is an error, or
  /// with `dropped` is left out and its id listed there (a task that came over the bus is not
  /// in a restarted generator's pool).
  status restore(std::string_view checkpoint, std::vector<std::string>* dropped = nullptr);

 private:
  struct entry {
    tasks::task task;
    std::string prompt;
    std::uint64_t prompt_hash = 0;
  };
  task_generator(task_generator_options o, tasks::prompt_template t, tasks::curriculum c)
      : options_(std::move(o)), template_(std::move(t)), curriculum_(std::move(c)) {}
  status add(tasks::task t);

  task_generator_options options_;
  tasks::prompt_template template_;
  tasks::curriculum curriculum_;
  std::vector<entry> pool_;
  std::unordered_map<std::string, std::size_t> index_;  ///< task id -> pool_ index
  bool told_ = false;  ///< a state file that could not be written was said
};

/// The generator a run uses: task_pool(m.tasks) with task_generator_options_from(m), and without
/// [tasks.gpu] the real sandbox's first GPU's facts (a short-lived reference server is asked).
/// `state_file`: task_generator_options::state_file.
result<std::shared_ptr<task_generator>> make_task_generator(const manifest& m,
                                                            const std::string& state_file = {});

/// What `kforge run` checks before starting anything: the pool loads and the template renders
/// every task. No GPU is asked (that is the generator's own start-up, in its process).
status check_task_generator(const manifest& m);

}  // namespace kforge::pipeline
