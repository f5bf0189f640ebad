#pragma once
// The tiny-model run the end-to-end tests share: the fixture Qwen2 (tests/model/fixtures) copied to
// DIR/model, and DIR/tiny.toml with every stage real on the CPU in one process (compile-only
// sandbox), sync, `steps` steps of 2 groups of 4. Needs KFORGE_MODEL_FIXTURES and KFORGE_SOURCE_DIR.

#include <filesystem>
#include <fstream>
#include <string>

namespace kforge::test {

/// The fixture model's files in DIR/model; returns that folder.
inline std::filesystem::path copy_tiny_model(const std::filesystem::path& dir) {
  const auto model = dir / "model";
  std::filesystem::create_directories(model);
  for (const char* sub : {"qwen2", "tokenizer"})
    for (const auto& f : std::filesystem::directory_iterator(std::filesystem::path(KFORGE_MODEL_FIXTURES) / sub))
      std::filesystem::copy_file(f.path(), model / f.path().filename(),
                                 std::filesystem::copy_options::overwrite_existing);
  return model;
}

/// DIR/tiny.toml over the model in DIR/model (copy_tiny_model). `sampler_keys` and `buffer_keys`
/// go into those tables; `tables` (whole tables: [trainer], [agent], ...) at the end.
inline std::filesystem::path write_tiny_manifest(const std::filesystem::path& dir, int steps,
                                                 const std::string& tables = "",
                                                 const std::string& buffer_keys = "",
                                                 const std::string& sampler_keys = "") {
  const auto manifest = dir / "tiny.toml";
  std::ofstream(manifest) << R"([run]
name = "tiny"
mode = "sync"
steps = )" << steps << R"(
seed = 1
progress = false

[gpu_groups]
rollout = []
trainer = []

[[process]]
name = "head"
[process.actors]
task_generator = { count = 1 }
sampler        = { count = 1, gpu_group = "rollout" }
sandbox_pool   = { count = 1 }
sandbox_worker = { count = 1, gpu_group = "rollout" }
reward         = { count = 1 }
buffer         = { count = 1 }
trainer        = { count = 1, gpu_group = "trainer" }

[tasks]
# The tiny model's context is short: a one-line prompt instead of the full template.
prompt_template = ")" << KFORGE_SOURCE_DIR << R"(/tests/pipeline/data/short_prompt_template.txt"

[sampler]
group_size = 4
max_new_tokens = 32
model = ")" << (dir / "model").string() << R"("
)" << sampler_keys << R"(
[buffer]
groups_per_batch = 2
)" << buffer_keys << R"(
[sandbox]
backend = "nvcc"

[record]
links = ["verdicts", "scored", "batches", "weights"]
)" << tables;
  return manifest;
}

}  // namespace kforge::test
