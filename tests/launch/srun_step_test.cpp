// The srun command line of one process's job step.
#include <doctest/doctest.h>

#include <algorithm>

#include "launch/srun_step.hpp"

using kforge::launch::srun_step;

TEST_CASE("one task on the named node, overlapping the run's other steps, then the command") {
  const auto argv = srun_step("gpu03", "sandbox", 32, "runs/x/logs/sandbox.log", {"/opt/kforge", "worker", "--process", "sandbox"});
  REQUIRE(argv.size() >= 5);
  CHECK(argv.front() == "srun");
  auto has = [&](const std::string& a) { return std::find(argv.begin(), argv.end(), a) != argv.end(); };
  CHECK(has("--nodes=1"));
  CHECK(has("--ntasks=1"));
  CHECK(has("--nodelist=gpu03"));
  CHECK(has("--overlap"));
  CHECK(has("--cpus-per-task=32"));
  CHECK(has("--job-name=kforge-sandbox"));
  CHECK(has("--output=runs/x/logs/sandbox.log"));
  CHECK(has("--open-mode=append"));
  CHECK(std::vector<std::string>(argv.end() - 4, argv.end()) ==
        std::vector<std::string>{"/opt/kforge", "worker", "--process", "sandbox"});
  const auto unknown_cpus = srun_step("n1", "p", 0, "p.log", {"x"});
  CHECK(std::none_of(unknown_cpus.begin(), unknown_cpus.end(),
                     [](const std::string& a) { return a.rfind("--cpus-per-task", 0) == 0; }));
}
