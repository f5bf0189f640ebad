// LoRA adapters (model/lora.hpp) and per-layer activation checkpointing (model/layer_checkpoint.hpp)
// on the fixture tiny Qwen2 (2 layers, hidden 64, vocab 512), in fp64 where numbers are compared:
// the adapted forward equals the merged weights' forward, switched off it is the base model's, its
// gradients match finite differences, the PEFT files load back (`kforge model random-adapter` and
// `logits` write and read them as the trainer and sampler do), and a checkpointed backward gives
// the plain backward's gradients.

#include <cmath>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "model/lora.hpp"
#include "model/model_command.hpp"
#include "model/weights.hpp"
#include "tests/model/test_files.hpp"
#include "tests/doctest_torch.hpp"  // last: after every header that may include LibTorch

using namespace kforge::model;
using namespace kforge::model::testing;

namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

CausalLM load_qwen2(at::ScalarType dtype = at::kDouble) {
  load_options lo;
  lo.dtype = dtype;
  auto m = load_causal_lm(fixtures("qwen2"), lo);
  REQUIRE_MESSAGE(m.ok(), (m.ok() ? "" : m.message()));
  return m.value();
}

lora_options all_targets(std::int64_t rank = 4) {
  lora_options o;
  o.rank = rank;
  o.alpha = 3 * static_cast<double>(rank);  // scale 3: a dropped scale shows
  o.targets = lora_target_names();
  o.seed = 5;
  return o;
}

/// Adapters whose B is not zero, so that they change the model.
void randomise_b(CausalLMImpl& m, std::uint64_t seed) {
  at::NoGradGuard no_grad;
  at::manual_seed(seed);
  for (const auto& [name, a] : m.lora->adapters) a->B.copy_(at::randn(a->B.sizes(), a->B.options()) * 0.05);
}

const at::Tensor& ids() {
  static const at::Tensor t = at::tensor({1, 17, 42, 99, 250, 7, 3, 5, 1, 300, 12, 64}, at::kLong).view({2, 6});
  return t;
}

at::Tensor logits_of(CausalLMImpl& m) {
  at::NoGradGuard no_grad;
  return m.forward(ids());
}

double max_diff(const at::Tensor& a, const at::Tensor& b) { return (a - b).abs().max().item<double>(); }

/// A scalar of the logits that weighs every position and vocabulary entry differently.
at::Tensor loss_of(CausalLMImpl& m) {
  const at::Tensor logits = m.forward(ids());
  const at::Tensor w = at::linspace(-1, 1, logits.numel(), logits.options()).view(logits.sizes());
  return (logits * w).sum() + logits.pow(2).mean();
}

}  // namespace

TEST_CASE("lora: options are checked") {
  CHECK(check_lora_options(all_targets()).empty());
  auto o = all_targets();
  o.rank = 0;
  CHECK(contains(check_lora_options(o), "rank"));
  o = all_targets();
  o.targets = {"q_proj", "lm_head"};
  CHECK(contains(check_lora_options(o), "lm_head"));
  o.targets = {"q_proj", "q_proj"};
  CHECK(contains(check_lora_options(o), "twice"));
  o = all_targets();
  o.dropout = 1;
  CHECK(contains(check_lora_options(o), "dropout"));
  auto m = load_qwen2();
  CHECK_FALSE(attach_lora(*m, o).ok());
  CHECK(!m->lora);
}

TEST_CASE("lora: a fresh adapter changes nothing, a trained one equals its merged weights") {
  auto m = load_qwen2();
  const at::Tensor base = logits_of(*m);
  REQUIRE(attach_lora(*m, all_targets()).ok());
  CHECK(lora_parameters(*m).size() == 2 * 2 * 7);  // 2 layers x 7 projections x (A, B)
  for (const auto& p : m->parameters()) CHECK_FALSE(p.requires_grad());  // the base is frozen
  for (const auto& p : lora_parameters(*m)) CHECK(p.requires_grad());
  CHECK(at::equal(logits_of(*m), base));  // B = 0

  randomise_b(*m, 1);
  const at::Tensor adapted = logits_of(*m);
  CHECK(max_diff(adapted, base) > 1e-3);

  // The merged model, in memory and through save_weights (what samplers and checkpoints get).
  scratch_dir dir;
  REQUIRE(save_weights(*m, dir.path("model.safetensors")).ok());
  std::filesystem::copy_file(fixtures("qwen2/config.json"), dir.path("config.json"));
  load_options lo;
  lo.dtype = at::kDouble;
  auto saved = load_causal_lm(dir.path(), lo);
  REQUIRE_MESSAGE(saved.ok(), (saved.ok() ? "" : saved.message()));
  CHECK(max_diff(logits_of(**saved), adapted) < 1e-10);

  merge_lora(*m);
  CHECK(!m->lora);
  CHECK(!m->model->layers->ptr<DecoderLayerImpl>(0)->self_attn->q_lora);
  CHECK(max_diff(logits_of(*m), adapted) < 1e-10);
}

TEST_CASE("lora: adapters switched off compute the base model, bit for bit") {
  auto m = load_qwen2(at::kFloat);
  const at::Tensor base = logits_of(*m);
  auto o = all_targets();
  o.targets = {"q_proj", "v_proj", "down_proj"};
  REQUIRE(attach_lora(*m, o).ok());
  randomise_b(*m, 2);
  const at::Tensor adapted = logits_of(*m);
  CHECK(max_diff(adapted, base) > 1e-3);
  {
    lora_disabled off(*m);
    CHECK(at::equal(logits_of(*m), base));
    scratch_dir dir;  // and what is saved then is the base model
    REQUIRE(save_weights(*m, dir.path("w.safetensors")).ok());
    auto f = safetensors_file::open(dir.path("w.safetensors"));
    REQUIRE(f.ok());
    auto q = to_tensor(*f->find("model.layers.1.self_attn.q_proj.weight"));
    REQUIRE(q.ok());
    CHECK(at::equal(*q, m->model->layers->ptr<DecoderLayerImpl>(1)->self_attn->q_proj->weight));
  }
  CHECK(at::equal(logits_of(*m), adapted));  // on again after the guard
}

TEST_CASE("lora: gradients of A and B match finite differences") {
  auto m = load_qwen2();
  REQUIRE(attach_lora(*m, all_targets(3)).ok());
  randomise_b(*m, 3);  // with B = 0, A's gradient would be 0 and prove little
  m->train();          // dropout is 0: training mode computes the same
  loss_of(*m).backward();
  for (const auto& p : m->parameters()) CHECK_FALSE(p.grad().defined());

  at::NoGradGuard no_grad;
  const double eps = 1e-6;
  int checked = 0;
  for (const auto& [name, t] : named_lora_parameters(*m)) {
    REQUIRE_MESSAGE(t.grad().defined(), name);
    // Three entries of each tensor, spread over it.
    for (std::int64_t k : {std::int64_t{0}, t.numel() / 2, t.numel() - 1}) {
      at::Tensor flat = t.view({-1});
      const double orig = flat[k].item<double>();
      flat[k] = orig + eps;
      const double up = loss_of(*m).item<double>();
      flat[k] = orig - eps;
      const double down = loss_of(*m).item<double>();
      flat[k] = orig;
      const double fd = (up - down) / (2 * eps);
      const double g = t.grad().view({-1})[k].item<double>();
      CHECK_MESSAGE(std::abs(fd - g) <= 1e-6 * std::max(1.0, std::abs(fd)), name << "[" << k << "]: autograd " << g
                                                                             << ", finite difference " << fd);
      ++checked;
    }
  }
  CHECK(checked == 2 * 2 * 7 * 3);
}

TEST_CASE("lora: adapters written in the PEFT layout load back and, merged, reproduce the logits") {
  scratch_dir dir;
  auto m = load_qwen2();
  auto o = all_targets(4);
  o.targets = {"v_proj", "q_proj", "gate_proj"};  // any order: written in the model's order
  o.alpha = 6;
  o.dropout = 0.05;
  REQUIRE(attach_lora(*m, o).ok());
  randomise_b(*m, 4);
  const at::Tensor adapted = logits_of(*m);
  REQUIRE(save_lora(*m, dir.path("adapter"), "Qwen/Qwen2-test").ok());

  const auto config = nlohmann::json::parse(read_text(dir.path("adapter/adapter_config.json")));
  CHECK(config["peft_type"] == "LORA");
  CHECK(config["task_type"] == "CAUSAL_LM");
  CHECK(config["r"] == 4);
  CHECK(config["lora_alpha"] == 6);
  CHECK(config["lora_dropout"].get<double>() == doctest::Approx(0.05));
  CHECK(config["target_modules"] == nlohmann::json::array({"q_proj", "v_proj", "gate_proj"}));
  CHECK(config["base_model_name_or_path"] == "Qwen/Qwen2-test");
  CHECK(config["bias"] == "none");

  auto file = safetensors_file::open(dir.path("adapter/adapter_model.safetensors"));
  REQUIRE(file.ok());
  CHECK(file->tensors().size() == 2 * 3 * 2);
  const auto* a = file->find("base_model.model.model.layers.1.self_attn.q_proj.lora_A.weight");
  const auto* b = file->find("base_model.model.model.layers.0.mlp.gate_proj.lora_B.weight");
  REQUIRE(a != nullptr);
  REQUIRE(b != nullptr);
  CHECK(a->shape == std::vector<std::int64_t>{4, 64});
  CHECK(b->shape == std::vector<std::int64_t>{128, 4});

  // Into a fresh model (attached as the config says), then merged.
  auto fresh = load_qwen2();
  const auto loaded = load_lora(*fresh, dir.path("adapter"));
  REQUIRE_MESSAGE(loaded.ok(), (loaded.ok() ? "" : loaded.message()));
  REQUIRE(fresh->lora);
  CHECK(fresh->lora->options.rank == 4);
  CHECK(fresh->lora->options.alpha == 6);
  CHECK(at::equal(logits_of(*fresh), adapted));
  merge_lora(*fresh);
  CHECK(max_diff(logits_of(*fresh), adapted) < 1e-10);

  // Into a model that has adapters already: they are overwritten.
  auto again = load_qwen2();
  o.seed = 99;
  REQUIRE(attach_lora(*again, o).ok());
  REQUIRE(load_lora(*again, dir.path("adapter")).ok());
  CHECK(at::equal(logits_of(*again), adapted));

  SUBCASE("a model with other adapters is refused") {
    auto other = load_qwen2();
    REQUIRE(attach_lora(*other, all_targets(2)).ok());
    const auto s = load_lora(*other, dir.path("adapter"));
    REQUIRE_FALSE(s.ok());
    CHECK(contains(s.message(), "differ"));
  }
  SUBCASE("unsupported settings are refused") {
    auto c = config;
    c["use_dora"] = true;
    write_text(dir.path("adapter/adapter_config.json"), c.dump());
    const auto s = read_lora_config(dir.path("adapter"));
    REQUIRE_FALSE(s.ok());
    CHECK(contains(s.message(), "use_dora"));
  }
  SUBCASE("a missing tensor is refused and the model keeps no adapters") {
    std::vector<tensor_bytes> entries;
    for (const auto& v : file->tensors()) {
      if (v.name == "base_model.model.model.layers.1.self_attn.q_proj.lora_A.weight") continue;
      entries.push_back({v.name, v.dtype, v.shape, v.data, v.nbytes});
    }
    std::filesystem::create_directories(dir.path("partial"));
    std::filesystem::copy_file(dir.path("adapter/adapter_config.json"), dir.path("partial/adapter_config.json"));
    REQUIRE(write_safetensors(dir.path("partial/adapter_model.safetensors"), entries).ok());
    auto target = load_qwen2();
    const auto s = load_lora(*target, dir.path("partial"));
    REQUIRE_FALSE(s.ok());
    CHECK(contains(s.message(), "layers.1.self_attn.q_proj.lora_A"));
    CHECK(!target->lora);
  }
}

TEST_CASE("lora: replace_lora swaps adapters of another shape, remove_lora leaves the base model") {
  scratch_dir dir;
  auto m = load_qwen2();
  const at::Tensor base = logits_of(*m);
  auto o = all_targets(4);
  o.targets = {"q_proj", "v_proj"};
  REQUIRE(attach_lora(*m, o).ok());
  randomise_b(*m, 7);
  const at::Tensor first = logits_of(*m);
  REQUIRE(save_lora(*m, dir.path("first"), "Qwen/Qwen2-test").ok());
  auto p = load_qwen2();
  REQUIRE(attach_lora(*p, all_targets(2)).ok());
  randomise_b(*p, 8);
  const at::Tensor second = logits_of(*p);
  REQUIRE(save_lora(*p, dir.path("second"), "Qwen/Qwen2-test").ok());

  // m holds rank-4 q/v adapters: load_lora refuses rank-2 ones on every projection, replace_lora
  // puts them on instead, and back.
  CHECK_FALSE(load_lora(*m, dir.path("second")).ok());
  REQUIRE(replace_lora(*m, dir.path("second")).ok());
  CHECK(m->lora->options.rank == 2);
  CHECK(lora_parameters(*m).size() == 2 * 7 * 2);
  CHECK(at::equal(logits_of(*m), second));
  REQUIRE(replace_lora(*m, dir.path("first")).ok());
  CHECK(at::equal(logits_of(*m), first));
  // A bad directory changes nothing.
  CHECK_FALSE(replace_lora(*m, dir.path("missing")).ok());
  CHECK(at::equal(logits_of(*m), first));

  remove_lora(*m);
  CHECK(!m->lora);
  CHECK(lora_parameters(*m).empty());
  CHECK(at::equal(logits_of(*m), base));
  remove_lora(*m);  // no adapters: nothing to do
  REQUIRE(replace_lora(*m, dir.path("first")).ok());
  CHECK(at::equal(logits_of(*m), first));
}

TEST_CASE("kforge model: random-adapter writes a PEFT adapter that changes the model, logits writes what it computes") {
  scratch_dir dir;
  std::ostringstream out, err;
  random_adapter_options ro;
  ro.model = fixtures("qwen2");
  ro.out = dir.path("adapter");
  ro.rank = 4;
  ro.alpha = 12;  // scale 3: a dropped scale shows
  ro.seed = 3;
  REQUIRE_MESSAGE(random_adapter_command(ro, out, err) == 0, err.str());
  auto o = read_lora_config(ro.out);
  REQUIRE(o.ok());
  CHECK(o->targets == lora_target_names());  // every projection by default

  // What `logits` writes is what the model with the adapter loaded computes, and not the base's.
  auto m = load_qwen2(at::kFloat);
  const at::Tensor base = logits_of(*m);
  REQUIRE(load_lora(*m, ro.out).ok());
  for (const auto& [name, a] : m->lora->adapters) CHECK_MESSAGE(a->B.abs().max().item<double>() > 0, name);
  const at::Tensor adapted = logits_of(*m)[1];
  CHECK(max_diff(adapted, base[1]) > 1e-2);

  logits_options lo;
  lo.model = fixtures("qwen2");
  lo.adapter = ro.out;
  const at::Tensor row = ids()[1];
  lo.tokens.assign(row.data_ptr<std::int64_t>(), row.data_ptr<std::int64_t>() + row.numel());
  lo.out = dir.path("logits.safetensors");
  REQUIRE_MESSAGE(logits_command(lo, out, err) == 0, err.str());
  auto file = safetensors_file::open(lo.out);
  REQUIRE(file.ok());
  auto written = to_tensor(*file->find("logits"));
  auto tokens = to_tensor(*file->find("tokens"));
  REQUIRE(written.ok());
  REQUIRE(tokens.ok());
  CHECK(at::equal(*tokens, row));
  CHECK(max_diff(*written, adapted) < 1e-5);

  SUBCASE("a token outside the vocabulary is a usage error") {
    lo.tokens = {1, 100000};
    CHECK(logits_command(lo, out, err) == 2);
  }
  SUBCASE("B of zero is refused: the adapter would change nothing") {
    ro.b_std = 0;
    CHECK(random_adapter_command(ro, out, err) == 2);
  }
}

TEST_CASE("activation checkpointing: the same gradients as the plain backward") {
  SUBCASE("full fine-tuning, fp64 and fp32") {
    for (auto dtype : {at::kDouble, at::kFloat}) {
      auto plain = load_qwen2(dtype);
      auto ckpt = load_qwen2(dtype);
      ckpt->model->checkpoint_layers = true;
      for (auto* m : {&plain, &ckpt})
        for (auto& p : (*m)->parameters()) p.set_requires_grad(true);
      const at::Tensor lp = loss_of(*plain), lc = loss_of(*ckpt);
      CHECK(at::equal(lp, lc));
      lp.backward();
      lc.backward();
      const auto pc = ckpt->named_parameters();
      for (const auto& item : plain->named_parameters()) {
        REQUIRE_MESSAGE(pc[item.key()].grad().defined(), item.key());
        CHECK_MESSAGE(at::equal(item.value().grad(), pc[item.key()].grad()), item.key());
      }
    }
  }
  SUBCASE("LoRA with dropout: the recomputation draws the same dropout masks") {
    // The frozen embeddings give the first layer an input without grad: its adapters must still
    // get theirs through the checkpointed layer.
    auto o = all_targets(4);
    o.dropout = 0.3;
    auto plain = load_qwen2();
    auto ckpt = load_qwen2();
    ckpt->model->checkpoint_layers = true;
    for (auto* m : {&plain, &ckpt}) {
      REQUIRE(attach_lora(**m, o).ok());
      randomise_b(**m, 6);
      (*m)->train();
    }
    at::manual_seed(77);
    const at::Tensor lp = loss_of(*plain);
    lp.backward();
    const double after_plain = at::rand({1}, at::kDouble).item<double>();
    at::manual_seed(77);
    const at::Tensor lc = loss_of(*ckpt);
    lc.backward();
    // Backward restored the generator where forward left it: the stream goes on as without it.
    CHECK(at::rand({1}, at::kDouble).item<double>() == after_plain);
    CHECK(at::equal(lp, lc));
    const auto pp = named_lora_parameters(*plain), pc = named_lora_parameters(*ckpt);
    REQUIRE(pp.size() == pc.size());
    for (std::size_t i = 0; i < pp.size(); ++i) {
      REQUIRE_MESSAGE(pc[i].second.grad().defined(), pc[i].first);
      CHECK_MESSAGE(at::equal(pp[i].second.grad(), pc[i].second.grad()), pp[i].first);
    }
    CHECK(pp.front().second.grad().abs().sum().item<double>() > 0);
  }
  SUBCASE("without gradients the layers run plainly") {
    auto m = load_qwen2();
    m->model->checkpoint_layers = true;
    const at::Tensor a = logits_of(*m);
    m->model->checkpoint_layers = false;
    CHECK(at::equal(a, logits_of(*m)));
  }
}
