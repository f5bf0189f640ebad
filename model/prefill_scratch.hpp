#pragma once
// How much attention scratch one prefill forward may take (model/generate.hpp slices a long
// prefill to stay under it); the memory plan counts it in the sampler's share.

namespace kforge::model {

inline constexpr double default_prefill_scratch_bytes = 1024.0 * 1024 * 1024;

}  // namespace kforge::model
