// The sandbox children in a build without CUDA: nothing can run a candidate here.
#include <cstdio>

#include "sandbox/children.hpp"

namespace kforge::sandbox {

namespace {
int no_cuda(const char* what) {
  std::fprintf(stderr,
               "kforge %s: this kforge was built without CUDA (KFORGE_WITH_CUDA=OFF); candidates "
               "can be compiled and checked here, not run\n",
               what);
  return 2;
}
}  // namespace

int candidate_child_main() { return no_cuda("sandbox-child"); }
int reference_server_main() { return no_cuda("sandbox-ref"); }

}  // namespace kforge::sandbox
