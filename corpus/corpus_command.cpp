#include "corpus/corpus_command.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <ostream>
#include <toml++/toml.h>

#include "corpus/copy_drill.hpp"
#include "corpus/lowering_drill.hpp"
#include "corpus/repair_drill.hpp"
#include "corpus/speed_drill.hpp"
#include "corpus/kernel_writer.hpp"
#include "sandbox/pool.hpp"
#include "tasks/prompt.hpp"
#include "tasks/task_parser.hpp"
#include "tasks/task_spec.hpp"

namespace kforge::corpus {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

result<gpu_facts> load_gpu_facts(const std::string& path) {
  gpu_facts g;
  if (path.empty()) return g;
  toml::table root;
  try {
    root = toml::parse_file(path);
  } catch (const std::exception& e) {
    return error{"--gpu-facts " + path + ": " + e.what()};
  }
  const toml::table* t = &root;
  if (auto* tasks_t = root["tasks"].as_table())
    if (auto* gpu = (*tasks_t)["gpu"].as_table()) t = gpu;
  const std::string where = "--gpu-facts " + path + ": ";
  for (const auto& [key, node] : *t) {
    const std::string k(key.str());
    auto integer = [&](auto& field) -> status {
      auto v = node.value<std::int64_t>();
      if (!v || *v < 1) return error{where + k + ": expected a positive integer"};
      field = static_cast<std::remove_reference_t<decltype(field)>>(*v);
      return {};
    };
    status st;
    if (k == "name") {
      auto v = node.value<std::string>();
      if (!v || v->empty()) return error{where + "name: expected a non-empty string"};
      g.name = *v;
    } else if (k == "compute_capability") {
      auto v = node.value<std::string>();
      int major = 0, minor = 0;
      if (!v || std::sscanf(v->c_str(), "%d.%d", &major, &minor) != 2 || major < 1)
        return error{where + "compute_capability: expected MAJOR.MINOR such as \"9.0\""};
      g.major = major;
      g.minor = minor;
    } else if (k == "sm_count") {
      st = integer(g.sm_count);
    } else if (k == "shared_per_block") {
      st = integer(g.shared_per_block);
    } else if (k == "shared_per_block_optin") {
      st = integer(g.shared_per_block_optin);
    } else if (k == "shared_per_sm") {
      st = integer(g.shared_per_sm);
    } else if (k == "registers_per_sm") {
      st = integer(g.registers_per_sm);
    } else if (k == "l2_bytes") {
      st = integer(g.l2_bytes);
    } else if (k == "memory_bytes") {
      st = integer(g.memory_bytes);
    } else if (k == "memory_bandwidth_gbs") {
      auto v = node.value<double>();
      if (!v || *v <= 0) return error{where + k + ": expected a positive number"};
      g.memory_bandwidth_gbs = *v;
    } else if (k == "tasks") {
      continue;
    } else {
      return error{where + "unknown key '" + k + "'"};
    }
    if (!st) return st.err();
  }
  return g;
}

/// (task id, variant) -> verdict line, from `kforge eval` output (its "file" is
/// .../<task id>/<variant>.cu).
result<std::map<std::pair<std::string, std::string>, json>> load_verdicts(const std::string& path) {
  std::map<std::pair<std::string, std::string>, json> v;
  std::ifstream in(path);
  if (!in) return error{"--verdicts: cannot read " + path};
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    json j = json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("task") || !j.contains("file") ||
        !j.contains("status"))
      return error{"--verdicts " + path + " line " + std::to_string(n) +
                   ": expected a `kforge eval` verdict object with task, file and status"};
    const auto variant = fs::path(j["file"].get<std::string>()).stem().string();
    v[{j["task"].get<std::string>(), variant}] = j;
  }
  return v;
}

bool write_file(const fs::path& p, const std::string& text) {
  std::error_code ec;
  fs::create_directories(p.parent_path(), ec);
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f << text;
  return static_cast<bool>(f);
}

using verdict_map = std::map<std::pair<std::string, std::string>, json>;

/// What the pass over the tasks wrote and kept, and what the drills draw from.
struct kernel_pass {
  struct tally {
    int seen = 0, supported = 0, variants = 0;
  };
  std::map<std::string, tally> per_category;
  std::map<std::string, int> reasons;  ///< why tasks were not supported, and how often
  int seen = 0, supported = 0, variants = 0, kept = 0, dropped = 0;
  std::vector<tasks::task> written;      ///< the supported tasks, for the copy drills
  std::vector<tasks::task> maps;         ///< maps, fused-epilogue products, row programs: lowering drills
  std::vector<drill_source> repairable;  ///< kept variants, for the repair drills (tasks from the loaded set)
  std::vector<timed_variant> timed;      ///< kept variants with their verdicts, for the speed drills
};

/// Every task's kernels under DIR/kernels, the supported tasks to `tasks_file` and a record per
/// kept variant to `sft`; an error when a file cannot be written.
status write_kernel_records(const corpus_options& opt, const std::vector<tasks::task>& all,
                            const tasks::prompt_template& tmpl, const gpu_facts& hw, const verdict_map& verdicts,
                            const fs::path& dir, std::ostream& tasks_file, std::ostream& sft, kernel_pass& pass) {
  for (const auto& t : all) {
    auto& cat = pass.per_category[std::string(tasks::to_string(t.category))];
    ++pass.seen;
    ++cat.seen;
    auto ks = write_kernels(t);
    if (!ks) {
      ++pass.reasons[reason_key(ks.message())];
      continue;
    }
    ++pass.supported;
    ++cat.supported;
    if (opt.copy_drills > 0) pass.written.push_back(t);
    if (opt.lowering_drills > 0 &&
        std::any_of(ks->begin(), ks->end(), [](const auto& v) { return has_drill_cut(v.source); }))
      pass.maps.push_back(t);
    tasks_file << tasks::to_json_line(t) << "\n";
    const std::string prompt = tmpl.render(t, hw);
    const auto task_dir = tasks::task_dir((dir / "kernels").string(), t.id);
    if (!task_dir) return task_dir.err();
    for (const auto& v : *ks) {
      ++pass.variants;
      ++cat.variants;
      if (!write_file(fs::path(*task_dir) / (v.name + ".cu"), v.source))
        return error{"cannot write kernel for " + t.id};
      json rec{{"task_id", t.id}, {"variant", v.name}, {"prompt", prompt}, {"completion", completion_text(v)}};
      if (!opt.verdicts.empty()) {
        auto it = verdicts.find({t.id, v.name});
        if (it == verdicts.end() || it->second.value("status", "") != "ok") {
          ++pass.dropped;
          continue;
        }
        if (it->second.contains("speedup")) rec["speedup"] = it->second["speedup"];
      }
      ++pass.kept;
      sft << rec.dump() << "\n";
      if (opt.repair_drills > 0) pass.repairable.push_back({&t, prompt, v});
      if (opt.speed_drills) pass.timed.push_back({&t, prompt, v, verdicts.at({t.id, v.name})});
    }
  }
  return {};
}

/// A two-turn drill record: the first completion (not trained), its observation, the second.
json two_turn_record(json head, const std::string& first, const std::string& observation, const std::string& second) {
  head["turns"] = json::array({{{"completion", first}, {"observation", observation}, {"train", false}},
                               {{"completion", second}}});
  return head;
}

/// How many drills of each kind were written.
struct drill_counts {
  std::size_t copy = 0, speed = 0;
  lowering_drill_tally lowered;
  repair_drill_tally repaired;
};

/// The two-turn drills, made before anything is appended: the repair drills run the sandbox.
struct two_turn_drills {
  std::vector<repair_drill> repairs;
  std::vector<speed_drill> speeds;
  repair_drill_tally repaired;
};

/// The drills the options ask for, appended to `sft`; the two-turn ones already made.
drill_counts write_drills(const corpus_options& opt, const kernel_pass& pass, const tasks::prompt_template& tmpl,
                          const gpu_facts& hw, const tasks::synth::exclusion_list& exclude,
                          const two_turn_drills& two_turn, std::ostream& sft) {
  drill_counts n;
  const auto copies = copy_drills(pass.written, tmpl, hw, opt.copy_drills, opt.drill_seed);
  n.copy = copies.size();
  for (const auto& d : copies)
    sft << json{{"task_id", d.task_id}, {"variant", "copy_drill"}, {"prompt", d.prompt},
                {"completion", d.completion}, {"prefix_only", true}}.dump()
        << "\n";
  for (const auto& d : lowering_drills(pass.maps, tmpl, hw, exclude, opt.lowering_drills, opt.drill_seed + 1,
                                       &n.lowered))
    sft << json{{"task_id", d.task_id}, {"variant", "lowering_drill"}, {"prompt", d.prompt},
                {"completion", d.completion}, {"prefix_only", true}}.dump()
        << "\n";
  n.repaired = two_turn.repaired;
  n.speed = two_turn.speeds.size();
  for (const auto& d : two_turn.speeds)
    sft << two_turn_record({{"task_id", d.task_id}, {"variant", d.fast_variant}, {"drill", "speed"},
                            {"from_variant", d.slow_variant}, {"speedups", {d.slow_speedup, d.fast_speedup}},
                            {"prompt", d.prompt}},
                           d.slow_completion, d.observation, d.fast_completion)
               .dump()
        << "\n";
  for (const auto& d : two_turn.repairs)
    sft << two_turn_record({{"task_id", d.task_id}, {"variant", d.variant}, {"drill", "repair"}, {"edit", d.edit},
                            {"prompt", d.prompt}},
                           d.broken_completion, d.observation, d.completion)
               .dump()
        << "\n";
  return n;
}

void print_summary(const corpus_options& opt, const kernel_pass& pass, const drill_counts& drills, std::ostream& out) {
  out << "kforge corpus build: " << pass.seen << " tasks seen, " << pass.supported << " supported, "
      << pass.variants << " variants written";
  if (!opt.verdicts.empty()) out << ", " << pass.kept << " kept by the verdicts (" << pass.dropped << " not ok)";
  if (opt.copy_drills > 0) out << ", " << drills.copy << " copy drills";
  if (opt.lowering_drills > 0)
    out << ", " << drills.lowered.written << " lowering drills (of " << opt.lowering_drills << " drawn: "
        << drills.lowered.excluded << " excluded, " << drills.lowered.unsupported << " not lowered)";
  if (opt.speed_drills) out << ", " << drills.speed << " speed drills";
  if (opt.repair_drills > 0)
    out << ", " << drills.repaired.written << " repair drills (of " << opt.repair_drills
        << " drawn: " << drills.repaired.unbroken << " still built)";
  out << "\n";
  out << "  category        seen  supported  variants\n";
  for (const auto& [c, n] : pass.per_category) {
    char buf[128];
    std::snprintf(buf, sizeof buf, "  %-14s %5d %10d %9d\n", c.c_str(), n.seen, n.supported, n.variants);
    out << buf;
  }
  std::vector<std::pair<int, std::string>> sorted;
  for (const auto& [r, n] : pass.reasons) sorted.emplace_back(-n, r);
  std::sort(sorted.begin(), sorted.end());
  if (!sorted.empty()) out << "  unsupported:\n";
  for (const auto& [n, r] : sorted) out << "    " << -n << "  " << r << "\n";
  out << "  written to " << opt.out << " (tasks.jsonl, kernels/, sft.jsonl)\n";
}

/// The options' inputs, read and checked before anything is written.
struct corpus_inputs {
  gpu_facts hw;
  verdict_map verdicts;
  tasks::prompt_template tmpl;
  std::vector<tasks::task> tasks;
  tasks::synth::exclusion_list exclude;
};

result<corpus_inputs> load_inputs(const corpus_options& opt, std::ostream& err) {
  if (opt.out.empty()) return error{"--out DIR is required"};
  if (opt.speed_drills && opt.verdicts.empty())
    return error{"--speed-drills needs --verdicts (the kernels' measured speeds)"};
  if (opt.gpu >= 0 && !opt.gpu_facts.empty())
    return error{"--gpu and --gpu-facts both give the prompts' GPU facts: pick one"};
  // --gpu: the facts a run's task generator states for that GPU (the same probe), so the corpus's
  // prompts are the prompts the policy later sees in a run there.
  auto hw = opt.gpu >= 0 ? sandbox::probe_gpu_facts(opt.gpu) : load_gpu_facts(opt.gpu_facts);
  if (!hw) return hw.err();
  verdict_map verdicts;
  if (!opt.verdicts.empty()) {
    auto v = load_verdicts(opt.verdicts);
    if (!v) return v.err();
    verdicts = std::move(*v);
  }
  auto tmpl = opt.prompt_template.empty() ? result<tasks::prompt_template>(tasks::prompt_template::embedded())
                                          : tasks::prompt_template::load(opt.prompt_template);
  if (!tmpl) return error{"--prompt-template: " + tmpl.message()};
  auto all = tasks::load_task_spec(opt.tasks, opt.categories, err);
  if (!all) return all.err();
  tasks::synth::exclusion_list exclude;
  for (const auto& f : opt.exclude)
    if (auto st = exclude.add_file(f); !st) return error{"--exclude " + f + ": " + st.message()};
  return corpus_inputs{std::move(*hw), std::move(verdicts), std::move(*tmpl), std::move(*all), std::move(exclude)};
}

}  // namespace

int corpus_command(const corpus_options& opt, std::ostream& out, std::ostream& err) {
  auto in = load_inputs(opt, err);
  if (!in) {
    err << "kforge corpus build: " << in.message() << "\n";
    return 2;
  }
  const fs::path dir(opt.out);
  std::error_code ec;
  fs::create_directories(dir / "kernels", ec);
  std::ofstream tasks_file(dir / "tasks.jsonl", std::ios::trunc);
  std::ofstream sft(dir / "sft.jsonl", std::ios::trunc);
  if (ec || !tasks_file || !sft) {
    err << "kforge corpus build: cannot write under " << opt.out << "\n";
    return 2;
  }
  kernel_pass pass;
  if (auto st = write_kernel_records(opt, in->tasks, in->tmpl, in->hw, in->verdicts, dir, tasks_file, sft, pass);
      !st) {
    err << "kforge corpus build: " << st.message() << "\n";
    return 2;
  }
  two_turn_drills two_turn;
  auto repairs = repair_drills(pass.repairable, opt.repair_drills, opt.drill_seed + 2,
                               (dir / "repair-cache").string(), opt.gpu, &two_turn.repaired);
  if (!repairs) {
    err << "kforge corpus build: " << repairs.message() << "\n";
    return 1;  // the sandbox could not run
  }
  auto speeds = speed_drills(pass.timed, speed_drill_gain, in->hw);
  if (!speeds) {
    err << "kforge corpus build: " << speeds.message() << "\n";
    return 2;
  }
  two_turn.repairs = std::move(*repairs);
  two_turn.speeds = std::move(*speeds);
  const auto drills = write_drills(opt, pass, in->tmpl, in->hw, in->exclude, two_turn, sft);
  if (!sft) {
    err << "kforge corpus build: cannot write " << (dir / "sft.jsonl").string() << "\n";
    return 2;
  }
  print_summary(opt, pass, drills, out);
  return 0;
}

}  // namespace kforge::corpus
