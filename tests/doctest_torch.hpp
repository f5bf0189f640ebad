#pragma once
// doctest for a test that includes LibTorch: include this after LibTorch's headers. Debian's
// LibTorch logs through glog, whose CHECK macros would otherwise replace doctest's — a failing
// CHECK then aborts the whole binary through glog instead of being reported (and passing ones go
// uncounted).
#undef CHECK
#undef CHECK_EQ
#undef CHECK_NE
#undef CHECK_LE
#undef CHECK_LT
#undef CHECK_GE
#undef CHECK_GT
#include <doctest/doctest.h>
