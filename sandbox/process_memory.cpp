#include "sandbox/process_memory.hpp"

#include <dlfcn.h>

#include <string>
#include <type_traits>
#include <vector>

namespace kforge::sandbox {

namespace {

// The few NVML declarations used here (nvml.h is not installed with the toolkit on every host).
using nvml_return = int;
constexpr nvml_return nvml_success = 0;
constexpr nvml_return nvml_insufficient_size = 7;
constexpr unsigned long long nvml_value_not_available = ~0ULL;

struct nvml_process_info {  // nvmlProcessInfo_t of the _v3 query
  unsigned int pid;
  unsigned long long used_gpu_memory;
  unsigned int gpu_instance_id;
  unsigned int compute_instance_id;
};
// Drivers 535.43 to about 535.86 wrote 32-byte entries through the same _v3 entry point (a field
// added, then removed again). Room for that many bytes per entry means such a driver can never
// write past the buffer; its entries are then read at the wrong stride, which the child's
// self-check on a known allocation catches (the meter is then not used).
constexpr std::size_t widest_entry = 32;
static_assert(sizeof(nvml_process_info) <= widest_entry);

}  // namespace

struct process_memory_meter::library {
  void* handle = nullptr;
  nvml_return (*init)() = nullptr;
  nvml_return (*shutdown)() = nullptr;
  const char* (*error_string)(nvml_return) = nullptr;
  nvml_return (*by_pci_bus_id)(const char*, void**) = nullptr;
  nvml_return (*compute_processes)(void*, unsigned int*, nvml_process_info*) = nullptr;

  std::string text(nvml_return r) const {
    return error_string ? error_string(r) : "NVML error " + std::to_string(r);
  }

  ~library() {
    if (shutdown) shutdown();
    if (handle) ::dlclose(handle);
  }
};

result<process_memory_meter> process_memory_meter::open(const std::string& pci_bus_id) {
  auto lib = std::make_shared<library>();
  lib->handle = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib->handle) return error{std::string("NVML is not available: ") + ::dlerror()};
  auto bind = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(lib->handle, name));
    return fn != nullptr;
  };
  if (!bind(lib->init, "nvmlInit_v2") || !bind(lib->shutdown, "nvmlShutdown") ||
      !bind(lib->error_string, "nvmlErrorString") ||
      !bind(lib->by_pci_bus_id, "nvmlDeviceGetHandleByPciBusId_v2") ||
      !bind(lib->compute_processes, "nvmlDeviceGetComputeRunningProcesses_v3")) {
    lib->shutdown = nullptr;  // never initialised
    return error{"NVML is too old: it lacks the per-process memory query"};
  }
  if (const auto r = lib->init(); r != nvml_success) {
    lib->shutdown = nullptr;
    return error{"NVML init: " + lib->text(r)};
  }
  void* device = nullptr;
  if (const auto r = lib->by_pci_bus_id(pci_bus_id.c_str(), &device); r != nvml_success)
    return error{"NVML has no GPU at " + pci_bus_id + ": " + lib->text(r)};
  return process_memory_meter(std::move(lib), device);
}

result<std::uint64_t> process_memory_meter::used_by(unsigned pid) const {
  std::size_t capacity = 16;
  std::vector<nvml_process_info> infos;
  for (int attempt = 0; attempt < 4; ++attempt) {
    infos.assign(capacity * widest_entry / sizeof(nvml_process_info) + 1, nvml_process_info{});
    unsigned int count = static_cast<unsigned int>(capacity);
    const auto r = lib_->compute_processes(device_, &count, infos.data());
    if (r == nvml_insufficient_size) {
      capacity = static_cast<std::size_t>(count) + 16;  // processes may start meanwhile
      continue;
    }
    if (r != nvml_success) return error{"NVML process query: " + lib_->text(r)};
    for (unsigned int i = 0; i < count; ++i) {
      if (infos[i].pid != pid) continue;
      if (infos[i].used_gpu_memory == nvml_value_not_available)
        return error{"NVML does not report process " + std::to_string(pid) + "'s memory"};
      return static_cast<std::uint64_t>(infos[i].used_gpu_memory);
    }
    return error{"NVML does not list process " + std::to_string(pid) +
                 " on this GPU (another PID namespace?)"};
  }
  return error{"NVML process query: the process list kept growing"};
}

}  // namespace kforge::sandbox
