#include "runtime/host_check.hpp"

#include <filesystem>
#include <sstream>

namespace kforge::pipeline {

namespace fs = std::filesystem;

namespace {

bool hosted_here(const manifest& m, actor_kind k) {
  for (const auto* p : m.hosts(k))
    if (p->is_local()) return true;
  return false;
}

bool is_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

// An engine model directory: config.json, a tokenizer (tokenizer.json + tokenizer_config.json)
// and weights (model.safetensors, or the index of a sharded checkpoint).
host_check model_check(const manifest& m) {
  const auto& s = m.sampler;
  if (s.model.empty()) return {"model", true, "none: the stand-in sampler and trainer"};
  if (s.backend == sampler_backend::openai) return {"model", true, s.model + " at " + s.server_url};
  const fs::path dir = s.model;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return {"model", false, s.model + ": no such directory (sampler.model)"};
  std::string missing;
  for (const char* f : {"config.json", "tokenizer.json", "tokenizer_config.json"})
    if (!is_file(dir / f)) missing += std::string(missing.empty() ? "" : ", ") + f;
  if (!is_file(dir / "model.safetensors") && !is_file(dir / "model.safetensors.index.json"))
    missing += std::string(missing.empty() ? "" : ", ") + "model.safetensors (weights)";
  if (!missing.empty()) return {"model", false, s.model + ": missing " + missing};
  return {"model", true, s.model + ": config, tokenizer and weights"};
}

std::vector<host_check> task_checks(const manifest& m) {
  if (m.tasks.source == task_source_kind::stand_in) return {{"tasks", true, "stand-in tasks: no files"}};
  std::vector<host_check> out;
  for (std::size_t i = 0; i < m.tasks.files.size(); ++i) {
    const auto& f = m.tasks.files[i];
    const std::string name = "tasks.files[" + std::to_string(i) + "]";
    out.push_back(is_file(f) ? host_check{name, true, f} : host_check{name, false, f + ": no such file"});
  }
  if (out.empty()) out.push_back({"tasks", true, "the built-in library"});
  return out;
}

host_check gpu_check(const manifest& m, const host_facts& h) {
  auto groups = resolve_gpu_groups(m, h.gpus);
  if (!groups) return {"gpus", false, groups.message()};
  std::ostringstream s;
  s << h.gpus << " visible";
  for (const auto& [name, gpus] : *groups) {
    s << "; " << name << "=[";
    for (std::size_t i = 0; i < gpus.size(); ++i) s << (i ? "," : "") << gpus[i];
    s << "]";
  }
  return {"gpus", true, s.str()};
}

}  // namespace

std::vector<host_check> host_checks(const manifest& m, const host_facts& h) {
  std::vector<host_check> out;
  if (hosted_here(m, actor_kind::sampler)) out.push_back(model_check(m));
  if (hosted_here(m, actor_kind::task_generator))
    for (auto& c : task_checks(m)) out.push_back(std::move(c));
  out.push_back(gpu_check(m, h));
  if (m.sandbox.backend == sandbox_backend::nvcc && hosted_here(m, actor_kind::sandbox_worker))
    out.push_back({"nvcc", h.nvcc_ok, h.nvcc_ok ? h.nvcc : h.nvcc + " (sandbox.backend = \"nvcc\")"});
  return out;
}

std::string format_host_checks(const std::vector<host_check>& checks) {
  std::ostringstream s;
  for (const auto& c : checks) s << (c.ok ? "ok      " : "PROBLEM ") << c.name << ": " << c.detail << "\n";
  return s.str();
}

bool all_passed(const std::vector<host_check>& checks) {
  for (const auto& c : checks)
    if (!c.ok) return false;
  return true;
}

}  // namespace kforge::pipeline
