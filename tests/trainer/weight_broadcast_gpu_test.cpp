// Weights by NCCL from the trainer to a sampler on another GPU (trainer/weight_broadcast.hpp):
// the fixture Qwen2 in bf16 on GPU 0 (the trainer's compute copy) and GPU 1 (a sampler's). Each
// version the sampler applies must equal, bit for bit, what the trainer held when it published,
// also when the trainer publishes twice before the sampler applies once; a sampler that never
// joins must make the trainer's next publish fail after the timeout (the stage then falls back to
// files), not hang; a model of another shape is refused. Skips (exit 77) with fewer than 2 GPUs.
#include <ATen/ATen.h>
#include <torch/cuda.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "trainer/weight_broadcast.hpp"
#include "tests/trainer/policy_fixture.hpp"  // includes doctest last, after LibTorch

using namespace kforge;
using namespace kforge::trainer;
using namespace kforge::trainer::testing;
using namespace std::chrono_literals;

namespace {

model::CausalLM load_bf16(int gpu) {
  model::load_options lo;
  lo.device = at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(gpu));
  lo.dtype = at::kBFloat16;
  auto m = model::load_causal_lm(qwen2_dir, lo);
  REQUIRE_MESSAGE(m.ok(), (m.ok() ? "" : m.message()));
  return std::move(*m);
}

// A training step's worth of change to every parameter.
void perturb(model::CausalLMImpl& m, double scale) {
  torch::NoGradGuard no_grad;
  for (auto& p : m.parameters()) p.add_(torch::randn_like(p) * scale);
}

std::vector<at::Tensor> snapshot(model::CausalLMImpl& m) {
  std::vector<at::Tensor> out;
  for (const auto& p : m.parameters()) out.push_back(p.detach().to(at::kCPU).clone());
  return out;
}

bool equal_to(model::CausalLMImpl& m, const std::vector<at::Tensor>& snap) {
  const auto ps = m.parameters();
  if (ps.size() != snap.size()) return false;
  for (std::size_t i = 0; i < ps.size(); ++i)
    if (!ps[i].detach().to(at::kCPU).equal(snap[i])) return false;
  return true;
}

}  // namespace

TEST_CASE("weights by NCCL: every version the sampler applies is the trainer's, in order") {
  require_two_gpus("weights by NCCL");
  torch::manual_seed(7);
  auto trainer_model = load_bf16(0);
  auto sampler_model = load_bf16(1);
  auto sender = weight_sender::create(0, 2, 60s);
  REQUIRE_MESSAGE(sender.ok(), (sender.ok() ? "" : sender.message()));
  auto receiver = weight_receiver::create(*sampler_model, 1, 1, 60s);
  REQUIRE_MESSAGE(receiver.ok(), (receiver.ok() ? "" : receiver.message()));

  // Version 1: announced (the pump's part) and applied (the sampler's, between batches).
  perturb(*trainer_model, 0.1);
  const auto v1 = snapshot(*trainer_model);
  CHECK_FALSE(equal_to(*sampler_model, v1));
  const auto t0 = std::chrono::steady_clock::now();
  auto b1 = (*sender)->publish(*trainer_model, 1);
  REQUIRE_MESSAGE(b1.ok(), (b1.ok() ? "" : b1.message()));
  CHECK(b1->dtype == "bfloat16");
  CHECK(b1->ranks == 2);
  (*receiver)->announce(*b1);
  auto s1 = (*receiver)->apply(*b1, *sampler_model);
  REQUIRE_MESSAGE(s1.ok(), (s1.ok() ? "" : s1.message()));
  std::printf("weights by NCCL: version 1 (%llu bytes, join included) applied in %.3f s\n",
              static_cast<unsigned long long>(b1->bytes),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  CHECK(equal_to(*sampler_model, v1));

  // Versions 2 and 3 published while the sampler is "generating": the trainer changes its weights
  // right after each publish, so the sampler must get what was published, not what is current.
  perturb(*trainer_model, 0.1);
  const auto v2 = snapshot(*trainer_model);
  auto b2 = (*sender)->publish(*trainer_model, 2);
  REQUIRE(b2.ok());
  (*receiver)->announce(*b2);
  perturb(*trainer_model, 0.1);
  const auto v3 = snapshot(*trainer_model);
  auto b3 = (*sender)->publish(*trainer_model, 3);  // waits for version 2's broadcast only
  REQUIRE(b3.ok());
  (*receiver)->announce(*b3);
  perturb(*trainer_model, 0.1);
  CHECK(equal_to(*sampler_model, v1));  // nothing changes under a generating sampler
  auto s2 = (*receiver)->apply(*b2, *sampler_model);
  REQUIRE_MESSAGE(s2.ok(), (s2.ok() ? "" : s2.message()));
  CHECK(equal_to(*sampler_model, v2));
  auto s3 = (*receiver)->apply(*b3, *sampler_model);
  REQUIRE_MESSAGE(s3.ok(), (s3.ok() ? "" : s3.message()));
  CHECK(equal_to(*sampler_model, v3));
}

TEST_CASE("weights by NCCL: a sampler that never joins fails the trainer's next publish after the timeout") {
  require_two_gpus("weights by NCCL");
  auto trainer_model = load_bf16(0);
  auto sender = weight_sender::create(0, 2, 3s);
  REQUIRE(sender.ok());
  auto b1 = (*sender)->publish(*trainer_model, 1);  // returns at once: the broadcast waits on its thread
  REQUIRE(b1.ok());
  const auto t0 = std::chrono::steady_clock::now();
  auto b2 = (*sender)->publish(*trainer_model, 2);
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  REQUIRE_FALSE(b2.ok());
  std::printf("weights by NCCL: no sampler joined; publish failed after %.1f s: %s\n", waited, b2.message().c_str());
  CHECK(b2.message().find("did not join") != std::string::npos);
  CHECK(waited < 30);
  auto b3 = (*sender)->publish(*trainer_model, 3);  // broken for good: files from now on
  CHECK_FALSE(b3.ok());
}

TEST_CASE("weights by NCCL: a sampler whose model differs refuses the version and keeps its weights") {
  require_two_gpus("weights by NCCL");
  auto sampler_model = load_bf16(1);
  const auto before = snapshot(*sampler_model);
  auto receiver = weight_receiver::create(*sampler_model, 1, 1, 3s);
  REQUIRE(receiver.ok());
  broadcast_info b;
  b.version = 1;
  b.ranks = 2;
  b.bytes = 1024;
  b.layout_hash = layout_hash(*sampler_model) ^ 1;
  b.dtype = "bfloat16";
  auto s = (*receiver)->apply(b, *sampler_model);
  REQUIRE_FALSE(s.ok());
  CHECK(s.message().find("layout hash differs") != std::string::npos);
  CHECK(equal_to(*sampler_model, before));
}
