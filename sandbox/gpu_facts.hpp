#pragma once
// Querying a GPU's facts (common/gpu_facts.hpp) with the CUDA runtime in GPU builds, and
// to_json/from_json so a process without a CUDA context (the supervisor, the task generator) can
// carry them.
#include <string>

#include "common/gpu_facts.hpp"

#include "common/result.hpp"

namespace kforge::sandbox {

using kforge::gpu_facts;

std::string to_json(const gpu_facts& f);
result<gpu_facts> gpu_facts_from_json(const std::string& text);

/// Queries device `index` (GPU builds only; elsewhere an error saying so).
result<gpu_facts> query_gpu(int index);

}  // namespace kforge::sandbox
