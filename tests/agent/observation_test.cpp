// agent/observation.hpp: each kind of feedback rendered from a real verdict. Compile errors come
// from the real compiler in compile-only mode; wrong answers, timeouts, runtime errors, suspected
// hacks and correct kernels are `kforge eval` verdicts recorded on an H200 (fixtures/verdicts.jsonl:
// lines of bench/data/2026-12-03-tiny-v14-default-run-355s/v14_heldout_verdicts.jsonl.gz and
// bench/data/2026-12-02-default-run-780s-v10/demo_after_verdicts.jsonl.gz).

#include <doctest/doctest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "agent/compiler_messages.hpp"
#include "agent/episode_turns.hpp"
#include "agent/observation.hpp"
#include "sandbox/verdict_encoding.hpp"
#include "sandbox/evaluator.hpp"
#include "tasks/builtin.hpp"

namespace fs = std::filesystem;
using namespace kforge::agent;
namespace wire = kforge::wire;

namespace {

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

wire::VerdictStatus status_of(const std::string& s) {
  for (int i = 0; i <= static_cast<int>(wire::VerdictStatus::MAX); ++i)
    if (s == wire::EnumNameVerdictStatus(static_cast<wire::VerdictStatus>(i)))
      return static_cast<wire::VerdictStatus>(i);
  FAIL("unknown status " << s);
  return wire::VerdictStatus::infra_error;
}

// A recorded verdict line (sandbox/verdict_json.cpp's fields) back into the wire struct.
wire::VerdictT recorded(const std::string& status) {
  std::ifstream in(std::string(KFORGE_AGENT_FIXTURES) + "/verdicts.jsonl");
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.at("status") != status) continue;
    wire::VerdictT v;
    v.status = status_of(status);
    v.reason = j.value("reason", "");
    v.max_abs_error = j.value("max_abs_error", 0.0);
    v.max_rel_error = j.value("max_rel_error", 0.0);
    v.first_bad_index = j.value("first_bad_index", std::int64_t{-1});
    v.output = j.value("output", "");
    for (const auto& r : j.value("resources", nlohmann::json::array())) {
      auto u = std::make_unique<wire::ResourceUsageT>();
      u->kernel = r.at("kernel");
      u->registers = r.at("registers");
      u->shared_bytes = r.at("shared_bytes");
      u->spill_store_bytes = r.at("spill_store_bytes");
      u->spill_load_bytes = r.at("spill_load_bytes");
      v.resources.push_back(std::move(u));
    }
    if (j.contains("candidate_ms")) {
      v.candidate_timing = std::make_unique<wire::TimingT>();
      v.candidate_timing->median_ms = j.at("candidate_ms");
      v.baseline_timing = std::make_unique<wire::TimingT>();
      v.baseline_timing->median_ms = j.at("baseline_ms");
    }
    return v;
  }
  FAIL("no recorded verdict with status " << status);
  return {};
}

kforge::gpu_facts h200() {
  kforge::gpu_facts g;
  g.name = "NVIDIA H200";
  g.major = 9;
  g.registers_per_sm = 65536;
  g.shared_per_sm = 233472;
  return g;
}

const feedback_kinds all_kinds;

}  // namespace

TEST_CASE("a compile error: its lines, what each means, and the source line it points at") {
  auto library = kforge::tasks::builtin_tasks();
  REQUIRE(library.ok());
  const kforge::tasks::task* relu = nullptr;
  for (const auto& t : *library)
    if (t.id == "l1/relu") relu = &t;
  REQUIRE(relu != nullptr);
  kforge::sandbox::evaluator_options eo;
  eo.compile.time_limit = std::chrono::milliseconds(600'000);
  eo.preprocess_time_limit = std::chrono::milliseconds(300'000);
  auto ev = kforge::sandbox::evaluator::create(eo);
  if (!ev) {
    MESSAGE("skipped: no nvcc here (" << ev.message() << ")");
    return;
  }
  const std::string source = R"(#include <kforge/kernel_abi.h>
__global__ void relu_kernel(const float* x, float* y, long n) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;
}
extern "C" int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs,
                          int32_t num_outputs, void* workspace, cudaStream_t stream) {
  const long n = inputs[0].numel;
  relu_kernel<<<(n + 255) / 256, 256, 0, stream>>>(static_cast<const float*>(inputs[0].data),
                                                    static_cast<float*>(outputs[0].data));
  return undefined_status;
}
)";
  auto v = ev->evaluate(*relu, source, {});
  REQUIRE(v.status == wire::VerdictStatus::compile_error);
  v.candidate = std::make_unique<wire::CandidateT>();
  v.candidate->source = source;
  turn_context ctx;
  ctx.turn = 2;
  const auto text = observation_template::embedded().render(v, ctx, all_kinds);
  INFO(text);
  CHECK(has(text, "## Turn 2: compile error"));
  CHECK(has(text, "line 10: too few arguments in function call (the call passes fewer arguments"));
  CHECK(has(text, "\n    static_cast<float*>(outputs[0].data));"));
  CHECK(has(text, "line 11: identifier \"undefined_status\" is undefined (a name that is not declared here"));
  CHECK(has(text, "\n    return undefined_status;"));
  CHECK(has(text, "Fix it: write the whole file again"));
  CHECK_FALSE(has(text, "Registers and shared memory"));  // nothing was built
  // With compile feedback off only the status remains.
  auto quiet = feedback_kinds::parse({"timing"});
  REQUIRE(quiet.ok());
  const auto bare = observation_template::embedded().render(v, ctx, *quiet);
  CHECK(has(bare, "## Turn 2: compile error"));
  CHECK_FALSE(has(bare, "too few arguments"));
}

TEST_CASE("a wrong answer: the failed check, the errors and where; the kernel's registers and what they allow") {
  auto v = recorded("wrong_answer");
  turn_context ctx;
  ctx.gpu = h200();
  const auto text = observation_template::embedded().render(v, ctx, all_kinds);
  INFO(text);
  CHECK(has(text, "## Turn 1: wrong answer"));
  CHECK(has(text, "input set 1 (primary shapes): output 0 differs from the reference"));
  CHECK(has(text, "Largest absolute error 1.57, largest relative error 311, first wrong element at flat index 0."));
  CHECK(has(text, "- kf_map(float const*, float const*, float*, long): 20 registers per thread, 0 B static shared memory"
                  "; its registers leave room for 2048 resident threads per SM"));
  // The template's order: the verdict's section before the resources, then the next step.
  CHECK(text.find("Largest absolute error") < text.find("Registers and shared memory"));
  CHECK(text.find("Registers and shared memory") < text.find("Fix it"));
  // In a run the facts travel with the episode: the task generator's request, the first turn's
  // episode state, the observed turn.
  wire::GenerateRequestT req;
  req.gpu_registers_per_sm = 65536;
  req.gpu_shared_per_sm = 233472;
  flatbuffers::FlatBufferBuilder fb;
  fb.Finish(wire::GenerateRequest::Pack(fb, &req));
  wire::ScoredT scored;
  scored.verdict = std::make_unique<wire::VerdictT>(std::move(v));
  scored.verdict->candidate = std::make_unique<wire::CandidateT>();
  scored.verdict->candidate->episode =
      first_turn(3, 3, 0, flatbuffers::GetRoot<wire::GenerateRequest>(fb.GetBufferPointer()));
  const auto observed = observed_turn(scored);
  CHECK(observed.gpu.registers_per_sm == 65536);
  CHECK(has(observation_template::embedded().render(*scored.verdict, observed, all_kinds),
            "; its registers leave room for 2048 resident threads per SM"));
  CHECK_FALSE(has(observation_template::embedded().render(*scored.verdict, turn_context{}, all_kinds),
                  "resident threads per SM"));
}

TEST_CASE("a timeout, a runtime error and a suspected hack say what happened") {
  const auto& t = observation_template::embedded();
  const auto timeout = t.render(recorded("timeout"), {}, all_kinds);
  CHECK(has(timeout, "Your kernel did not finish in time: ran past the sandbox's 20000 ms limit (killed)"));
  const auto runtime = t.render(recorded("runtime_error"), {}, all_kinds);
  CHECK(has(runtime, "Your kernel failed while running: kf_forward returned 3"));
  const auto hack = t.render(recorded("hack_suspected"), {}, all_kinds);
  CHECK(has(hack, "games the check instead of computing the result: two calls on the same inputs disagree"));
  auto no_runtime = feedback_kinds::parse({"compile", "correctness"});
  REQUIRE(no_runtime.ok());
  CHECK_FALSE(has(t.render(recorded("timeout"), {}, *no_runtime), "did not finish"));
}

TEST_CASE("a correct kernel: its speedup, against the episode's best, and its profile") {
  auto v = recorded("ok");
  turn_context ctx;
  ctx.turn = 3;
  ctx.best_speedup = 0.8;
  kernel_profile p;
  p.kernel = "kf_rows_kernel(kf_ptrs, kf_rows)";
  p.duration_us = 241.5;
  p.achieved_occupancy_pct = 47.2;
  p.dram_throughput_pct = 81.4;
  p.sm_throughput_pct = 22.9;
  p.stalls = {{"long_scoreboard", 61.0}, {"barrier", 12.0}};
  ctx.profile = p;
  const auto text = observation_template::embedded().render(v, ctx, all_kinds);
  INFO(text);
  CHECK(has(text, "## Turn 3: correct"));
  CHECK(has(text, "0.2603 ms against the baseline's 0.2973 ms, 1.14x the baseline (faster than the episode's best so far, 0.80x)"));
  CHECK(has(text, "Nsight Compute on your slowest kernel (kf_rows_kernel(kf_ptrs, kf_rows)): 241.5 us, achieved occupancy 47 %, "
                  "DRAM throughput 81 % of peak, SM throughput 23 % of peak; warps stalled most on long_scoreboard (61 %), barrier (12 %)"));
  CHECK(has(text, "Make it faster if you can"));
  ctx.best_speedup = 2.0;
  ctx.profile.reset();
  const auto behind = observation_template::embedded().render(v, ctx, all_kinds);
  CHECK(has(behind, "(the episode's best so far is 2.00x)"));
  CHECK_FALSE(has(behind, "Nsight Compute"));
}

TEST_CASE("a correct kernel's profile comes from its verdict, where the sandbox took one") {
  auto v = recorded("ok");
  kforge::sandbox::run_outcome run;
  run.status = wire::VerdictStatus::ok;
  kernel_profile p;
  p.kernel = "rows_kernel(float const*, float*)";
  p.duration_us = 241.5;
  p.achieved_occupancy_pct = 47.2;
  p.dram_throughput_pct = 81.4;
  p.sm_throughput_pct = 22.9;
  p.stalls = {{"waiting at a barrier", 40.0}};
  run.profile = p;
  run.profile_ms = 1800;
  kforge::sandbox::encode_run(run, v);
  turn_context ctx;
  ctx.turn = 2;
  const auto text = observation_template::embedded().render(v, ctx, all_kinds);
  INFO(text);
  CHECK(has(text, "Nsight Compute on your slowest kernel (rows_kernel(float const*, float*)): 241.5 us, achieved occupancy 47 %"));
  CHECK(has(text, "warps stalled most on waiting at a barrier (40 %)"));
  // Through the episode's bookkeeping too: the observed turn carries the verdict's profile.
  wire::ScoredT scored;
  scored.verdict = std::make_unique<wire::VerdictT>();
  kforge::sandbox::encode_run(run, *scored.verdict);
  const auto observed = observed_turn(scored);
  REQUIRE(observed.profile.has_value());
  CHECK(observed.profile->sm_throughput_pct == doctest::Approx(22.9));
  auto no_profile = feedback_kinds::parse({"timing"});
  REQUIRE(no_profile.ok());
  CHECK_FALSE(has(observation_template::embedded().render(v, ctx, *no_profile), "Nsight Compute"));
}

TEST_CASE("an observation template is checked when loaded: sections and placeholders") {
  std::string text;
  for (const auto& s : observation_template::section_names()) text += "[[" + s + "]]\nsome words\n";
  CHECK(observation_template::from_text(text, "t").ok());
  const auto unknown_placeholder = observation_template::from_text(text + "{{nope}}\n", "t");
  REQUIRE_FALSE(unknown_placeholder.ok());
  CHECK(has(unknown_placeholder.message(), "{{nope}}"));
  CHECK(has(unknown_placeholder.message(), "[[next_faster]]"));
  const auto unknown_section = observation_template::from_text("[[header]]\n[[extra]]\n", "t");
  REQUIRE_FALSE(unknown_section.ok());
  CHECK(has(unknown_section.message(), "t:2: unknown section [[extra]]"));
  const auto missing = observation_template::from_text("[[header]]\n{{turn}}\n", "t");
  REQUIRE_FALSE(missing.ok());
  CHECK(has(missing.message(), "missing section(s) [[compile_errors]]"));
  const auto stray = observation_template::from_text("words\n" + text, "t");
  REQUIRE_FALSE(stray.ok());
  CHECK(has(stray.message(), "t:1: text before the first [[section]]"));
  CHECK_FALSE(feedback_kinds::parse({"timing", "speed"}).ok());
}

TEST_CASE("compiler messages: a code or a wording the table knows, and none for one it does not") {
  CHECK(explain_diagnostic("ptxas", "Entry function 'k' uses too much shared data (0x10000 bytes)").find("opt-in") != std::string::npos);
  CHECK(!explain_diagnostic("", "identifier \"x\" is undefined").empty());
  CHECK(explain_diagnostic("177-D", "function \"f\" was declared but never referenced").empty());
}
