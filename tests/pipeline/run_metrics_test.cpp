// The head's reading of the stage metrics: when the loop has run dry (runtime/run_metrics.hpp).

#include <doctest/doctest.h>

#include <cmath>
#include <set>
#include <sstream>

#include "actors/stage_metrics.hpp"
#include "runtime/prometheus_text.hpp"
#include "runtime/run_metrics.hpp"
#include "stages/reward.hpp"

namespace {

namespace wire = kforge::wire;

using kforge::pipeline::loop_ran_dry;
using kforge::pipeline::metrics_board;
using kforge::pipeline::refill_policy;

void row(metrics_board& b, const std::string& kind, std::uint64_t received, std::uint64_t sent,
         std::uint64_t judged = 0) {
  wire::StageMetricsT m;
  m.stage = kind;
  m.kind = kind;
  m.process = "head";
  m.received = received;
  m.sent = sent;
  if (judged > 0) {
    auto c = std::make_unique<wire::CounterT>();
    c->name = "groups_judged";
    c->value = judged;
    m.extra.push_back(std::move(c));
  }
  b.latest[kind] = std::move(m);
}

}  // namespace

TEST_CASE("the loop has run dry when every released group is judged, the trainer idle, and groups dropped") {
  metrics_board b;
  row(b, "task_generator", 0, 24, 24);  // 3 steps of 8 groups requested, all judged
  row(b, "buffer", 192, 2);             // 2 batches sent; the third is short:
  b.latest["buffer"].dropped = 16;      // groups dropped
  row(b, "trainer", 2, 2);              // both trained and published
  CHECK(loop_ran_dry(b, 24, 0));

  SUBCASE("a report from before the driver's latest release is not a dry loop") {
    CHECK_FALSE(loop_ran_dry(b, 32, 0));  // the gap between steps: 8 more groups released
  }
  SUBCASE("no drop since the last refill: the batch filled, or something else is wrong") {
    CHECK_FALSE(loop_ran_dry(b, 24, 16));
  }
  SUBCASE("a group still out (generating, in the sandbox) is work in progress") {
    row(b, "task_generator", 0, 24, 23);
    CHECK_FALSE(loop_ran_dry(b, 24, 0));
  }
  SUBCASE("a batch the trainer has not reported receiving is in transit (or the trainer is busy)") {
    row(b, "buffer", 192, 3);
    b.latest["buffer"].dropped = 16;
    CHECK_FALSE(loop_ran_dry(b, 24, 0));
  }
  SUBCASE("a trainer step that failed is a stall to report, not a dry loop") {
    row(b, "trainer", 3, 2);
    b.latest["trainer"].errors = 1;
    row(b, "buffer", 192, 3);
    b.latest["buffer"].dropped = 16;
    CHECK_FALSE(loop_ran_dry(b, 24, 0));
  }
  SUBCASE("nothing requested yet is a run starting, not a dry loop") {
    metrics_board empty;
    row(empty, "buffer", 0, 0);
    empty.latest["buffer"].dropped = 1;
    CHECK_FALSE(loop_ran_dry(empty, 0, 0));
  }
}

TEST_CASE("what a process that exited or fell silent said it held no longer holds up draining") {
  using namespace std::chrono_literals;
  metrics_board b;
  auto held = [&](const std::string& stage, const std::string& process, std::uint64_t depth) {
    wire::StageMetricsT m;
    m.stage = stage;
    m.kind = "sandbox_worker";
    m.process = process;
    m.queue_depth = depth;
    b.latest[stage] = std::move(m);
  };
  const auto t0 = std::chrono::steady_clock::time_point{} + 100s;
  held("sandbox_worker@a", "a", 4);
  held("sandbox_worker@b", "b", 2);
  held("sandbox_worker@c", "c", 1);
  b.heard("a", t0);
  b.heard("b", t0);
  b.heard("c", t0);
  CHECK(b.queued(false, t0 + 1s) == 7);
  b.gone.insert("c");  // exited (a child the head saw end)
  CHECK(b.queued(false, t0 + 1s) == 6);
  // a stops reporting (killed on another node, or its link is down); b goes on.
  b.heard("b", t0 + 6s);
  CHECK(b.queued(false, t0 + 5s) == 6);
  CHECK(b.queued(false, t0 + 6s) == 2);
  // a reports again (its link came back): what it holds counts again.
  b.heard("a", t0 + 7s);
  CHECK(b.queued(false, t0 + 7s) == 6);
}

TEST_CASE("refills: what the driver released, a new drop each time, and a limit without progress") {
  // Async, 8 groups a step, lookahead 3, from step 0 of 100: at version 0 steps 0..2 are out.
  refill_policy p(8, 3, 0, 100);
  metrics_board b;
  row(b, "task_generator", 0, 24, 24);
  row(b, "buffer", 160, 0);
  b.latest["buffer"].dropped = 8;
  row(b, "trainer", 0, 0);
  CHECK(p.due(b, 0));
  CHECK(p.sent() == 1);
  CHECK_FALSE(p.due(b, 0));  // the refill's 8 groups are not in the generator's report yet
  row(b, "task_generator", 0, 32, 32);
  CHECK_FALSE(p.due(b, 0));  // reported and judged, but nothing more was dropped: not dry
  for (std::uint64_t i = 2; i <= refill_policy::max_in_a_row; ++i) {
    row(b, "task_generator", 0, 24 + 8 * i, 24 + 8 * i);
    b.latest["buffer"].dropped = 8 * i;
    CHECK(p.due(b, 0));
  }
  CHECK(p.in_a_row() == refill_policy::max_in_a_row);
  row(b, "task_generator", 0, 24 + 8 * 9, 24 + 8 * 9);
  b.latest["buffer"].dropped = 8 * 9;
  CHECK_FALSE(p.due(b, 0));  // the limit: the stall report comes instead
  // A new version resets the run of refills; at version 1 step 3 is out too (8 more groups).
  row(b, "buffer", 160, 1);
  b.latest["buffer"].dropped = 8 * 10;
  row(b, "trainer", 1, 1);
  row(b, "task_generator", 0, 24 + 8 * 9 + 8, 24 + 8 * 9 + 8);
  CHECK(p.due(b, 1));
  CHECK(p.in_a_row() == 1);
  CHECK(p.sent() == refill_policy::max_in_a_row + 1);
}

TEST_CASE("sandbox time per judged candidate: summed over worker rows, averaged, grouped by phase") {
  using kforge::pipeline::sandbox_time_of;
  const auto worker = [](const std::string& name, std::uint64_t calls,
                         std::vector<std::pair<std::string, std::uint64_t>> extra) {
    wire::StageMetricsT m;
    m.stage = name;
    m.kind = "sandbox_worker";
    m.logic_calls = calls;
    for (auto& [k, v] : extra) {
      auto c = std::make_unique<wire::CounterT>();
      c->name = k;
      c->value = v;
      m.extra.push_back(std::move(c));
    }
    return m;
  };
  metrics_board b;
  // No sandbox counters (stand-ins): nothing to say.
  b.latest["w0"] = worker("w0", 4, {{"busy_us", 1000}});
  CHECK(sandbox_time_of(b).judged == 0);
  CHECK(kforge::pipeline::describe(sandbox_time_of(b)).empty());
  // Two worker threads of one sandbox: 4 candidates in all.
  b.latest["w0"] = worker("w0", 3, {{"compile_us", 6'000'000}, {"gpu_wait_us", 2'000'000},
                                    {"prepare_us", 400'000}, {"check_us", 400'000},
                                    {"trials_us", 1'000'000}, {"start_us", 200'000}});
  b.latest["w1"] = worker("w1", 1, {{"compile_us", 2'000'000}, {"load_us", 200'000},
                                    {"compare_us", 200'000}, {"baseline_us", 1'000'000},
                                    {"unload_us", 200'000}});
  const auto t = sandbox_time_of(b);
  CHECK(t.judged == 4);
  CHECK(t.compile_s == doctest::Approx(2.0));
  CHECK(t.gpu_wait_s == doctest::Approx(0.5));
  CHECK(t.verify_s == doctest::Approx(0.3));
  CHECK(t.timing_s == doctest::Approx(0.5));
  CHECK(t.other_s == doctest::Approx(0.1));
  CHECK(kforge::pipeline::describe(t) ==
        "sandbox per judged candidate (4): nvcc 2.00 s, waiting for the GPU 0.50 s, verifying "
        "0.30 s, timing 0.50 s, other 0.10 s");
  CHECK(t.reused == 0);
  // Verdicts copied to a group's repeated kernels (stages/verdict_reuse.hpp) are said.
  b.latest["w1"] = worker("w1", 1, {{"compile_us", 2'000'000}, {"load_us", 200'000},
                                    {"compare_us", 200'000}, {"baseline_us", 1'000'000},
                                    {"unload_us", 200'000}, {"reused_verdicts", 2},
                                    {"reused_earlier_verdicts", 3}});
  const auto r = sandbox_time_of(b);
  CHECK(r.reused == 2);
  CHECK(r.reused_earlier == 3);
  CHECK(to_json(r)["reused"] == 2);
  CHECK(to_json(r)["reused_earlier"] == 3);
  CHECK(kforge::pipeline::describe(r).find("; 2 of them repeated a kernel of their group (verdict reused); 3 "
                                           "repeated a kernel judged for their prompt in an earlier group") !=
        std::string::npos);
}

TEST_CASE("the progress line: pass rate and mean reward over the verdicts so far, time left under a limit") {
  metrics_board b;
  row(b, "sampler", 0, 40);
  row(b, "reward", 20, 20);
  for (auto [name, value] : {std::pair<const char*, std::uint64_t>{"status_ok", 5},
                             {kforge::pipeline::reward_sum_counter, 3'000'000}}) {
    auto c = std::make_unique<wire::CounterT>();
    c->name = name;
    c->value = value;
    b.latest["reward"].extra.push_back(std::move(c));
  }
  const auto text = kforge::pipeline::progress_text(b, 3, 10, 100.0, 450.0);
  CHECK(text.find("step 3/10") == 0);
  CHECK(text.find("verdicts 20 (pass 25.0%, reward 0.150)") != std::string::npos);
  CHECK(text.find("100.0 s (350.0 s left)") != std::string::npos);
  // No verdicts yet: no rates; no time limit: no time left.
  metrics_board empty;
  const auto quiet = kforge::pipeline::progress_text(empty, 0, 10, 5.0, 0.0);
  CHECK(quiet.find("pass") == std::string::npos);
  CHECK(quiet.find("left") == std::string::npos);
}

TEST_CASE("the metrics in Prometheus text format: stage counts, counters, run gauges") {
  metrics_board b;
  row(b, "sampler", 8, 64);
  row(b, "reward", 40, 40);
  auto add = [&](const char* name, std::uint64_t v) {
    auto c = std::make_unique<wire::CounterT>();
    c->name = name;
    c->value = v;
    b.latest["reward"].extra.push_back(std::move(c));
  };
  add("status_ok", 10);
  add(kforge::pipeline::reward_sum_counter, 20'000'000);  // 20.0 over 40 verdicts
  b.latest["reward"].stage = "reward \"main\"";           // a label value that needs escaping
  kforge::pipeline::run_gauges g;
  g.policy_version = 3;
  g.steps = 100;
  kforge::pipeline::gpu_group_use u;
  u.name = "rollout";
  u.idle_fraction = 0.25;
  g.gpu_groups.push_back(u);
  const auto text = kforge::pipeline::prometheus_text(b, g);
  INFO(text);
  auto has = [&](const std::string& line) { return text.find(line + "\n") != std::string::npos; };
  CHECK(has("# TYPE kforge_stage_sent_total counter"));
  CHECK(has("kforge_stage_sent_total{stage=\"sampler\",kind=\"sampler\",process=\"head\"} 64"));
  CHECK(has("kforge_stage_received_total{stage=\"reward \\\"main\\\"\",kind=\"reward\",process=\"head\"} 40"));
  CHECK(has("kforge_stage_counter_total{stage=\"reward \\\"main\\\"\",kind=\"reward\",process=\"head\",name=\"status_ok\"} 10"));
  CHECK(has("# TYPE kforge_policy_version gauge"));
  CHECK(has("kforge_policy_version 3"));
  CHECK(has("kforge_run_steps 100"));
  CHECK(has("kforge_verdict_pass_rate 0.25"));
  CHECK(has("kforge_reward_mean 0.5"));
  CHECK(has("kforge_gpu_group_busy_fraction{group=\"rollout\"} 0.75"));
  // Every sample line is `name{labels} value` or `name value`, under its family's TYPE line.
  std::istringstream lines(text);
  std::set<std::string> typed;
  for (std::string l; std::getline(lines, l);) {
    if (l.rfind("# TYPE ", 0) == 0) {
      typed.insert(l.substr(7, l.find(' ', 7) - 7));
      continue;
    }
    if (l.rfind("# HELP ", 0) == 0) continue;
    const auto name = l.substr(0, std::min(l.find('{'), l.find(' ')));
    CHECK_MESSAGE(typed.count(name) == 1, l);
    CHECK_MESSAGE(std::isfinite(std::stod(l.substr(l.rfind(' ') + 1))), l);
  }
}

TEST_CASE("a stage still building its logic holds the stall clock until it reports itself started") {
  metrics_board b;
  row(b, "sandbox_pool", 32, 0);
  CHECK_FALSE(b.starting());
  const auto worker = [&](std::uint64_t starting, const std::string& process) {
    wire::StageMetricsT m;
    m.stage = "sandbox_worker@" + process;
    m.kind = "sandbox_worker";
    m.process = process;
    auto c = std::make_unique<wire::CounterT>();
    c->name = kforge::actors::starting_gauge;
    c->value = starting;
    m.extra.push_back(std::move(c));
    b.latest[m.stage] = std::move(m);
  };
  worker(1, "head");
  CHECK(b.starting());
  worker(0, "head");  // its reference servers and runners are up
  CHECK_FALSE(b.starting());
  worker(1, "node1");
  CHECK(b.starting());
  b.gone.insert("node1");  // a process that exited starts nothing more
  CHECK_FALSE(b.starting());
}
