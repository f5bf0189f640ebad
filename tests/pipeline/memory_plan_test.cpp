// runtime/memory_plan.hpp: parameter counts from shapes, the stages' estimates, and a plan that
// does not fit refused with what to change; runtime/memory_table.hpp: the estimates per training mode.

#include <doctest/doctest.h>

#include <algorithm>
#include <sstream>
#include <string>

#include "config/manifest.hpp"
#include "runtime/episode_token_limit.hpp"
#include "runtime/memory_plan.hpp"
#include "runtime/memory_table.hpp"

using namespace kforge::pipeline;
using kforge::sampler_options;
using kforge::trainer_options;
using kforge::agent_options;

namespace {

// Qwen2.5-Coder-7B's shapes (its config.json): 7.62 B parameters as published.
policy_shape qwen_7b() {
  policy_shape p;
  p.hidden = 3584;
  p.intermediate = 18944;
  p.layers = 28;
  p.heads = 28;
  p.kv_heads = 4;
  p.head_dim = 128;
  p.vocab = 152064;
  return p;
}

constexpr double gib80 = 80.0 * 1024 * 1024 * 1024;

}  // namespace

TEST_CASE("memory plan: parameters from shapes, as the checkpoint counts them") {
  CHECK(static_cast<double>(qwen_7b().parameters()) == doctest::Approx(7.6156e9).epsilon(0.002));
  // The shipped model's own config.json, read the way `kforge run --check` reads it.
  auto tiny = policy_shape_of(std::string(KFORGE_SOURCE_DIR) + "/models/kforge-tiny");
  if (!tiny) {
    MESSAGE("the model library is not in this build: " << tiny.message());
    return;
  }
  CHECK(tiny->parameters() > 7'000'000);
  CHECK(tiny->parameters() < 8'500'000);
}

TEST_CASE("memory plan: a 7B policy trained in full at 4 x 4k tokens does not fit one 80 GiB GPU") {
  sampler_options s;
  s.max_new_tokens = 2048;
  trainer_options t;
  t.micro_batch = 4;
  const auto sampler = sampler_memory(qwen_7b(), s, planned_sequence_tokens(s));
  const auto trainer = trainer_memory(qwen_7b(), t, planned_sequence_tokens(s));
  // 20 bytes a parameter before activations: bf16 policy and reference, fp32 masters, gradients, moments.
  CHECK(trainer.total() > 20 * 7.6e9);
  const auto v = judge_memory(sampler, trainer, false, gib80);
  CHECK_FALSE(v.fits);
  CHECK(v.text.find("the trainer needs") != std::string::npos);
  CHECK(v.text.find("[trainer] micro_batch") != std::string::npos);
  // Unknown GPU memory: said, not refused.
  const auto unknown = judge_memory(sampler, trainer, false, 0);
  CHECK(unknown.fits);
  CHECK(unknown.text.find("GPU memory unknown") != std::string::npos);
}

TEST_CASE("memory plan: a small policy fits, and sharing one GPU adds the two stages") {
  policy_shape small = qwen_7b();
  small.layers = 2;
  small.hidden = 512;
  small.intermediate = 1024;
  small.heads = 8;
  small.kv_heads = 2;
  small.head_dim = 64;
  small.vocab = 4096;
  sampler_options s;
  trainer_options t;
  const auto sampler = sampler_memory(small, s, planned_sequence_tokens(s));
  const auto trainer = trainer_memory(small, t, planned_sequence_tokens(s));
  CHECK(judge_memory(sampler, trainer, true, gib80).fits);
  // A GPU just big enough for each alone, not for both.
  const double each = std::max(sampler.total(), trainer.total()) / 0.9 * 1.01;
  CHECK(judge_memory(sampler, trainer, false, each).fits);
  const auto both = judge_memory(sampler, trainer, true, each);
  CHECK_FALSE(both.fits);
  CHECK(both.text.find("the sampler and trainer on one GPU needs") != std::string::npos);
}

TEST_CASE("memory plan: episodes whose turns decode with new groups count twice the sampler's rows") {
  sampler_options s;
  agent_options a;
  CHECK(planned_sampler_rows(s, a) == s.batch_requests * s.group_size);
  a.max_turns = 3;
  CHECK(planned_sampler_rows(s, a) == 2 * s.batch_requests * s.group_size);
  const auto seq = planned_sequence_tokens(s, a);
  const auto joined = sampler_memory(qwen_7b(), s, seq, a);
  s.batch_turns_with_groups = false;
  CHECK(planned_sampler_rows(s, a) == s.batch_requests * s.group_size);
  const auto apart = sampler_memory(qwen_7b(), s, seq, a);
  CHECK(joined.total() > apart.total());
  CHECK(joined.parts.front().first.find("(128 sequences)") != std::string::npos);
}

TEST_CASE("memory plan: LoRA and activation checkpointing bring a 7B trainer onto one 80 GiB GPU") {
  sampler_options s;
  s.max_new_tokens = 2048;
  trainer_options t;
  t.micro_batch = 4;
  const auto full = trainer_memory(qwen_7b(), t, planned_sequence_tokens(s));
  // LoRA rank 64 on the attention: A and B of each projection, every layer.
  const std::int64_t q = 28 * 128, kv = 4 * 128;
  CHECK(qwen_7b().lora_parameters(64, {"q_proj", "k_proj", "v_proj", "o_proj"}) ==
        28 * 64 * ((3584 + q) + 2 * (3584 + kv) + (q + 3584)));
  t.lora.enabled = true;
  t.lora.rank = 64;
  const auto lora = trainer_memory(qwen_7b(), t, planned_sequence_tokens(s));
  t.activation_checkpointing = true;
  const auto both = trainer_memory(qwen_7b(), t, planned_sequence_tokens(s));
  // 2 bytes a parameter for the frozen base (the reference too), and far fewer activations.
  CHECK(lora.total() < full.total() - 14 * 7.6e9);
  CHECK(both.total() < lora.total() / 2);
  const auto v = judge_memory(sampler_memory(qwen_7b(), s, planned_sequence_tokens(s)), both, false, gib80);
  INFO(v.text);
  CHECK(v.fits);
  CHECK(v.text.find("LoRA adapters") != std::string::npos);
  CHECK(v.text.find("one layer recomputed") != std::string::npos);
}

TEST_CASE("memory plan: sharded optimiser state is counted per rank") {
  sampler_options s;
  s.max_new_tokens = 2048;
  trainer_options t;
  t.micro_batch = 4;
  const double params = static_cast<double>(qwen_7b().parameters());
  const auto full = trainer_memory(qwen_7b(), t, planned_sequence_tokens(s), 4);
  t.shard_optimizer = true;
  // One rank has nothing to share with: the unsharded plan.
  CHECK(trainer_memory(qwen_7b(), t, planned_sequence_tokens(s), 1).total() == full.total());
  for (std::int64_t ranks : {2, 4, 8}) {
    CAPTURE(ranks);
    const auto sharded = trainer_memory(qwen_7b(), t, planned_sequence_tokens(s), ranks);
    // All 16 bytes a parameter of fp32 masters, summed gradients and moments are split N ways;
    // the bf16 weights, reference and gradients (6) stay whole on both.
    CHECK(full.total() - sharded.total() == doctest::Approx(params * (16 - 16.0 / static_cast<double>(ranks))));
    double optimiser = 0;
    for (const auto& [what, bytes] : sharded.parts)
      if (what.find("1/" + std::to_string(ranks) + " (fp32)") != std::string::npos) optimiser += bytes;
    CHECK(optimiser == doctest::Approx(params * 16 / static_cast<double>(ranks)));
  }
  // LoRA is not sharded (the manifest refuses both): its plan ignores the ranks.
  t.lora.enabled = true;
  CHECK(trainer_memory(qwen_7b(), t, planned_sequence_tokens(s), 8).total() ==
        trainer_memory(qwen_7b(), t, planned_sequence_tokens(s), 1).total());
}

TEST_CASE("memory plan: episodes lengthen the planned sequence, and candidate children share the sampler's GPU") {
  sampler_options s;
  s.max_new_tokens = 2048;
  kforge::agent_options a;
  CHECK(planned_sequence_tokens(s, a) == planned_prompt_tokens + 2048);
  a.max_turns = 3;
  a.observation_max_tokens = 512;
  CHECK(planned_sequence_tokens(s, a) == planned_prompt_tokens + 3 * 2048 + 2 * 512);
  a.max_tokens = 4096;  // no turn starts past 4096 tokens of context and an observation: the last may add 2048 more
  CHECK(planned_sequence_tokens(s, a) == 4096 + 512 + 2048);

  policy_shape small = qwen_7b();
  small.layers = 2;
  small.hidden = 512;
  small.intermediate = 1024;
  small.heads = 8;
  small.kv_heads = 2;
  small.head_dim = 64;
  small.vocab = 32000;
  trainer_options t;
  a.max_tokens = 0;
  const auto one = trainer_memory(small, t, planned_sequence_tokens(s));
  const auto three = trainer_memory(small, t, planned_sequence_tokens(s, a));
  CHECK(three.total() > 2 * one.total());  // activations and logits grow with the sequence
  const auto sampler = sampler_memory(small, s, planned_sequence_tokens(s, a));
  // On one GPU with 4 candidate children: a plan that fits without them, refused with them.
  const double gpu = (sampler.total() + three.total() + 0.5 * sandbox_memory(4).total()) / 0.9;
  CHECK(judge_memory(sampler, three, true, gpu).fits);
  const auto v = judge_memory(sampler, three, true, gpu, 0.1, sandbox_memory(4));
  CHECK_FALSE(v.fits);
  CHECK(v.text.find("4 candidate children") != std::string::npos);
  CHECK(v.text.find("the sampler, the trainer and the sandbox's children on one GPU needs") != std::string::npos);
  CHECK(v.text.find("[sandbox] runners_per_gpu") != std::string::npos);
}

TEST_CASE("memory plan: the table of training modes is the plan's estimates, for shapes read from config.json") {
  const auto modes = standard_training_modes(4, 64, {2, 8});
  REQUIRE(modes.size() == 6);
  CHECK(modes[3].ranks == 8);
  CHECK(modes[3].trainer.shard_optimizer);
  CHECK(modes[3].trainer.activation_checkpointing);
  CHECK(modes[5].trainer.lora.enabled);
  CHECK(modes[5].trainer.activation_checkpointing);
  CHECK(trainable_parameters(qwen_7b(), modes[0]) == qwen_7b().parameters());
  CHECK(trainable_parameters(qwen_7b(), modes[4]) == qwen_7b().lora_parameters(64, {"q_proj", "k_proj", "v_proj", "o_proj"}));

  const std::string table = memory_table({{"7b", qwen_7b()}}, modes, 4096);
  // A header, its rule, one row per mode and the sampler's.
  CHECK(std::count(table.begin(), table.end(), '\n') == 2 + 6 + 1);
  for (const auto& m : modes) {
    CAPTURE(m.name);
    CHECK(table.find(m.name + " | ") != std::string::npos);
    CHECK(table.find(gib(trainer_memory(qwen_7b(), m.trainer, 4096, m.ranks).total())) != std::string::npos);
  }

  // The committed shapes: config.json alone, read as `kforge run --check` reads a model's.
  auto coder = policy_shape_of(std::string(KFORGE_SOURCE_DIR) + "/deploy/shapes/qwen2.5-coder-7b");
  auto small = policy_shape_of(std::string(KFORGE_SOURCE_DIR) + "/deploy/shapes/qwen2.5-1.5b/config.json");
  if (!coder || !small) {
    MESSAGE("the model library is not in this build");
    return;
  }
  CHECK(coder->parameters() == qwen_7b().parameters());
  CHECK(static_cast<double>(small->parameters()) == doctest::Approx(1.5437e9).epsilon(0.002));
  std::ostringstream out, err;
  memory_table_options opt;
  opt.models = {std::string(KFORGE_SOURCE_DIR) + "/deploy/shapes/qwen2.5-1.5b/"};
  REQUIRE(memory_table_command(opt, out, err) == 0);
  CHECK(out.str().find("| qwen2.5-1.5b | 1.54 B |") != std::string::npos);
  opt.models = {"/nonexistent"};
  CHECK(memory_table_command(opt, out, err) == 2);
}

TEST_CASE("episodes of an engine policy stay within its context where agent.max_tokens leaves them open") {
  if (auto tiny = policy_shape_of(std::string(KFORGE_SOURCE_DIR) + "/models/kforge-tiny"); !tiny) {
    MESSAGE("the model library is not in this build: " << tiny.message());
    return;
  }
  auto m = default_manifest();
  REQUIRE(m);
  m->sampler.model = std::string(KFORGE_SOURCE_DIR) + "/models/kforge-tiny";  // max_position_embeddings 8192
  m->sampler.max_new_tokens = 3072;
  bound_episode_tokens(*m);
  CHECK(m->agent.max_tokens == 0u);  // single-shot: nothing to bound
  m->agent.max_turns = 3;
  bound_episode_tokens(*m);
  CHECK(m->agent.max_tokens == 8192u - 3072u - m->agent.observation_max_tokens);
  // The memory plan then plans for the model's whole context, not 3 turns and 2 observations.
  CHECK(planned_sequence_tokens(m->sampler, m->agent) == 8192);
  m->agent.max_tokens = 4000;  // the manifest's own bound stays
  bound_episode_tokens(*m);
  CHECK(m->agent.max_tokens == 4000u);
  m->agent.max_tokens = 0;
  m->sampler.model = std::string(KFORGE_SOURCE_DIR) + "/no/such/model";  // the model checks say why
  bound_episode_tokens(*m);
  CHECK(m->agent.max_tokens == 0u);
  m->sampler.model = std::string(KFORGE_SOURCE_DIR) + "/models/kforge-tiny";
  m->sampler.max_new_tokens = 8192;  // no room for a prompt: left to the sampler's own errors
  bound_episode_tokens(*m);
  CHECK(m->agent.max_tokens == 0u);
}
