// Hostile (finds `system` without naming it in a call or an import): dl_iterate_phdr walks the
// loaded objects to libc, reads its dynamic symbol table and looks up the string "system" by hand,
// then calls it through the found address. The library imports only dl_iterate_phdr. Declared by
// hand (link.h and elf.h are not allowed includes). Expect rejected (rule host_system_call,
// `dl_iterate_phdr`).
#include <kforge/kernel_abi.h>

struct kf_phdr {
  uint32_t p_type, p_flags;
  uint64_t p_offset, p_vaddr, p_paddr, p_filesz, p_memsz, p_align;
};
struct kf_dyn {
  int64_t d_tag;
  uint64_t d_val;
};
struct kf_sym {
  uint32_t st_name;
  unsigned char st_info, st_other;
  uint16_t st_shndx;
  uint64_t st_value, st_size;
};
struct kf_phdr_info {
  uint64_t dlpi_addr;
  const char* dlpi_name;
  const kf_phdr* dlpi_phdr;
  uint16_t dlpi_phnum;
};
extern "C" int dl_iterate_phdr(int (*callback)(kf_phdr_info*, size_t, void*), void* data);

static bool name_is(const char* s, const char* want) {
  while (*s && *s == *want) ++s, ++want;
  return *s == *want;
}
static bool contains(const char* s, const char* part) {
  for (; s && *s; ++s) {
    const char *a = s, *b = part;
    while (*a && *a == *b) ++a, ++b;
    if (!*b) return true;
  }
  return false;
}

// Scans libc's dynamic symbols for "system"; its address goes to *data.
static int find_system(kf_phdr_info* info, size_t, void* data) {
  if (!contains(info->dlpi_name, "libc.so")) return 0;
  for (uint16_t p = 0; p < info->dlpi_phnum; ++p) {
    if (info->dlpi_phdr[p].p_type != 2 /* PT_DYNAMIC */) continue;
    const kf_dyn* dyn = reinterpret_cast<const kf_dyn*>(info->dlpi_addr + info->dlpi_phdr[p].p_vaddr);
    const kf_sym* symtab = nullptr;
    const char* strtab = nullptr;
    for (; dyn->d_tag != 0; ++dyn) {
      if (dyn->d_tag == 6 /* DT_SYMTAB */) symtab = reinterpret_cast<const kf_sym*>(dyn->d_val);
      if (dyn->d_tag == 5 /* DT_STRTAB */) strtab = reinterpret_cast<const char*>(dyn->d_val);
    }
    if (!symtab || !strtab) return 0;
    // The symbol table ends where the string table begins in glibc's layout.
    for (const kf_sym* s = symtab; reinterpret_cast<const char*>(s) < strtab; ++s)
      if (s->st_value != 0 && name_is(strtab + s->st_name, "system")) {
        *static_cast<uint64_t*>(data) = info->dlpi_addr + s->st_value;
        return 1;
      }
  }
  return 0;
}

static int g_done = 0;

__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    y[i] = fmaxf(x[i], 0.0f);
}

extern "C" int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs,
                          int32_t num_outputs, void* workspace, cudaStream_t stream) {
  (void)workspace;
  if (num_inputs != 1 || num_outputs != 1) return 1;
  if (!g_done) {
    g_done = 1;
    uint64_t where = 0;
    if (dl_iterate_phdr(find_system, &where) && where != 0)
      (void)reinterpret_cast<int (*)(const char*)>(where)("touch /tmp/kforge-found-system");
  }
  const int64_t n = kf_numel(&inputs[0]);
  if (n == 0) return 0;
  int64_t blocks = (n + 255) / 256;
  if (blocks > 8192) blocks = 8192;
  relu_kernel<<<(unsigned)blocks, 256, 0, stream>>>(static_cast<const float*>(inputs[0].data),
                                                    static_cast<float*>(outputs[0].data), n);
  return (int)cudaGetLastError();
}
