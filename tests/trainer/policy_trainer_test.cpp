// policy_trainer on the fixture tiny Qwen2 (tests/model/fixtures/qwen2, 2 layers, hidden 64, vocab
// 512) on CPU: checkpoint -> resume is bit-identical to an uninterrupted run, and a synthetic
// reward (the fraction of a target token in sampled completions) rises.
#include <ATen/ATen.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "../model/test_files.hpp"
#include "model/generate.hpp"
#include "model/weights.hpp"
#include "trainer/checkpoint.hpp"
#include "trainer/collective.hpp"
#include "trainer/data_parallel_trainer.hpp"
#include "trainer/gradient_reducer.hpp"
#include "trainer/policy_trainer.hpp"
#include "trainer/socket_group.hpp"
#include "tests/trainer/policy_fixture.hpp"  // includes doctest last, after LibTorch

using namespace kforge;
using namespace kforge::trainer;
using namespace kforge::trainer::testing;

namespace {

using model::testing::scratch_dir;

double mean_reward(const train_batch& b) {
  double sum = 0;
  int n = 0;
  for (const auto& g : b.groups)
    for (const auto& s : g.samples) sum += s.reward, ++n;
  return sum / n;
}

/// `n` steps, each on a batch sampled with a seed drawn from LibTorch's default generator, so
/// that a resume which did not restore the generator would train on other data.
void train(policy_trainer& t, int n) {
  for (int i = 0; i < n; ++i) {
    const auto seed = static_cast<std::uint64_t>(at::randint(1 << 30, {1}, at::kLong).item<std::int64_t>());
    auto st = t.step(sample_batch(t, prompts, 4, 5, seed, -1));
    REQUIRE_MESSAGE(st.ok(), (st.ok() ? "" : st.message()));
    REQUIRE(st->grpo.stepped);
  }
}

}  // namespace

TEST_CASE("policy trainer: checkpoint -> resume gives bit-identical weights to an uninterrupted run") {
  scratch_dir dir;
  const int n = 4;

  at::manual_seed(3);
  policy_trainer whole(load_policy(), resume_options());
  train(whole, n);

  at::manual_seed(3);
  {
    policy_trainer first(load_policy(), resume_options());
    train(first, n / 2);
    REQUIRE(first.save_checkpoint(dir.path("ckpt")).ok());
    REQUIRE(first.save_checkpoint(dir.path("ckpt2")).ok());
    train(first, 1);
    REQUIRE(first.save_checkpoint(dir.path("ckpt2")).ok());  // replaces the one there
  }
  CHECK(std::filesystem::exists(dir.path("ckpt/config.json")));  // loadable as a model too
  CHECK(model::load_causal_lm(dir.path("ckpt")).ok());
  CHECK_FALSE(std::filesystem::exists(dir.path("ckpt.tmp")));
  CHECK_FALSE(std::filesystem::exists(dir.path("ckpt2.old")));
  auto replaced = read_trainer_state(dir.path("ckpt2"));
  REQUIRE(replaced.ok());
  CHECK(replaced->step == n / 2 + 1);

  at::manual_seed(12345);  // whatever the process did in between
  policy_trainer resumed(load_policy(), resume_options());
  const auto ok = resumed.load_checkpoint(dir.path("ckpt"));
  REQUIRE_MESSAGE(ok.ok(), (ok.ok() ? "" : ok.message()));
  CHECK(resumed.steps() == n / 2);
  train(resumed, n - n / 2);

  CHECK(resumed.steps() == whole.steps());
  CHECK(resumed.policy_version() == whole.policy_version());
  CHECK(resumed.stepper().steps() == whole.stepper().steps());
  CHECK(resumed.kl().coef() == whole.kl().coef());
  CHECK(resumed.kl().to_json() == whole.kl().to_json());
  CHECK(whole.kl().coef() > resume_options().kl.initial_coef);  // the controller did move
  CHECK(same_weights(resumed.policy(), whole.policy()));
  CHECK_FALSE(same_weights(whole.policy(), whole.reference()));  // training did change them
  CHECK(same_weights(resumed.reference(), whole.reference()));

  // Controls, so the comparison above can fail: one random number drawn after the load (the
  // generator not restored) and no optimiser state (moments restarted) each change the result.
  policy_trainer shifted(load_policy(), resume_options());
  REQUIRE(shifted.load_checkpoint(dir.path("ckpt")).ok());
  (void)at::rand({1});
  train(shifted, n - n / 2);
  CHECK_FALSE(same_weights(shifted.policy(), whole.policy()));

  {
    policy_trainer fresh(load_policy(), resume_options());
    REQUIRE(fresh.save_checkpoint(dir.path("fresh")).ok());
  }
  std::filesystem::copy(dir.path("ckpt"), dir.path("no_moments"));
  std::filesystem::copy_file(dir.path("fresh/optimizer.pt"), dir.path("no_moments/optimizer.pt"),
                             std::filesystem::copy_options::overwrite_existing);
  policy_trainer no_moments(load_policy(), resume_options());
  REQUIRE(no_moments.load_checkpoint(dir.path("no_moments")).ok());
  CHECK(no_moments.stepper().steps() == 0);
  train(no_moments, n - n / 2);
  CHECK_FALSE(same_weights(no_moments.policy(), whole.policy()));
}


TEST_CASE("policy trainer: with baseline_from_draws a group's draws set its mean") {
  // Every group keeps only samples of reward 0 (its correct kernel, drawn twice, was a repeat the
  // buffer dropped): all-equal against themselves, pushed down against the draws.
  policy_trainer source(load_policy(), resume_options());
  auto batch = sample_batch(source, prompts, 4, 5, 7, -1);
  for (auto& g : batch.groups) {
    for (auto& s : g.samples) s.reward = 0;
    g.draw_rewards = {1, 1, 0, 0, 0, 0, 0};
  }
  const auto run = [&](bool from_draws) {
    auto o = resume_options();
    o.baseline_from_draws = from_draws;
    policy_trainer t(load_policy(), o);
    auto st = t.step(batch);
    REQUIRE_MESSAGE(st.ok(), (st.ok() ? "" : st.message()));
    return std::make_pair(*st, same_weights(t.policy(), t.reference()));
  };
  const auto [kept, kept_unchanged] = run(false);
  CHECK(kept.grpo.advantages.equal_groups == 4);
  CHECK_FALSE(kept.grpo.stepped);
  CHECK(kept_unchanged);
  const auto [draws, draws_unchanged] = run(true);
  CHECK(draws.grpo.advantages.equal_groups == 0);
  CHECK(draws.grpo.advantages.draw_signal_groups == 4);
  CHECK(draws.grpo.stepped);
  CHECK(draws.grpo.advantages.adv_max < 0);  // every kept sample is below the draws' mean
  CHECK_FALSE(draws_unchanged);
}

TEST_CASE("policy trainer: data-parallel ranks keep identical weights, equal to one rank on the whole batch") {
  // The same three batches for every run, sampled once from the starting policy (16 samples each;
  // from step 2 on they are off-policy, so the importance weights are exercised too).
  policy_trainer source(load_policy(), resume_options());
  std::vector<train_batch> batches;
  for (std::uint64_t i = 0; i < 3; ++i) batches.push_back(sample_batch(source, prompts, 4, 5, 100 + i, -1));

  const auto opts = resume_options();  // micro-batches of 5: the ranks' shares split differently
  policy_trainer single(load_policy(), opts);
  std::vector<policy_step_stats> single_stats;
  for (const auto& b : batches) {
    auto st = single.step(b);
    REQUIRE_MESSAGE(st.ok(), (st.ok() ? "" : st.message()));
    single_stats.push_back(*st);
  }
  REQUIRE(single_stats.back().grpo.stepped);

  for (int ranks : {2, 3}) {
    CAPTURE(ranks);
    auto run = train_group(std::vector<at::Device>(static_cast<std::size_t>(ranks), at::kCPU), opts, batches);
    REQUIRE(run.group->ranks() == ranks);
    CHECK(ranks_identical(*run.group));
    // One rank on the whole batch sums its micro-batches in another order: equal within rounding
    // (fp32, 3 AdamW steps of lr 1e-2). AdamW divides each gradient by its own magnitude, so a
    // weight whose gradient is rounding noise moves by up to lr a step either way: the largest
    // difference is a few such weights, the update's direction the same.
    const double diff = max_weight_diff(run.group->lead().policy(), single.policy());
    const double cos = model::update_cosine(*run.group->lead().policy(), *single.policy(), *single.reference());
    MESSAGE("ranks " << ranks << ": max |weight difference| to one rank " << diff << ", update cosine " << cos);
    CHECK(diff < 5e-4);
    CHECK(cos > 0.99999);
    CHECK(max_weight_diff(single.policy(), single.reference()) > 1e-3);  // training moved them
    for (std::size_t i = 0; i < batches.size(); ++i) {
      const auto& a = run.stats[i].grpo;
      const auto& b = single_stats[i].grpo;
      CHECK(a.samples == b.samples);
      CHECK(a.loss.tokens == b.loss.tokens);
      CHECK(a.micro_batches >= b.micro_batches);  // summed over the ranks' shares
      CHECK(a.stale_samples == b.stale_samples);
      CHECK(a.loss.loss == doctest::Approx(b.loss.loss).epsilon(1e-4));
      CHECK(a.loss.mean_kl == doctest::Approx(b.loss.mean_kl).epsilon(1e-3));
      CHECK(a.grad_norm == doctest::Approx(b.grad_norm).epsilon(1e-4));
      CHECK(run.stats[i].kl.coef == doctest::Approx(single_stats[i].kl.coef).epsilon(1e-9));
    }
  }

  // Control: a rank that trained on its share alone (no reduction) ends elsewhere, so the
  // comparison above can fail.
  {
    auto alone = opts;
    policy_trainer half(load_policy(), alone);
    for (const auto& b : batches) {
      train_batch share = b;
      share.groups.resize(2);  // half the groups: what rank 0 of 2 trains on
      REQUIRE(half.step(share).ok());
    }
    const double diff = max_weight_diff(half.policy(), single.policy());
    const double cos = model::update_cosine(*half.policy(), *single.policy(), *single.reference());
    MESSAGE("control: max |weight difference| " << diff << ", update cosine " << cos);
    CHECK(diff > 1e-2);
    CHECK(cos < 0.999);
  }
}

TEST_CASE("data-parallel trainer: 2 CPU ranks step like one, checkpoint from rank 0, resume into every rank") {
  scratch_dir dir;
  policy_trainer source(load_policy(), resume_options());
  std::vector<train_batch> batches;
  for (std::uint64_t i = 0; i < 4; ++i) batches.push_back(sample_batch(source, prompts, 4, 5, 200 + i, -1));

  const auto o = group_options({at::kCPU, at::kCPU}, resume_options());
  auto whole = data_parallel_trainer::create(o);
  REQUIRE_MESSAGE(whole.ok(), (whole.ok() ? "" : whole.message()));
  CHECK((*whole)->ranks() == 2);
  policy_trainer single(load_policy(), resume_options());
  for (const auto& b : batches) {
    auto st = (*whole)->step(b);
    REQUIRE_MESSAGE(st.ok(), (st.ok() ? "" : st.message()));
    REQUIRE(single.step(b).ok());
  }
  CHECK(max_weight_diff((*whole)->lead().policy(), single.policy()) < 1e-4);
  CHECK((*whole)->lead().steps() == 4);

  // Two steps, a checkpoint (rank 0's), then a fresh group resumed from it: bit-identical to the
  // uninterrupted group (every rank loaded the checkpoint, so their reductions agree again).
  {
    auto first = data_parallel_trainer::create(o);
    REQUIRE(first.ok());
    for (std::size_t i = 0; i < 2; ++i) REQUIRE((*first)->step(batches[i]).ok());
    REQUIRE((*first)->save_checkpoint(dir.path("dp")).ok());
  }
  auto resumed = data_parallel_trainer::create(o);
  REQUIRE(resumed.ok());
  REQUIRE((*resumed)->load_checkpoint(dir.path("dp")).ok());
  for (std::size_t i = 2; i < batches.size(); ++i) REQUIRE((*resumed)->step(batches[i]).ok());
  CHECK(same_weights((*resumed)->lead().policy(), (*whole)->lead().policy()));

  // Bad input: no device, mixed devices, and a model that is not there.
  auto none = o;
  none.devices.clear();
  CHECK(data_parallel_trainer::create(none).message().find("no device") != std::string::npos);
  auto mixed = o;
  mixed.devices = {at::Device(at::kCPU), at::Device(at::kCUDA, 0)};
  CHECK(data_parallel_trainer::create(mixed).message().find("mix the CPU and CUDA") != std::string::npos);
  auto missing = o;
  missing.model_dir = dir.path("nowhere");
  auto bad = data_parallel_trainer::create(missing);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.message().find("data parallel: rank 0:") != std::string::npos);
}

namespace {

/// The largest |a - b| of any parameter, relative to the largest |b| of that parameter.
double max_relative_diff(const model::CausalLM& a, const model::CausalLM& b) {
  const auto pb = b->named_parameters();
  double worst = 0;
  for (const auto& item : a->named_parameters()) {
    const at::Tensor want = pb[item.key()].detach().to(at::kDouble);
    const double scale = std::max(want.abs().max().item<double>(), 1e-30);
    worst = std::max(worst, (item.value().detach().to(at::kDouble) - want).abs().max().item<double>() / scale);
  }
  return worst;
}

}  // namespace

// trainer.shard_optimizer: the GRPO step reduce-scatters the gradients into sharded_adamw instead of
// all-reducing them into a whole AdamW; the weights must come out as the unsharded group's.
TEST_CASE("data-parallel trainer with sharded optimiser state: 2 and 3 CPU ranks step as unsharded ones") {
  policy_trainer source(load_policy(), resume_options());
  std::vector<train_batch> batches;
  for (std::uint64_t i = 0; i < 3; ++i) batches.push_back(sample_batch(source, prompts, 4, 5, 300 + i, -1));
  // max_grad_norm 100: the norm (about 4, then 2) never clips. 1: it clips every step.
  for (double clip : {100.0, 1.0})
    for (int ranks : {2, 3}) {
      CAPTURE(clip);
      CAPTURE(ranks);
      auto plain_o = resume_options();
      plain_o.step.max_grad_norm = clip;
      auto sharded = plain_o;
      sharded.shard_optimizer = true;
      sharded.step.grad_bucket_bytes = 64 << 10;  // several buckets, parameters split across chunks
      const std::vector<at::Device> cpus(static_cast<std::size_t>(ranks), at::kCPU);
      auto plain = train_group(cpus, plain_o, batches);
      auto shard = train_group(cpus, sharded, batches);
      auto first = train_group(cpus, sharded, {batches.front()});
      auto plain_first = train_group(cpus, plain_o, {batches.front()});
      CHECK(ranks_identical(*shard.group));
      const auto* opt = shard.group->lead().stepper().sharded();
      REQUIRE(opt != nullptr);
      CHECK(plain.group->lead().stepper().sharded() == nullptr);
      CHECK(opt->shard_numel() < opt->total_numel() / ranks + static_cast<std::int64_t>(opt->buckets().size()));
      CHECK(shard.group->lead().stepper().steps() == 3);
      CHECK(max_weight_diff(plain.group->lead().policy(), source.policy()) > 1e-3);  // they trained
      // The same gradient sums (thread ranks add in rank order either way) and AdamW's operations:
      // unclipped, the same weights. Clipping scales by a norm summed in another order (fp64 over
      // chunks here, fp32 per parameter there): one step agrees to rounding, and over later steps
      // AdamW's normalisation magnifies that rounding where a gradient is near zero.
      const double one = max_relative_diff(first.group->lead().policy(), plain_first.group->lead().policy());
      const double rel = max_relative_diff(shard.group->lead().policy(), plain.group->lead().policy());
      MESSAGE("clip " << clip << ", ranks " << ranks << ": max relative weight difference to unsharded " << one
                      << " after one step, " << rel << " after three");
      CHECK(one < 1e-6);
      CHECK(rel < (clip > 10 ? 1e-6 : 1e-3));
      for (std::size_t i = 0; i < batches.size(); ++i) {
        const auto& a = shard.stats[i].grpo;
        const auto& b = plain.stats[i].grpo;
        CHECK(a.stepped);
        CHECK(a.loss.tokens == b.loss.tokens);
        CHECK(a.loss.loss == doctest::Approx(b.loss.loss).epsilon(1e-5));
        CHECK(a.grad_norm == doctest::Approx(b.grad_norm).epsilon(1e-5));
        CHECK(a.grad_clipped == b.grad_clipped);
        CHECK(a.grad_clipped == (clip < 10));
      }
    }

  // LoRA trains a few adapters: nothing to shard, refused as the manifest refuses it.
  auto lora = resume_options();
  lora.shard_optimizer = true;
  lora.lora = model::lora_options{};
  std::string why;
  try {
    policy_trainer t(load_policy(), lora);
  } catch (const std::invalid_argument& e) {
    why = e.what();
  }
  CHECK(why.find("shard_optimizer") != std::string::npos);
}

// Sharded over bf16 weights (trainer.compute = bf16, the GPU default): the fp32 masters exist only
// as the ranks' shards, each micro-batch's bf16 gradients are summed into the fp32 shard at once,
// and the steps are the unsharded bf16 group's (which sums in fp32 too) up to rounding; a resume
// is exact.
TEST_CASE("data-parallel trainer with sharded optimiser state over bf16 weights: no fp32 copy, the unsharded steps") {
  scratch_dir dir;
  policy_trainer source(load_policy(), resume_options());
  std::vector<train_batch> batches;
  for (std::uint64_t i = 0; i < 3; ++i) batches.push_back(sample_batch(source, prompts, 4, 5, 500 + i, -1));
  for (int ranks : {2, 3}) {  // micro-batches of 5: shares of 8 (2 each), of 5, 5 and 6 (1, 1 and 2)
    CAPTURE(ranks);
    auto plain_o = resume_options();
    plain_o.bf16_compute = true;
    plain_o.step.max_grad_norm = 100;  // unclipped: the norm's summation order stays out of it
    auto sharded = plain_o;
    sharded.shard_optimizer = true;
    sharded.step.grad_bucket_bytes = 64 << 10;
    const std::vector<at::Device> cpus(static_cast<std::size_t>(ranks), at::kCPU);
    auto plain = train_group(cpus, plain_o, batches);
    auto shard = train_group(cpus, sharded, batches);
    auto& lead = shard.group->lead();
    REQUIRE(lead.stepper().sharded() != nullptr);
    CHECK(lead.stepper().sharded()->sums_each_micro_batch());
    CHECK(lead.policy().ptr() == lead.compute_model().ptr());  // no fp32 policy beside the bf16 one
    std::size_t fp32 = 0;
    for (const auto& p : lead.policy()->parameters()) fp32 += p.scalar_type() == at::kFloat ? 1 : 0;
    CHECK(fp32 == 0);
    CHECK((plain.group->lead().policy()->output_weight().scalar_type() == at::kFloat));
    CHECK(ranks_identical(*shard.group));
    CHECK(max_weight_diff(lead.policy(), source.policy()) > 1e-3);  // they trained
    for (std::size_t i = 0; i < batches.size(); ++i) {
      CHECK(shard.stats[i].grpo.stepped);
      CHECK(shard.stats[i].grpo.loss.tokens == plain.stats[i].grpo.loss.tokens);
      CHECK(shard.stats[i].grpo.grad_norm == doctest::Approx(plain.stats[i].grpo.grad_norm).epsilon(1e-4));
    }
    // The masters agree to fp32 rounding; their bf16 roundings then agree but for the rare weight
    // whose master lies at a rounding boundary (one bf16 step: a relative 2^-8 of the tensor's
    // largest weight, at most).
    const double rel = max_relative_diff(lead.policy(), plain.group->lead().compute_model());
    MESSAGE("ranks " << ranks << ": max relative weight difference to the unsharded bf16 group " << rel);
    CHECK(rel < 1e-2);
    CHECK(model::update_cosine(*lead.policy(), *plain.group->lead().compute_model(), *source.policy()) > 0.9999);
  }

  // Resume: model.safetensors holds the bf16 weights, each rank's shard its fp32 masters.
  auto o = resume_options();
  o.bf16_compute = true;
  o.shard_optimizer = true;
  auto whole = train_group({at::kCPU, at::kCPU}, o, batches);
  auto dp = group_options({at::kCPU, at::kCPU}, o);
  {
    auto first = data_parallel_trainer::create(dp);
    REQUIRE(first.ok());
    for (std::size_t i = 0; i < 2; ++i) REQUIRE((*first)->step(batches[i]).ok());
    const auto saved = (*first)->save_checkpoint(dir.path("ckpt"));
    REQUIRE_MESSAGE(saved.ok(), (saved.ok() ? "" : saved.message()));
  }
  auto resumed = data_parallel_trainer::create(dp);
  REQUIRE(resumed.ok());
  const auto loaded = (*resumed)->load_checkpoint(dir.path("ckpt"));
  REQUIRE_MESSAGE(loaded.ok(), (loaded.ok() ? "" : loaded.message()));
  REQUIRE((*resumed)->step(batches[2]).ok());
  CHECK(same_weights((*resumed)->lead().policy(), whole.group->lead().policy()));
  CHECK(ranks_identical(**resumed));
}

TEST_CASE("data-parallel trainer with sharded optimiser state: every rank's shard in the checkpoint, resume is exact") {
  scratch_dir dir;
  policy_trainer source(load_policy(), resume_options());
  std::vector<train_batch> batches;
  for (std::uint64_t i = 0; i < 4; ++i) batches.push_back(sample_batch(source, prompts, 4, 5, 400 + i, -1));
  auto o = resume_options();
  o.shard_optimizer = true;
  o.step.grad_bucket_bytes = 64 << 10;
  auto whole = train_group({at::kCPU, at::kCPU}, o, batches);

  auto dp = group_options({at::kCPU, at::kCPU}, o);
  {
    auto first = data_parallel_trainer::create(dp);
    REQUIRE(first.ok());
    for (std::size_t i = 0; i < 2; ++i) REQUIRE((*first)->step(batches[i]).ok());
    // One rank alone cannot write a checkpoint the others' shards are missing from.
    const auto alone = (*first)->lead().save_checkpoint(dir.path("alone"));
    CHECK(alone.message().find("sharded over 2 ranks") != std::string::npos);
    CHECK_FALSE(std::filesystem::exists(dir.path("alone")));
    const auto saved = (*first)->save_checkpoint(dir.path("ckpt"));
    REQUIRE_MESSAGE(saved.ok(), (saved.ok() ? "" : saved.message()));
    // The weights written are the whole gathered model (every rank holds it after a step).
    auto written = model::load_causal_lm(dir.path("ckpt"));
    REQUIRE(written.ok());
    CHECK(max_weight_diff(*written, (*first)->lead().policy()) == 0);
  }
  for (const std::string& f : {sharded_optimizer_file(0, 2), sharded_optimizer_file(1, 2)})
    CHECK_MESSAGE(std::filesystem::exists(dir.path("ckpt/" + f)), f);
  CHECK_FALSE(std::filesystem::exists(dir.path("ckpt/optimizer.pt")));

  auto resumed = data_parallel_trainer::create(dp);
  REQUIRE(resumed.ok());
  const auto loaded = (*resumed)->load_checkpoint(dir.path("ckpt"));
  REQUIRE_MESSAGE(loaded.ok(), (loaded.ok() ? "" : loaded.message()));
  CHECK((*resumed)->lead().stepper().steps() == 2);
  for (std::size_t i = 2; i < batches.size(); ++i) REQUIRE((*resumed)->step(batches[i]).ok());
  CHECK(same_weights((*resumed)->lead().policy(), whole.group->lead().policy()));
  CHECK(ranks_identical(**resumed));

  // Another rank count, or an unsharded trainer, cannot resume it: each says why.
  auto three = dp;
  three.devices = {at::kCPU, at::kCPU, at::kCPU};
  auto other = data_parallel_trainer::create(three);
  REQUIRE(other.ok());
  const auto refused = (*other)->load_checkpoint(dir.path("ckpt"));
  CHECK(refused.message().find("same number of ranks") != std::string::npos);
  policy_trainer plain(load_policy(), resume_options());
  CHECK_FALSE(plain.load_checkpoint(dir.path("ckpt")).ok());
}

// What a trainer whose ranks are processes (trainer.ranks = "processes") runs in each process: one
// data_parallel_trainer per rank, joined over a socket group. Here the two ranks are threads with a
// socket each; stages/trainer_ranks drives real processes (test_run).
TEST_CASE("data-parallel trainer: ranks joined over a socket group step bit-identically to thread ranks") {
  policy_trainer source(load_policy(), resume_options());
  std::vector<train_batch> batches;
  for (std::uint64_t i = 0; i < 3; ++i) batches.push_back(sample_batch(source, prompts, 4, 5, 300 + i, -1));
  auto threads = train_group({at::kCPU, at::kCPU}, resume_options(), batches);

  const std::string endpoint = "ipc:///tmp/kforge-dp-socket-" + std::to_string(::getpid()) + ".sock";
  std::vector<std::unique_ptr<data_parallel_trainer>> ranks(2);
  std::vector<std::string> errors(2);
  std::vector<std::thread> ts;
  for (int r = 0; r < 2; ++r)
    ts.emplace_back([&, r] {
      auto& why = errors[static_cast<std::size_t>(r)];
      auto g = make_socket_group(endpoint, r, 2, std::chrono::seconds(120));
      if (!g) return void(why = g.message());
      auto dp = group_options({at::kCPU}, resume_options());
      dp.group = *g;
      auto t = data_parallel_trainer::create(dp);
      if (!t) return void(why = t.message());
      for (const auto& b : batches)
        if (auto st = (*t)->step(b); !st) return void(why = st.message());
      ranks[static_cast<std::size_t>(r)] = std::move(*t);
    });
  for (auto& t : ts) t.join();
  for (const auto& e : errors) CHECK_MESSAGE(e.empty(), e);
  REQUIRE((ranks[0] && ranks[1]));
  CHECK(ranks[0]->lead().steps() == 3);
  CHECK(same_weights(ranks[0]->lead().policy(), ranks[1]->lead().policy()));
  CHECK(same_weights(ranks[0]->lead().policy(), threads.group->lead().policy()));
  CHECK(max_weight_diff(ranks[0]->lead().policy(), ranks[0]->lead().reference()) > 1e-3);  // it trained

  // A joined group is one rank per process: two devices with it are an error.
  auto two = group_options({at::kCPU, at::kCPU}, {});
  two.group = make_thread_group(1).front();
  auto bad = data_parallel_trainer::create(two);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.message().find("one device per process") != std::string::npos);
}

TEST_CASE("thread group: sums and broadcasts are the same on every rank; mismatches are errors on all") {
  auto group = make_thread_group(3);
  std::vector<std::string> errors(3);
  std::vector<at::Tensor> sums(3), bcast(3);
  std::vector<std::string> mismatch(3), bad_root(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r)
    threads.emplace_back([&, r] {
      const auto i = static_cast<std::size_t>(r);
      auto& g = *group[i];
      at::Tensor x = at::full({4}, static_cast<double>(r + 1), at::kFloat);
      if (auto s = g.all_reduce_sum({x}); !s) errors[i] = s.message();
      sums[i] = x;
      at::Tensor y = at::full({2}, static_cast<double>(10 * r), at::kFloat);
      if (auto s = g.broadcast({y}, 2); !s) errors[i] += s.message();
      bcast[i] = y;
      at::Tensor z = at::zeros({r == 1 ? 3 : 2});  // rank 1 disagrees on the shape
      auto s = g.all_reduce_sum({z});
      mismatch[i] = s ? "" : s.message();
      auto b = g.broadcast({y}, r == 2 ? 7 : 0);  // rank 2 names a root outside the group
      bad_root[i] = b ? "" : b.message();
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < 3; ++r) {
    const auto i = static_cast<std::size_t>(r);
    CHECK_MESSAGE(errors[i].empty(), errors[i]);
    CHECK(at::equal(sums[i], at::full({4}, 6.0, at::kFloat)));
    CHECK(at::equal(bcast[i], at::full({2}, 20.0, at::kFloat)));
    CHECK(mismatch[i].find("tensor 0 differs between rank 0 and rank 1") != std::string::npos);
    CHECK(bad_root[i].find("ranks disagree on the root (0 here, 7 on rank 2)") != std::string::npos);  // every rank, no hang
  }
  CHECK_THROWS_AS(make_thread_group(0), std::invalid_argument);
}

namespace {

double update_cosine(const model::CausalLM& a, const model::CausalLM& b, const model::CausalLM& start) {
  return model::update_cosine(*a, *b, *start);
}

void check_reward_rises(bool bf16_compute) {
  at::manual_seed(0);
  policy_trainer_options o;
  o.bf16_compute = bf16_compute;
  o.step.lr = 2e-3;
  o.step.micro_batch_size = 16;
  // A random tiny model's KL to its start is orders of magnitude above an LLM's: a wide band keeps
  // a small KL term without the controller holding the policy at the reference.
  o.kl.initial_coef = 0.01;
  o.kl.target_high = 2.0;
  policy_trainer t(load_policy(), o);
  std::vector<std::string> log;
  t.set_log_sink([&log](const policy_step_stats& s) { log.push_back(format_step_log(s)); });

  // The target: a token the untrained model samples now and then (about 2-8 % of tokens), so that
  // most groups see different rewards from the first step on.
  const std::int64_t g = 8, max_new = 6;
  std::int64_t target = -1;
  {
    auto probe = sample_batch(t, prompts, g, max_new, 999, 0);
    std::map<std::int64_t, int> freq;
    int total = 0;
    for (const auto& grp : probe.groups)
      for (const auto& s : grp.samples)
        for (auto tok : s.completion_tokens) ++freq[tok], ++total;
    int best = 0;
    for (const auto& [tok, f] : freq)
      if (f > best && f <= total / 12) best = f, target = tok;
    MESSAGE("target token " << target << ": " << best << " of " << total << " sampled tokens");
  }
  REQUIRE(target >= 0);

  const int steps = 30;
  double first = 0, last = 0;
  for (int step = 0; step < steps; ++step) {
    const auto batch = sample_batch(t, prompts, g, max_new, 1000 + static_cast<std::uint64_t>(step), target);
    const double r = mean_reward(batch);
    if (step < 5) first += r / 5;
    if (step >= steps - 5) last += r / 5;
    auto st = t.step(batch);
    REQUIRE(st.ok());
    REQUIRE(std::isfinite(st->grpo.loss.loss));
  }
  MESSAGE("mean reward: first 5 steps " << first << ", last 5 steps " << last << "; last log line: "
                                        << log.back());
  CHECK(first < 0.15);
  // bf16 learns this slower (seen: 0.11 -> 0.41 in 30 steps, fp32 0.06 -> 0.85).
  CHECK(last > first + (bf16_compute ? 0.2 : 0.3));
  REQUIRE(log.size() == static_cast<std::size_t>(steps));
  CHECK(log.back().find("kl_coef=") != std::string::npos);
  CHECK(log.back().find("kl_window=") != std::string::npos);
  CHECK(t.kl().steps() > 0);
  CHECK((t.policy()->output_weight().scalar_type() == at::kFloat));  // the master weights stay fp32
}

}  // namespace

TEST_CASE("policy trainer: a synthetic reward (fraction of a target token) rises") { check_reward_rises(false); }

TEST_CASE("policy trainer: with bf16 compute on fp32 master weights the reward rises too") {
  check_reward_rises(true);
}

TEST_CASE("policy trainer: bf16 compute steps near the fp32 ones; data parallel ranks agree in bf16 too") {
  policy_trainer source(load_policy(), resume_options());
  std::vector<train_batch> batches;
  for (std::uint64_t i = 0; i < 3; ++i) batches.push_back(sample_batch(source, prompts, 4, 5, 300 + i, -1));
  auto fp32 = resume_options();
  auto bf16 = resume_options();
  bf16.bf16_compute = true;
  policy_trainer a(load_policy(), fp32), b(load_policy(), bf16);
  for (const auto& batch : batches) {
    auto sa = a.step(batch);
    auto sb = b.step(batch);
    REQUIRE(sa.ok());
    REQUIRE(sb.ok());
    // The loss of a bf16 forward is the fp32 one within bf16's precision (3 significant digits).
    CHECK(sb->grpo.loss.mean_kl == doctest::Approx(sa->grpo.loss.mean_kl).epsilon(0.05).scale(1e-3));
    CHECK(sb->grpo.grad_norm == doctest::Approx(sa->grpo.grad_norm).epsilon(0.05));
  }
  CHECK((b.policy()->output_weight().scalar_type() == at::kFloat));
  // AdamW turns a gradient's rounding noise into full-size steps wherever the gradient is tiny, so
  // single weights may differ by a step's size; the update as a whole points the same way.
  const double cos = update_cosine(a.policy(), b.policy(), a.reference());
  MESSAGE("bf16 vs fp32 compute after 3 steps: cosine of the weight updates " << cos);
  CHECK(!same_weights(a.policy(), b.policy()));  // bf16 did change the arithmetic
  CHECK(cos > 0.9);                               // but not where the steps go

  // A checkpoint of a bf16 trainer holds the fp32 master weights and resumes into one exactly.
  scratch_dir dir;
  REQUIRE(b.save_checkpoint(dir.path("b")).ok());
  policy_trainer c(load_policy(), bf16);
  REQUIRE(c.load_checkpoint(dir.path("b")).ok());
  CHECK(same_weights(c.policy(), b.policy()));
  const auto next = sample_batch(source, prompts, 4, 5, 400, -1);
  REQUIRE(b.step(next).ok());
  REQUIRE(c.step(next).ok());
  CHECK(same_weights(c.policy(), b.policy()));  // the compute copy was refreshed from the loaded weights

  auto run = train_group({at::kCPU, at::kCPU}, bf16, batches);
  CHECK(ranks_identical(*run.group));
  policy_trainer one(load_policy(), bf16);
  for (const auto& batch : batches) REQUIRE(one.step(batch).ok());
  const double dp = update_cosine(run.group->lead().policy(), one.policy(), one.reference());
  MESSAGE("bf16: 2 ranks vs 1 rank, cosine of the weight updates " << dp);
  CHECK(dp > 0.9);
}

TEST_CASE("policy trainer: excluded samples are dropped, bad samples are errors that change nothing") {
  at::manual_seed(1);
  policy_trainer t(load_policy(), resume_options());
  auto batch = sample_batch(t, prompts, 4, 3, 5, -1);
  batch.groups[0].samples[1].excluded = "infra_error: GPU lost";
  for (auto& s : batch.groups[0].samples) s.reward = static_cast<double>(&s - &batch.groups[0].samples[0]);
  const auto st = t.step(batch);
  REQUIRE(st.ok());
  CHECK(st->excluded_samples == 1);
  CHECK(st->grpo.stepped);
  CHECK(st->policy_version == 1);

  const auto before = t.policy()->output_weight().clone();
  auto bad = batch;
  bad.groups[1].samples[0].completion_tokens[0] = 512;  // vocab 512
  auto e = t.step(bad);
  REQUIRE_FALSE(e.ok());
  CHECK(e.message().find("outside the vocabulary") != std::string::npos);
  bad = batch;
  bad.groups[1].samples[0].logprobs.pop_back();
  CHECK_FALSE(t.step(bad).ok());
  CHECK(at::equal(before, t.policy()->output_weight()));
  CHECK(t.steps() == 1);

  scratch_dir dir;
  REQUIRE(t.save_checkpoint(dir.path("c")).ok());
  policy_trainer other_seed(load_policy(), [] {
    auto o = resume_options();
    o.seed = 12;
    return o;
  }());
  CHECK_FALSE(other_seed.load_checkpoint(dir.path("c")).ok());  // another run's checkpoint
  CHECK_FALSE(t.load_checkpoint(dir.path("missing")).ok());

  auto state = read_trainer_state(dir.path("c"));
  REQUIRE(state.ok());
  CHECK(state->step == 1);
  CHECK(state->policy_version == 1);
  CHECK(!state->cpu_rng.empty());
  const auto again = parse_trainer_state(to_json(*state), "x");
  REQUIRE(again.ok());
  CHECK(again->cpu_rng == state->cpu_rng);
  CHECK(again->kl_controller == state->kl_controller);
  CHECK_FALSE(parse_trainer_state("{\"version\": 1}", "x").ok());
}

TEST_CASE("policy trainer: episodes with turn returns train one sample a turn; mismatched or lone ones whole") {
  at::manual_seed(2);
  policy_trainer t(load_policy(), [] {
    auto o = resume_options();
    o.baseline_from_draws = true;  // a group of turns ignores its draws (one reward an episode)
    return o;
  }());
  auto batch = sample_batch(t, prompts, 4, 3, 5, -1);
  std::int64_t episodes = 0;
  for (auto& g : batch.groups) {
    g.draw_rewards = {5, 5, 0, 0};  // would make every turn's advantage negative, were it used
    for (auto& s : g.samples) {
      // Two turns {5, 6} and {8, 9} around an observation {7}; returns that differ in the group.
      s.completion_tokens = {5, 6, 7, 8, 9};
      s.completion_mask = {1, 1, 0, 1, 1};
      s.logprobs.clear();
      const double k = static_cast<double>(episodes++ % 4);
      s.turn_returns = {0.1 * k, 0.3 - 0.1 * k};
      s.reward = s.turn_returns[0];
    }
  }
  batch.groups[0].samples[0].turn_returns = {1, 2, 3};  // three returns for two turns
  // Group 1 keeps one episode: whole, against its draws (alone it would be all-equal, skipped).
  REQUIRE(batch.groups[1].samples.size() == 4);
  for (int i = 1; i < 4; ++i) batch.groups[1].samples[i].excluded = "infra_error: test";
  const auto st = t.step(batch);
  REQUIRE_MESSAGE(st.ok(), (st.ok() ? "" : st.message()));
  const std::int64_t split = episodes - 5;
  CHECK(st->split_episodes == split);
  CHECK(st->whole_episodes == 2);
  CHECK(st->grpo.samples == 2 * split + 2);
  CHECK(st->grpo.advantages.adv_max > 0);  // the draws (mean 2.5) did not set the split groups' baseline
  CHECK(st->grpo.loss.tokens == 4 * split + 8);  // two tokens a turn; each whole episode four
}

namespace {
// A thread rank that says it sums in the background (as NCCL ranks in processes do), so the GRPO
// step uses the gradient reducer on the CPU; its sums still run at once.
class background_rank final : public collective {
 public:
  explicit background_rank(std::shared_ptr<collective> inner) : inner_(std::move(inner)) {}
  int rank() const noexcept override { return inner_->rank(); }
  int size() const noexcept override { return inner_->size(); }
  status all_reduce_sum(const std::vector<at::Tensor>& t) override { return inner_->all_reduce_sum(t); }
  status broadcast(const std::vector<at::Tensor>& t, int root) override { return inner_->broadcast(t, root); }
  bool sums_in_background() const noexcept override { return true; }

 private:
  std::shared_ptr<collective> inner_;
};

// `ranks` data-parallel trainers, each joined to a rank of `group`, stepping `batches` in threads.
std::vector<std::unique_ptr<data_parallel_trainer>> train_joined(const std::vector<std::shared_ptr<collective>>& group,
                                                                 const policy_trainer_options& opts,
                                                                 const std::vector<train_batch>& batches,
                                                                 std::vector<std::vector<policy_step_stats>>& stats) {
  const std::size_t n = group.size();
  std::vector<std::unique_ptr<data_parallel_trainer>> ranks(n);
  std::vector<std::string> errors(n);
  stats.assign(n, {});
  std::vector<std::thread> ts;
  for (std::size_t r = 0; r < n; ++r)
    ts.emplace_back([&, r] {
      auto dp = group_options({at::kCPU}, opts);
      dp.group = group[r];
      auto t = data_parallel_trainer::create(dp);
      if (!t) return void(errors[r] = t.message());
      for (const auto& b : batches) {
        auto st = (*t)->step(b);
        if (!st) return void(errors[r] = st.message());
        stats[r].push_back(*st);
      }
      ranks[r] = std::move(*t);
    });
  for (auto& t : ts) t.join();
  for (const auto& e : errors) CHECK_MESSAGE(e.empty(), e);
  return ranks;
}
}  // namespace

TEST_CASE("data parallel: gradients summed during the backward pass step exactly like sums after it") {
  policy_trainer source(load_policy(), resume_options());
  std::vector<train_batch> batches;
  for (std::uint64_t i = 0; i < 3; ++i) batches.push_back(sample_batch(source, prompts, 4, 5, 500 + i, -1));
  for (const bool bf16 : {false, true}) {
    CAPTURE(bf16);
    auto opts = resume_options();
    opts.bf16_compute = bf16;
    opts.step.grad_bucket_bytes = 16u << 10;  // many buckets for the tiny model
    // Plain thread ranks: they do not sum in the background, so they sum after backward.
    auto after = train_group({at::kCPU, at::kCPU}, opts, batches);
    std::vector<std::shared_ptr<collective>> group;
    for (auto& r : make_thread_group(2)) group.push_back(std::make_shared<background_rank>(r));
    std::vector<std::vector<policy_step_stats>> stats;
    auto during = train_joined(group, opts, batches, stats);
    REQUIRE((during[0] && during[1]));
    CHECK(same_weights(during[0]->lead().policy(), during[1]->lead().policy()));
    // The same fp32 sums of the same accumulated gradients, only started earlier.
    CHECK(same_weights(after.group->lead().policy(), during[0]->lead().policy()));
    for (std::size_t i = 0; i < batches.size(); ++i) {
      CHECK(stats[0][i].grpo.grad_norm == after.stats[i].grpo.grad_norm);
      CHECK(after.stats[i].grpo.buckets_reduced_in_backward == 0);
      CHECK(stats[0][i].grpo.buckets_reduced_in_backward > 0);
      MESSAGE("step " << i << ": " << stats[0][i].grpo.buckets_reduced_in_backward << " buckets summed in backward");
    }
    // The switch off: the same ranks sum after backward.
    auto off = opts;
    off.step.overlap_grad_reduce = false;
    std::vector<std::shared_ptr<collective>> group2;
    for (auto& r : make_thread_group(2)) group2.push_back(std::make_shared<background_rank>(r));
    auto plain = train_joined(group2, off, batches, stats);
    REQUIRE(plain[0]);
    CHECK(stats[0].back().grpo.buckets_reduced_in_backward == 0);
    CHECK(same_weights(plain[0]->lead().policy(), during[0]->lead().policy()));
  }
}

TEST_CASE("gradient reducer: sums every parameter across ranks, frozen ones too, starting buckets during backward") {
  // Per rank: a and c train, b is frozen; one parameter per bucket, so the buckets are [c], [b], [a].
  auto group = make_thread_group(2);
  std::vector<std::vector<at::Tensor>> grads(2);
  std::vector<std::size_t> early(2);
  std::vector<std::string> errors(2);
  std::vector<std::thread> ts;
  for (int r = 0; r < 2; ++r)
    ts.emplace_back([&, r] {
      background_rank rank(group[static_cast<std::size_t>(r)]);
      auto a = torch::ones({3}, torch::requires_grad());
      auto b = torch::ones({2});
      auto c = torch::ones({4}, torch::requires_grad());
      std::vector<at::Tensor> params = {a, b, c};
      gradient_reducer reducer(params, params, rank, /*bucket_bytes=*/1);
      for (int step = 0; step < 2; ++step) {
        for (auto& p : params) p.mutable_grad() = at::Tensor();
        const double k = r + 1 + step;  // this rank's gradients: k for a, 2k for c
        auto loss = (a * k).sum() + (c * (2 * k)).sum() + (b * 5).sum();
        reducer.arm();
        loss.backward();
        if (auto s = reducer.finish(); !s) return void(errors[static_cast<std::size_t>(r)] = s.message());
      }
      grads[static_cast<std::size_t>(r)] = {a.grad().clone(), b.grad().clone(), c.grad().clone()};
      early[static_cast<std::size_t>(r)] = reducer.started_early();
    });
  for (auto& t : ts) t.join();
  for (const auto& e : errors) REQUIRE_MESSAGE(e.empty(), e);
  for (int r = 0; r < 2; ++r) {
    const auto& g = grads[static_cast<std::size_t>(r)];
    // Step 2: k = 2 on rank 0 and 3 on rank 1.
    CHECK(at::equal(g[0], torch::full({3}, 5.0)));
    CHECK(at::equal(g[1], torch::zeros({2})));  // frozen: no gradient anywhere, summed as zeros
    CHECK(at::equal(g[2], torch::full({4}, 10.0)));
    CHECK(early[static_cast<std::size_t>(r)] == 3);  // the frozen bucket did not hold back the one after it
  }
}

namespace {

policy_trainer_options lora_options_for_test(bool checkpointing) {
  auto o = resume_options();
  model::lora_options lo;
  lo.rank = 4;
  lo.alpha = 8;
  lo.dropout = 0.1;  // drawn from the default generator: resume and recomputation must keep it
  lo.targets = {"q_proj", "v_proj", "o_proj", "down_proj"};
  lo.seed = 3;
  o.lora = lo;
  o.activation_checkpointing = checkpointing;
  return o;
}

bool same_adapters(const model::CausalLM& a, const model::CausalLM& b) {
  const auto pa = model::named_lora_parameters(*a), pb = model::named_lora_parameters(*b);
  bool same = !pa.empty() && pa.size() == pb.size();
  for (std::size_t i = 0; same && i < pa.size(); ++i)
    same = pa[i].first == pb[i].first && at::equal(pa[i].second, pb[i].second);
  return same;
}

at::Tensor logits_of(model::CausalLMImpl& m) {
  at::NoGradGuard no_grad;
  return m.forward(at::tensor({1, 17, 42, 99, 250, 7}, at::kLong).view({1, 6}));
}

}  // namespace

TEST_CASE("policy trainer with LoRA and activation checkpointing: adapters train, the base stays, resume is exact") {
  scratch_dir dir;
  const int n = 4;
  auto base = load_policy();

  at::manual_seed(5);
  policy_trainer whole(load_policy(), lora_options_for_test(true));
  CHECK(whole.stepper().steps() == 0);
  CHECK(&*whole.reference() == &*whole.policy());  // no second copy: the reference is adapters off
  CHECK(whole.compute_model()->model->checkpoint_layers);
  train(whole, n);
  CHECK(same_weights(whole.policy(), base));  // the base weights are frozen
  double b_norm = 0;
  for (const auto& [name, a] : whole.policy()->lora->adapters) b_norm += a->B.abs().sum().item<double>();
  CHECK(b_norm > 0);  // the adapters trained
  {
    model::lora_disabled off(*whole.policy());  // the KL reference is the base model
    CHECK(at::equal(logits_of(*whole.policy()), logits_of(*base)));
  }
  CHECK_FALSE(at::equal(logits_of(*whole.policy()), logits_of(*base)));

  // Recomputing layers in backward changes no gradient and no dropout mask: the same run without
  // it ends with the same adapters, bit for bit.
  at::manual_seed(5);
  policy_trainer plain(load_policy(), lora_options_for_test(false));
  train(plain, n);
  CHECK(same_adapters(plain.policy(), whole.policy()));

  at::manual_seed(5);
  {
    policy_trainer first(load_policy(), lora_options_for_test(true));
    train(first, n / 2);
    REQUIRE(first.save_checkpoint(dir.path("ckpt")).ok());
    // The checkpoint's model.safetensors is the merged policy: it loads as a plain model.
    auto merged = model::load_causal_lm(dir.path("ckpt"));
    REQUIRE_MESSAGE(merged.ok(), (merged.ok() ? "" : merged.message()));
    CHECK((logits_of(**merged) - logits_of(*first.policy())).abs().max().item<double>() < 1e-4);
  }
  for (const char* f : {"adapter_config.json", "adapter_model.safetensors", "model.safetensors", "optimizer.pt"})
    CHECK_MESSAGE(std::filesystem::exists(dir.path(std::string("ckpt/") + f)), f);

  at::manual_seed(999);
  policy_trainer resumed(load_policy(), lora_options_for_test(true));
  const auto ok = resumed.load_checkpoint(dir.path("ckpt"));
  REQUIRE_MESSAGE(ok.ok(), (ok.ok() ? "" : ok.message()));
  train(resumed, n - n / 2);
  CHECK(resumed.stepper().steps() == whole.stepper().steps());
  CHECK(same_adapters(resumed.policy(), whole.policy()));
  CHECK(same_weights(resumed.policy(), base));

  // A control: a resume without the adapters' optimiser state goes elsewhere.
  {
    policy_trainer fresh(load_policy(), lora_options_for_test(true));
    REQUIRE(fresh.save_checkpoint(dir.path("fresh")).ok());
  }
  std::filesystem::copy(dir.path("ckpt"), dir.path("no_moments"));
  std::filesystem::copy_file(dir.path("fresh/optimizer.pt"), dir.path("no_moments/optimizer.pt"),
                             std::filesystem::copy_options::overwrite_existing);
  policy_trainer no_moments(load_policy(), lora_options_for_test(true));
  REQUIRE(no_moments.load_checkpoint(dir.path("no_moments")).ok());
  train(no_moments, n - n / 2);
  CHECK_FALSE(same_adapters(no_moments.policy(), whole.policy()));

  // A checkpoint of other adapters does not load.
  auto other = lora_options_for_test(true);
  other.lora->rank = 2;
  policy_trainer mismatched(load_policy(), other);
  CHECK_FALSE(mismatched.load_checkpoint(dir.path("ckpt")).ok());
}

TEST_CASE("data-parallel trainer with LoRA: 2 CPU ranks start from the same adapters and stay identical") {
  policy_trainer source(load_policy(), resume_options());
  std::vector<train_batch> batches;
  for (std::uint64_t i = 0; i < 2; ++i) batches.push_back(sample_batch(source, prompts, 4, 5, 500 + i, -1));
  auto o = lora_options_for_test(true);
  o.lora->dropout = 0;  // ranks draw dropout from generators of their own
  auto run = train_group({at::kCPU, at::kCPU}, o, batches);
  CHECK(same_adapters(run.group->rank(1).policy(), run.group->lead().policy()));
  policy_trainer one(load_policy(), o);
  for (const auto& b : batches) REQUIRE(one.step(b).ok());
  const auto pa = model::named_lora_parameters(*one.policy());
  const auto pb = model::named_lora_parameters(*run.group->lead().policy());
  double worst = 0;
  for (std::size_t i = 0; i < pa.size(); ++i)
    worst = std::max(worst, (pa[i].second - pb[i].second).abs().max().item<double>());
  CHECK(worst < 1e-4);
}
