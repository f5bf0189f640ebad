#include "tasks/check_server.hpp"

#include <nlohmann/json.hpp>
#include <sys/prctl.h>
#include <unistd.h>

#include <csignal>

#include <sstream>

#include "tasks/task_parser.hpp"

namespace kforge::tasks {
namespace {

using json = nlohmann::json;

json request_for(const task& t, const check_options& opt) {
  return {{"task", json::parse(to_json_line(t))},
          {"device", opt.dev.str()},
          {"shapes", opt.shapes ? json(*opt.shapes) : json(nullptr)},
          {"seed", opt.seed}};
}

json reply_with(const std::vector<std::string>& problems, double elapsed_ms = 0) {
  return {{"problems", problems}, {"elapsed_ms", elapsed_ms}};
}

// One check, in the child: a request that does not hold a valid task is a problem of its own.
json answer(const std::string& line) {
  const auto req = json::parse(line, nullptr, false);
  if (!req.is_object() || !req.contains("task") || !req["task"].is_object())
    return reply_with({"a malformed check request"});
  auto t = parse_task(req["task"].dump(), "check request");
  if (!t) return reply_with({t.message()});
  auto dev = device::parse(req.value("device", std::string("cpu")));
  if (!dev) return reply_with({dev.message()});
  check_options co;
  co.dev = *dev;
  co.seed = req.value("seed", co.seed);
  if (const auto& s = req.value("shapes", json()); s.is_number_unsigned())
    co.shapes = s.get<std::size_t>();
  const auto r = check_task_runs(*t, co);
  return reply_with(r.problems, r.elapsed_ms);
}

// "2", "0.5": the limit as --time-limit-s was written.
std::string seconds_text(std::chrono::milliseconds d) {
  std::ostringstream s;
  s << static_cast<double>(d.count()) / 1000.0;
  return s.str();
}

}  // namespace

int serve_task_checks() {
  // A parent killed without its destructors (SIGKILL, a test's timeout) must not leave a looping
  // reference spinning here: end with it. getppid() == 1: it ended before the request.
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || ::getppid() == 1) return 1;
  control_channel channel;
  for (std::string line; channel.read(line);)
    if (!channel.write(answer(line).dump())) return 1;
  return 0;  // the parent went away
}

check_report check_client::check(const task& t, const check_options& opt,
                                 std::chrono::milliseconds limit) {
  check_report report;
  report.task_id = t.id;
  if (!child_.running()) {
    auto started = child_process::start(argv_, child_options{});
    if (!started) {
      report.problems.push_back("cannot start the check process: " + started.message());
      return report;
    }
    child_ = std::move(*started);
  }
  const auto reply = child_.request(request_for(t, opt).dump(), limit);
  switch (reply.failure) {
    case child_failure::none:
      break;
    case child_failure::timeout:
      report.problems.push_back("the reference ran past the time limit of " +
                                seconds_text(limit) + " s (--time-limit-s) and was stopped");
      return report;
    case child_failure::died:
    case child_failure::protocol:
      report.problems.push_back("the check process failed (" + reply.detail +
                                "): " + child_.take_output());
      return report;
  }
  const auto j = json::parse(reply.json, nullptr, false);
  if (!j.is_object() || !j.contains("problems") || !j["problems"].is_array()) {
    report.problems.push_back("the check process sent a malformed reply");
    return report;
  }
  for (const auto& p : j["problems"])
    report.problems.push_back(p.is_string() ? p.get<std::string>() : p.dump());
  report.elapsed_ms = j.value("elapsed_ms", 0.0);
  return report;
}

}  // namespace kforge::tasks
