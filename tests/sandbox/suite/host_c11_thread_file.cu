// Hostile (a thread that outlives the call): a C11 thread (thrd_create, not pthread_create or
// std::thread) waits two seconds after kf_forward returned, then creates and writes a file with
// openat64 and pwritev (no open/write/fopen). Declared by hand (threads.h, fcntl.h and sys/uio.h
// are not allowed includes). Expect rejected (rule host_system_call, `thrd_create`).
#include <kforge/kernel_abi.h>

typedef unsigned long kf_thrd_t;
struct kf_iovec {
  void* iov_base;
  size_t iov_len;
};
extern "C" int thrd_create(kf_thrd_t* thr, int (*func)(void*), void* arg);
extern "C" int openat64(int dirfd, const char* path, int flags, ...);
extern "C" long pwritev(int fd, const kf_iovec* iov, int iovcnt, long offset);

static int late_writer(void*) {
  const time_t until = time(nullptr) + 2;
  while (time(nullptr) < until) {
  }
  const int fd = openat64(-100 /* AT_FDCWD */, "/tmp/kforge-thread-after-return",
                          01 | 0100 /* O_WRONLY | O_CREAT */, 0600);
  if (fd < 0) return 1;
  static char text[] = "written after kf_forward returned\n";
  const kf_iovec iov = {text, sizeof text - 1};
  return pwritev(fd, &iov, 1, 0) < 0;
}

static int g_started = 0;

__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    y[i] = fmaxf(x[i], 0.0f);
}

extern "C" int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs,
                          int32_t num_outputs, void* workspace, cudaStream_t stream) {
  (void)workspace;
  if (num_inputs != 1 || num_outputs != 1) return 1;
  if (!g_started) {
    g_started = 1;
    kf_thrd_t t;
    (void)thrd_create(&t, late_writer, nullptr);
  }
  const int64_t n = kf_numel(&inputs[0]);
  if (n == 0) return 0;
  int64_t blocks = (n + 255) / 256;
  if (blocks > 8192) blocks = 8192;
  relu_kernel<<<(unsigned)blocks, 256, 0, stream>>>(static_cast<const float*>(inputs[0].data),
                                                    static_cast<float*>(outputs[0].data), n);
  return (int)cudaGetLastError();
}
