// LoRA adapters in `kforge serve` (a child process on models/kforge-tiny, on the CPU) and in the
// engine policy it serves through: adapters made here (attach_lora with B not zero, save_lora), then
// loaded at start (--adapter) and at run time (/load_lora_adapter, /v1/load_lora_adapter). At
// temperature 0 a completion through an adapter is the in-process engine's with that adapter, the
// base's name gives the base's tokens while the adapter stays loaded (also in one burst with
// adapter requests), loads and unloads move the served version, and bad paths and unknown names
// get clear 400 and 404 answers.
#include "stages/engine_sampler.hpp"

#include <future>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "model/lora.hpp"
#include "model/transformer.hpp"
#include "model/weights.hpp"
#include "tests/model/test_files.hpp"
#include "tests/doctest_torch.hpp"  // after every header that may include LibTorch
#include "tests/pipeline/serve_process.hpp"  // doctest, after LibTorch

using namespace kforge;
using namespace kforge::pipeline;
using json = nlohmann::json;
using kforge::model::testing::scratch_dir;

namespace {

const std::string tiny = std::string(KFORGE_SOURCE_DIR) + "/models/kforge-tiny";

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// A PEFT adapter for kforge-tiny in `dir`: B drawn (not zero), so it changes what the model says.
void make_adapter(const std::string& dir, std::int64_t rank, std::vector<std::string> targets, std::uint64_t seed,
                  double size) {
  auto m = model::load_causal_lm(tiny, {});
  REQUIRE_MESSAGE(m.ok(), (m.ok() ? "" : m.message()));
  model::lora_options o;
  o.rank = rank;
  o.alpha = 2.0 * static_cast<double>(rank);
  o.targets = std::move(targets);
  o.seed = seed;
  REQUIRE(model::attach_lora(**m, o).ok());
  model::draw_lora_b(**m, size, seed);
  REQUIRE(model::save_lora(**m, dir, "kforge-tiny").ok());
}

// `kforge serve` on kforge-tiny as a child process, with requests to it.
struct served : kforge::test::serve_process {
  explicit served(std::vector<std::string> extra) : serve_process(args(std::move(extra))) {}

  static std::vector<std::string> args(std::vector<std::string> extra) {
    std::vector<std::string> a = {"--model", tiny, "--max-tokens", "32", "--batch-wait-ms", "100"};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }

  std::pair<int, json> post(const std::string& path, const json& body) const {
    httplib::Client c(url);
    c.set_read_timeout(120, 0);
    auto r = c.Post(path, body.dump(), "application/json");
    REQUIRE(r);
    return {r->status, json::parse(r->body, nullptr, false)};
  }
  json models() const {
    httplib::Client c(url);
    auto r = c.Get("/v1/models");
    REQUIRE(r);
    return json::parse(r->body)["data"];
  }
  // The greedy completion's token ids of `prompt`, selecting the model by `select` (merged into
  // the body: {"model": ...}, {"lora_path": ...} or nothing).
  std::vector<std::int32_t> complete(const std::vector<std::int32_t>& prompt, const json& select) const {
    json body = {{"prompt", prompt}, {"max_tokens", 12}, {"temperature", 0}, {"seed", 1}, {"return_token_ids", true}};
    body.update(select);
    auto [status, j] = post("/v1/completions", body);
    REQUIRE_MESSAGE(status == 200, j.dump());
    return j["choices"][0]["token_ids"].get<std::vector<std::int32_t>>();
  }
  // The error answer of a completion that must fail with `status`.
  json refused(const std::vector<std::int32_t>& prompt, const json& select, int status) const {
    json body = {{"prompt", prompt}, {"max_tokens", 4}, {"temperature", 0}};
    body.update(select);
    auto [code, j] = post("/v1/completions", body);
    CHECK(code == status);
    REQUIRE(j.contains("error"));
    return j["error"];
  }
};

engine_policy::continuation greedy_continuation(engine_policy& p, const std::vector<std::int32_t>& prompt) {
  auto g = p.sample_group(prompt, 1, 1, 0.0, 1.0, 12);
  REQUIRE_MESSAGE(g.ok(), (g.ok() ? "" : g.message()));
  return g->front();
}

std::vector<std::int32_t> greedy(engine_policy& p, const std::vector<std::int32_t>& prompt) {
  return greedy_continuation(p, prompt).tokens;
}

std::shared_ptr<engine_policy> tiny_policy() {
  engine_sampler_options o;
  o.sampler.model = tiny;
  auto p = load_engine_policy(o);
  REQUIRE_MESSAGE(p.ok(), (p.ok() ? "" : p.message()));
  return *p;
}

}  // namespace

TEST_CASE("engine policy: a LoRA adapter loads unmerged, is replaced by another, switches off, unloads") {
  scratch_dir dir;
  make_adapter(dir.path("a"), 4, {"q_proj", "v_proj", "o_proj", "down_proj"}, 11, 0.2);
  make_adapter(dir.path("b"), 2, {"k_proj", "gate_proj", "up_proj"}, 12, 1.0);
  auto p = tiny_policy();
  const auto prompt = p->prompt_ids("Write a CUDA kernel for relu.");
  const auto base = greedy(*p, prompt);
  CHECK_FALSE(p->adapter_on());

  REQUIRE(p->load_adapter(dir.path("a")).ok());
  CHECK(p->adapter_on());
  const auto a = greedy(*p, prompt);
  CHECK(a != base);
  {
    const base_model_only off(*p);
    CHECK_FALSE(p->adapter_on());
    CHECK(greedy(*p, prompt) == base);
  }
  CHECK(p->adapter_on());
  CHECK(greedy(*p, prompt) == a);

  // Another rank and other projections: the old adapter is taken off, the new one put on.
  REQUIRE(p->load_adapter(dir.path("b")).ok());
  const auto b = greedy(*p, prompt);
  CHECK(b != a);
  CHECK(b != base);
  // A bad directory leaves the adapter that was serving.
  const auto bad = p->load_adapter(dir.path("missing"));
  REQUIRE_FALSE(bad.ok());
  CHECK(contains(bad.message(), dir.path("missing")));
  CHECK(greedy(*p, prompt) == b);
  // Back to the first (its rank again): the same tokens as when it was loaded first.
  REQUIRE(p->load_adapter(dir.path("a")).ok());
  CHECK(greedy(*p, prompt) == a);

  REQUIRE(p->unload_adapter().ok());
  CHECK_FALSE(p->adapter_on());
  CHECK(greedy(*p, prompt) == base);
}

TEST_CASE("kforge serve: LoRA adapters at start and at run time, selected per request, as SGLang and vLLM load them") {
  scratch_dir dir;
  make_adapter(dir.path("a"), 4, {"q_proj", "v_proj", "o_proj", "down_proj"}, 11, 0.2);
  make_adapter(dir.path("b"), 2, {"k_proj", "gate_proj", "up_proj"}, 12, 1.0);
  // What the in-process engine says with each.
  auto p = tiny_policy();
  const auto prompt = p->prompt_ids("Write a CUDA kernel for relu.");
  const auto base_text = greedy_continuation(*p, prompt).text;
  const auto base = greedy(*p, prompt);
  REQUIRE(p->load_adapter(dir.path("a")).ok());
  const auto a_text = greedy_continuation(*p, prompt).text;
  const auto with_a = greedy(*p, prompt);
  REQUIRE(p->load_adapter(dir.path("b")).ok());
  const auto with_b = greedy(*p, prompt);
  REQUIRE(with_a != base);
  REQUIRE(with_b != base);

  served s({"--adapter", dir.path("a"), "--adapter-name", "ada"});
  auto models = s.models();
  REQUIRE(models.size() == 2);
  CHECK(models[0]["id"] == "kforge-tiny");
  CHECK(models[1]["id"] == "ada");
  CHECK(models[1]["parent"] == "kforge-tiny");
  CHECK(models[1]["root"] == dir.path("a"));
  CHECK(models[1]["version"] == 0);

  // vLLM selects by "model", SGLang by "lora_path"; naming nothing gets what is served.
  CHECK(s.complete(prompt, {{"model", "ada"}}) == with_a);
  CHECK(s.complete(prompt, {{"lora_path", "ada"}}) == with_a);
  CHECK(s.complete(prompt, {{"model", "kforge-tiny"}, {"lora_path", "ada"}}) == with_a);
  CHECK(s.complete(prompt, json::object()) == with_a);
  // The base's name: the base model, the adapter still loaded.
  CHECK(s.complete(prompt, {{"model", "kforge-tiny"}}) == base);
  CHECK(s.complete(prompt, {{"model", "ada"}}) == with_a);
  // The chat endpoint selects the same way and names what answered.
  const json chat_body = {{"messages", json::array({{{"role", "user"}, {"content", "Write a CUDA kernel for relu."}}})},
                          {"max_tokens", 12}, {"temperature", 0}};
  auto chat_on = [&](const json& select) {
    json body = chat_body;
    body.update(select);
    auto [status, j] = s.post("/v1/chat/completions", body);
    REQUIRE_MESSAGE(status == 200, j.dump());
    return j;
  };
  const json chat_a = chat_on({{"model", "ada"}}), chat_base = chat_on({{"model", "kforge-tiny"}});
  CHECK(chat_a["model"] == "ada");
  CHECK(chat_base["model"] == "kforge-tiny");
  CHECK(chat_a["choices"][0]["message"]["content"] == a_text);
  CHECK(chat_base["choices"][0]["message"]["content"] == base_text);
  // Base and adapter requests arriving together are not generated in one batch.
  {
    auto on_base = std::async(std::launch::async, [&] { return s.complete(prompt, {{"model", "kforge-tiny"}}); });
    auto on_a = std::async(std::launch::async, [&] { return s.complete(prompt, {{"model", "ada"}}); });
    CHECK(on_base.get() == base);
    CHECK(on_a.get() == with_a);
  }
  // Names that are not served: 404.
  auto e = s.refused(prompt, {{"model", "nope"}}, 404);
  CHECK(e["code"] == "model_not_found");
  CHECK(contains(e["message"].get<std::string>(), "`nope` does not exist"));
  e = s.refused(prompt, {{"lora_path", "nope"}}, 404);
  CHECK(e["code"] == "model_not_found");
  CHECK(contains(e["message"].get<std::string>(), "No LoRA adapter `nope` is loaded"));

  // Unloading: the base again, the version up; the adapter's name is then unknown.
  auto [us, unloaded] = s.post("/unload_lora_adapter", {{"lora_name", "ada"}});
  CHECK(us == 200);
  CHECK(unloaded["success"] == true);
  CHECK(unloaded["version"] == 1);
  CHECK(s.models().size() == 1);
  CHECK(s.models()[0]["version"] == 1);
  CHECK(s.complete(prompt, json::object()) == base);
  CHECK(s.refused(prompt, {{"model", "ada"}}, 404)["code"] == "model_not_found");
  auto [again, gone] = s.post("/v1/unload_lora_adapter", {{"lora_name", "ada"}});
  CHECK(again == 404);
  CHECK(gone["error"]["code"] == "model_not_found");

  // Loading at run time through vLLM's path, then SGLang's with a weight version.
  auto [ls, loaded] = s.post("/v1/load_lora_adapter", {{"lora_name", "adb"}, {"lora_path", dir.path("b")}});
  CHECK(ls == 200);
  CHECK(loaded["success"] == true);
  CHECK(loaded["version"] == 2);
  models = s.models();
  REQUIRE(models.size() == 2);
  CHECK(models[1]["id"] == "adb");
  CHECK(models[1]["version"] == 2);
  CHECK(s.complete(prompt, {{"model", "adb"}}) == with_b);
  CHECK(s.complete(prompt, {{"model", "kforge-tiny"}}) == base);
  auto [ls2, replaced] =
      s.post("/load_lora_adapter", {{"lora_name", "ada"}, {"lora_path", dir.path("a")}, {"weight_version", "7"}});
  CHECK(ls2 == 200);
  CHECK(replaced["version"] == 7);
  CHECK(contains(replaced["message"].get<std::string>(), "in place of adb"));
  CHECK(s.complete(prompt, {{"lora_path", "ada"}}) == with_a);
  CHECK(s.refused(prompt, {{"model", "adb"}}, 404)["code"] == "model_not_found");

  // A bad directory: 400 naming it, the adapter that was serving still serves, the version stays.
  auto [bs, bad] = s.post("/load_lora_adapter", {{"lora_name", "adc"}, {"lora_path", dir.path("missing")}});
  CHECK(bs == 400);
  CHECK(bad["success"] == false);
  CHECK(contains(bad["error"]["message"].get<std::string>(), dir.path("missing")));
  CHECK(contains(bad["message"].get<std::string>(), "adapter_config.json"));
  CHECK(bad["error"]["code"] == "adapter_not_loaded");
  CHECK(s.models()[1]["id"] == "ada");
  CHECK(s.models()[0]["version"] == 7);
  CHECK(s.complete(prompt, {{"model", "ada"}}) == with_a);
  auto [ms, missing] = s.post("/load_lora_adapter", {{"lora_name", "adc"}});
  CHECK(ms == 400);
  CHECK(contains(missing["error"]["message"].get<std::string>(), "\"lora_path\" is required"));
  auto [ns, named_base] = s.post("/load_lora_adapter", {{"lora_name", "kforge-tiny"}, {"lora_path", dir.path("a")}});
  CHECK(ns == 400);
  CHECK(contains(named_base["error"]["message"].get<std::string>(), "base model's name"));
}
