// The sampler's openai backend against `kforge serve` (the fixture model on the CPU, started as a
// child process) and against a fake server in this process: the same candidates as the in-process
// engine, weight updates through the endpoint, a replica killed mid-run, and clear errors for
// malformed, cut and error responses. Torch-free: the engine is reached through its header only.
#include "stages/openai_sampler.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <cstdlib>
#include <fstream>
#include <future>
#include <iterator>
#include <thread>

#include <doctest/doctest.h>
#include <flatbuffers/flatbuffers.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "tests/pipeline/serve_process.hpp"
#include "tests/pipeline/tiny_model_manifest.hpp"
#include "common/hash.hpp"
#include "stages/openai_client.hpp"

using namespace kforge;
using namespace kforge::pipeline;
namespace wire = ::kforge::wire;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

std::string fx(const std::string& rel) { return std::string(KFORGE_MODEL_FIXTURES) + "/" + rel; }
bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// `kforge serve` on the fixture model (or `model`) as a child process.
struct served : kforge::test::serve_process {
  explicit served(const std::string& model = fx("qwen2"), const std::string& tok = fx("tokenizer"),
                  std::vector<std::string> extra = {})
      : serve_process(args(model, tok, std::move(extra))) {}

 private:
  static std::vector<std::string> args(const std::string& model, const std::string& tok, std::vector<std::string> extra) {
    std::vector<std::string> a = {"--model", model, "--max-tokens", "64"};
    if (!tok.empty()) a.insert(a.end(), {"--tokenizer", tok});
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }
};

struct run_result {
  int rc = 0;
  std::string out;
};

// `kforge run` in `dir` of the tiny manifest with `trainer_tables`, its sampler on the openai
// backend against `server_url`: its exit status and output.
run_result run_against(const fs::path& dir, const std::string& server_url,
                                        const std::string& trainer_tables) {
  kforge::test::write_tiny_manifest(dir, 2, trainer_tables, "",
                                    "backend = \"openai\"\nserver_urls = [\"" + server_url + "/v1\"]\n");
  const std::string cmd = "cd " + dir.string() + " && " + KFORGE_BINARY + " run --manifest tiny.toml > run.log 2>&1";
  const int rc = std::system(cmd.c_str());
  std::ifstream log(dir / "run.log");
  return {rc, std::string((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>())};
}

// The summary.json of the tiny manifest's run in `dir` (discarded, not an object, if unreadable).
json run_summary(const fs::path& dir) {
  return json::parse(std::ifstream(dir / "runs" / "tiny" / "summary.json"), nullptr, false);
}

template <class T>
struct packed {
  flatbuffers::FlatBufferBuilder fbb;
  const T* get() const { return flatbuffers::GetRoot<T>(fbb.GetBufferPointer()); }
};

std::unique_ptr<packed<wire::GenerateRequest>> request(const std::string& prompt, std::uint32_t group = 3) {
  wire::GenerateRequestT r;
  r.task = std::make_unique<wire::TaskT>();
  r.task->id = "l1/relu";
  r.prompt = prompt;
  r.prompt_hash = fnv1a64(prompt);
  r.group_size = group;
  r.temperature = 0.8f;
  r.top_p = 1.0f;
  r.max_new_tokens = 12;
  auto p = std::make_unique<packed<wire::GenerateRequest>>();
  p->fbb.Finish(wire::GenerateRequest::Pack(p->fbb, &r));
  return p;
}

std::unique_ptr<packed<wire::PolicyWeights>> file_weights(const std::string& path, std::uint64_t version) {
  wire::PolicyWeightsT w;
  w.version = version;
  w.transport = wire::WeightsTransport::file;
  w.path = path;
  auto p = std::make_unique<packed<wire::PolicyWeights>>();
  p->fbb.Finish(wire::PolicyWeights::Pack(p->fbb, &w));
  return p;
}

engine_sampler_options engine_options() {
  engine_sampler_options o;
  o.sampler.model = fx("qwen2");
  o.tokenizer_dir = fx("tokenizer");
  o.sampler.max_new_tokens = 16;
  o.sampler.group_size = 3;
  o.seed = 5;
  return o;
}

openai_sampler_options openai_options(std::vector<std::string> urls) {
  openai_sampler_options o;
  const auto e = engine_options();
  o.sampler = e.sampler;
  o.sampler.backend = sampler_backend::openai;
  o.tokenizer_dir = e.tokenizer_dir;
  o.seed = e.seed;
  o.urls = std::move(urls);
  o.pool.backoff = std::chrono::milliseconds(20);
  o.pool.max_backoff = std::chrono::milliseconds(100);
  return o;
}

std::vector<wire::CandidateT> run(actors::sampler_logic& s, const wire::GenerateRequest& req, std::uint64_t id) {
  actors::envelope_info info;
  info.sample_id = id;
  auto out = s.generate(req, info);
  REQUIRE_MESSAGE(out.ok(), (out.ok() ? "" : out.message()));
  return std::move(out).value();
}

std::string get(const std::string& url, const std::string& path) {
  httplib::Client c(url);
  auto r = c.Get(path);
  REQUIRE(r);
  return r->body;
}

std::pair<int, json> post(const std::string& url, const std::string& path, const std::string& body) {
  httplib::Client c(url);
  auto r = c.Post(path, body, "application/json");
  REQUIRE(r);
  return {r->status, json::parse(r->body, nullptr, false)};
}

// A server in this process answering /v1/completions with whatever `reply` gives.
struct fake_server {
  httplib::Server svr;
  std::thread t;
  int port = 0;
  std::atomic<int> hits{0};
  explicit fake_server(std::function<void(httplib::Response&)> reply) {
    svr.Get("/health", [](const httplib::Request&, httplib::Response& res) { res.set_content("{}", "application/json"); });
    svr.Get("/v1/models", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(R"({"object":"list","data":[{"id":"fake","object":"model"}]})", "application/json");
    });
    svr.Post("/v1/completions", [this, reply](const httplib::Request&, httplib::Response& res) {
      ++hits;
      reply(res);
    });
    port = svr.bind_to_any_port("127.0.0.1");
    t = std::thread([this] { svr.listen_after_bind(); });
    // bind_to_any_port already listens: connections queue until the loop runs.
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port) + "/v1"; }
  ~fake_server() {
    svr.stop();
    t.join();
  }
};

// A socket bound to 127.0.0.1:port (0: any), closed when it goes; its port.
struct bound_socket {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  int port = 0;
  explicit bound_socket(int want) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<std::uint16_t>(want));
    socklen_t n = sizeof a;
    if (fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n) == 0)
      port = ntohs(a.sin_port);
  }
  ~bound_socket() {
    if (fd >= 0) ::close(fd);
  }
};

// Two consecutive ports nothing is bound to now. (An httplib::Server bound to find one keeps its
// socket listening after it goes: the servers under test would then share the port with it, and
// the connections the kernel gives to it are never answered.)
int free_port_pair() {
  for (int tries = 0; tries < 50; ++tries) {
    bound_socket a(0);
    if (a.port <= 0 || a.port >= 65535) continue;
    bound_socket b(a.port + 1);
    if (b.port == a.port + 1) return a.port;
  }
  FAIL("no two consecutive free ports");
  return 0;
}

bool alive(pid_t pid) { return ::kill(pid, 0) == 0; }

}  // namespace

TEST_CASE("openai sampler: [sampler.server] starts kforge serve twice, samples through both, stops them with the sampler") {
  auto o = openai_options({});
  o.sampler.server.enabled = true;
  o.sampler.server.port = free_port_pair();
  o.sampler.server.count = 2;
  o.sampler.server.ready_timeout_s = 120;
  o.sampler.server.command = std::string(KFORGE_BINARY) + " serve --model " + fx("qwen2") + " --tokenizer " +
                             fx("tokenizer") + " --port {port} --max-tokens 64";
  const auto logs = std::filesystem::temp_directory_path() / ("kforge-servers-" + std::to_string(::getpid()));
  o.server_log_dir = logs.string();
  std::vector<pid_t> pids;
  {
    auto h = make_openai_sampler_handles(o);
    REQUIRE_MESSAGE(h.ok(), (h.ok() ? "" : h.message()));
    REQUIRE(h->servers);
    CHECK(h->servers->urls() == std::vector<std::string>{"http://127.0.0.1:" + std::to_string(o.sampler.server.port),
                                                         "http://127.0.0.1:" + std::to_string(o.sampler.server.port + 1)});
    pids = h->servers->pids();
    for (const auto& url : h->servers->urls()) CHECK(contains(get(url, "/v1/models"), "\"data\""));
    const auto req = request("Write a CUDA kernel for relu.");
    CHECK(run(*h->sampler, *req->get(), 3).size() == 3);
    CHECK(std::filesystem::exists(logs / "server-1.log"));
  }
  for (pid_t pid : pids) CHECK_FALSE(alive(pid));  // stopped (and reaped) with the sampler
  std::filesystem::remove_all(logs);
}

TEST_CASE("openai sampler: a [sampler.server] that exits or never answers fails with its log's last line") {
  auto o = openai_options({});
  o.sampler.server.enabled = true;
  o.sampler.server.port = free_port_pair();
  o.sampler.server.ready_timeout_s = 60;
  const auto logs = std::filesystem::temp_directory_path() / ("kforge-servers-bad-" + std::to_string(::getpid()));
  o.server_log_dir = logs.string();
  o.sampler.server.command = "echo 'no model at /models/x (port {port})'; exit 3";
  auto h = make_openai_sampler_handles(o);
  REQUIRE_FALSE(h.ok());
  CHECK(contains(h.message(), "[sampler.server] server 0"));
  CHECK(contains(h.message(), "exited with status 3"));
  CHECK(contains(h.message(), "ends: no model at /models/x (port " + std::to_string(o.sampler.server.port) + ")"));

  o.sampler.server.ready_timeout_s = 1;
  o.sampler.server.command = "echo loading {port}; exec sleep 60";
  const auto t0 = std::chrono::steady_clock::now();
  h = make_openai_sampler_handles(o);
  REQUIRE_FALSE(h.ok());
  CHECK(contains(h.message(), "did not answer GET /health with 200 in time"));
  CHECK(contains(h.message(), "ends: loading"));
  // The server that never answered was stopped, not left to sleep: the call returned within the
  // ready timeout and the grace period.
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(15));
  std::filesystem::remove_all(logs);
}

TEST_CASE("inference servers: commands filled in, GPU ordinals mapped through CUDA_VISIBLE_DEVICES") {
  CHECK(server_command("vllm serve m --port {port} # gpu {gpu}, again {port}", 8101, "3") ==
        "vllm serve m --port 8101 # gpu 3, again 8101");
  CHECK(visible_device(1, "") == "1");
  CHECK(visible_device(1, "4,6") == "6");
  CHECK(visible_device(0, "GPU-abc,GPU-def") == "GPU-abc");
  CHECK(visible_device(5, "4,6") == "5");  // past the list: the ordinal as it is
}

TEST_CASE("openai sampler: kforge serve gives the in-process engine's candidates, ids and log-probs") {
  served server;
  auto engine = make_engine_sampler(engine_options());
  REQUIRE_MESSAGE(engine.ok(), (engine.ok() ? "" : engine.message()));
  auto http = make_openai_sampler(openai_options({server.url + "/v1"}));
  REQUIRE_MESSAGE(http.ok(), (http.ok() ? "" : http.message()));
  const auto req = request("Write a CUDA kernel for relu.");
  for (std::uint64_t id : {7u, 8u}) {
    const auto a = run(**engine, *req->get(), id);
    const auto b = run(**http, *req->get(), id);
    REQUIRE(a.size() == 3);
    REQUIRE(b.size() == 3);
    for (std::size_t k = 0; k < a.size(); ++k) {
      CHECK(a[k].prompt_tokens == b[k].prompt_tokens);
      CHECK(a[k].completion_tokens == b[k].completion_tokens);
      REQUIRE(a[k].logprobs.size() == b[k].logprobs.size());
      for (std::size_t t = 0; t < a[k].logprobs.size(); ++t) CHECK(a[k].logprobs[t] == doctest::Approx(b[k].logprobs[t]).epsilon(1e-5));
      CHECK(a[k].completion == b[k].completion);
      CHECK(a[k].source == b[k].source);
    }
  }
  // Requests of a batch go out together and each still gets its own group.
  std::vector<std::unique_ptr<packed<wire::GenerateRequest>>> reqs;
  std::vector<actors::sampler_logic::request_item> items;
  for (int i = 0; i < 4; ++i) {
    reqs.push_back(request("task " + std::to_string(i)));
    actors::envelope_info info;
    info.sample_id = 100 + i;
    items.push_back({reqs.back()->get(), info});
  }
  const auto batch = (*http)->generate_batch(items);
  REQUIRE(batch.size() == 4);
  for (std::size_t i = 0; i < 4; ++i) {
    REQUIRE(batch[i].ok());
    CHECK(batch[i].value().size() == 3);
    CHECK(batch[i].value().front().completion_tokens == run(**engine, *reqs[i]->get(), 100 + i).front().completion_tokens);
  }
}

// The batching counts of a kforge serve (GET /v1/models).
json batching_of(const std::string& url) { return json::parse(get(url, "/v1/models"))["data"][0]["batching"]; }

TEST_CASE("kforge serve: concurrent requests with equal settings run as one generation, each with its own samples") {
  // The shipped tiny policy: real end tokens, so rows stop at different steps inside a batch. A long
  // gathering wait, so a loaded machine still delivers the burst before the batch starts.
  served server(std::string(KFORGE_SOURCE_DIR) + "/models/kforge-tiny", "", {"--batch-wait-ms", "300"});
  auto pool = replica_pool::make({server.url});
  REQUIRE(pool.ok());
  std::vector<completion_request> reqs;
  for (int i = 0; i < 4; ++i) {
    completion_request r;
    for (int t = 0; t <= 3 * i; ++t) r.prompt.push_back(100 + 37 * i + 11 * t);  // lengths differ: padding
    r.n = 2;
    r.temperature = 0.9;
    r.max_tokens = 12;
    r.seed = 1000 + i;
    reqs.push_back(r);
  }
  completion_request other = reqs[0];  // other settings: a generation of its own
  other.max_tokens = 8;
  auto complete = [&](const completion_request& r) {
    auto c = pool.value()->complete(r, "");
    REQUIRE_MESSAGE(c.ok(), (c.ok() ? "" : c.message()));
    return std::move(c).value();
  };
  std::vector<std::vector<completion_choice>> alone;
  for (const auto& r : reqs) alone.push_back(complete(r));
  const json before = batching_of(server.url);
  CHECK(before["generations"] == 4);
  CHECK(before["requests"] == 4);

  std::vector<std::future<std::vector<completion_choice>>> together;
  for (const auto& r : reqs) together.push_back(std::async(std::launch::async, complete, r));
  auto apart = std::async(std::launch::async, complete, other);
  CHECK(apart.get().size() == 2);
  for (std::size_t i = 0; i < reqs.size(); ++i) {
    const auto got = together[i].get();
    REQUIRE(got.size() == 2);
    for (std::size_t k = 0; k < got.size(); ++k) {
      INFO("request " << i << ", sample " << k);
      CHECK(got[k].tokens == alone[i][k].tokens);
      REQUIRE(got[k].logprobs.size() == alone[i][k].logprobs.size());
      for (std::size_t t = 0; t < got[k].logprobs.size(); ++t)
        CHECK(got[k].logprobs[t] == doctest::Approx(alone[i][k].logprobs[t]).epsilon(1e-4));
    }
    CHECK_FALSE(got[0].tokens == got[1].tokens);  // a group's samples differ
  }
  const json after = batching_of(server.url);
  CHECK(after["requests"] == 9);
  CHECK(after["generations"] == 6);  // the four together, the other one apart
  CHECK(after["largest_batch_requests"] == 4);
  CHECK(after["sequences"] == 18);
}

TEST_CASE("kforge serve: weight updates bump the served version; bad requests get OpenAI errors") {
  served server;
  auto version = [&] { return json::parse(get(server.url, "/v1/models"))["data"][0]["version"].get<std::uint64_t>(); };
  CHECK(json::parse(get(server.url, "/health"))["status"] == "ok");
  CHECK(version() == 0);

  auto h = make_openai_sampler_handles(openai_options({server.url}));
  REQUIRE_MESSAGE(h.ok(), (h.ok() ? "" : h.message()));
  const auto good = fx("qwen2/model.safetensors");
  CHECK(h->sampler->set_weights(*file_weights(good, 7)->get()).ok());
  CHECK(version() == 7);
  // A file that is not weights leaves the old ones serving, and the version where it was.
  const auto bad_file = fs::temp_directory_path() / "kforge-openai-not-weights.safetensors";
  std::ofstream(bad_file) << "not a safetensors file";
  const auto s = h->sampler->set_weights(*file_weights(bad_file.string(), 8)->get());
  CHECK_FALSE(s.ok());
  CHECK(contains(s.message(), "loaded nowhere"));
  CHECK(version() == 7);
  fs::remove(bad_file);
  // Without a version the endpoint counts one up; a directory means its model.safetensors.
  auto [st, body] = post(server.url, "/update_weights_from_disk", json{{"model_path", fx("qwen2")}}.dump());
  CHECK(st == 200);
  CHECK(body["success"] == true);
  CHECK(version() == 8);

  auto error_of = [&](const std::string& path, const std::string& b, int status) {
    auto [code, j] = post(server.url, path, b);
    CHECK(code == status);
    REQUIRE(j.is_object());
    REQUIRE(j.contains("error"));
    CHECK(j["error"]["message"].is_string());
    CHECK(j["error"]["type"].is_string());
    CHECK(j["error"].contains("code"));
    return j["error"]["message"].get<std::string>();
  };
  CHECK(contains(error_of("/v1/completions", "{\"prompt\": [1, 2", 400), "not JSON"));
  CHECK(contains(error_of("/v1/completions", R"({"max_tokens": 4})", 400), "\"prompt\" is required"));
  CHECK(contains(error_of("/v1/completions", R"({"prompt": [1, 99999999]})", 400), "outside the vocabulary"));
  CHECK(contains(error_of("/v1/completions", R"({"prompt": [1, 2], "n": 0})", 400), "\"n\""));
  CHECK(contains(error_of("/v1/completions", R"({"prompt": [1, 2], "max_tokens": 100000})", 400), "\"max_tokens\""));
  CHECK(contains(error_of("/v1/completions", R"({"prompt": [1, 2], "logprobs": 5})", 400), "logprobs"));
  CHECK(contains(error_of("/v1/completions", R"({"prompt": [1, 2], "model": "other"})", 404), "does not exist"));
  CHECK(contains(error_of("/v1/chat/completions", R"({"messages": []})", 400), "messages"));
  CHECK(contains(error_of("/update_weights_from_disk", R"({})", 400), "model_path"));
  CHECK(contains(error_of("/update_weights_from_disk", R"({"model_path": "/nonexistent/w.safetensors"})", 400),
                 "/nonexistent/w.safetensors"));
  // Text in, text out on the chat endpoint; a string prompt on the completions endpoint.
  auto [cs, chat] = post(server.url, "/v1/chat/completions",
                         R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "seed": 1})");
  CHECK(cs == 200);
  CHECK(chat["choices"][0]["message"]["content"].is_string());
  auto [ts, text] = post(server.url, "/v1/completions", R"({"prompt": "hello", "max_tokens": 3, "logprobs": 0})");
  CHECK(ts == 200);
  CHECK(text["choices"][0]["logprobs"]["token_logprobs"].size() == 3);
}

TEST_CASE("openai sampler: a replica killed mid-run: its requests finish on the other") {
  served a, b;
  auto h = make_openai_sampler_handles(openai_options({a.url, b.url}));
  REQUIRE_MESSAGE(h.ok(), (h.ok() ? "" : h.message()));
  std::vector<std::unique_ptr<packed<wire::GenerateRequest>>> reqs;
  std::vector<actors::sampler_logic::request_item> items;
  for (int i = 0; i < 8; ++i) {
    reqs.push_back(request("task " + std::to_string(i)));
    actors::envelope_info info;
    info.sample_id = 200 + i;
    items.push_back({reqs.back()->get(), info});
  }
  auto first = h->sampler->generate_batch(items);
  for (const auto& r : first) CHECK(r.ok());
  const auto before = h->pool->answered();
  CHECK(before[0] > 0);  // both shared the load
  CHECK(before[1] > 0);
  // Killed while the next batch is in flight: whatever it held is answered by the other.
  std::thread killer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    a.kill_now();
  });
  auto second = h->sampler->generate_batch(items);
  killer.join();
  auto third = h->sampler->generate_batch(items);
  for (std::size_t i = 0; i < items.size(); ++i) {
    REQUIRE_MESSAGE(second[i].ok(), (second[i].ok() ? "" : second[i].message()));
    REQUIRE_MESSAGE(third[i].ok(), (third[i].ok() ? "" : third[i].message()));
    CHECK(second[i].value().size() == 3);
    // The same seed on the other replica: the same candidates as before the kill.
    CHECK(third[i].value().front().completion_tokens == first[i].value().front().completion_tokens);
  }
  // A replica that stays down is tried again after a rest, and dropped after drop_after failures
  // in a row; meanwhile every request is still answered.
  for (int round = 0; round < 20 && h->pool->live().size() > 1; ++round) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    for (const auto& r : h->sampler->generate_batch(items)) CHECK(r.ok());
  }
  CHECK(h->pool->live() == std::vector<std::string>{b.url});
}

TEST_CASE("openai client: a request names the adapter in use as its server's API does") {
  completion_request r;
  r.prompt = {1, 2};
  const auto plain = json::parse(completion_body(r, "base"));
  CHECK(plain["model"] == "base");
  CHECK_FALSE(plain.contains("lora_path"));
  const auto sglang = json::parse(completion_body(r, "base", {"kforge-v3", adapter_api::sglang}));
  CHECK(sglang["model"] == "base");
  CHECK(sglang["lora_path"] == "kforge-v3");
  const auto vllm = json::parse(completion_body(r, "base", {"kforge-v3", adapter_api::vllm}));
  CHECK(vllm["model"] == "kforge-v3");
  CHECK_FALSE(vllm.contains("lora_path"));
}

TEST_CASE("openai client: malformed, cut, text-only and error responses give clear errors") {
  SUBCASE("parse_completion") {
    CHECK(contains(parse_completion("{\"choices\": [{\"text\": \"a\"", 1).message(), "not JSON"));
    CHECK(contains(parse_completion("[]", 1).message(), "not a JSON object"));
    CHECK(contains(parse_completion("{}", 1).message(), "no \"choices\""));
    CHECK(contains(parse_completion(R"({"choices": [{"text": "a"}]})", 2).message(), "n = 2"));
    const auto text_only = parse_completion(R"({"choices": [{"index": 0, "text": "a", "logprobs": null}]})", 1);
    CHECK(contains(text_only.message(), "\"logprobs\": 1"));
    const auto words =
        parse_completion(R"({"choices": [{"text": "a", "logprobs": {"tokens": ["a"], "token_logprobs": [-1.0]}}]})", 1);
    CHECK(contains(words.message(), "return_tokens_as_token_ids"));
    const auto uneven = parse_completion(
        R"({"choices": [{"token_ids": [1, 2], "logprobs": {"token_logprobs": [-1.0]}}]})", 1);
    CHECK(contains(uneven.message(), "2 token ids but 1 log-probs"));
    const auto err = parse_completion(R"({"error": {"message": "boom", "type": "server_error"}})", 1);
    CHECK(contains(err.message(), "boom"));
    const auto ok = parse_completion(
        R"({"choices": [{"index": 1, "logprobs": {"tokens": ["token_id:5"], "token_logprobs": [-0.5]}},
                        {"index": 0, "token_ids": [3], "logprobs": {"token_logprobs": [-0.25]}}]})", 2);
    REQUIRE(ok.ok());
    CHECK(ok.value()[0].tokens == std::vector<std::int32_t>{3});
    CHECK(ok.value()[1].tokens == std::vector<std::int32_t>{5});
    CHECK(ok.value()[1].logprobs == std::vector<float>{-0.5f});
  }
  replica_pool_options fast;
  fast.backoff = std::chrono::milliseconds(5);
  fast.max_backoff = std::chrono::milliseconds(10);
  completion_request r;
  r.prompt = {1, 2, 3};
  SUBCASE("a cut body is retried, then reported") {
    fake_server cut([](httplib::Response& res) { res.set_content("{\"choices\": [{\"tok", "application/json"); });
    auto p = replica_pool::make({cut.url()}, fast);
    REQUIRE(p.ok());
    const auto c = p.value()->complete(r, "req: ");
    CHECK_FALSE(c.ok());
    CHECK(contains(c.message(), "not JSON"));
    CHECK(contains(c.message(), "req: "));
    CHECK(p.value()->live().size() == 1);  // the last live replica is kept, to be tried again
  }
  SUBCASE("a replica that keeps failing is dropped while another is live; 429 is retried") {
    fake_server cut([](httplib::Response& res) { res.set_content("{\"choices\": [{\"tok", "application/json"); });
    fake_server busy([](httplib::Response& res) {
      res.status = 429;
      res.set_content(R"({"error": {"message": "too many requests", "type": "rate_limit", "code": null}})", "application/json");
    });
    auto p = replica_pool::make({cut.url(), busy.url()}, fast);
    REQUIRE(p.ok());
    const auto c = p.value()->complete(r, "");
    CHECK_FALSE(c.ok());
    CHECK(busy.hits > 1);  // 429 is the server's moment, not the request's fault: tried again
    CHECK(p.value()->live().size() == 1);
  }
  SUBCASE("a 500 goes to the other replica; a 400 is the request's own error") {
    fake_server broken([](httplib::Response& res) {
      res.status = 500;
      res.set_content(R"({"error": {"message": "out of memory", "type": "server_error", "code": null}})", "application/json");
    });
    fake_server fine([](httplib::Response& res) {
      res.set_content(R"({"choices": [{"index": 0, "token_ids": [4], "logprobs": {"token_logprobs": [-0.1]}}]})",
                      "application/json");
    });
    auto p = replica_pool::make({broken.url(), fine.url()}, fast);
    REQUIRE(p.ok());
    for (int i = 0; i < 5; ++i) {
      const auto c = p.value()->complete(r, "");
      REQUIRE_MESSAGE(c.ok(), (c.ok() ? "" : c.message()));
      CHECK(c.value().front().tokens == std::vector<std::int32_t>{4});
    }
    fake_server refusing([](httplib::Response& res) {
      res.status = 400;
      res.set_content(R"({"error": {"message": "prompt too long", "type": "invalid_request_error", "code": null}})",
                      "application/json");
    });
    auto q = replica_pool::make({refusing.url()}, fast);
    const auto c = q.value()->complete(r, "");
    CHECK(contains(c.message(), "HTTP 400"));
    CHECK(contains(c.message(), "prompt too long"));
    CHECK(refusing.hits == 1);
  }
  SUBCASE("a replica that cannot load a weights version is dropped; the others go on with it") {
    fake_server loads([](httplib::Response&) {});
    fake_server refuses([](httplib::Response&) {});
    loads.svr.Post("/update_weights_from_disk", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(R"({"success": true})", "application/json");
    });
    refuses.svr.Post("/update_weights_from_disk", [](const httplib::Request&, httplib::Response& res) {
      res.status = 500;
      res.set_content(R"({"error": {"message": "no such file", "type": "server_error", "code": null}})", "application/json");
    });
    auto p = replica_pool::make({loads.url(), refuses.url()}, fast);
    REQUIRE(p.ok());
    CHECK(p.value()->update_weights("/w/policy-v1.safetensors", 1).ok());
    REQUIRE(p.value()->live().size() == 1);
    CHECK(p.value()->live().front() == loads.url());
    // Loaded nowhere: an error, and the pool keeps its replica (still on the older version).
    auto q = replica_pool::make({refuses.url()}, fast);
    CHECK_FALSE(q.value()->update_weights("/w/policy-v2.safetensors", 2).ok());
    CHECK(q.value()->live().size() == 1);
  }
  SUBCASE("an adapter the replicas fail to unload drops none of them: the new one is in use") {
    fake_server a([](httplib::Response&) {}), b([](httplib::Response&) {});
    for (auto* f : {&a, &b})
      f->svr.Post("/load_lora_adapter", [](const httplib::Request&, httplib::Response& res) {
        res.set_content(R"({"success": true})", "application/json");
      });
    a.svr.Post("/unload_lora_adapter", [](const httplib::Request&, httplib::Response& res) {
      res.status = 500;
      res.set_content(R"({"error": {"message": "busy", "type": "server_error", "code": null}})", "application/json");
    });
    b.svr.Post("/unload_lora_adapter", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(R"({"success": true})", "application/json");
    });
    auto p = replica_pool::make({a.url(), b.url()}, fast);
    REQUIRE(p.ok());
    CHECK(p.value()->load_adapter("kforge-v1", "/w/adapter-v1", 1, adapter_api::sglang).ok());
    CHECK(p.value()->load_adapter("kforge-v2", "/w/adapter-v2", 2, adapter_api::sglang).ok());
    CHECK(p.value()->live().size() == 2);
  }
  SUBCASE("a server that returns text only is refused, naming the option") {
    fake_server text([](httplib::Response& res) {
      res.set_content(R"({"choices": [{"index": 0, "text": "hello", "logprobs": null}]})", "application/json");
    });
    auto p = replica_pool::make({text.url()}, fast);
    const auto c = p.value()->complete(r, "");
    CHECK(contains(c.message(), "logprobs"));
    CHECK(text.hits == 1);
  }
  SUBCASE("no server at all") {
    auto p = replica_pool::make({"http://127.0.0.1:1"}, fast);
    REQUIRE(p.ok());
    CHECK_FALSE(p.value()->check_health().ok());
    const auto c = p.value()->complete(r, "");
    CHECK_FALSE(c.ok());
    CHECK(contains(c.message(), "no replica answered"));
    CHECK_FALSE(replica_pool::make({"ftp://x"}).ok());
  }
}

TEST_CASE("kforge run with backend openai against kforge serve: the loop completes, counts balance") {
  const auto dir = fs::temp_directory_path() / ("kforge-openai-run-" + std::to_string(getpid()));
  fs::remove_all(dir);
  kforge::test::copy_tiny_model(dir);
  served server((dir / "model").string(), "");
  const auto run = run_against(dir, server.url, "");
  INFO(run.out);
  CHECK(run.rc == 0);
  CHECK(contains(run.out, "real: openai backend"));
  const auto summary = run_summary(dir);
  REQUIRE(summary.is_object());
  CHECK(summary["outcome"] == "completed");
  CHECK(summary["balanced"] == true);
  // Both published versions reached the server through /update_weights_from_disk.
  CHECK(json::parse(get(server.url, "/v1/models"))["data"][0]["version"] == 2);
  fs::remove_all(dir);
}

// A LoRA run with trainer.publish = "adapters": each version's adapters reach the server through
// its adapter endpoint (SGLang's, the default), and later requests name them.
TEST_CASE("kforge run with LoRA adapters published to kforge serve: the server loads each version's adapters") {
  const auto dir = fs::temp_directory_path() / ("kforge-openai-adapters-" + std::to_string(getpid()));
  fs::remove_all(dir);
  kforge::test::copy_tiny_model(dir);
  served server((dir / "model").string(), "");
  const auto run = run_against(
      dir, server.url, "\n[trainer]\npublish = \"adapters\"\nlora = { rank = 4, targets = [\"q_proj\", \"v_proj\"] }\n");
  INFO(run.out);
  CHECK(run.rc == 0);
  CHECK(contains(run.out, "trainer.publish = \"adapters\""));
  const auto summary = run_summary(dir);
  REQUIRE(summary.is_object());
  CHECK(summary["balanced"] == true);
  // The server holds the last version's adapter (the first unloaded when the second came), with
  // its directory under the run's weights, and counts both loads in its version.
  const auto models = json::parse(get(server.url, "/v1/models"));
  INFO(models.dump(2));
  REQUIRE(models["data"].size() == 2);
  const auto& adapter = models["data"][1];
  CHECK(adapter["id"] == "kforge-v2");
  CHECK(contains(adapter["root"].get<std::string>(), "weights/adapter-v2"));
  CHECK(models["data"][0]["version"] == 2);
  CHECK(fs::exists(dir / "runs" / "tiny" / "weights" / "adapter-v2" / "adapter_config.json"));
  // vLLM's endpoints load it too, and the adapter before is unloaded.
  auto pool = replica_pool::make({server.url});
  REQUIRE(pool.ok());
  REQUIRE(pool.value()->load_adapter("again", (dir / "runs" / "tiny" / "weights" / "adapter-v2").string(), 9,
                                     adapter_api::vllm).ok());
  const auto after = json::parse(get(server.url, "/v1/models"));
  CHECK(after["data"][1]["id"] == "again");
  CHECK(after["data"][0]["version"] == 9);
  // A manifest that asks for adapters without LoRA is refused, saying why.
  const auto bad = run_against(dir, server.url, "\n[trainer]\npublish = \"adapters\"\n");
  CHECK(bad.rc != 0);
  CHECK(contains(bad.out, "publishes LoRA adapters: set [trainer] lora"));
  fs::remove_all(dir);
}
