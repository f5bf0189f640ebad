// serve_bench: rollout tokens/s through `kforge serve` (HTTP, batching across requests) against the
// in-process engine (the anchor, measured in the same run), on the same model, device, prompts and
// seeds. The product's goal: the HTTP path at >= 90 % of the in-process engine's tokens/s.
//
//   serve_bench [--model DIR] [--tokenizer DIR] [--gpu N] [--groups B] [--n N] [--max-new-tokens K]
//               [--prompt-len T] [--rounds R] [--temperature X] [--batch-wait-ms W]
//               [--max-batch-sequences M] [--json FILE]
//
// Workload: B groups (default 8) of N samples (default 8) of B random prompts of T token ids
// (default 128, drawn from the tokenizer's vocabulary with a fixed seed), group k seeded 1000 + k,
// at most K new tokens (default 256), temperature 0.8, top-p 1: the engine sampler's default batch.
// The model's end tokens stop a row, so tokens/s counts the tokens generated (a row's stop token
// included) over the wall time of the whole batch.
//
// In-process: engine_policy::sample_groups (stages/engine_sampler.hpp), one call for the B groups,
// as the engine sampler runs a batch of requests. HTTP: `kforge serve` as a child process on the same
// device (--gpu N: CUDA_VISIBLE_DEVICES=N, so the same GPU; default the CPU) with
// --max-batch-sequences B*N (M instead: M = N answers one request at a time, as kforge serve did
// before it batched), and the openai backend's client (stages/openai_client.hpp) sending the
// B requests at once, one per group with n = N, from B threads, as the openai sampler does. One
// warm-up round of each (16 tokens), then R rounds (default 5) alternating which path goes first.
// Reported: median (min..max) tokens/s of each path, the ratio HTTP/in-process, and the server's
// batching counts (generations run, the most requests one generation answered).
//
// Correctness while measuring: every request is answered with N choices, and each sequence's token
// ids through HTTP are compared with the in-process ones for the same (prompt, seed). They are
// reported as a fraction, not a failure: the server batches requests in their order of arrival, so
// a prompt's rows sit elsewhere in the batch than in-process, and on a GPU in bf16 the batched
// kernels may then round differently, which can flip a sampled token (and everything after it).
// On the CPU in fp32 they are expected equal. A failed request or a wrong number of choices exits 1.
//
// On the CPU (the default) it is a smoke test: e.g. --model models/kforge-tiny --groups 4 --n 4
// --max-new-tokens 16 --rounds 3.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "stages/chat_tokens.hpp"
#include "stages/engine_sampler.hpp"
#include "stages/inference_servers.hpp"
#include "stages/openai_client.hpp"

namespace fs = std::filesystem;
namespace kp = kforge::pipeline;
using json = nlohmann::json;
using clk = std::chrono::steady_clock;

namespace {

struct flags {
  std::string model = std::string(KFORGE_SOURCE_DIR) + "/models/kforge-tiny";
  std::string tokenizer;
  int gpu = -1;
  int groups = 8, n = 8, max_new_tokens = 256, prompt_len = 128, rounds = 5, batch_wait_ms = 20;
  int max_batch_sequences = 0;  ///< the server's; 0: groups * n
  double temperature = 0.8;
  std::string json_path;
};

struct spread {
  double median = 0, min = 0, max = 0;
  static spread of(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const std::size_t k = v.size();
    return {k % 2 ? v[k / 2] : (v[k / 2 - 1] + v[k / 2]) / 2, v.front(), v.back()};
  }
  json to_json() const { return {{"median", median}, {"min", min}, {"max", max}}; }
};

// One batch's outcome on either path: every group's sequences' token ids, and its wall time.
struct batch_run {
  std::vector<std::vector<std::vector<std::int32_t>>> tokens;  ///< [group][sample]
  double seconds = 0;
  std::size_t generated() const {
    std::size_t t = 0;
    for (const auto& g : tokens)
      for (const auto& s : g) t += s.size();
    return t;
  }
};

bool parse(int argc, char** argv, flags& f) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string("x"); };
    try {
      if (a == "--model") f.model = next();
      else if (a == "--tokenizer") f.tokenizer = next();
      else if (a == "--gpu") f.gpu = std::stoi(next());
      else if (a == "--groups") f.groups = std::stoi(next());
      else if (a == "--n") f.n = std::stoi(next());
      else if (a == "--max-new-tokens") f.max_new_tokens = std::stoi(next());
      else if (a == "--prompt-len") f.prompt_len = std::stoi(next());
      else if (a == "--rounds") f.rounds = std::stoi(next());
      else if (a == "--temperature") f.temperature = std::stod(next());
      else if (a == "--batch-wait-ms") f.batch_wait_ms = std::stoi(next());
      else if (a == "--max-batch-sequences") f.max_batch_sequences = std::stoi(next());
      else if (a == "--json") f.json_path = next();
      else throw std::invalid_argument(a);
    } catch (const std::exception&) {
      return false;
    }
  }
  if (f.max_batch_sequences <= 0) f.max_batch_sequences = f.groups * f.n;
  return f.groups >= 1 && f.n >= 1 && f.max_new_tokens >= 1 && f.prompt_len >= 1 && f.rounds >= 1;
}

std::vector<std::vector<std::int32_t>> random_prompts(const flags& f, std::int64_t vocab) {
  std::mt19937_64 gen(99);
  std::uniform_int_distribution<std::int32_t> id(0, static_cast<std::int32_t>(vocab - 1));
  std::vector<std::vector<std::int32_t>> out(static_cast<std::size_t>(f.groups));
  for (auto& p : out)
    for (int t = 0; t < f.prompt_len; ++t) p.push_back(id(gen));
  return out;
}

std::vector<std::uint64_t> group_seeds(const flags& f) {
  std::vector<std::uint64_t> s;
  for (int k = 0; k < f.groups; ++k) s.push_back(1000 + static_cast<std::uint64_t>(k));
  return s;
}

kforge::result<batch_run> in_process(kp::engine_policy& policy, const std::vector<std::vector<std::int32_t>>& prompts,
                                     const flags& f, int max_new_tokens) {
  const auto t0 = clk::now();
  auto groups = policy.sample_groups(prompts, f.n, group_seeds(f), f.temperature, 1.0, max_new_tokens);
  const double sec = std::chrono::duration<double>(clk::now() - t0).count();
  if (!groups) return groups.err();
  batch_run r;
  r.seconds = sec;
  for (auto& g : *groups) {
    r.tokens.emplace_back();
    for (auto& c : g) r.tokens.back().push_back(std::move(c.tokens));
  }
  return r;
}

// The B requests at once, one thread each, as the openai sampler's generate_batch sends them.
kforge::result<batch_run> over_http(kp::replica_pool& pool, const std::vector<std::vector<std::int32_t>>& prompts,
                                    const flags& f, int max_new_tokens) {
  const auto seeds = group_seeds(f);
  std::vector<std::future<kforge::result<std::vector<kp::completion_choice>>>> pending;
  const auto t0 = clk::now();
  for (std::size_t k = 0; k < prompts.size(); ++k) {
    kp::completion_request r;
    r.prompt = prompts[k];
    r.n = f.n;
    r.temperature = f.temperature;
    r.max_tokens = max_new_tokens;
    r.seed = seeds[k];
    pending.push_back(std::async(std::launch::async, [&pool, r, k] {
      return pool.complete(r, "group " + std::to_string(k) + ": ");
    }));
  }
  batch_run out;
  std::optional<kforge::error> failed;
  for (auto& p : pending) {
    auto choices = p.get();  // every future waited on, whatever failed
    if (!choices) {
      if (!failed) failed = choices.err();
      continue;
    }
    out.tokens.emplace_back();
    for (auto& c : *choices) out.tokens.back().push_back(std::move(c.tokens));
  }
  out.seconds = std::chrono::duration<double>(clk::now() - t0).count();
  if (failed) return *failed;
  return out;
}

// A port nothing listens on now (the kernel's pick for port 0), for the server child.
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = 0;
  if (fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  if (fd >= 0) ::close(fd);
  return port;
}

std::string serve_command(const flags& f) {
  std::string c = std::string(KFORGE_BINARY) + " serve --model '" + f.model + "' --port {port} --max-tokens " +
                  std::to_string(std::max(f.max_new_tokens, 16)) + " --max-batch-sequences " +
                  std::to_string(f.max_batch_sequences) + " --batch-wait-ms " + std::to_string(f.batch_wait_ms);
  if (!f.tokenizer.empty()) c += " --tokenizer '" + f.tokenizer + "'";
  if (f.gpu >= 0) c += " --gpu 0";  // the child sees only that GPU (CUDA_VISIBLE_DEVICES)
  return c;
}

// How many sequences both paths sampled identically, and how many came out at all.
struct agreement {
  std::size_t equal = 0, total = 0;
  void add(const batch_run& a, const batch_run& b) {
    for (std::size_t g = 0; g < a.tokens.size() && g < b.tokens.size(); ++g)
      for (std::size_t s = 0; s < a.tokens[g].size() && s < b.tokens[g].size(); ++s) {
        ++total;
        equal += a.tokens[g][s] == b.tokens[g][s];
      }
  }
};

bool complete_shape(const batch_run& r, const flags& f) {
  if (r.tokens.size() != static_cast<std::size_t>(f.groups)) return false;
  for (const auto& g : r.tokens)
    if (g.size() != static_cast<std::size_t>(f.n)) return false;
  return true;
}

// The server's batching counts (GET /v1/models): generations run, requests answered, the largest batch.
json batching_counts(const std::string& url) {
  httplib::Client c(url);
  auto r = c.Get("/v1/models");
  if (!r || r->status != 200) return json();
  const json j = json::parse(r->body, nullptr, false);
  return j.is_object() ? j["data"][0].value("batching", json()) : json();
}

// Generations the server ran between two readings of its counts (-1: not known).
double generations_between(const json& before, const json& after) {
  if (!before.is_object() || !after.is_object()) return -1;
  return after.value("generations", 0.0) - before.value("generations", 0.0);
}

// The warm-up, then R rounds alternating which path goes first; prints and writes the report.
int measure(const flags& f, kp::engine_policy& policy, kp::replica_pool& pool, const std::string& url,
            std::int64_t vocab, const std::string& device) {
  const auto prompts = random_prompts(f, vocab);
  const int warm_tokens = std::min(16, f.max_new_tokens);
  for (int side = 0; side < 2; ++side) {
    auto w = side == 0 ? in_process(policy, prompts, f, warm_tokens) : over_http(pool, prompts, f, warm_tokens);
    if (!w) {
      std::fprintf(stderr, "serve_bench: warm-up: %s\n", w.message().c_str());
      return 1;
    }
  }
  const json counts_before = batching_counts(url);
  std::vector<double> rate[2], seconds[2];
  std::vector<std::size_t> generated[2];
  agreement same;
  std::vector<double> generations;  // the server's, per round: 1 when the round's requests ran as one batch
  for (int round = 0; round < f.rounds; ++round) {
    batch_run runs[2];
    const json counts_then = batching_counts(url);
    for (int k = 0; k < 2; ++k) {
      const int side = (round + k) % 2;  // 0: in-process, 1: HTTP; who goes first alternates
      auto r = side == 0 ? in_process(policy, prompts, f, f.max_new_tokens) : over_http(pool, prompts, f, f.max_new_tokens);
      if (!r || !complete_shape(*r, f)) {
        std::fprintf(stderr, "serve_bench: round %d, %s: %s\n", round, side == 0 ? "in-process" : "http",
                     r ? "a group came back without its n sequences" : r.message().c_str());
        return 1;
      }
      runs[side] = std::move(*r);
      seconds[side].push_back(runs[side].seconds);
      generated[side].push_back(runs[side].generated());
      rate[side].push_back(static_cast<double>(runs[side].generated()) / runs[side].seconds);
    }
    same.add(runs[0], runs[1]);
    generations.push_back(generations_between(counts_then, batching_counts(url)));
    std::printf("round %d: in-process %zu tokens in %.2f s (%.0f tokens/s); http %zu tokens in %.2f s (%.0f tokens/s, "
                "%.0f generation(s))\n",
                round, generated[0].back(), seconds[0].back(), rate[0].back(), generated[1].back(),
                seconds[1].back(), rate[1].back(), generations.back());
  }
  const json counts_after = batching_counts(url);
  const spread engine = spread::of(rate[0]), http = spread::of(rate[1]);
  const double ratio = http.median / engine.median;
  const double fraction = same.total ? static_cast<double>(same.equal) / static_cast<double>(same.total) : 0.0;
  std::printf("in-process: %.0f tokens/s (%.0f..%.0f)\nhttp:       %.0f tokens/s (%.0f..%.0f)\n", engine.median,
              engine.min, engine.max, http.median, http.min, http.max);
  std::printf("ratio http/in-process: %.3f (goal >= 0.9: %s)\n", ratio, ratio >= 0.9 ? "met" : "NOT met");
  std::printf("same token ids for the same (prompt, seed): %zu of %zu sequences (%.3f)\n", same.equal, same.total,
              fraction);
  // One generation per round means the server answered each round's B requests as one batch.
  const double per_round = generations_between(counts_before, counts_after) / f.rounds;
  std::printf("server: %.2f generations per round (1: each round's %d requests in one batch); counts %s\n", per_round,
              f.groups, counts_after.dump().c_str());
  json out = {{"device", device},
              {"model", f.model},
              {"workload", {{"groups", f.groups}, {"n", f.n}, {"sequences", f.groups * f.n},
                            {"prompt_len", f.prompt_len}, {"max_new_tokens", f.max_new_tokens},
                            {"temperature", f.temperature}, {"top_p", 1.0}, {"rounds", f.rounds},
                            {"warmup_new_tokens", warm_tokens}, {"batch_wait_ms", f.batch_wait_ms},
                            {"server_max_batch_sequences", f.max_batch_sequences}}},
              {"in_process", {{"seconds", seconds[0]}, {"generated_tokens", generated[0]}, {"tokens_per_s", engine.to_json()}}},
              {"http", {{"seconds", seconds[1]}, {"generated_tokens", generated[1]}, {"tokens_per_s", http.to_json()},
                        {"server_generations", generations}, {"server_generations_per_round", per_round},
                        {"server_batching", counts_after}}},
              {"ratio_http_over_in_process", ratio},
              {"goal_90_percent_met", ratio >= 0.9},
              {"check", {{"sequences", same.total}, {"equal_token_ids", same.equal}, {"fraction_equal", fraction}}}};
  if (!f.json_path.empty()) std::ofstream(f.json_path) << out.dump(2) << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  flags f;
  if (!parse(argc, argv, f)) {
    std::fprintf(stderr,
                 "usage: %s [--model DIR] [--tokenizer DIR] [--gpu N] [--groups B] [--n N] [--max-new-tokens K] "
                 "[--prompt-len T] [--rounds R] [--temperature X] [--batch-wait-ms W] [--max-batch-sequences M] "
                 "[--json FILE]\n",
                 argv[0]);
    return 2;
  }
  auto tokens = kp::chat_tokens::load(f.model, f.tokenizer);
  if (!tokens) {
    std::fprintf(stderr, "serve_bench: %s\n", tokens.message().c_str());
    return 2;
  }
  kp::engine_sampler_options eo;
  eo.sampler.model = f.model;
  eo.tokenizer_dir = f.tokenizer;
  eo.device = f.gpu;
  auto policy = kp::load_engine_policy(eo);
  if (!policy) {
    std::fprintf(stderr, "serve_bench: %s\n", policy.message().c_str());
    return 1;
  }
  const std::string device = f.gpu >= 0 ? "cuda:" + std::to_string(f.gpu) + " (bf16)" : "cpu (fp32)";
  std::printf("serve_bench: %s on %s; %d groups x n %d, prompts of %d ids, at most %d new tokens, %d rounds\n",
              f.model.c_str(), device.c_str(), f.groups, f.n, f.prompt_len, f.max_new_tokens, f.rounds);

  kforge::sampler_server so;
  so.enabled = true;
  so.command = serve_command(f);
  so.port = free_port();
  so.count = 1;
  so.ready_timeout_s = 600;
  const fs::path logs = fs::temp_directory_path() / ("kforge-serve-bench-" + std::to_string(::getpid()));
  std::vector<int> gpus;
  if (f.gpu >= 0) gpus.push_back(f.gpu);
  auto server = kp::inference_servers::start(so, gpus, logs.string());
  if (!server) {
    std::fprintf(stderr, "serve_bench: %s\n", server.message().c_str());
    return 1;
  }
  const std::string url = (*server)->urls().front();
  auto pool = kp::replica_pool::make({url});
  if (!pool) {
    std::fprintf(stderr, "serve_bench: %s\n", pool.message().c_str());
    return 1;
  }
  std::printf("server: %s (log %s)\n", so.command.c_str(), (logs / "server-0.log").c_str());
  const int code = measure(f, **policy, **pool, url, tokens->vocab_size(), device);
  server->reset();  // stopped before its log goes
  fs::remove_all(logs);
  return code;
}
