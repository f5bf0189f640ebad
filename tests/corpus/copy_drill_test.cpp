// Copy drills: scrambled references keep their shape and lose their names and numbers. (The
// drill records `kforge corpus build --copy-drills N` writes: corpus_command_test.cpp.)
#include <doctest/doctest.h>

#include <random>
#include <string>

#include "corpus/copy_drill.hpp"

using kforge::corpus::scramble_reference;

TEST_CASE("scramble_reference replaces called names, numbers and binary operators in forward's body only") {
  const std::string ref =
      "def forward(x, w1):\n    y = torch.leaky_relu(x * w1, 0.01)\n    return torch.softmax(y, -1) + 1e-6\n";
  int changed_names = 0, changed_numbers = 0;
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    std::mt19937_64 rng(seed);
    const auto s = scramble_reference(ref, rng);
    INFO(s);
    CHECK(s.rfind("def forward(x, w1):\n    y = torch.", 0) == 0);  // the signature and variables stay
    CHECK(s.find("(x ") != std::string::npos);
    CHECK(s.find(" w1, ") != std::string::npos);
    CHECK(s.find("    return torch.") != std::string::npos);
    changed_names += s.find("leaky_relu(") == std::string::npos;
    changed_numbers += s.find("0.01)") == std::string::npos;
    // The same seed gives the same text.
    std::mt19937_64 again(seed);
    CHECK(scramble_reference(ref, again) == s);
  }
  CHECK(changed_names >= 15);
  CHECK(changed_numbers >= 15);
  std::mt19937_64 rng(1);
  CHECK(scramble_reference("no forward here", rng) == "no forward here");
}
