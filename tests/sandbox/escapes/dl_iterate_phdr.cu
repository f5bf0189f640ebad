// Escape: dl_iterate_phdr hands over every loaded library's program headers; walking libc's dynamic
// symbol table from there finds `system` without importing it (the walk is left out here: importing
// dl_iterate_phdr is the tell).
#include <kforge/kernel_abi.h>
extern "C" int dl_iterate_phdr(int (*callback)(void* info, unsigned long size, void* data), void* data);
static int visit(void*, unsigned long, void*) { return 1; }

extern "C" int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs,
                          int32_t num_outputs, void* workspace, cudaStream_t stream) {
  return dl_iterate_phdr(visit, nullptr) != 1;
  return 0;
}
