#pragma once
// Which nvcc target the sandbox builds candidates for: one machine-code target, the GPU's own.
// Plain strings (no nvcc, no CUDA), so the manifest reader, the prompt builder and the sandbox
// agree on the names without linking the sandbox.
#include <string>
#include <string_view>

namespace kforge {

/// The setting ([sandbox] arch, `kforge eval --arch`) that means: the target of the sandbox's
/// first GPU, asked at start-up.
inline constexpr std::string_view auto_arch = "auto";

/// The target of a sandbox with no GPU to ask (compile-only) when none is set: Hopper's, the
/// GPUs kforge's runs are sized for (H100/H200).
inline constexpr std::string_view default_arch = "sm_90a";

/// The nvcc target for a GPU of compute capability major.minor: sm_<major><minor>, with nvcc's
/// arch-specific `a` suffix on 9.x, 10.x and 11.x (Hopper, datacenter Blackwell, Thor), whose
/// tensor-core instructions (wgmma and setmaxnreg, tcgen05) exist only in that target. An `a`
/// library runs only on that exact compute capability, which costs nothing here: the sandbox
/// builds every library for the GPU it runs on. Other families (8.x, 12.x) take the plain target,
/// which also runs on later minors of the family. "" when the compute capability is unknown.
std::string arch_for_compute_capability(int major, int minor);

/// Whether `arch` is one nvcc target the sandbox's way: sm_NN or compute_NN, optionally with an
/// `a` or `f` suffix (nvcc's native/all/all-major name no single target; "auto" is resolved
/// before anything reaches nvcc).
bool valid_arch(const std::string& arch);

}  // namespace kforge
