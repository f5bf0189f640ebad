#include "common/visible_gpus.hpp"

#include <dirent.h>

#include <algorithm>
#include <cstdlib>

namespace kforge {

std::string physical_gpu(int ordinal) {
  // Our ordinals count the GPUs this process may use; a child must see the same physical one.
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES")) {
    std::string list = visible;
    int i = 0;
    for (std::size_t start = 0; start <= list.size(); ++i) {
      const std::size_t end = std::min(list.find(',', start), list.size());
      if (i == ordinal) return list.substr(start, end - start);
      start = end + 1;
    }
  }
  return std::to_string(ordinal);
}

int visible_gpu_count() {
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES")) {
    const std::string list = visible;
    if (list.empty() || list == "-1") return 0;
    return static_cast<int>(std::count(list.begin(), list.end(), ',')) + 1;
  }
  int n = 0;
  if (DIR* d = ::opendir("/proc/driver/nvidia/gpus")) {
    while (const dirent* e = ::readdir(d))
      if (e->d_name[0] != '.') ++n;
    ::closedir(d);
  }
  return n;
}

}  // namespace kforge
