#include "runtime/readiness.hpp"

#include <cstdlib>
#include <iomanip>
#include <sstream>

#include "common/subprocess.hpp"
#include "stages/stage_factory.hpp"
#include "sandbox/child_setup.hpp"
#include "sandbox/toolchain.hpp"
#ifdef KFORGE_HAVE_TORCH
#include "trainer/torch_env.hpp"
#endif

namespace kforge::pipeline {

host_facts probe_host() {
  host_facts h;
#ifdef KFORGE_HAVE_TORCH
  const auto env = trainer::probe_torch();
  h.torch = "LibTorch " + env.torch_version + (env.cuda_available ? " (CUDA)" : " (CPU only)");
  h.torch_cuda = env.cuda_available;
  h.gpus = env.cuda_devices;
  h.devices = env.devices;
  h.gpu_source = "LibTorch";
#else
  h.torch = "not built (configured with KFORGE_WITH_TORCH=OFF)";
#endif
  if (h.gpus == 0) {
    // Without a CUDA LibTorch, ask the driver's tool; its absence means no usable GPU here.
    auto smi = run_process({"nvidia-smi", "-L"}, std::chrono::seconds(10));
    if (smi && smi->exit_code == 0) {
      std::istringstream lines(smi->output);
      for (std::string l; std::getline(lines, l);)
        if (l.rfind("GPU ", 0) == 0) h.devices.push_back(l);
      h.gpus = static_cast<int>(h.devices.size());
      h.gpu_source = "nvidia-smi";
    } else {
      h.gpu_source = "no CUDA LibTorch and no working nvidia-smi";
    }
  }
  if (h.gpus > 0)
    if (auto smi = run_process({"nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits"},
                               std::chrono::seconds(10));
        smi && smi->exit_code == 0) {
      std::istringstream lines(smi->output);
      for (std::string l; std::getline(lines, l);)
        if (!l.empty()) h.gpu_memory.push_back(std::strtod(l.c_str(), nullptr) * 1024 * 1024);  // MiB
    }
  auto tc = sandbox::find_toolchain();
  h.nvcc_ok = tc.ok();
  h.nvcc = tc ? "nvcc " + tc->release + " (" + tc->nvcc + ")" : tc.message();
  return h;
}

std::string readiness_report(const manifest& m, const host_facts& h) {
  std::ostringstream s;
  s << "host: " << h.gpus << " GPU(s) (" << h.gpu_source << ")";
  for (const auto& d : h.devices) s << "\n  " << d;
  s << "\n  " << h.torch << "\n  " << h.nvcc << "\n";
  auto groups = resolve_gpu_groups(m, h.gpus);
  if (groups) {
    s << "gpu groups on this host:";
    for (const auto& [name, gpus] : *groups) {
      s << " " << name << "=[";
      for (std::size_t i = 0; i < gpus.size(); ++i) s << (i ? "," : "") << gpus[i];
      s << "]";
    }
    s << "\n";
  } else {
    s << "gpu groups: " << groups.message() << "\n";
  }
  s << "\n" << std::left << std::setw(16) << "stage" << std::setw(14) << "processes"
    << "logic today / what it needs here\n";
  for (auto k : all_actor_kinds) {
    std::string where;
    for (const auto* p : m.hosts(k)) where += (where.empty() ? "" : ",") + p->name;
    std::string needs;
    switch (k) {
      case actor_kind::sampler:
        needs = m.sampler.model.empty() ? "a policy model: none set (sampler.model)"
                                        : "model " + m.sampler.model;
        break;
      case actor_kind::sandbox_worker:
        needs = std::string(h.nvcc_ok ? "nvcc: ok" : "nvcc: MISSING") +
                (h.gpus > 0 ? "; GPU: ok" : "; GPU: none, so the nvcc backend is compile-only");
        // What the OS grants the candidate children here, said once, before anything runs.
        if (m.sandbox.backend == sandbox_backend::nvcc && h.gpus > 0)
          needs += "\n" + std::string(30, ' ') + "candidate children: " +
                   sandbox::describe_candidate_confinement(m.sandbox.confine);
        break;
      case actor_kind::trainer:
        needs = h.torch + (h.torch_cuda ? "" : "; training will need CUDA LibTorch and NCCL");
        break;
      default:
        break;
    }
    s << std::setw(16) << to_string(k) << std::setw(14) << where << logic_description(k, &m) << "\n";
    if (!needs.empty()) s << std::setw(30) << "" << needs << "\n";
  }
  return s.str();
}

}  // namespace kforge::pipeline
