#include "config/manifest.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/visible_gpus.hpp"
#include "config/manifest_internal.hpp"

namespace kforge::pipeline {

namespace detail {
// Generated from default_manifest.toml at build time (config/CMakeLists.txt).
extern const char default_manifest_data[];
extern const std::size_t default_manifest_size;
}  // namespace detail

const actor_spec* process_spec::find(actor_kind k) const noexcept {
  for (const actor_spec& a : actors)
    if (a.kind == k) return &a;
  return nullptr;
}

int process_spec::count(actor_kind k) const noexcept {
  const actor_spec* a = find(k);
  return a ? a->count : 0;
}

const process_spec* manifest::find_process(std::string_view name) const noexcept {
  for (const process_spec& p : processes)
    if (p.name == name) return &p;
  return nullptr;
}

const process_spec& manifest::head() const noexcept {
  for (const process_spec& p : processes)
    if (p.head) return p;
  return processes.front();  // unreachable for a validated manifest
}

std::vector<const process_spec*> manifest::hosts(actor_kind k) const {
  std::vector<const process_spec*> out;
  for (const process_spec& p : processes)
    if (p.find(k)) out.push_back(&p);
  return out;
}

std::vector<const process_spec*> manifest::processes_on(link l) const {
  const link_info& li = info(l);
  std::vector<const process_spec*> out;
  for (const process_spec& p : processes)
    if (li.every_process || p.find(li.from) || p.find(li.to)) out.push_back(&p);
  return out;
}

const gpu_group* manifest::find_gpu_group(std::string_view name) const noexcept {
  for (const gpu_group& g : gpu_groups)
    if (g.name == name) return &g;
  return nullptr;
}

int manifest::count(actor_kind k) const noexcept {
  int n = 0;
  for (const process_spec& p : processes) n += p.count(k);
  return n;
}

result<manifest> parse_manifest(std::string_view text, std::string_view source_name) {
  return parse_manifest(text, source_name, cross_node_endpoint{});
}

result<manifest> parse_manifest(std::string_view text, std::string_view source_name,
                                const cross_node_endpoint& derive) {
  const std::string source(source_name);
  try {
    detail::diagnostics d(source);
    toml::table root;
#if TOML_EXCEPTIONS
    // Debian's libtomlplusplus is built with exceptions: parse() throws parse_error.
    try {
      root = toml::parse(text, source_name);
    } catch (const toml::parse_error& e) {
      d.add(&e.source(), "", "TOML syntax error: " + std::string(e.description()));
      return d.to_error();
    }
#else
    toml::parse_result parsed = toml::parse(text, source_name);
    if (!parsed) {
      d.add(&parsed.error().source(), "",
            "TOML syntax error: " + std::string(parsed.error().description()));
      return d.to_error();
    }
    root = std::move(parsed).table();
#endif
    manifest m;
    m.source = source;
    m.text = std::string(text);
    detail::read_manifest(root, d, m);
    if (!d.empty()) return d.to_error();
    detail::check_manifest(root, d, m, derive);
    if (!d.empty()) return d.to_error();
    return m;
  } catch (const std::exception& e) {  // bad_alloc and the like: still an error value
    return error{source + ": cannot read the manifest: " + e.what()};
  }
}

result<manifest> load_manifest(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return error{path + ": cannot open manifest: " + std::strerror(errno)};
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return error{path + ": cannot read manifest: " + std::strerror(errno)};
  return parse_manifest(text.str(), path);
}

std::string_view default_manifest_text() noexcept {
  return {detail::default_manifest_data, detail::default_manifest_size};
}

result<manifest> default_manifest() {
  return parse_manifest(default_manifest_text(), "<default manifest>");
}

result<std::map<std::string, std::vector<int>>> resolve_gpu_groups(const manifest& m,
                                                                   int visible_gpus) {
  std::map<std::string, std::vector<int>> out;
  std::vector<bool> taken(static_cast<std::size_t>(std::max(visible_gpus, 0)), false);
  std::vector<const gpu_group*> automatic;
  for (const gpu_group& g : m.gpu_groups) {
    if (g.automatic) {
      automatic.push_back(&g);
      continue;
    }
    for (int gpu : g.gpus) {
      if (gpu >= visible_gpus)
        return error{m.source + ": gpu_groups." + g.name + ": GPU " + std::to_string(gpu) +
                     " is not visible on this host (" + std::to_string(visible_gpus) +
                     " GPU(s) visible)"};
      taken[static_cast<std::size_t>(gpu)] = true;
    }
    out[g.name] = g.gpus;
  }
  std::vector<int> free;
  for (int i = 0; i < visible_gpus; ++i)
    if (!taken[static_cast<std::size_t>(i)]) free.push_back(i);
  const std::size_t k = automatic.size();
  if (k == 0) return out;
  if (free.size() < k) {
    for (const gpu_group* g : automatic) out[g->name] = free;
    return out;
  }
  std::size_t next = 0;
  for (std::size_t i = 0; i < k; ++i) {
    const std::size_t n = free.size() / k + (i < free.size() % k ? 1 : 0);
    out[automatic[i]->name].assign(free.begin() + static_cast<std::ptrdiff_t>(next),
                                   free.begin() + static_cast<std::ptrdiff_t>(next + n));
    next += n;
  }
  return out;
}

namespace {

/// The GPU group of the first process hosting `k` with one; empty when none names one.
std::string stage_group(const manifest& m, actor_kind k) {
  for (const auto* p : m.hosts(k))
    if (const auto* a = p->find(k); a && !a->gpu_group.empty()) return a->gpu_group;
  return {};
}

}  // namespace

result<std::vector<int>> stage_gpus(const manifest& m, actor_kind k) {
  const std::string group = stage_group(m, k);
  if (group.empty()) return std::vector<int>{};
  auto groups = resolve_gpu_groups(m, visible_gpu_count());
  if (!groups) return groups.err();
  const auto it = groups->find(group);
  return it == groups->end() ? std::vector<int>{} : it->second;
}

status check_sampler_gpu(const manifest& m) {
  if (!m.sampler.require_gpu || m.sampler.model.empty() || m.sampler.backend != sampler_backend::engine)
    return {};
  auto gpus = stage_gpus(m, actor_kind::sampler);
  if (!gpus) return gpus.err();
  if (!gpus->empty()) return {};
  const std::string group = stage_group(m, actor_kind::sampler);
  return error{"sampler.require_gpu: the sampler would run on the CPU here (" +
               (group.empty() ? std::string("it names no gpu_group")
                              : "its GPU group \"" + group + "\" has no GPU") +
               "; " + std::to_string(visible_gpu_count()) +
               " GPU(s) visible). Writing kernels of thousands of tokens with model \"" +
               m.sampler.model +
               "\" takes hours a step on a CPU. Run on a GPU host, set sampler.require_gpu = false "
               "to sample on the CPU anyway, or run the loop with stand-ins: kforge run --manifest "
               "deploy/manifests/stand_in.toml"};
}

std::string dedup_left_out_note(const manifest& m) {
  if (m.buffer.dedup_set) return "";
  return "note: " + m.source +
         " sets no [buffer] dedup, so the buffer drops a repeated kernel within its group only (the "
         "built-in value since 2026-12-02); a run made before then dropped it across the whole run: "
         "add dedup = \"run\" to its [buffer] table to continue or replay it as it ran\n";
}

std::uint64_t step_lookahead(const manifest& m) {
  return m.run.mode == run_mode::sync ? 1 : 1 + static_cast<std::uint64_t>(m.buffer.max_staleness);
}

}  // namespace kforge::pipeline
