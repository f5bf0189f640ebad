// Copy drills: scrambled references keep their shape and lose their names and numbers; a drill
// record is the task section of the prompt and the scrambled restatement, and
// `kforge corpus build --copy-drills N` appends them marked prefix_only.
#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "corpus/copy_drill.hpp"
#include "corpus/corpus_command.hpp"
#include "corpus/kernel_writer.hpp"

using namespace kforge;
using kforge::corpus::scramble_reference;
namespace fs = std::filesystem;

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

#ifdef KFORGE_TASKS_WITH_TORCH
TEST_CASE("corpus build --copy-drills appends prefix-only restatements of scrambled task sections") {
  const fs::path dir = fs::temp_directory_path() / ("kforge-drill-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  corpus::corpus_options o;
  o.tasks = "builtin";
  o.categories = {"elementwise"};
  o.out = (dir / "c").string();
  o.copy_drills = 40;
  std::ostringstream out, err;
  REQUIRE_MESSAGE(corpus::corpus_command(o, out, err) == 0, err.str());
  CHECK(out.str().find(", 40 copy drills") != std::string::npos);
  std::ifstream f(dir / "c" / "sft.jsonl");
  std::string line;
  int kernels = 0, drills = 0, scrambled = 0;
  while (std::getline(f, line)) {
    const auto r = nlohmann::json::parse(line);
    if (r["variant"] != "copy_drill") {
      CHECK(drills == 0);  // the drills come after every kernel record
      CHECK_FALSE(r.contains("prefix_only"));
      ++kernels;
      continue;
    }
    ++drills;
    const auto prompt = r["prompt"].get<std::string>();
    const auto completion = r["completion"].get<std::string>();
    INFO(prompt << "\n---\n" << completion);
    CHECK(r["prefix_only"] == true);
    CHECK(prompt.rfind("## Task ", 0) == 0);
    CHECK(prompt.find("## Answer") != std::string::npos);
    CHECK(prompt.find("## The kernel ABI") == std::string::npos);
    REQUIRE(completion.rfind("The reference computes `", 0) == 0);
    REQUIRE(completion.size() > 26);
    CHECK(completion.substr(completion.size() - 2) == "`.");
    // What is restated is in the prompt, line for line.
    const auto body = completion.substr(24, completion.size() - 26);
    std::size_t at = 0;
    for (std::size_t start = 0; start <= body.size();) {
      auto end = body.find("; ", start);
      if (end == std::string::npos) end = body.size();
      const auto stmt = body.substr(start, end - start);
      at = prompt.find(stmt, at);
      CHECK(at != std::string::npos);
      start = end + 2;
    }
    scrambled += r["task_id"].get<std::string>().rfind("drill/", 0) == 0;
  }
  CHECK(kernels > 40);
  CHECK(drills == 40);
  CHECK(scrambled == 40);
  fs::remove_all(dir);
}
#endif
