// `kforge report` on crafted run directories: charts, numbers and escaping in the page; a
// malformed line named by file and line; missing inputs said, never a crash.
#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>

#include "report/report.hpp"
#include "report/svg_chart.hpp"
#include "messages/recording.hpp"

namespace fs = std::filesystem;
using namespace kforge;

namespace {

struct run_dir {
  fs::path path;
  explicit run_dir(const std::string& name)
      : path(fs::temp_directory_path() / ("kf-report-" + name + "-" + std::to_string(::getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path / "best");
  }
  ~run_dir() { fs::remove_all(path); }
  void write(const std::string& file, const std::string& text) const {
    std::ofstream(path / file) << text;
  }
};

/// A reward metrics row at time t with the given verdict counts (cumulative).
std::string reward_row(double t, int ok, int compile_error, int hack, int scored, long reward_micro,
                       int fast) {
  std::ostringstream o;
  o << R"({"process":"head","stage":"reward","kind":"reward","received":)" << scored
    << R"(,"sent":)" << scored << R"(,"dropped":0,"errors":0,"queue_depth":)" << int(t * 4)
    << R"(,"extra":{"status_ok":)" << ok << R"(,"status_compile_error":)" << compile_error
    << R"(,"status_hack_suspected":)" << hack << R"(,"scored":)" << scored
    << R"(,"reward_sum_micro":)" << reward_micro << R"(,"speedup_1_1.5":)" << ok - fast
    << R"(,"speedup_ge_4":)" << fast << R"(},"t":)" << t << "}\n";
  return o.str();
}

std::string sampler_row(double t, int sent) {
  return R"({"process":"head","stage":"sampler/0","kind":"sampler","received":1,"sent":)" +
         std::to_string(sent) + R"(,"queue_depth":2,"extra":{},"t":)" + std::to_string(t) + "}\n";
}

void craft(const run_dir& d, bool with_train) {
  d.write("manifest.toml", "[run]\nname = \"nightly <b>&amp</b>\"\nsteps = 3\n");
  d.write("summary.json", R"({"outcome": "completed", "steps": 3, "versions": 3,
    "elapsed_s": 12.5, "balanced": true, "stand_ins": false,
    "checks": [{"check": "scored: reward sent = buffer received", "left": 40, "right": 40, "ok": true}],
    "stages": [{"stage": "reward", "process": "head", "received": 40, "sent": 40, "dropped": 0,
                "errors": 0, "queue_depth": 0, "latency_p50_us": 12.0, "latency_p99_us": 40.0,
                "last_error": "<script>alert(1)</script>"}],
    "processes": [], "mode": "async", "loop_s": 7.5, "seconds_per_step": 2.5,
    "gpu_groups": [{"name": "rollout", "gpus": [0], "busy_s": 6.0, "elapsed_s": 7.5,
                    "idle_fraction": 0.2, "stages": [{"stage": "sampler/0", "kind": "sampler",
                                                      "busy_s": 6.0, "busy_fraction": 0.8}]}]})");
  d.write("metrics.jsonl", sampler_row(0.25, 8) + reward_row(0.25, 2, 5, 1, 10, 5'000'000, 0) +
                               sampler_row(0.5, 24) + reward_row(0.5, 10, 8, 1, 25, 18'000'000, 3) +
                               "\n" +  // blank lines are fine
                               sampler_row(0.75, 40) +
                               reward_row(0.75, 20, 12, 2, 40, 31'000'000, 7));
  if (with_train)
    d.write(
        "train.jsonl",
        R"({"step": 1, "policy_version": 1, "loss": 0.5, "kl": 0.001, "kl_coef": 0.05, "reward_mean": 0.25, "tokens_per_s": 900, "clip_fraction": 0.1, "grad_norm": 1.5, "samples": 40, "equal_groups": 2, "draw_signal_groups": 1}
{"step": 2, "policy_version": 2, "loss": 0.4, "kl": 0.002, "kl_coef": 0.05, "reward_mean": 0.5, "tokens_per_s": 950, "clip_fraction": 0.1, "grad_norm": 1.2, "samples": 36, "equal_groups": 3, "draw_signal_groups": 2}
{"step": 3, "policy_version": 3, "loss": 0.3, "kl": 0.004, "kl_coef": 0.06, "reward_mean": 0.75, "tokens_per_s": 1000, "clip_fraction": 0.2, "grad_norm": 1.1, "samples": 30, "equal_groups": 1, "draw_signal_groups": 0}
)");
  d.write("best/l1__relu.cu", "// the kernel\n");
  d.write("best/l1__relu.json", R"({"task": "l1/relu<x>", "speedup": 4.25, "candidate_ms": 0.5,
    "baseline_ms": 2.125, "policy_version": 2, "source": "l1__relu.cu",
    "verdict": {"status": "ok", "audit": ""}})");
}

std::string render(const run_dir& d) {
  auto html = pipeline::render_report(d.path.string(), d.path.string());
  REQUIRE_MESSAGE(html.ok(), (html.ok() ? "" : html.message()));
  return *html;
}

bool has(const std::string& s, const std::string& what) {
  return s.find(what) != std::string::npos;
}

}  // namespace

TEST_CASE("the report draws the run's charts and tables, every text escaped") {
  run_dir d("full");
  craft(d, true);
  const auto html = render(d);
  INFO(html.substr(0, 4000));
  CHECK(has(html, "<!DOCTYPE html>"));
  CHECK_FALSE(has(html, "<script"));  // no scripts of its own, and none let in from the data
  CHECK(has(html, "&lt;script&gt;alert(1)&lt;/script&gt;"));
  CHECK(has(html, "nightly &lt;b&gt;&amp;amp&lt;/b&gt;"));  // the run's name from manifest.toml
  CHECK_FALSE(has(html, "nightly <b>"));
  CHECK(has(html, "completed"));
  CHECK(has(html, "12.5 s"));
  // Time per step and each GPU group's idle share.
  CHECK(has(html, "<th>time per step</th><td>2.5 s (async mode"));
  CHECK(has(html, "<td>rollout</td><td>[0]</td><td class=\"n\">20%</td>"));
  CHECK(has(html, "sampler/0 80%"));
  // One chart per series family: reward, verdict rates, loss, KL, KL coefficient, ...
  std::size_t charts = 0;
  for (auto at = html.find("<svg"); at != std::string::npos; at = html.find("<svg", at + 1))
    ++charts;
  CHECK(charts >= 8);
  CHECK(has(html, "Reward mean per training step"));
  CHECK(has(html, "KL coefficient"));
  CHECK(has(html, "Training batch: samples and groups"));
  CHECK(has(html, "groups with a signal only against the draws"));
  CHECK(has(html, "pass (ok)"));
  CHECK(has(html, "Queue depth per stage"));
  CHECK(has(html, "candidates (samplers sent)"));
  // Whole-run tables from the last counters: 20 ok of 34 judged verdicts, 7 of 20 at >= 4x.
  CHECK(has(html, "<td>compile_error</td><td class=\"n\">12</td>"));
  CHECK(has(html, "<td>&gt;= 4x</td><td class=\"n\">7</td><td class=\"n\">35%</td>"));
  CHECK(has(html, "mean reward 0.775"));  // 31 / 40
  // The best kernel, linked relative to the page.
  CHECK(has(html, "l1/relu&lt;x&gt;"));
  CHECK(has(html, "4.25x"));
  CHECK(has(html, "href=\"best/l1__relu.cu\""));
  // Every section has its data but the per-level table, which reads the verdict recordings.
  const auto first = html.find("not available");
  CHECK(first == html.find("not available: no verdict recordings"));
  CHECK(html.find("not available", first + 1) == std::string::npos);
}

TEST_CASE("a malformed line is an error naming its file and line") {
  run_dir d("bad");
  craft(d, true);
  d.write("metrics.jsonl",
          sampler_row(0.25, 8) + sampler_row(0.5, 9) + "{\"stage\": \"x\", oops\n");
  auto html = pipeline::render_report(d.path.string(), d.path.string());
  REQUIRE_FALSE(html.ok());
  CHECK(has(html.message(), (d.path / "metrics.jsonl").string() + ":3: not valid JSON"));

  d.write("metrics.jsonl", sampler_row(0.25, 8) +
                               R"({"stage": "x", "kind": "reward", "t": 1, "sent": -4})"
                               "\n");
  html = pipeline::render_report(d.path.string(), d.path.string());
  REQUIRE_FALSE(html.ok());
  CHECK(has(html.message(), "metrics.jsonl:2: field \"sent\": not a non-negative integer"));

  d.write("metrics.jsonl", sampler_row(0.25, 8));
  d.write("train.jsonl", "{\"step\": 1}\n[1, 2]\n");
  html = pipeline::render_report(d.path.string(), d.path.string());
  REQUIRE_FALSE(html.ok());
  CHECK(has(html.message(), "train.jsonl:2: not a JSON object"));

  // The command says it and writes nothing.
  std::ostringstream out, err;
  CHECK(pipeline::report_command({d.path.string(), std::nullopt}, out, err) == 1);
  CHECK(has(err.str(), "train.jsonl:2"));
  CHECK_FALSE(fs::exists(d.path / "report.html"));
}

TEST_CASE("missing inputs make their sections say \"not available\"") {
  run_dir d("partial");
  craft(d, false);
  const auto html = render(d);
  CHECK(has(html, "not available: no train.jsonl"));
  CHECK(has(html, "<svg"));  // the metrics charts are still drawn

  // An empty run directory still gives a page, every section saying what is missing.
  run_dir empty("empty");
  const auto bare = render(empty);
  CHECK(has(bare, "not available: no summary.json"));
  CHECK(has(bare, "not available: no metrics.jsonl"));
  CHECK(has(bare, "not available: no best/*.json"));

  // The command writes RUN_DIR/report.html by default, or --out.
  std::ostringstream out, err;
  CHECK(pipeline::report_command({d.path.string(), std::nullopt}, out, err) == 0);
  CHECK(fs::exists(d.path / "report.html"));
  const auto elsewhere = d.path / "sub" / "r.html";
  fs::create_directories(elsewhere.parent_path());
  CHECK(pipeline::report_command({d.path.string(), elsewhere.string()}, out, err) == 0);
  std::ifstream f(elsewhere);
  std::stringstream ss;
  ss << f.rdbuf();
  CHECK(has(ss.str(), "href=\"../best/l1__relu.cu\""));
  CHECK(pipeline::report_command({(d.path / "nope").string(), std::nullopt}, out, err) == 1);
  CHECK(has(err.str(), "not a run directory"));
}

TEST_CASE("train.jsonl of earlier runs into the same directory is left out") {
  run_dir d("restart");
  craft(d, false);
  d.write("train.jsonl",
          "{\"step\": 1, \"loss\": 9}\n{\"step\": 2, \"loss\": 9}\n"
          "{\"step\": 1, \"loss\": 0.5}\n{\"step\": 2, \"loss\": 0.25}\n");
  const auto html = render(d);
  CHECK(has(html, "2 line(s) of earlier runs"));
}

TEST_CASE("numbers and text for the page") {
  using pipeline::format_number;
  CHECK(format_number(2.5) == "2.5");
  CHECK(format_number(0) == "0");
  CHECK(format_number(123456) == "123456");
  CHECK(format_number(0.00314159, 3) == "0.00314");
  CHECK(pipeline::html_escape("a<b>&\"'") == "a&lt;b&gt;&amp;&quot;&#39;");
  pipeline::chart_series s{"x<y", {0, 1, 2}, {1, 4, 9}};
  const auto svg = pipeline::svg_line_chart({"t", "step", "v"}, {s});
  CHECK(has(svg, "<polyline"));
  CHECK(has(svg, "x&lt;y"));
  CHECK_FALSE(pipeline::has_points({pipeline::chart_series{"none", {}, {}}}));
}

TEST_CASE("a stand-in run's report says at the top that its kernels and speedups are synthetic") {
  run_dir d("standin");
  craft(d, true);
  CHECK_FALSE(has(render(d), "id=\"stand-in\""));  // every stage real: no such line

  // The run of deploy/manifests/stand_in.toml: stand-in sampler, sandbox and trainer.
  std::ifstream f(KFORGE_SOURCE_DIR "/deploy/manifests/stand_in.toml");
  d.write("manifest.toml", std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>()));
  d.write("summary.json", R"({"outcome": "completed", "steps": 3, "stand_ins": true})");
  auto html = render(d);
  const auto banner = html.find("<p class=\"bad\" id=\"stand-in\">Stand-in run: the kernels and speedups in "
                                "this report are synthetic");
  INFO(html.substr(0, 2000));
  REQUIRE(banner != std::string::npos);
  CHECK(banner < html.find("<table"));  // before anything else about the run
  CHECK(has(html, "Stand-in stages: sampler, sandbox_worker, trainer."));

  // A snapshot that does not parse still gets the line, without the stage names.
  d.write("manifest.toml", "[run]\nname = \"x\"\n");
  html = render(d);
  CHECK(has(html, "the kernels and speedups in this report are synthetic"));
  CHECK_FALSE(has(html, "Stand-in stages"));
}

namespace {

/// A packed verdict of `task` (its category given) with the kernel `speedup` times faster than the
/// reference when ok.
messages::envelope field_verdict(const std::string& task, const std::string& category, wire::VerdictStatus st,
                                 double speedup) {
  wire::VerdictT v;
  v.candidate = std::make_unique<wire::CandidateT>();
  v.candidate->task = std::make_unique<wire::TaskT>();
  v.candidate->task->id = task;
  v.candidate->task->category = category;
  v.status = st;
  if (st == wire::VerdictStatus::ok) {
    v.candidate_timing = std::make_unique<wire::TimingT>();
    v.candidate_timing->median_ms = 1.0;
    v.baseline_timing = std::make_unique<wire::TimingT>();
    v.baseline_timing->median_ms = speedup;
  }
  return messages::pack(messages::header{}, v);
}

}  // namespace

TEST_CASE("the recorded verdicts are counted per task, per level and per category, as kforge eval counts") {
  run_dir d("field");
  craft(d, true);
  CHECK(has(render(d), "no verdict recordings"));
  fs::create_directories(d.path / "recordings");
  fs::create_directories(d.path / "recordings-1");  // a resumed run's earlier leg
  using st = wire::VerdictStatus;
  {
    // l1/relu: 2 samples, one 2x; l1/softmax: never correct; kb/l2/7_Gemm: 1.5x and 0.5x.
    auto w = messages::recording_writer::create((d.path / "recordings" / "verdicts@head.kfrec").string(), "verdicts");
    REQUIRE(w.ok());
    for (const auto& e : {field_verdict("l1/relu", "elementwise", st::ok, 2.0),
                          field_verdict("l1/relu", "elementwise", st::compile_error, 0),
                          field_verdict("l1/softmax", "reduction", st::wrong_answer, 0),
                          field_verdict("kb/l2/7_Gemm", "fused", st::ok, 1.5)})
      REQUIRE(w->write(e, 1).ok());
    REQUIRE(w->close().ok());
    auto earlier = messages::recording_writer::create((d.path / "recordings-1" / "verdicts@head.kfrec").string(),
                                                      "verdicts");
    REQUIRE(earlier.ok());
    REQUIRE(earlier->write(field_verdict("kb/l2/7_Gemm", "fused", st::ok, 0.5), 1).ok());
    REQUIRE(earlier->close().ok());
  }
  // A writer that died mid-record: the whole records before it count, and the page says so.
  std::ofstream(d.path / "recordings-1" / "verdicts@head.kfrec", std::ios::app) << "\x40\x00";
  const auto html = render(d);
  CHECK(has(html, "5 verdicts from 2 recording(s)"));
  // all: 3 tasks, 2 correct; fast_1 2 of 3 (relu 2x, gemm 1.5x), fast_1.5 1 (gemm's 1.5 is not
  // above 1.5), fast_2 0 (2.0 is not above 2); correct kernels 2, 1.5, 0.5: geomean 1.145, median 1.5.
  CHECK(has(html, "<tr><td>all</td><td class=\"n\">3</td><td class=\"n\">66.7%</td>"));
  CHECK(has(html, "<td class=\"n\">1.14x</td><td class=\"n\">1.5x</td>"));
  // l1: relu correct (mean over samples 1/2), softmax not: 50% best, 25% mean.
  CHECK(has(html, "<tr><td>l1</td><td class=\"n\">2</td><td class=\"n\">50%</td><td class=\"n\">25%</td>"));
  CHECK(has(html, "<tr><td>l2</td><td class=\"n\">1</td><td class=\"n\">100%</td><td class=\"n\">100%</td>"));
  CHECK(has(html, "<tr><td>reduction</td><td class=\"n\">1</td><td class=\"n\">0%</td><td class=\"n\">0%</td>"
                  "<td class=\"n\">0%</td><td class=\"n\">0%</td><td class=\"n\">0%</td><td class=\"n\">-</td>"));
  CHECK(has(html, "Counted up to a torn record"));
}
