// How the trainer's weights reach the samplers (config/weights_publish.hpp): NCCL exactly where
// every sampler is an engine on a GPU of its own, ranks in process order, and an explicit
// trainer.publish = "nccl" that cannot be honoured is an error saying why.

#include <doctest/doctest.h>

#include <map>
#include <string>
#include <vector>

#include "config/manifest.hpp"
#include "config/weights_publish.hpp"

using namespace kforge;
using namespace kforge::pipeline;

namespace {

using groups_t = std::map<std::string, std::vector<int>>;

const groups_t two_gpus{{"rollout", {0}}, {"trainer", {1}}};

// Explicit GPU groups, then the head process with every stage but the sampler and `sampler_line`
// (its sampler entry, or "" for none); `rest` appends processes and tables.
std::string topology(const std::string& sampler_line, const std::string& rest = "") {
  return R"(
[gpu_groups]
rollout = [0]
trainer = [1]
[[process]]
name = "head"
[process.actors]
task_generator = {}
sandbox_pool = {}
sandbox_worker = { gpu_group = "rollout" }
reward = {}
buffer = {}
trainer = { gpu_group = "trainer" }
)" + sampler_line + "\n" + rest;
}

manifest parsed(const std::string& text) {
  auto m = parse_manifest(text, "test.toml");
  REQUIRE_MESSAGE(m.ok(), m.message());
  return std::move(*m);
}

// One process, sampler and trainer on groups of their own; `extra` appends settings.
manifest one_process(const std::string& extra = "") {
  return parsed(topology("sampler = { gpu_group = \"rollout\" }", "[sampler]\nmodel = \"m\"\n" + extra));
}

bool has(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

}  // namespace

TEST_CASE("weights by NCCL when the sampler is an engine on a GPU the trainer does not use") {
  auto plan = plan_weights_publish(one_process(), two_gpus, true);
  REQUIRE_MESSAGE(plan.ok(), plan.message());
  CHECK(plan->nccl);
  CHECK(plan->ranks == 2);
  CHECK(plan->sampler_rank.at("head") == 1);
}

TEST_CASE("weights by file, and why, wherever NCCL cannot carry them") {
  auto why = [](const manifest& m, const groups_t& g, bool built) {
    auto plan = plan_weights_publish(m, g, built);
    REQUIRE_MESSAGE(plan.ok(), plan.message());
    CHECK_FALSE(plan->nccl);
    return plan->reason;
  };
  CHECK(has(why(one_process("[trainer]\npublish = \"file\"\n"), two_gpus, true), "publish = \"file\""));
  CHECK(has(why(one_process(), two_gpus, false), "built without CUDA"));
  CHECK(has(why(one_process(), {{"rollout", {0}}, {"trainer", {}}}, true), "trainer runs on the CPU"));
  CHECK(has(why(one_process(), {{"rollout", {}}, {"trainer", {1}}}, true), "samplers run on the CPU"));
  // One GPU: "auto" groups share it.
  CHECK(has(why(one_process(), {{"rollout", {0}}, {"trainer", {0}}}, true), "shares GPU 0 with the trainer"));
  const auto stand_in = parsed(topology("sampler = {}"));
  CHECK(has(why(stand_in, {}, true), "stand-in sampler"));
  // LoRA: the samplers need the adapters merged, which only the file carries.
  CHECK(has(why(one_process("[trainer]\nlora = { rank = 8 }\n"), two_gpus, true), "trainer.lora is set"));
  auto forced = plan_weights_publish(one_process("[trainer]\npublish = \"nccl\"\nlora = { rank = 8 }\n"), two_gpus, true);
  REQUIRE_FALSE(forced.ok());
  CHECK(has(forced.message(), "trainer.lora"));
  // "adapters": the adapters alone, by file; only with LoRA, and only for samplers with a model.
  auto adapters = plan_weights_publish(one_process("[trainer]\npublish = \"adapters\"\nlora = { rank = 8 }\n"),
                                       two_gpus, true);
  REQUIRE_MESSAGE(adapters.ok(), adapters.message());
  CHECK(adapters->adapters);
  CHECK_FALSE(adapters->nccl);
  auto no_lora = plan_weights_publish(one_process("[trainer]\npublish = \"adapters\"\n"), two_gpus, true);
  REQUIRE_FALSE(no_lora.ok());
  CHECK(has(no_lora.message(), "set [trainer] lora"));
  const auto stand_in_adapters =
      parsed(topology("sampler = {}", "[trainer]\npublish = \"adapters\"\nlora = { rank = 8 }\n"));
  CHECK_FALSE(plan_weights_publish(stand_in_adapters, {}, true).ok());
}

TEST_CASE("two samplers on one GPU, or two sampler processes on one node, go by file") {
  const auto two_in_one = parsed(topology("sampler = { count = 2, gpu_group = \"rollout\" }", "[sampler]\nmodel = \"m\"\n"));
  auto plan = plan_weights_publish(two_in_one, two_gpus, true);
  REQUIRE(plan.ok());
  CHECK_FALSE(plan->nccl);
  CHECK(has(plan->reason, "process head hosts 2 samplers"));

  const auto two_local = parsed(topology("sampler = { gpu_group = \"rollout\" }", R"(
[[process]]
name = "more"
[process.actors]
sampler = { gpu_group = "rollout" }
[sampler]
model = "m"
[trainer]
publish = "nccl"
)"));
  auto refused = plan_weights_publish(two_local, two_gpus, true);
  REQUIRE_FALSE(refused.ok());
  CHECK(has(refused.message(), "test.toml: trainer.publish = \"nccl\" cannot be used"));
  CHECK(has(refused.message(), "processes head and more put their samplers on the same GPU"));
}

TEST_CASE("sampler processes on other nodes: files unless trainer.publish = \"nccl\", then ranks 1..n") {
  const std::string text = topology("", R"(
[[process]]
name = "gen-a"
node = "node-a"
[process.actors]
sampler = { gpu_group = "rollout" }
[[process]]
name = "gen-b"
node = "node-b"
[process.actors]
sampler = { gpu_group = "rollout" }
[sampler]
model = "m"
[endpoints]
tasks = "tcp://head:5601"
candidates = "tcp://head:5602"
weights = "tcp://head:5603"
control = "tcp://head:5604"
metrics = "tcp://head:5605"
)");
  auto by_file = plan_weights_publish(parsed(text), two_gpus, true);
  REQUIRE(by_file.ok());
  CHECK_FALSE(by_file->nccl);
  CHECK(has(by_file->reason, "process gen-a is on another node"));

  auto plan = plan_weights_publish(parsed(text + "[trainer]\npublish = \"nccl\"\n"), two_gpus, true);
  REQUIRE_MESSAGE(plan.ok(), plan.message());
  CHECK(plan->nccl);
  CHECK(plan->ranks == 3);
  CHECK(plan->sampler_rank.at("gen-a") == 1);
  CHECK(plan->sampler_rank.at("gen-b") == 2);
}

TEST_CASE("trainer.publish and publish_timeout_s are checked") {
  auto bad = parse_manifest(topology("sampler = {}", "[trainer]\npublish = \"carrier-pigeon\"\n"), "test.toml");
  REQUIRE_FALSE(bad.ok());
  CHECK(has(bad.message(), "test.toml"));
  CHECK(has(bad.message(), "publish"));
  auto zero = parse_manifest(topology("sampler = {}", "[trainer]\npublish_timeout_s = 0\n"), "test.toml");
  REQUIRE_FALSE(zero.ok());
  CHECK(has(zero.message(), "publish_timeout_s"));
}
