#pragma once
// Log lines of kforge's processes, with a timestamp and a level:
//   2026-12-06T05:50:01.123 warning trainer: NCCL weight publishing failed, ...
// on stderr, which for a worker process is RUN_DIR/logs/PROCESS.log. The level comes from
// KFORGE_LOG_LEVEL (trace, debug, info, warn, error, critical, off; default info); an unknown value
// is said once and info kept. spdlog writes them (only log.cpp includes it: its headers are heavy).
// The console output of a command (kforge run's plan, table and summary) is not logging and stays
// plain text on its streams.

#include <string_view>

namespace kforge::log {

void debug(std::string_view line);
void info(std::string_view line);
void warn(std::string_view line);
void error(std::string_view line);

}  // namespace kforge::log
