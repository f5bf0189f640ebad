#include "tasks/task_spec.hpp"

#include <algorithm>
#include <sstream>
#include <stdexcept>

#include "tasks/builtin.hpp"
#include "tasks/task_parser.hpp"
#if defined(KFORGE_TASKS_WITH_TORCH)
#include "tasks/synth_run.hpp"
#endif

namespace kforge::tasks {

namespace {

// Errors here are prefixed with "--tasks SPEC: " by the caller.
result<std::vector<task>> synthesized(const std::string& spec, std::ostream& log) {
  const auto rest = spec.substr(6);
  const auto colon = rest.find(':');
  int count = 0;
  std::uint64_t seed = 0;
  try {
    if (colon == std::string::npos) throw std::invalid_argument("no seed");
    // Digits only: stoi/stoull would take a sign or leading spaces (and wrap "-1" around).
    if (rest.find_first_not_of("0123456789:") != std::string::npos) throw std::invalid_argument("not digits");
    std::size_t used = 0;
    count = std::stoi(rest.substr(0, colon), &used);
    if (used != colon) throw std::invalid_argument("count");
    const auto s = rest.substr(colon + 1);
    seed = std::stoull(s, &used);
    if (used != s.size()) throw std::invalid_argument("seed");
  } catch (const std::exception&) {
    return error{"expected synth:COUNT:SEED with two integers"};
  }
  if (count < 1) return error{"COUNT must be at least 1"};
#if defined(KFORGE_TASKS_WITH_TORCH)
  synth::synth_options so;
  so.count = count;
  so.seed = seed;
  so.dev = device::cpu();
  std::ostringstream lines, progress;
  auto rep = synth::synthesize(so, lines, progress);
  if (!rep) return rep.err();
  log << "synthesized " << rep->kept << " of " << count << " tasks (" << rep->tried << " tried, CPU filters)\n";
  task_set_reader reader;
  reader.add_lines(lines.str(), spec);
  if (!reader.errors().empty()) return reader.errors().front();
  return reader.take_tasks();
#else
  (void)seed;
  (void)log;
  return error{"synthesis needs a build with LibTorch"};
#endif
}

}  // namespace

result<std::vector<task>> load_task_spec(const std::string& spec, const std::vector<std::string>& categories,
                                         std::ostream& log) {
  std::vector<category> keep;
  for (const auto& c : categories) {
    auto parsed = parse_category(c);
    if (!parsed) return error{"--category: unknown category '" + c + "' (known: " + category_names() + ")"};
    keep.push_back(*parsed);
  }
  auto all = spec == "builtin"               ? builtin_tasks()
             : spec.rfind("synth:", 0) == 0 ? synthesized(spec, log)
                                            : load_task_file(spec);
  if (!all) return error{"--tasks " + spec + ": " + all.message()};
  if (keep.empty()) return all;
  std::vector<task> out;
  for (auto& t : *all)
    if (std::find(keep.begin(), keep.end(), t.category) != keep.end()) out.push_back(std::move(t));
  return out;
}

}  // namespace kforge::tasks
