#pragma once
// An NCCL group's unique id as plain bytes, so that messages and torch-free code can carry it.
// Rank 0 makes it once per group (new_nccl_id, in GPU builds) and the other ranks receive it.

#include <array>

#include "common/result.hpp"

namespace kforge::trainer {

/// ncclUniqueId's bytes (NCCL_UNIQUE_ID_BYTES), as a message carries them.
struct nccl_id {
  std::array<char, 128> bytes{};
};

/// A fresh unique id. Only in builds with CUDA (KFORGE_WITH_CUDA).
result<nccl_id> new_nccl_id();

/// Whether this build has NCCL (and the weight channel over it).
#if defined(KFORGE_WITH_CUDA)
inline constexpr bool nccl_built = true;
#else
inline constexpr bool nccl_built = false;
#endif

}  // namespace kforge::trainer
