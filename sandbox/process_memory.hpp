#pragma once
// Device memory one process holds on one GPU, as the NVIDIA driver counts it (NVML, loaded at run
// time: libnvidia-ml ships with the driver, not the toolkit, and CPU-only hosts have none).
//
// Why: the candidate child's leak check. The GPU's free memory is a device-wide figure that every
// other child and reference server moves, so reading it made healthy children look leaky (and
// recycled them) or hid a real leak behind another process's free. A process's own usage moves
// only with its own allocations.
#include <cstdint>
#include <memory>
#include <string>

#include "common/result.hpp"

namespace kforge::sandbox {

class process_memory_meter {
 public:
  /// The meter for the GPU at `pci_bus_id` ("0000:19:00.0", as cudaDeviceGetPCIBusId gives it):
  /// an error naming why where NVML or the GPU cannot be reached.
  static result<process_memory_meter> open(const std::string& pci_bus_id);

  /// Bytes `pid` (a process ID as this process sees it) holds on the GPU, or an error: NVML
  /// failed, the process is not listed (no context on this GPU, or the driver reports process IDs
  /// of another PID namespace) or its usage is not available. Users check the figure once against
  /// an allocation of their own: a PID of another namespace can name another process, and some
  /// drivers lay the entries out differently.
  result<std::uint64_t> used_by(unsigned pid) const;

  process_memory_meter(process_memory_meter&&) noexcept = default;
  process_memory_meter& operator=(process_memory_meter&&) noexcept = default;

 private:
  struct library;
  process_memory_meter(std::shared_ptr<library> lib, void* device) : lib_(std::move(lib)), device_(device) {}
  std::shared_ptr<library> lib_;
  void* device_ = nullptr;  ///< nvmlDevice_t
};

}  // namespace kforge::sandbox
