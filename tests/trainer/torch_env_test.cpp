#include <doctest/doctest.h>

#include "trainer/torch_env.hpp"

TEST_CASE("LibTorch is usable and reports a version") {
  const auto env = kforge::trainer::probe_torch();
  CHECK_FALSE(env.torch_version.empty());
  CHECK(env.torch_version.find('.') != std::string::npos);
  CHECK(env.cuda_devices >= 0);
  if (!env.cuda_available) CHECK(env.cuda_devices == 0);
  CHECK(kforge::trainer::torch_self_test() == "");
}
