// manifest::summary(): what `kforge run` prints before it starts anything.

#include <sstream>

#include "config/manifest.hpp"

namespace kforge::pipeline {
namespace {

std::string gpus_text(const gpu_group& g) {
  if (g.automatic) return "auto (chosen from the visible GPUs at start)";
  if (g.gpus.empty()) return "[] (CPU only)";
  std::string s = "[";
  for (std::size_t i = 0; i < g.gpus.size(); ++i) s += (i ? ", " : "") + std::to_string(g.gpus[i]);
  return s + "]";
}

}  // namespace

std::string manifest::summary() const {
  std::ostringstream s;
  s << "manifest " << source << "\n";
  s << "run \"" << run.name << "\": " << (run.mode == run_mode::sync ? "sync" : "async") << ", "
    << run.steps << " steps, seed " << run.seed << ", run dir " << run.run_dir << "\n";

  s << "gpu groups:" << (gpu_groups.empty() ? " none (every actor on the CPU)" : "") << "\n";
  for (const gpu_group& g : gpu_groups) s << "  " << g.name << " = " << gpus_text(g) << "\n";

  s << "processes:\n";
  for (const process_spec& p : processes) {
    s << "  " << p.name << " [" << (p.is_local() ? "local" : "node " + p.node)
      << (p.head ? ", head" : "") << "]";
    if (!p.is_local())
      s << "  start there: kforge worker --manifest FILE --process " << p.name;
    s << "\n";
    for (const actor_spec& a : p.actors) {
      s << "    " << to_string(a.kind) << " x" << a.count;
      if (!a.gpu_group.empty()) s << " on gpu group " << a.gpu_group;
      s << "\n";
    }
  }

  s << "endpoints:\n";
  for (const endpoint_spec& e : endpoints) {
    if (!uses(e.id)) continue;
    const link_info& li = info(e.id);
    s << "  " << li.name << std::string(li.name.size() < 16 ? 16 - li.name.size() : 1, ' ')
      << e.address << "  (" << li.pattern << (e.derived ? ", derived" : "") << ")\n";
  }

  s << "record: ";
  if (record.links.empty()) s << "nothing";
  for (std::size_t i = 0; i < record.links.size(); ++i)
    s << (i ? ", " : "") << to_string(record.links[i]);
  if (!record.links.empty()) s << " (at most " << record.max_bytes << " bytes per link)";
  s << "\n";
  return s.str();
}

}  // namespace kforge::pipeline
