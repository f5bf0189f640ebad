#pragma once
// Whether a child process has ended, without reaping it (its child_process handle still will):
// gone from /proc, or a zombie there.
#include <sys/types.h>

#include <fstream>
#include <string>

namespace kforge::testing {

inline bool process_ended(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string id, name, state;
  stat >> id >> name >> state;
  return !stat || state == "Z";
}

}  // namespace kforge::testing
