// kforge compare's arithmetic on small hand-made verdict files (sandbox/eval_compare.hpp).

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <unistd.h>

#include "sandbox/eval_compare.hpp"

namespace {

using namespace kforge::sandbox;

std::string line(const std::string& task, const std::string& status, double speedup = -1) {
  std::string s = R"({"task":")" + task + R"(","status":")" + status + "\"";
  if (speedup >= 0) s += ",\"speedup\":" + std::to_string(speedup);
  return s + "}\n";
}

eval_by_task parse(const std::string& text) {
  auto r = parse_eval_verdicts(text, "test.jsonl");
  REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.message()));
  return *r;
}

}  // namespace

TEST_CASE("verdict lines are counted per task; a failing sample adds 0 to the speedup") {
  const auto e = parse(line("a", "ok", 2.0) + line("a", "wrong_answer") + "\n" +
                       line("a", "ok", 0.5) + line("a", "compile_error") + line("b", "ok"));
  REQUIRE(e.size() == 2);
  CHECK(e.at("a").samples == 4);
  CHECK(e.at("a").correct == 2);
  CHECK(e.at("a").pass_rate() == doctest::Approx(0.5));
  CHECK(e.at("a").mean_speedup() == doctest::Approx((2.0 + 0.5) / 4));
  CHECK(e.at("b").correct == 1);          // an ok verdict without a timing: passing, no speedup
  CHECK(e.at("b").correct_speedups.empty());
}

TEST_CASE("bad verdict files are refused with the file and line") {
  auto bad = parse_eval_verdicts(line("a", "ok", 1.0) + "{not json\n", "v.jsonl");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.message().find("v.jsonl:2: not a JSON object") != std::string::npos);
  auto no_task = parse_eval_verdicts(R"({"status":"ok"})" "\n", "v.jsonl");
  REQUIRE_FALSE(no_task.ok());
  CHECK(no_task.message().find("v.jsonl:1: no \"task\" string") != std::string::npos);
  auto bad_speed = parse_eval_verdicts(R"({"task":"a","status":"ok","speedup":"fast"})" "\n", "v.jsonl");
  REQUIRE_FALSE(bad_speed.ok());
  CHECK(bad_speed.message().find("\"speedup\" is not a finite number") != std::string::npos);
  auto compiled = parse_eval_verdicts(R"({"task":"a","status":"compiled"})" "\n", "v.jsonl");
  REQUIRE_FALSE(compiled.ok());
  CHECK(compiled.message().find("v.jsonl:1: a compile-only verdict") != std::string::npos);
  auto empty = parse_eval_verdicts("\n\n", "v.jsonl");
  REQUIRE_FALSE(empty.ok());
  CHECK(empty.message().find("no verdict lines") != std::string::npos);
  CHECK_FALSE(read_eval_verdicts("/nonexistent/v.jsonl").ok());
}

TEST_CASE("a comparison averages per task, pairs the tasks, and says what the interval shows") {
  // Task a: 1/2 -> 2/2; task b: 0/2 -> 1/2; task c: 2/2 -> 2/2. Speedups 1.0 where correct.
  const auto before = parse(line("a", "ok", 1.0) + line("a", "wrong_answer") +
                            line("b", "wrong_answer") + line("b", "compile_error") +
                            line("c", "ok", 1.0) + line("c", "ok", 1.0));
  const auto after = parse(line("a", "ok", 1.0) + line("a", "ok", 1.0) + line("b", "ok", 1.0) +
                           line("b", "runtime_error") + line("c", "ok", 1.0) + line("c", "ok", 1.0));
  auto c = compare_evals(before, after, 2000, 7);
  REQUIRE(c.ok());
  const auto& j = *c;
  CHECK(j["before"]["correct"] == 3);
  CHECK(j["after"]["correct"] == 5);
  CHECK(j["before"]["pass_rate"]["mean"].get<double>() == doctest::Approx(0.5));
  CHECK(j["after"]["pass_rate"]["mean"].get<double>() == doctest::Approx(5.0 / 6));
  // sample sd of {0.5, 0, 1}
  CHECK(j["before"]["pass_rate"]["sd"].get<double>() == doctest::Approx(0.5));
  CHECK(j["before"]["tasks_with_a_correct_sample"] == 2);
  CHECK(j["before"]["tasks_half_or_more_correct"] == 2);
  const auto& d = j["difference"]["pass_rate"];
  CHECK(d["estimate"].get<double>() == doctest::Approx(1.0 / 3));
  // Every task's difference is >= 0 and two are 0.5: the interval lies in [0, 0.5].
  CHECK(d["lo"].get<double>() >= 0.0);
  CHECK(d["hi"].get<double>() <= 0.5 + 1e-12);
  CHECK(d["lo"].get<double>() <= d["estimate"].get<double>());
  CHECK(j["tasks_rose"].size() == 2);
  CHECK(j["tasks_fell"].size() == 0);
  CHECK(j["tasks_same"] == 1);
  // The same files and seed give the same interval.
  auto again = compare_evals(before, after, 2000, 7);
  REQUIRE(again.ok());
  CHECK((*again)["difference"] == j["difference"]);
  CHECK(format_comparison(j).find("tasks whose pass rate rose / fell / stayed: 2 / 0 / 1") !=
        std::string::npos);
}

TEST_CASE("a difference every task shows is 'higher'; none at all is 'not shown different'") {
  std::string b, a;
  for (const char* t : {"a", "b", "c", "d", "e", "f"}) {
    b += line(t, "ok", 1.0) + line(t, "wrong_answer");
    a += line(t, "ok", 1.0) + line(t, "ok", 1.0);
  }
  auto up = compare_evals(parse(b), parse(a), 500, 1);
  REQUIRE(up.ok());
  CHECK((*up)["difference"]["pass_rate"]["word"] == "higher");
  CHECK((*up)["difference"]["pass_rate"]["lo"].get<double>() == doctest::Approx(0.5));
  CHECK((*up)["difference"]["mean_speedup"]["word"] == "higher");
  auto down = compare_evals(parse(a), parse(b), 500, 1);
  REQUIRE(down.ok());
  CHECK((*down)["difference"]["pass_rate"]["word"] == "lower");
  auto flat = compare_evals(parse(b), parse(b), 500, 1);
  REQUIRE(flat.ok());
  CHECK((*flat)["difference"]["pass_rate"]["word"] == "not shown different");
}

TEST_CASE("infra_error verdicts are the sandbox's failures: left out of the pass rate, counted") {
  const auto before = parse(line("a", "ok", 1.0) + line("a", "infra_error") + line("b", "wrong_answer") +
                            line("b", "ok", 1.0));
  CHECK(before.at("a").samples == 1);
  CHECK(before.at("a").infra_errors == 1);
  auto c = compare_evals(before, before, 500, 1);
  REQUIRE(c.ok());
  CHECK((*c)["before"]["infra_errors_left_out"] == 1);
  CHECK((*c)["before"]["pass_rate"]["mean"].get<double>() == doctest::Approx(0.75));
  CHECK(format_comparison(*c).find("infra_error verdicts (left out)") != std::string::npos);
  auto only_infra = compare_evals(before, parse(line("a", "infra_error") + line("b", "ok", 1.0)), 500, 1);
  REQUIRE_FALSE(only_infra.ok());
  CHECK(only_infra.message().find("after, task a: every verdict is an infra_error") != std::string::npos);
}

TEST_CASE("one task is refused: an interval over tasks needs at least two") {
  auto c = compare_evals(parse(line("a", "ok", 1.0)), parse(line("a", "wrong_answer")), 500, 1);
  REQUIRE_FALSE(c.ok());
  CHECK(c.message().find("at least 2 tasks") != std::string::npos);
}

TEST_CASE("files of different tasks are refused, naming the tasks") {
  auto c = compare_evals(parse(line("a", "ok", 1.0) + line("b", "ok", 1.0)),
                         parse(line("a", "ok", 1.0) + line("z", "ok", 1.0)), 500, 1);
  REQUIRE_FALSE(c.ok());
  CHECK(c.message().find("1 only before (b), 1 only after (z)") != std::string::npos);
  CHECK_FALSE(compare_evals(parse(line("a", "ok")), parse(line("a", "ok")), 10, 1).ok());
}

TEST_CASE("the command prints the table, writes JSON, and exits 2 on a bad file") {
  std::ostringstream out, err;
  compare_options o;
  o.before = "/nonexistent/before.jsonl";
  o.after = "/nonexistent/after.jsonl";
  CHECK(compare_command(o, out, err) == 2);
  CHECK(err.str().find("kforge compare: ") != std::string::npos);
  CHECK(err.str().find("before.jsonl") != std::string::npos);

  const auto dir = std::filesystem::temp_directory_path() / ("kf-compare-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "b.jsonl") << line("a", "ok", 0.5) << line("a", "wrong_answer") << line("b", "ok", 1.0);
  std::ofstream(dir / "a.jsonl") << line("a", "ok", 0.5) << line("a", "ok", 1.5) << line("b", "ok", 1.0);
  o.before = (dir / "b.jsonl").string();
  o.after = (dir / "a.jsonl").string();
  o.json = (dir / "c.json").string();
  out.str("");
  err.str("");
  CHECK(compare_command(o, out, err) == 0);
  CHECK(err.str().empty());
  CHECK(out.str().find("correct samples") != std::string::npos);
  CHECK(out.str().find("rose a: 1/2 -> 2/2") != std::string::npos);
  const auto j = nlohmann::json::parse(std::ifstream(dir / "c.json"));
  CHECK(j["after"]["file"] == o.after);
  CHECK(j["after"]["mean_speedup"]["mean"].get<double>() == doctest::Approx(1.0));  // (1.0 + 1.0) / 2
  CHECK(j["after"]["correct_speedup"]["median"].get<double>() == doctest::Approx(1.0));
  std::filesystem::remove_all(dir);
}

TEST_CASE("best of task: a task passes when any sample is correct, at its best speedup") {
  // a: one of three correct at 2x, another at 0.5x; b: none correct; c: only infra errors.
  const auto e = best_of_task(parse(line("a", "wrong_answer") + line("a", "ok", 2.0) + line("a", "ok", 0.5) +
                                    line("b", "compile_error") + line("b", "timeout") + line("c", "infra_error")));
  REQUIRE(e.size() == 3);
  CHECK(e.at("a").samples == 1);
  CHECK(e.at("a").correct == 1);
  CHECK(e.at("a").mean_speedup() == doctest::Approx(2.0));
  CHECK(e.at("b").samples == 1);
  CHECK(e.at("b").correct == 0);
  CHECK(e.at("b").mean_speedup() == 0.0);
  CHECK(e.at("c").samples == 0);
  CHECK(e.at("c").infra_errors == 1);
  // Per sample, a's pass rate is 2/3 and b's 0; at equal budget per task the best counts.
  const auto other = best_of_task(parse(line("a", "ok", 1.0) + line("b", "ok", 1.5) + line("c", "ok", 1.0)));
  auto c = compare_evals(best_of_task(parse(line("a", "ok", 2.0) + line("b", "timeout") + line("c", "ok", 1.0))),
                         other, 500, 3);
  REQUIRE(c.ok());
  CHECK(c->at("difference").at("pass_rate").at("estimate").get<double>() == doctest::Approx(1.0 / 3));
  CHECK(c->at("difference").at("mean_speedup").at("estimate").get<double>() == doctest::Approx((-1.0 + 1.5) / 3));
}
