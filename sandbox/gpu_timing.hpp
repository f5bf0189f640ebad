#pragma once
// CUDA pieces both sandbox children time with (GPU builds only): an L2 flush between trials and a
// pair of events. Header-only; include only from translation units built with the CUDA runtime.
#include <cuda_runtime.h>

#include <cstddef>

namespace kforge::sandbox {

/// Writes a buffer twice the L2 size, so no trial starts with its data cached from the previous
/// one, and drops persisting L2 lines a candidate may have set up.
class l2_flusher {
 public:
  l2_flusher() = default;
  l2_flusher(const l2_flusher&) = delete;
  l2_flusher& operator=(const l2_flusher&) = delete;
  ~l2_flusher() {
    if (buf_) cudaFree(buf_);
  }
  cudaError_t init(std::size_t l2_bytes) {
    bytes_ = 2 * (l2_bytes > 0 ? l2_bytes : (std::size_t{64} << 20));
    return cudaMalloc(&buf_, bytes_);
  }
  cudaError_t flush(cudaStream_t stream) {
    cudaCtxResetPersistingL2Cache();
    value_ = (value_ + 1) & 0xff;
    return cudaMemsetAsync(buf_, value_, bytes_, stream);
  }

 private:
  void* buf_ = nullptr;
  std::size_t bytes_ = 0;
  int value_ = 0;
};

class event_pair {
 public:
  event_pair() {
    cudaEventCreate(&start_);
    cudaEventCreate(&stop_);
  }
  ~event_pair() {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }
  event_pair(const event_pair&) = delete;
  event_pair& operator=(const event_pair&) = delete;
  void start(cudaStream_t s) { cudaEventRecord(start_, s); }
  void stop(cudaStream_t s) { cudaEventRecord(stop_, s); }
  /// Milliseconds between the two (after both completed); negative on error.
  double elapsed_ms() {
    float ms = -1;
    if (cudaEventElapsedTime(&ms, start_, stop_) != cudaSuccess) return -1;
    return ms;
  }

 private:
  cudaEvent_t start_{};
  cudaEvent_t stop_{};
};

}  // namespace kforge::sandbox
