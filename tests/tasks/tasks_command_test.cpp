// `kforge tasks ...` through tasks_command: output, exit codes and errors.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <unistd.h>

#include "tasks/task_parser.hpp"
#include "tasks/tasks_command.hpp"

using namespace kforge::tasks;

namespace {

struct ran {
  int code;
  std::string out, err;
};

ran run(tasks_options opt) {
  std::ostringstream out, err;
  const int code = tasks_command(opt, out, err);
  return {code, out.str(), err.str()};
}

tasks_options action(const std::string& a) {
  tasks_options o;
  o.action = a;
#ifdef KFORGE_TASK_CHECK_SERVER
  o.check_server = {KFORGE_TASK_CHECK_SERVER};
#endif
  return o;
}

const std::string data_dir = std::string(KFORGE_TEST_DATA) + "/data/";

}  // namespace

TEST_CASE("tasks list: the built-in library with a count per category") {
  auto r = run(action("list"));
  CHECK(r.code == 0);
  CHECK(r.out.find("l1/relu ") != std::string::npos);
  CHECK(r.out.find(" tasks: conv ") != std::string::npos);

  auto o = action("list");
  o.category = "gemm";
  r = run(o);
  CHECK(r.code == 0);
  CHECK(r.out.find("l1/matmul_square") != std::string::npos);
  CHECK(r.out.find("l1/relu ") == std::string::npos);

  o.category = "matmul";
  r = run(o);
  CHECK(r.code == 2);
  CHECK(r.err.find("unknown category 'matmul'") != std::string::npos);
}

TEST_CASE("tasks list and show read given files; a bad file is exit 2 naming its line") {
  auto o = action("list");
  o.files = {data_dir + "good.jsonl"};
  auto r = run(o);
  CHECK(r.code == 0);
  CHECK(r.out.find("3 tasks: gemm 1, other 1, reduction 1") != std::string::npos);

  o.files = {data_dir + "bad.jsonl"};
  r = run(o);
  CHECK(r.code == 2);
  CHECK(r.err.find("bad.jsonl:2: inputs[0].dtype: unknown dtype") != std::string::npos);
}

TEST_CASE("tasks show: one task as JSON that parses back; an unknown id is exit 2") {
  auto o = action("show");
  o.id = "l1/softmax_rows";
  auto r = run(o);
  REQUIRE(r.code == 0);
  auto t = parse_task(r.out, "show output");
  REQUIRE_MESSAGE(t.ok(), (t.ok() ? "" : t.message()));
  CHECK(t->id == "l1/softmax_rows");
  CHECK(t->provenance == "builtin:reduction.jsonl");

  o.id = "l1/no_such_task";
  r = run(o);
  CHECK(r.code == 2);
  CHECK(r.err.find("no task 'l1/no_such_task'") != std::string::npos);
}

TEST_CASE("tasks synth needs --out; an unknown action is exit 2") {
  auto o = action("synth");
  o.device = "cpu";
  auto r = run(o);
#ifdef KFORGE_TASKS_WITH_TORCH
  CHECK(r.code == 2);
  CHECK(r.err.find("--out FILE is required") != std::string::npos);
#else
  CHECK(r.code == 3);
#endif
  r = run(action("frobnicate"));
  CHECK(r.code == 2);
}

#ifdef KFORGE_TASKS_WITH_TORCH
TEST_CASE("tasks baseline times every reference and writes one JSON line per task") {
  const auto out_file = std::string("/tmp/kforge-baseline-test-") + std::to_string(::getpid());
  auto o = action("baseline");
  o.files = {data_dir + "good.jsonl"};
  o.device = "cpu";
  o.shapes = "smallest";
  o.trials = 5;
  o.out = out_file;
  auto r = run(o);
  CHECK_MESSAGE(r.code == 0, (r.out + r.err));
  CHECK(r.out.find("baseline: 3 references timed on cpu, 0 failed") != std::string::npos);
  std::ifstream f(out_file);
  int lines = 0;
  for (std::string line; std::getline(f, line); ++lines) {
    CHECK(line.find("\"median_ms\": ") != std::string::npos);
    CHECK(line.find("\"trials\": 5") != std::string::npos);
  }
  CHECK(lines == 3);
  std::remove(out_file.c_str());

  o.device = "tpu";  // not a device kforge knows
  CHECK(run(o).code == 2);
  o.device = "cpu";
  o.trials = 0;
  CHECK(run(o).code == 2);
  o.trials = 5;
  o.out = "/nonexistent-dir/x.jsonl";
  CHECK(run(o).code == 2);
}

TEST_CASE("tasks synth writes the kept tasks and ends with the rejection table") {
  const auto out_file = std::string("/tmp/kforge-synth-cmd-test-") + std::to_string(::getpid());
  auto o = action("synth");
  o.device = "cpu";
  o.count = 3;
  o.seed = 4;
  o.out = out_file;
  auto r = run(o);
  CHECK_MESSAGE(r.code == 0, (r.out + r.err));
  CHECK(r.out.find("synth: 3 kept of ") != std::string::npos);
  CHECK(r.out.find("output ignores an input") != std::string::npos);
  CHECK(r.out.find("written to " + out_file) != std::string::npos);
  auto tasks = load_task_file(out_file);
  REQUIRE_MESSAGE(tasks.ok(), (tasks.ok() ? "" : tasks.message()));
  CHECK(tasks->size() == 3);

  o.max_tries = 2;  // cannot keep 3 in 2 tries
  r = run(o);
  CHECK(r.code == 1);
  CHECK(r.err.find("--max-tries reached") != std::string::npos);
  o.max_tries = 0;
  o.device = "tpu";
  CHECK(run(o).code == 2);
  o.device = "cpu";
  o.exclude = {"/nonexistent-dir/bench.jsonl"};
  r = run(o);
  CHECK(r.code == 2);
  CHECK(r.err.find("--exclude") != std::string::npos);
  o.exclude.clear();
  o.out = "/nonexistent-dir/x.jsonl";
  CHECK(run(o).code == 2);
  std::remove(out_file.c_str());
}

TEST_CASE("tasks validate: per-task verdicts; parse, compile and degeneracy failures exit 1") {
  auto o = action("validate");
  o.files = {data_dir + "good.jsonl"};
  auto r = run(o);
  CHECK_MESSAGE(r.code == 0, (r.out + r.err));
  CHECK(r.out.find("ok    t/softmax_rows") != std::string::npos);
  CHECK(r.out.find("3 tasks on cpu, 3 ok, 0 failed") != std::string::npos);

  o.files = {data_dir + "bad.jsonl"};
  r = run(o);
  CHECK(r.code == 1);
  CHECK(r.out.find("ok    t/ok") != std::string::npos);
  CHECK(r.out.find("FAIL  " + data_dir + "bad.jsonl:2: inputs[0].dtype") != std::string::npos);
  CHECK(r.out.find("FAIL  t/no_compile: task 't/no_compile': reference: does not compile") !=
        std::string::npos);
  CHECK(r.out.find("FAIL  t/ignores_y: no output changes beyond the tolerance when input 'y'") !=
        std::string::npos);
  CHECK(r.out.find("4 tasks on cpu, 1 ok, 3 failed") != std::string::npos);

  o.device = "tpu";
  r = run(o);
  CHECK(r.code == 2);
  CHECK(r.err.find("expected cpu, cuda or cuda:N") != std::string::npos);
}
TEST_CASE("tasks validate: a reference that never returns is stopped at --time-limit-s") {
  // t/loops counts forever; the task after it must still be checked, by a fresh child.
  const std::string file = "/tmp/kforge-validate-loops-" + std::to_string(::getpid()) + ".jsonl";
  {
    std::ofstream f(file);
    const std::string head =
        R"({"category": "elementwise", "description": "x + 1.", "inputs": [{"name": "x", )"
        R"("shape": [8], "dtype": "float32", "init": {"dist": "normal", "mean": 0.0, "std": 1.0}}], )"
        R"("outputs": [{"name": "y", "shape": [8], "dtype": "float32"}], )";
    f << head << R"("id": "t/loops", "reference": "def forward(x):\n    i = 0\n    while i >= 0:\n        i = i + 1\n    return x + 1\n"})"
      << "\n"
      << head << R"("id": "t/after", "reference": "def forward(x):\n    return x + 1\n"})" << "\n";
  }
  auto o = action("validate");
  o.files = {file};
  o.time_limit_s = 2;
  const auto start = std::chrono::steady_clock::now();
  auto r = run(o);
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(r.code == 1);
  CHECK_MESSAGE(r.out.find("FAIL  t/loops: the reference ran past the time limit of 2 s "
                           "(--time-limit-s) and was stopped") != std::string::npos,
                (r.out + r.err));
  CHECK(r.out.find("ok    t/after") != std::string::npos);
  CHECK(r.out.find("2 tasks on cpu, 1 ok, 1 failed") != std::string::npos);
  CHECK(secs < 60);

  o.time_limit_s = 0;
  r = run(o);
  CHECK(r.code == 2);
  CHECK(r.err.find("--time-limit-s must be > 0") != std::string::npos);
  std::remove(file.c_str());
}
#endif
