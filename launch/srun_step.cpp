#include "launch/srun_step.hpp"

namespace kforge::launch {

std::vector<std::string> srun_step(const std::string& node, const std::string& process, int cpus,
                                   const std::string& log, const std::vector<std::string>& command) {
  std::vector<std::string> argv{"srun",
                                "--nodes=1",
                                "--ntasks=1",
                                "--nodelist=" + node,
                                "--overlap",
                                "--kill-on-bad-exit=1",
                                "--job-name=kforge-" + process,
                                "--output=" + log,
                                "--open-mode=append"};
  if (cpus > 0) argv.push_back("--cpus-per-task=" + std::to_string(cpus));
  argv.insert(argv.end(), command.begin(), command.end());
  return argv;
}

}  // namespace kforge::launch
