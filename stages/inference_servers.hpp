#pragma once
// Inference servers the openai sampler starts itself ([sampler.server]): one shell command per
// server with {port} and {gpu} filled in, each in its own process group (a vLLM or SGLang server
// forks workers: the group goes as a whole), its output in LOG_DIR/server-K.log. start() returns
// once every server answers GET /health, or fails naming the server, its command and the last
// line of its log. The servers are stopped when the object goes: SIGTERM to each group, then
// SIGKILL to what is left after a grace period.

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "common/result.hpp"
#include "config/options/sampler_options.hpp"

namespace kforge::pipeline {

/// `command` with every {port} and {gpu} replaced.
std::string server_command(const std::string& command, int port, const std::string& gpu);

/// The device a child should see for GPU ordinal `ordinal` of this process: the ordinal-th entry of
/// `visible` (this process's CUDA_VISIBLE_DEVICES, comma-separated) when set, else the ordinal.
std::string visible_device(int ordinal, const std::string& visible);

class inference_servers {
 public:
  /// Starts o.count servers (0: one per entry of `gpus`, or one when `gpus` is empty) and waits
  /// for them. `grace`: how long a stopped server has between SIGTERM and SIGKILL.
  static result<std::unique_ptr<inference_servers>> start(const sampler_server& o, const std::vector<int>& gpus,
                                                          const std::string& log_dir,
                                                          std::chrono::milliseconds grace = std::chrono::seconds(10));
  ~inference_servers();
  inference_servers(const inference_servers&) = delete;
  inference_servers& operator=(const inference_servers&) = delete;

  /// http://127.0.0.1:PORT of each server, in start order.
  const std::vector<std::string>& urls() const { return urls_; }
  /// The servers' process ids (their process groups' ids).
  const std::vector<pid_t>& pids() const { return pids_; }

 private:
  inference_servers() = default;
  void stop();

  std::vector<pid_t> pids_;
  std::vector<std::string> urls_;
  std::chrono::milliseconds grace_{10000};
};

}  // namespace kforge::pipeline
