// `kforge run --check`'s checks against a host described by hand: the model directory's files,
// the task files, the GPU groups against the visible GPUs, nvcc for the real sandbox.
#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "runtime/host_check.hpp"
#include "stages/stage_factory.hpp"

namespace fs = std::filesystem;
using namespace kforge::pipeline;

namespace {

/// The stand-in manifest with `extra` tables appended, its trainer group set to `trainer_group`.
kforge::pipeline::manifest stand_in_with(const std::string& extra,
                                         const std::string& trainer_group = "\"auto\"") {
  std::ifstream f(KFORGE_SOURCE_DIR "/deploy/manifests/stand_in.toml");
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const std::string automatic = "trainer = \"auto\"";
  const auto at = text.find(automatic);
  REQUIRE(at != std::string::npos);
  text.replace(at, automatic.size(), "trainer = " + trainer_group);
  auto m = parse_manifest(text + extra, "stand_in.toml");
  REQUIRE_MESSAGE(m.ok(), (m.ok() ? "" : m.message()));
  return *m;
}

const host_check* find(const std::vector<host_check>& checks, const std::string& name) {
  for (const auto& c : checks)
    if (c.name == name) return &c;
  return nullptr;
}

}  // namespace

TEST_CASE("run --check: nvcc is checked only for the nvcc sandbox, and a missing one fails") {
  host_facts h;
  h.nvcc = "nvcc not found";
  CHECK(find(host_checks(stand_in_with(""), h), "nvcc") == nullptr);
  const auto m = stand_in_with("[sandbox]\nbackend = \"nvcc\"\n");
  auto checks = host_checks(m, h);
  REQUIRE(find(checks, "nvcc") != nullptr);
  CHECK_FALSE(find(checks, "nvcc")->ok);
  CHECK_FALSE(all_passed(checks));
  CHECK(format_host_checks(checks).find("PROBLEM nvcc: nvcc not found") != std::string::npos);
  h.nvcc_ok = true;
  h.nvcc = "nvcc 13.0 (/usr/local/cuda/bin/nvcc)";
  CHECK(all_passed(host_checks(m, h)));
}

TEST_CASE("run --check: a model directory needs config, tokenizer and weights; task files must exist") {
  const fs::path dir = fs::temp_directory_path() / ("kf-hostcheck-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "model");
  const auto m = stand_in_with("[sampler]\nmodel = \"" + (dir / "model").string() + "\"\n[tasks]\nfiles = [\"" +
                               (dir / "tasks.jsonl").string() + "\"]\n");
  host_facts h;
  auto checks = host_checks(m, h);
  REQUIRE(find(checks, "model") != nullptr);
  CHECK_FALSE(find(checks, "model")->ok);
  CHECK(find(checks, "model")->detail.find("missing config.json, tokenizer.json") != std::string::npos);
  REQUIRE(find(checks, "tasks.files[0]") != nullptr);
  CHECK_FALSE(find(checks, "tasks.files[0]")->ok);

  for (const char* f : {"config.json", "tokenizer.json", "tokenizer_config.json", "model.safetensors"})
    std::ofstream(dir / "model" / f) << "{}";
  std::ofstream(dir / "tasks.jsonl") << "\n";
  checks = host_checks(m, h);
  INFO(format_host_checks(checks));
  CHECK(all_passed(checks));
  fs::remove_all(dir);
}

TEST_CASE("run --check: a GPU group naming a GPU this host lacks fails, \"auto\" groups do not") {
  host_facts h;
  h.gpus = 2;
  CHECK(find(host_checks(stand_in_with(""), h), "gpus")->ok);
  const auto checks = host_checks(stand_in_with("", "[2]"), h);
  INFO(format_host_checks(checks));
  CHECK_FALSE(find(checks, "gpus")->ok);
}

TEST_CASE("the banner warns of inference servers that share the sandbox's GPU and do not yield it") {
  const std::string vllm = "vllm serve /models/Qwen2.5-Coder-7B-Instruct --port {port}";
  const auto warned = unlocked_server_warning(vllm, {0, 1}, {1});
  CHECK(warned.find("WARNING: they share GPU 1 with the sandbox") != std::string::npos);
  CHECK(unlocked_server_warning(vllm, {0}, {1}).empty());  // GPUs of their own
  CHECK(unlocked_server_warning(vllm, {0}, {}).empty());   // a compile-only sandbox
  // kforge serve holds the host-wide GPU lock while it generates, as the engine does.
  CHECK(unlocked_server_warning("build/kforge serve --model m --gpu 0 --port {port}", {0}, {0}).empty());
  CHECK(unlocked_server_warning("/opt/kforge/bin/kforge serve --model m", {0}, {0}).empty());
}
