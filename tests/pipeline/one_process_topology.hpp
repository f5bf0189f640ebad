#pragma once
// The smallest valid topology for manifest tests: every stage once, in one process. Tests append
// their own tables to it (TOML allows tables after the process array).
#include <string>

namespace kforge::testing {

inline const std::string one_process_topology = R"(
[[process]]
name = "all"
[process.actors]
task_generator = {}
sampler = {}
sandbox_pool = {}
sandbox_worker = {}
reward = {}
buffer = {}
trainer = {}
)";

}  // namespace kforge::testing
