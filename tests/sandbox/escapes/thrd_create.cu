// Escape: C11 threads start a host thread that outlives kf_forward, past pthread_create's name.
#include <kforge/kernel_abi.h>
typedef unsigned long thrd_t;
extern "C" int thrd_create(thrd_t* thread, int (*fn)(void*), void* arg);
static int spin(void*) { for (;;) {} }

extern "C" int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs,
                          int32_t num_outputs, void* workspace, cudaStream_t stream) {
  thrd_t t;
  return thrd_create(&t, spin, nullptr);
  return 0;
}
