#pragma once
// The GPUs this process may use, found without touching CUDA (no context, no driver library): the
// supervisor processes (sandbox, run head, stage factory) must stay free of CUDA state.

#include <string>

namespace kforge {

/// The physical GPU behind our CUDA ordinal (an entry of CUDA_VISIBLE_DEVICES, or the ordinal).
std::string physical_gpu(int ordinal);
/// GPUs this process may use: CUDA_VISIBLE_DEVICES if set, else the NVIDIA driver's /proc
/// entries (0 on a host without the driver).
int visible_gpu_count();

}  // namespace kforge
