#include "common/log.hpp"

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <memory>
#include <string>

namespace kforge::log {

namespace {

// One logger for the process, made on first use: a line at a time to stderr, unbuffered, so a
// worker's log holds every line up to a crash.
spdlog::logger& logger() {
  static const std::shared_ptr<spdlog::logger> l = [] {
    auto made = std::make_shared<spdlog::logger>("kforge", std::make_shared<spdlog::sinks::stderr_sink_mt>());
    made->set_pattern("%Y-%m-%dT%H:%M:%S.%e %-7l %v");
    made->flush_on(spdlog::level::trace);
    made->set_level(spdlog::level::info);
    if (const char* env = std::getenv("KFORGE_LOG_LEVEL"); env && *env) {
      const auto level = spdlog::level::from_str(env);
      // from_str gives "off" for a name it does not know: only an explicit "off" turns logging off.
      if (level == spdlog::level::off && std::string(env) != "off")
        made->warn("KFORGE_LOG_LEVEL={} is not a level (trace, debug, info, warn, error, "
                   "critical, off); logging at info", env);
      else
        made->set_level(level);
    }
    return made;
  }();
  return *l;
}

}  // namespace

void debug(std::string_view line) { logger().debug("{}", line); }
void info(std::string_view line) { logger().info("{}", line); }
void warn(std::string_view line) { logger().warn("{}", line); }
void error(std::string_view line) { logger().error("{}", line); }

}  // namespace kforge::log
