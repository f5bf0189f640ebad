#include "common/gpu_use_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>

namespace kforge {

namespace {

int open_lock_file(const std::string& path) {
  return ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
}

void lock(int fd, int how) {
  if (fd < 0) return;
  while (::flock(fd, how) != 0 && errno == EINTR) {
  }
}

}  // namespace

std::string gpu_use_lock::path(const std::string& gpu) { return "/tmp/kforge-gpu" + gpu + ".lock"; }

gpu_use_lock::gpu_use_lock(const std::string& gpu, bool exclusive) {
  // The gate is held only while entering: exclusively by a user that will be exclusive (new
  // shared users wait at the gate meanwhile), shared by the others (they pass one another).
  const int gate = open_lock_file(path(gpu) + ".gate");
  lock(gate, exclusive ? LOCK_EX : LOCK_SH);
  fd_ = open_lock_file(path(gpu));
  lock(fd_, exclusive ? LOCK_EX : LOCK_SH);
  if (gate >= 0) ::close(gate);  // releases the gate
}

gpu_use_lock::~gpu_use_lock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock
}

}  // namespace kforge
