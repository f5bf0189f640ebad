// The engine sampler on the fixture Qwen2 model (tests/model/fixtures), fp32 on the CPU: candidates
// and their consistency, determinism per sample id, the tie to the trainer's scoring pass, weight
// updates (good, bad and unsupported ones leave the old weights serving), and the source rule.
#include "stages/engine_sampler.hpp"
#include "stages/episode_turn_sampler.hpp"
#include "agent/episode_turns.hpp"


#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <flatbuffers/flatbuffers.h>

#include "common/hash.hpp"
#include "common/visible_gpus.hpp"
#include "model/chat.hpp"
#include "model/generate.hpp"
#include "model/weights.hpp"
#include "config/manifest.hpp"
#include "commands/sample_command.hpp"
#include "tests/file_size_limit.hpp"
#include "tests/model/test_files.hpp"
#include "tests/doctest_torch.hpp"  // last: after every header that may include LibTorch

using namespace kforge;
using namespace kforge::pipeline;
namespace wire = ::kforge::wire;
namespace fs = std::filesystem;
using kforge::model::testing::scratch_dir;

namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

std::string fx(const std::string& rel) { return std::string(KFORGE_MODEL_FIXTURES) + "/" + rel; }

const std::string kernel = "#include <kforge/kernel_abi.h>\nextern \"C\" int kf_forward() { return 0; }\n";

engine_sampler_options options() {
  engine_sampler_options o;
  o.sampler.model = fx("qwen2");
  o.tokenizer_dir = fx("tokenizer");  // the fixture model directory holds no tokenizer
  o.sampler.max_new_tokens = 16;
  o.sampler.group_size = 3;
  o.seed = 5;
  return o;
}

std::shared_ptr<actors::sampler_logic> sampler() {
  auto s = make_engine_sampler(options());
  REQUIRE_MESSAGE(s.ok(), (s.ok() ? "" : s.message()));
  return s.value();
}

/// A packed message whose root stays valid as long as this lives.
template <class T>
struct packed {
  flatbuffers::FlatBufferBuilder fbb;
  const T* get() const { return flatbuffers::GetRoot<T>(fbb.GetBufferPointer()); }
};

std::unique_ptr<packed<wire::GenerateRequest>> request(const std::string& prompt, std::uint32_t group = 4,
                                                       float temperature = 0.8f, std::uint32_t max_new = 12) {
  wire::GenerateRequestT r;
  r.task = std::make_unique<wire::TaskT>();
  r.task->id = "l1/relu";
  r.prompt = prompt;
  r.prompt_hash = fnv1a64(prompt);
  r.group_size = group;
  r.temperature = temperature;
  r.top_p = 1.0f;
  r.max_new_tokens = max_new;
  auto p = std::make_unique<packed<wire::GenerateRequest>>();
  p->fbb.Finish(wire::GenerateRequest::Pack(p->fbb, &r));
  return p;
}

std::unique_ptr<packed<wire::PolicyWeights>> weights(wire::WeightsTransport t, const std::string& path,
                                                      std::uint64_t bytes = 0, std::vector<std::uint8_t> data = {}) {
  wire::PolicyWeightsT w;
  w.version = 1;
  w.transport = t;
  w.path = path;
  w.bytes = bytes;
  w.data = std::move(data);
  auto p = std::make_unique<packed<wire::PolicyWeights>>();
  p->fbb.Finish(wire::PolicyWeights::Pack(p->fbb, &w));
  return p;
}

std::vector<wire::CandidateT> run(actors::sampler_logic& s, const wire::GenerateRequest& req, std::uint64_t id) {
  actors::envelope_info info;
  info.sample_id = id;
  auto out = s.generate(req, info);
  REQUIRE_MESSAGE(out.ok(), (out.ok() ? "" : out.message()));
  return std::move(out).value();
}

bool same(const std::vector<wire::CandidateT>& a, const std::vector<wire::CandidateT>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i].completion_tokens != b[i].completion_tokens || a[i].logprobs != b[i].logprobs) return false;
  return true;
}

model::CausalLM load_fixture() {
  auto m = model::load_causal_lm(fx("qwen2"));
  REQUIRE_MESSAGE(m.ok(), (m.ok() ? "" : m.message()));
  return m.value();
}

// Adds seeded noise to every parameter, so that a model with these weights samples differently.
void perturb(model::CausalLMImpl& m, std::uint64_t seed) {
  at::NoGradGuard no_grad;
  at::Generator gen = at::detail::createCPUGenerator(seed);
  for (auto& p : m.parameters()) p.add_(at::randn(p.sizes(), gen, p.options()) * 0.05);
}

// Largest |scored - sampled| log-prob over the candidates, scored by `m` as the trainer does.
double score_gap(model::CausalLMImpl& m, const std::vector<wire::CandidateT>& cands, double temperature) {
  std::vector<model::score_item> items;
  for (const auto& c : cands)
    items.push_back({{c.prompt_tokens.begin(), c.prompt_tokens.end()},
                     {c.completion_tokens.begin(), c.completion_tokens.end()}});
  model::score_options so;
  so.temperature = temperature;
  at::NoGradGuard no_grad;
  auto s = model::score_batch(m, items, so);
  REQUIRE_MESSAGE(s.ok(), (s.ok() ? "" : s.message()));
  double worst = 0;
  for (std::size_t i = 0; i < cands.size(); ++i)
    for (std::size_t t = 0; t < cands[i].logprobs.size(); ++t)
      worst = std::max(worst, std::abs(s->logprobs[static_cast<std::int64_t>(i)][static_cast<std::int64_t>(t)]
                                           .item<double>() -
                                       cands[i].logprobs[t]));
  return worst;
}

std::vector<std::uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

TEST_CASE("engine sampler: a group of consistent candidates, deterministic per sample id") {
  auto s = sampler();
  const auto req = request("Write a CUDA relu kernel.");
  const auto a = run(*s, *req->get(), 11);
  REQUIRE(a.size() == 4);

  auto tok = model::tokenizer::load(fx("tokenizer"));
  REQUIRE(tok.ok());
  // The prompt is wrapped in the fixture's ChatML format: it starts with <|im_start|> (id 1).
  const auto want_prompt = tok->encode("<|im_start|>user\nWrite a CUDA relu kernel.<|im_end|>\n<|im_start|>assistant\n",
                                       /*add_special_tokens=*/false);
  for (const auto& c : a) {
    CHECK(std::vector<std::int64_t>(c.prompt_tokens.begin(), c.prompt_tokens.end()) == want_prompt);
    REQUIRE(c.task);
    CHECK(c.task->id == "l1/relu");
    CHECK(c.prompt_hash == fnv1a64("Write a CUDA relu kernel."));
    REQUIRE_FALSE(c.completion_tokens.empty());
    CHECK(c.completion_tokens.size() <= 12);
    CHECK(c.completion_tokens.size() == c.logprobs.size());
    for (float lp : c.logprobs) {
      CHECK(std::isfinite(lp));
      CHECK(lp <= 0.0f);
    }
    // The text leaves out a final eos (id 2) and special tokens.
    std::vector<std::int64_t> body(c.completion_tokens.begin(), c.completion_tokens.end());
    if (body.back() == 2) body.pop_back();
    CHECK(c.completion == tok->decode(body, /*skip_special_tokens=*/true));
    CHECK(c.source == candidate_source(c.completion));
    CHECK(c.code_hash == fnv1a64(c.source));
  }
  CHECK_FALSE(a[0].completion_tokens == a[1].completion_tokens);  // the group's samples differ

  CHECK(same(run(*s, *req->get(), 11), a));   // same sample id: the same candidates
  CHECK_FALSE(same(run(*s, *req->get(), 12), a));  // another one: others

  // A fresh sampler (a rerun) gives the same candidates too.
  auto again = sampler();
  CHECK(same(run(*again, *req->get(), 11), a));
}

TEST_CASE("engine sampler: a batch of requests gives each request its own candidates") {
  auto s = sampler();
  CHECK(s->max_batch() == 8);  // sampler_options' default batch_requests
  CHECK(s->max_turn_batch() == 8 * 3);  // a turn is one sequence: 8 groups of group_size 3
  const auto a = request("Write a CUDA relu kernel.");
  const auto b = request("Fuse add and relu.", 2, 0.8f, 12);
  const auto c = request("Write a kernel.", 4, 0.5f, 12);  // other settings: its own generate call
  const auto empty = request("", 4, 0.8f, 12);
  std::vector<actors::sampler_logic::request_item> items(4);
  items[0] = {a->get(), {}};
  items[1] = {b->get(), {}};
  items[2] = {empty->get(), {}};
  items[3] = {c->get(), {}};
  for (std::size_t i = 0; i < items.size(); ++i) items[i].info.sample_id = 40 + i;
  auto out = s->generate_batch(items);
  REQUIRE(out.size() == 4);
  REQUIRE(out[0].ok());
  REQUIRE(out[1].ok());
  REQUIRE(out[3].ok());
  REQUIRE_FALSE(out[2].ok());
  CHECK(out[2].message().find("request 42") != std::string::npos);
  CHECK(out[2].message().find("no prompt") != std::string::npos);
  // Alone, each request gives the same candidates (its seed is its own, whatever shares the batch).
  CHECK(same(*out[0], run(*s, *a->get(), 40)));
  CHECK(same(*out[1], run(*s, *b->get(), 41)));
  CHECK(same(*out[3], run(*s, *c->get(), 43)));
  CHECK(out[1]->size() == 2);
}

TEST_CASE("engine policy: sample_groups gives each context the group sample_group gives it alone") {
  auto policy = load_engine_policy(options());
  REQUIRE_MESSAGE(policy.ok(), (policy.ok() ? "" : policy.message()));
  auto& p = **policy;
  const std::vector<std::vector<std::int32_t>> contexts = {p.prompt_ids("relu"), p.prompt_ids("a longer prompt: softmax")};
  const std::vector<std::uint64_t> seeds = {11, 12};
  auto groups = p.sample_groups(contexts, 3, seeds, 0.9, 1.0, 10);
  REQUIRE_MESSAGE(groups.ok(), (groups.ok() ? "" : groups.message()));
  REQUIRE(groups->size() == 2);
  for (std::size_t k = 0; k < contexts.size(); ++k) {
    auto alone = p.sample_group(contexts[k], 3, seeds[k], 0.9, 1.0, 10);
    REQUIRE(alone.ok());
    REQUIRE((*groups)[k].size() == 3);
    for (std::size_t i = 0; i < 3; ++i) {
      CHECK((*groups)[k][i].tokens == (*alone)[i].tokens);
      CHECK((*groups)[k][i].text == (*alone)[i].text);
    }
  }
  CHECK_FALSE((*groups)[0][0].tokens == (*groups)[1][0].tokens);  // each context its own seed
  CHECK_FALSE(p.sample_groups(contexts, 3, {1}, 0.9, 1.0, 10).ok());  // one seed per context
}

TEST_CASE("engine sampler: request settings out of range fall back to the options; max_new_tokens is capped") {
  auto s = sampler();
  const auto req = request("Write a kernel.", /*group=*/0, /*temperature=*/0.0f, /*max_new=*/100000);
  const auto c = run(*s, *req->get(), 3);
  CHECK(c.size() == 3);  // options().sampler.group_size
  for (const auto& x : c) CHECK(x.completion_tokens.size() <= 16);  // options().sampler.max_new_tokens
  // Temperature 0 in the request is not greedy decoding (it would make the group identical).
  CHECK_FALSE(c[0].completion_tokens == c[1].completion_tokens);
}

TEST_CASE("engine sampler: the trainer's scoring pass gives the sampler's log-probs") {
  auto s = sampler();
  const auto cands = run(*s, *request("Fuse add and relu.", 4, 0.8f, 16)->get(), 21);
  model::CausalLM m = load_fixture();
  const double gap = score_gap(*m, cands, 0.8);
  MESSAGE("max |score_batch - sampler log-prob| = " << gap);
  CHECK(gap < 1e-4);
}

TEST_CASE("engine sampler: set_weights loads new weights, and a bad update keeps the old ones") {
  scratch_dir dir;
  auto s = sampler();
  const auto req = request("Write a CUDA softmax kernel.", 4, 0.8f, 12);
  const auto before = run(*s, *req->get(), 7);

  model::CausalLM m = load_fixture();
  perturb(*m, 1);
  const std::string file = dir.path("v1.safetensors");
  REQUIRE(model::save_weights(*m, file).ok());
  const auto size = fs::file_size(file);

  SUBCASE("file: the outputs change, and match the new model's scoring") {
    auto ok = s->set_weights(*weights(wire::WeightsTransport::file, file, size)->get());
    REQUIRE_MESSAGE(ok.ok(), (ok.ok() ? "" : ok.message()));
    const auto after = run(*s, *req->get(), 7);
    CHECK_FALSE(same(after, before));
    CHECK(score_gap(*m, after, 0.8) < 1e-4);
    CHECK(score_gap(*load_fixture(), after, 0.8) > 1e-3);  // the old weights would score them otherwise

    // inline_bytes of the original checkpoint brings the old outputs back.
    auto back = s->set_weights(
        *weights(wire::WeightsTransport::inline_bytes, "", 0, read_bytes(fx("qwen2/model.safetensors")))->get());
    REQUIRE_MESSAGE(back.ok(), (back.ok() ? "" : back.message()));
    CHECK(same(run(*s, *req->get(), 7), before));
  }
  SUBCASE("the size in the message must match the file") {
    auto e = s->set_weights(*weights(wire::WeightsTransport::file, file, size + 1)->get());
    REQUIRE_FALSE(e.ok());
    CHECK(contains(e.message(), file));
    CHECK(contains(e.message(), "bytes"));
    CHECK(same(run(*s, *req->get(), 7), before));
    auto inl = s->set_weights(*weights(wire::WeightsTransport::inline_bytes, "", 10, read_bytes(file))->get());
    REQUIRE_FALSE(inl.ok());
    CHECK(contains(inl.message(), "bytes"));
  }
  SUBCASE("a truncated file") {
    const std::string cut = dir.path("cut.safetensors");
    auto bytes = read_bytes(file);
    bytes.resize(bytes.size() / 2);
    std::ofstream(cut, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                               static_cast<std::streamsize>(bytes.size()));
    auto e = s->set_weights(*weights(wire::WeightsTransport::file, cut)->get());
    REQUIRE_FALSE(e.ok());
    CHECK(contains(e.message(), cut));
    CHECK(contains(e.message(), "version 1"));
    CHECK(same(run(*s, *req->get(), 7), before));
  }
  SUBCASE("a wrong shape in the last tensor: nothing before it was copied") {
    // Every tensor of the perturbed model, the last one with a wrong shape: a loader that copied
    // as it checked would have changed the outputs before finding it.
    std::vector<at::Tensor> keep;
    std::vector<model::tensor_bytes> entries;
    auto params = m->named_parameters(true);
    for (std::size_t i = 0; i < params.size(); ++i) {
      at::Tensor t = params[i].value().detach().contiguous();
      if (i + 1 == params.size()) t = t.flatten().narrow(0, 0, t.numel() - 1).contiguous();
      keep.push_back(t);
      entries.push_back({params[i].key(), model::st_dtype::f32, t.sizes().vec(), t.data_ptr(),
                         static_cast<std::size_t>(t.numel()) * 4});
    }
    const std::string bad = dir.path("bad.safetensors");
    REQUIRE(model::write_safetensors(bad, entries).ok());
    auto e = s->set_weights(*weights(wire::WeightsTransport::file, bad)->get());
    REQUIRE_FALSE(e.ok());
    CHECK(contains(e.message(), bad));
    CHECK(contains(e.message(), "tensor '" + params[params.size() - 1].key() + "' has shape"));
    CHECK(same(run(*s, *req->get(), 7), before));
  }
  SUBCASE("a missing file, a missing path, nccl") {
    auto missing = s->set_weights(*weights(wire::WeightsTransport::file, dir.path("nope.safetensors"))->get());
    REQUIRE_FALSE(missing.ok());
    CHECK(contains(missing.message(), "nope.safetensors"));
    CHECK_FALSE(s->set_weights(*weights(wire::WeightsTransport::file, "")->get()).ok());
    CHECK_FALSE(s->set_weights(*weights(wire::WeightsTransport::inline_bytes, "")->get()).ok());
    auto nccl = s->set_weights(*weights(wire::WeightsTransport::nccl, "")->get());
    REQUIRE_FALSE(nccl.ok());
    // Not a rank of the trainer's NCCL group (no trainer.publish plan made it one), or no CUDA.
    CHECK(contains(nccl.message(), "transport nccl, and this"));
    CHECK(same(run(*s, *req->get(), 7), before));
  }
}

TEST_CASE("engine sampler: the source is the last fenced block with kf_forward, else the whole completion") {
  SUBCASE("several fences: the last code block that defines kf_forward wins") {
    const std::string text = "Plan.\n```cpp\n// draft kf_forward\n```\nFinal:\n```cuda\n" + kernel +
                             "```\n```python\nkf_forward = 1\n```\n```c++\nint helper;\n```\n";
    CHECK(candidate_source(text) == kernel);
  }
  SUBCASE("bare and c++ fences") {
    CHECK(candidate_source("```\n" + kernel + "```") == kernel);
    CHECK(candidate_source("```c++\n" + kernel + "```\n") == kernel);
  }
  SUBCASE("no fence: the whole completion") {
    CHECK(candidate_source(kernel) == kernel);
    CHECK(candidate_source("") == "");
  }
  SUBCASE("an unterminated fence (cut off by max_new_tokens): the whole completion") {
    const std::string cut = "Here:\n```cuda\n" + kernel;
    CHECK(candidate_source(cut) == cut);
  }
  SUBCASE("fences without kf_forward: the whole completion") {
    const std::string text = "```cuda\n__global__ void k() {}\n```\n";
    CHECK(candidate_source(text) == text);
  }
}

TEST_CASE("engine sampler: seeds, options from the manifest, and load errors") {
  CHECK(group_seed(1, 2) == group_seed(1, 2));
  CHECK(group_seed(1, 2) != group_seed(1, 3));
  CHECK(group_seed(1, 2) != group_seed(2, 2));

  auto m = default_manifest();
  REQUIRE(m.ok());
  m->sampler.model = fx("qwen2");
  m->run.seed = 42;
  if (visible_gpu_count() == 0) {  // the default's sampler.require_gpu refuses the CPU
    auto refused = engine_sampler_options_from(*m, "head");
    REQUIRE_FALSE(refused.ok());
    CHECK(contains(refused.message(), "sampler.require_gpu"));
  }
  m->sampler.require_gpu = false;
  auto o = engine_sampler_options_from(*m, "head");
  REQUIRE_MESSAGE(o.ok(), (o.ok() ? "" : o.message()));
  CHECK(o->sampler.model == fx("qwen2"));
  CHECK(o->seed == 42);
  CHECK(o->device == -1);  // the "auto" rollout group is empty without a GPU: CPU

  engine_sampler_options e = options();
  e.sampler.model = "";
  auto empty = make_engine_sampler(e);
  REQUIRE_FALSE(empty.ok());
  CHECK(contains(empty.message(), "model is empty"));

  e.sampler.model = "/nonexistent/model";
  auto missing = make_engine_sampler(e);
  REQUIRE_FALSE(missing.ok());
  CHECK(contains(missing.message(), "/nonexistent/model"));

  e = options();
  e.tokenizer_dir = "";  // the fixture model directory has no tokenizer.json
  auto no_tok = make_engine_sampler(e);
  REQUIRE_FALSE(no_tok.ok());
  CHECK(contains(no_tok.message(), fx("qwen2")));

  e = options();
  e.device = 64;
  auto no_gpu = make_engine_sampler(e);
  REQUIRE_FALSE(no_gpu.ok());
  CHECK(contains(no_gpu.message(), "CUDA device 64"));
}

TEST_CASE("kforge sample: G kernels per task in eval's layout, and bad options are errors") {
  scratch_dir dir;
  // A checkpoint directory with its tokenizer, as users have them.
  fs::create_directories(dir.path("model"));
  for (const auto* from : {"qwen2", "tokenizer"})
    for (const auto& f : fs::directory_iterator(fx(from)))
      fs::copy_file(f.path(), fs::path(dir.path("model")) / f.path().filename());
  {
    std::ofstream t(dir.path("tasks.jsonl"));
    t << R"({"id": "t/relu", "category": "elementwise", "description": "ReLU.", "inputs": [{"name": "x", "shape": [8], "dtype": "float32", "init": {"dist": "normal", "mean": 0.0, "std": 1.0}}], )"
         R"("outputs": [{"name": "y", "shape": [8], "dtype": "float32"}], "reference": "def forward(x):\n    return torch.relu(x)\n"})"
      << "\n";
  }
  sample_options o;
  o.model = dir.path("model");
  o.tasks = dir.path("tasks.jsonl");
  o.out = dir.path("out");
  o.samples = 3;
  o.max_new_tokens = 6;
  o.prompt_template = KFORGE_PIPELINE_TEST_DATA "/short_prompt_template.txt";  // a short prompt: fast
  std::ostringstream out, err;
  REQUIRE_MESSAGE(sample_command(o, out, err) == 0, err.str());
  for (int i = 0; i < 3; ++i) CHECK(fs::exists(dir.path("out/t/relu/s" + std::to_string(i) + ".cu")));
  std::ifstream samples(dir.path("out/samples.jsonl"));
  int lines = 0;
  for (std::string line; std::getline(samples, line);) ++lines;
  CHECK(lines == 3);
  CHECK(fs::exists(dir.path("out/tasks.jsonl")));
  CHECK(contains(out.str(), "3 samples of 1 tasks"));

  // The same output directory again: refused, nothing overwritten.
  std::ostringstream err2;
  CHECK(sample_command(o, out, err2) == 2);
  CHECK(contains(err2.str(), "already holds samples.jsonl"));
  sample_options bad = o;
  bad.out = dir.path("out2");
  bad.categories = {"nope"};
  std::ostringstream err3;
  CHECK(sample_command(bad, out, err3) == 2);
  CHECK(contains(err3.str(), "unknown category 'nope'"));
  bad.categories = {};
  bad.model = dir.path("missing");
  std::ostringstream err4;
  CHECK(sample_command(bad, out, err4) == 2);
  CHECK(contains(err4.str(), "not a directory"));
  // Counts past the sampler's bounds are refused before the model loads (it would abort on them).
  bad.model = o.model;
  bad.samples = 100000;
  std::ostringstream err5;
  CHECK(sample_command(bad, out, err5) == 2);
  CHECK(contains(err5.str(), "--samples must be in [1, 1024], got 100000"));
  bad.samples = 3;
  bad.max_new_tokens = 1 << 30;
  std::ostringstream err6;
  CHECK(sample_command(bad, out, err6) == 2);
  CHECK(contains(err6.str(), "--max-new-tokens must be in [1, 131072], got 1073741824"));
  // A full disk (RLIMIT_FSIZE; the task's line is longer than 200 bytes) stops the command at the
  // first refused write, naming the file and the reason.
  bad = o;
  bad.out = dir.path("full");
  std::ostringstream err7;
  {
    kforge::testing::file_size_limit limit(200);
    CHECK(sample_command(bad, out, err7) == 2);
  }
  CHECK(err7.str() == "kforge sample: " + dir.path("full/tasks.jsonl") + ": cannot write: File too large\n");
}

TEST_CASE("kforge sample: a task id that would leave --out is refused, nothing written") {
  scratch_dir dir;
  {
    std::ofstream t(dir.path("tasks.jsonl"));
    t << R"({"id": "../../escape", "category": "elementwise", "description": "ReLU.", "inputs": [{"name": "x", "shape": [8], "dtype": "float32", "init": {"dist": "normal", "mean": 0.0, "std": 1.0}}], )"
         R"("outputs": [{"name": "y", "shape": [8], "dtype": "float32"}], "reference": "def forward(x):\n    return torch.relu(x)\n"})"
      << "\n";
  }
  fs::create_directories(dir.path("model"));
  sample_options o;
  o.model = dir.path("model");
  o.tasks = dir.path("tasks.jsonl");
  o.out = dir.path("a/b/out");
  std::ostringstream out, err;
  CHECK(sample_command(o, out, err) == 2);
  CHECK(contains(err.str(), "id: '../../escape' has a name starting with '.'"));
  CHECK_FALSE(fs::exists(dir.path("escape")));
  CHECK_FALSE(fs::exists(dir.path("a/b/out")));
}

namespace {

// A policy over ids: a message of n characters is wrapped as {1, n ids of 7, 2, 3} (its closing and
// the assistant's opening last); a context longer than 40 ids cannot be continued.
class fake_policy final : public engine_policy {
 public:
  std::vector<std::int32_t> prompt_ids(std::string_view p) const override { return std::vector<std::int32_t>(p.size(), 5); }
  std::vector<std::int32_t> follow_up_ids(std::string_view m, const std::vector<std::int32_t>&) const override {
    std::vector<std::int32_t> ids{1};
    ids.insert(ids.end(), m.size(), 7);
    ids.push_back(2);
    ids.push_back(3);
    return ids;
  }
  std::string decode(const std::vector<std::int32_t>&) const override { return ""; }
  result<std::vector<continuation>> continue_each(const std::vector<std::vector<std::int32_t>>& contexts,
                                                  const std::vector<std::uint64_t>&, double, double, int) override {
    ++calls;
    if (contexts.size() > max_batch) return error{"out of memory"};
    std::vector<continuation> out;
    for (const auto& c : contexts) {
      if (c.size() > 400) return error{"context of " + std::to_string(c.size()) + " tokens is too long"};
      out.push_back({{9, 9}, {-0.5f, -0.5f}, "```cuda\nk\n```"});
    }
    return out;
  }
  std::size_t calls = 0;
  std::size_t max_batch = 1000;  ///< a larger batch fails, as one too large for the GPU's memory
};

// A scored first turn of an episode of up to 3 turns with a context of `context` ids.
std::unique_ptr<wire::ScoredT> observed_turn(std::size_t context, const std::string& output) {
  auto s = std::make_unique<wire::ScoredT>();
  s->verdict = std::make_unique<wire::VerdictT>();
  s->verdict->status = wire::VerdictStatus::runtime_error;
  s->verdict->reason = "CUDA error";
  s->verdict->output = output;
  auto c = std::make_unique<wire::CandidateT>();
  c->prompt_tokens.assign(context, 5);
  c->completion_tokens = {8};
  c->logprobs = {-1.0f};
  c->source = "x";
  c->episode = agent::first_turn(context, 3, 0);
  s->verdict->candidate = std::move(c);
  return s;
}

}  // namespace

TEST_CASE("episode turns: a long observation is cut inside the message; a turn that cannot be generated ends its episode") {
  agent_options a;
  a.max_turns = 3;
  a.observation_max_tokens = 64;
  auto turns = episode_turn_sampler::make(a, sampler_options{}, 1);
  REQUIRE(turns);
  fake_policy policy;
  flatbuffers::FlatBufferBuilder fb1, fb2;
  fb1.Finish(wire::Scored::Pack(fb1, observed_turn(10, std::string(5000, 'x')).get()));
  fb2.Finish(wire::Scored::Pack(fb2, observed_turn(500, "short").get()));
  std::vector<actors::sampler_logic::turn_item> items{
      {flatbuffers::GetRoot<wire::Scored>(fb1.GetBufferPointer()), {}},
      {flatbuffers::GetRoot<wire::Scored>(fb2.GetBufferPointer()), {}}};
  auto out = turns->next_turns(policy, items);
  REQUIRE(out.size() == 2);
  REQUIRE(out[0]);
  // The observation (after the context and the first completion) fits and keeps its closing ids.
  const auto& ctx = out[0]->prompt_tokens;
  REQUIRE(ctx.size() > 11);
  CHECK(ctx.size() - 11 <= 64);
  CHECK(ctx[11] == 1);
  CHECK(ctx[ctx.size() - 2] == 2);
  CHECK(ctx.back() == 3);
  CHECK(out[0]->episode->turn == 2);
  CHECK(out[0]->completion_tokens == std::vector<std::int32_t>{9, 9});
  // The second context is too long for the policy: its episode ends with an empty last turn,
  // and the first still got its turn from the batch that failed.
  REQUIRE(out[1]);
  CHECK(out[1]->episode->turn == 3);
  CHECK(out[1]->completion_tokens.empty());
  CHECK(out[1]->source.empty());
}

TEST_CASE("episode turns: a batch that fails is generated in halves, not one context at a time") {
  agent_options a;
  a.max_turns = 3;
  auto turns = episode_turn_sampler::make(a, sampler_options{}, 1);
  REQUIRE(turns);
  // 16 observed turns; the one at `bad` has a context the policy cannot take.
  auto run = [&](fake_policy& policy, std::size_t bad) {
    std::vector<flatbuffers::FlatBufferBuilder> fbs(16);
    std::vector<actors::sampler_logic::turn_item> items;
    for (std::size_t i = 0; i < fbs.size(); ++i) {
      fbs[i].Finish(wire::Scored::Pack(fbs[i], observed_turn(i == bad ? 500 : 10, "short").get()));
      items.push_back({flatbuffers::GetRoot<wire::Scored>(fbs[i].GetBufferPointer()), {}});
    }
    return turns->next_turns(policy, items);
  };
  fake_policy small;  // takes at most 4 contexts at once
  small.max_batch = 4;
  auto out = run(small, 99);
  REQUIRE(out.size() == 16);
  for (const auto& t : out) {
    REQUIRE(t);
    CHECK(t->completion_tokens == std::vector<std::int32_t>{9, 9});
  }
  CHECK(small.calls == 7);  // 16, then 8 + 8, then 4 x 4
  fake_policy one_bad;
  out = run(one_bad, 5);
  REQUIRE(out.size() == 16);
  for (std::size_t i = 0; i < out.size(); ++i) {
    REQUIRE(out[i]);
    CHECK(out[i]->completion_tokens.empty() == (i == 5));
  }
  CHECK(one_bad.calls == 9);  // 16, 8 + 8, 4 + 4, 2 + 2, 1 + 1: one failed half split at each level
}

namespace {

// The same tokens, and log-probs up to the rounding of batched arithmetic.
void check_same_sample(const wire::CandidateT& x, const wire::CandidateT& y) {
  CHECK(x.completion_tokens == y.completion_tokens);
  REQUIRE(x.logprobs.size() == y.logprobs.size());
  for (std::size_t t = 0; t < x.logprobs.size(); ++t) CHECK(x.logprobs[t] == doctest::Approx(y.logprobs[t]).epsilon(1e-4));
}

}  // namespace

TEST_CASE("engine sampler: new groups and episodes' next turns generated together are the candidates of separate calls") {
  auto o = options();
  o.agent.max_turns = 3;
  auto joint = make_engine_sampler(o);
  REQUIRE_MESSAGE(joint.ok(), (joint.ok() ? "" : joint.message()));
  o.sampler.batch_turns_with_groups = false;
  auto apart = make_engine_sampler(o);
  REQUIRE(apart.ok());
  // Two requests at the turns' settings (the sampler's 0.8 sent as a float) join the turns; one at
  // another temperature and one without a prompt do not.
  const auto a = request("Write a CUDA relu kernel.", 3, 0.8f, 16);
  const auto b = request("Fuse add and relu.", 2, 0.8f, 16);
  const auto c = request("Write a kernel.", 3, 0.5f, 16);
  const auto empty = request("", 3, 0.8f, 16);
  std::vector<actors::sampler_logic::request_item> requests{{a->get(), {}}, {b->get(), {}}, {c->get(), {}},
                                                            {empty->get(), {}}};
  for (std::size_t i = 0; i < requests.size(); ++i) requests[i].info.sample_id = 40 + i;
  flatbuffers::FlatBufferBuilder fb1, fb2;
  fb1.Finish(wire::Scored::Pack(fb1, observed_turn(10, "wrong answer at index 3").get()));
  fb2.Finish(wire::Scored::Pack(fb2, observed_turn(30, "short").get()));
  std::vector<actors::sampler_logic::turn_item> turns{{flatbuffers::GetRoot<wire::Scored>(fb1.GetBufferPointer()), {}},
                                                      {flatbuffers::GetRoot<wire::Scored>(fb2.GetBufferPointer()), {}}};
  turns[0].info.sample_id = 70;
  turns[1].info.sample_id = 71;
  CHECK((*joint)->generates_together());
  CHECK_FALSE((*apart)->generates_together());
  CHECK_FALSE(sampler()->generates_together());  // single-shot: no turns to join
  auto together = (*joint)->generate_together(requests, turns);
  auto separate = (*apart)->generate_together(requests, turns);
  using counters = std::vector<std::pair<std::string, std::uint64_t>>;
  CHECK((*joint)->take_counters() == counters{{"joint_calls", 1}});
  CHECK((*joint)->take_counters().empty());  // deltas
  CHECK((*apart)->take_counters().empty());
  REQUIRE(together.groups.size() == 4);
  REQUIRE(separate.groups.size() == 4);
  for (std::size_t i = 0; i < 3; ++i) {
    CAPTURE(i);
    REQUIRE(together.groups[i].ok());
    REQUIRE(separate.groups[i].ok());
    REQUIRE(together.groups[i]->size() == separate.groups[i]->size());
    for (std::size_t k = 0; k < together.groups[i]->size(); ++k) {
      check_same_sample((*together.groups[i])[k], (*separate.groups[i])[k]);
      CHECK((*together.groups[i])[k].episode->turn == 1);
    }
  }
  CHECK(together.groups[1]->size() == 2);
  REQUIRE_FALSE(together.groups[3].ok());
  CHECK(contains(together.groups[3].message(), "no prompt"));
  REQUIRE(together.turns.size() == 2);
  REQUIRE(separate.turns.size() == 2);
  for (std::size_t i = 0; i < 2; ++i) {
    CAPTURE(i);
    REQUIRE(together.turns[i].ok());
    REQUIRE(separate.turns[i].ok());
    const auto& x = *together.turns[i];
    CHECK(x.episode->turn == 2);
    CHECK_FALSE(x.completion_tokens.empty());
    CHECK(x.prompt_tokens == separate.turns[i]->prompt_tokens);
    check_same_sample(x, *separate.turns[i]);
  }
}
