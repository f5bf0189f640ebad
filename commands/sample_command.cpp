#include "commands/sample_command.hpp"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <ostream>

#include <nlohmann/json.hpp>

#include "common/file_writer.hpp"
#include "model/op_profile.hpp"
#include "stages/engine_sampler.hpp"
#include "sandbox/pool.hpp"
#include "tasks/prompt.hpp"
#include "tasks/task_parser.hpp"
#include "tasks/task_spec.hpp"
#include "tasks/task_wire.hpp"

namespace kforge::pipeline {

namespace fs = std::filesystem;

namespace {

// A count flag within [1, hi] (the manifest's bounds for the same sampler settings): the error
// names the flag, its value and the bounds.
status count_in_range(const char* flag, int value, int hi) {
  if (value >= 1 && value <= hi) return {};
  return error{std::string(flag) + " must be in [1, " + std::to_string(hi) + "], got " +
               std::to_string(value)};
}

status check(const sample_options& o) {
  if (o.model.empty()) return error{"--model is required"};
  if (!fs::is_directory(o.model)) return error{"--model " + o.model + ": not a directory"};
  if (o.out.empty()) return error{"--out is required"};
  if (auto s = count_in_range("--samples", o.samples, max_group_size); !s) return s;
  if (!(o.temperature > 0)) return error{"--temperature must be > 0"};
  if (!(o.top_p > 0 && o.top_p <= 1)) return error{"--top-p must be in (0, 1]"};
  if (auto s = count_in_range("--max-new-tokens", o.max_new_tokens, max_new_tokens_limit); !s)
    return s;
  if (auto s = count_in_range("--batch", o.batch, max_batch_requests); !s) return s;
  if (fs::exists(fs::path(o.out) / "samples.jsonl"))
    return error{"--out " + o.out + ": already holds samples.jsonl (choose a new directory)"};
  return {};
}

// Each task's folder under --out, made before any sampling: an id that would leave --out stops
// the command before the model writes anything.
result<std::vector<std::string>> task_dirs(const std::vector<tasks::task>& pool,
                                           const std::string& out) {
  std::vector<std::string> dirs;
  for (const auto& t : pool) {
    auto dir = tasks::task_dir(out, t.id);
    if (!dir) return dir.err();
    dirs.push_back(std::move(*dir));
  }
  return dirs;
}

/// A packed request whose root stays valid as long as this lives.
struct packed_request {
  flatbuffers::FlatBufferBuilder fbb;
  const wire::GenerateRequest* get() const {
    return flatbuffers::GetRoot<wire::GenerateRequest>(fbb.GetBufferPointer());
  }
};

/// The sampler's request for task `t` with its rendered prompt.
std::unique_ptr<packed_request> pack_request(const tasks::task& t, std::string prompt, const sample_options& o) {
  wire::GenerateRequestT r;
  r.task = std::make_unique<wire::TaskT>(tasks::to_wire(t));
  r.prompt = std::move(prompt);
  r.prompt_hash = tasks::prompt_hash(r.prompt);
  r.group_size = static_cast<std::uint32_t>(o.samples);
  r.temperature = static_cast<float>(o.temperature);
  r.top_p = static_cast<float>(o.top_p);
  r.max_new_tokens = static_cast<std::uint32_t>(o.max_new_tokens);
  auto p = std::make_unique<packed_request>();
  p->fbb.Finish(wire::GenerateRequest::Pack(p->fbb, &r));
  return p;
}

struct sample_tally {
  std::size_t written = 0, with_kernel = 0, tokens = 0;
};

/// A task's samples as DIR/s<i>.cu and lines of samples.jsonl.
status write_samples(const tasks::task& t, const std::vector<wire::CandidateT>& samples,
                     const fs::path& dir, file_writer& lines, sample_tally& tally) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return error{dir.string() + ": cannot create: " + ec.message()};
  for (std::size_t i = 0; i < samples.size(); ++i) {
    const auto& c = samples[i];
    if (auto w = write_file_atomically((dir / ("s" + std::to_string(i) + ".cu")).string(), c.source, /*sync=*/false);
        !w)
      return w;
    const bool has_kernel = c.source.find("kf_forward") != std::string::npos;
    tally.with_kernel += has_kernel ? 1 : 0;
    tally.tokens += c.completion_tokens.size();
    ++tally.written;
    const auto line = nlohmann::json{{"task_id", t.id},
                                     {"sample", i},
                                     {"completion", c.completion},
                                     {"tokens", c.completion_tokens.size()},
                                     {"has_kf_forward", has_kernel}}
                          .dump() +
                      "\n";
    if (auto w = lines.append(line); !w) return w;
  }
  return {};
}

}  // namespace

int sample_command(const sample_options& o, std::ostream& out, std::ostream& err) {
  const auto fail = [&](const std::string& why) {
    err << "kforge sample: " << why << "\n";
    return 2;
  };
  if (auto s = check(o); !s) return fail(s.message());
  auto pool = tasks::load_task_spec(o.tasks, o.categories, err);
  if (!pool) return fail(pool.message());
  if (pool->empty()) return fail("no task left to sample (--tasks " + o.tasks + ", --category filter)");
  const auto dirs = task_dirs(*pool, o.out);
  if (!dirs) return fail(dirs.message());
  auto tmpl = o.prompt_template.empty() ? result<tasks::prompt_template>(tasks::prompt_template::embedded())
                                        : tasks::prompt_template::load(o.prompt_template);
  if (!tmpl) return fail(tmpl.message());
  tasks::hardware_context hw;
  if (o.gpu >= 0 && !o.no_gpu_facts) {
    auto facts = sandbox::probe_gpu_facts(o.gpu);
    if (!facts) return fail("the prompts' GPU facts (--gpu " + std::to_string(o.gpu) + "): " + facts.message());
    hw = *facts;
  }

  engine_sampler_options eo;
  eo.sampler.model = o.model;
  eo.sampler.group_size = o.samples;
  eo.sampler.temperature = o.temperature;
  eo.sampler.top_p = o.top_p;
  eo.sampler.max_new_tokens = o.max_new_tokens;
  eo.sampler.batch_requests = o.batch;
  eo.device = o.gpu;
  eo.seed = o.seed;
  auto sampler = make_engine_sampler(eo);
  if (!sampler) return fail(sampler.message());

  std::error_code ec;
  fs::create_directories(o.out, ec);
  if (ec) return fail("--out " + o.out + ": cannot create: " + ec.message());
  // Whole lines, every write checked: a full disk stops the command, naming the file.
  auto samples = file_writer::open((fs::path(o.out) / "samples.jsonl").string(), file_writer::mode::truncate);
  if (!samples) return fail(samples.message());
  auto task_file = file_writer::open((fs::path(o.out) / "tasks.jsonl").string(), file_writer::mode::truncate);
  if (!task_file) return fail(task_file.message());

  std::optional<model::op_profile> profile;
  if (o.profile_ops) profile.emplace();
  const auto t0 = std::chrono::steady_clock::now();
  sample_tally tally;
  std::size_t failed_tasks = 0;
  const std::size_t batch = static_cast<std::size_t>(o.batch);
  for (std::size_t first = 0; first < pool->size(); first += batch) {
    const std::size_t n = std::min(batch, pool->size() - first);
    std::vector<std::unique_ptr<packed_request>> reqs;
    std::vector<actors::sampler_logic::request_item> items;
    for (std::size_t k = 0; k < n; ++k) {
      const auto& t = (*pool)[first + k];
      auto p = pack_request(t, tmpl->render(t, hw), o);
      actors::sampler_logic::request_item item{p->get(), {}};
      item.info.sample_id = first + k;  // with --seed, each task's own sampling seed
      items.push_back(item);
      reqs.push_back(std::move(p));
    }
    auto results = (*sampler)->generate_batch(items);
    for (std::size_t k = 0; k < n; ++k) {
      const auto& t = (*pool)[first + k];
      if (!results[k]) {
        err << "kforge sample: task " << t.id << ": " << results[k].message() << "\n";
        ++failed_tasks;
        continue;
      }
      if (auto w = task_file->append(tasks::to_json_line(t) + "\n"); !w) return fail(w.message());
      if (auto w = write_samples(t, *results[k], (*dirs)[first + k], *samples, tally); !w) return fail(w.message());
    }
    out << "sampled " << (first + n) << "/" << pool->size() << " tasks\r" << std::flush;
  }
  if (profile) {
    profile->stop();
    profile->report(30);
  }
  for (auto* f : {&*samples, &*task_file})
    if (auto w = f->close(); !w) return fail(w.message());
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  out << "\nkforge sample: " << tally.written << " samples of " << (pool->size() - failed_tasks) << " tasks in "
      << s << " s (" << (s > 0 ? static_cast<double>(tally.tokens) / s : 0.0) << " tokens/s); " << tally.with_kernel
      << " mention kf_forward; written to " << o.out << "\n";
  if (failed_tasks > 0) {
    err << "kforge sample: " << failed_tasks << " tasks failed (above)\n";
    return 1;
  }
  return 0;
}

}  // namespace kforge::pipeline
