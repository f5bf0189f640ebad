// trainer/checkpoint.hpp, the torch-free part: a checkpoint named step-N must hold step N.
#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <string>

#include "trainer/checkpoint.hpp"

namespace fs = std::filesystem;
using namespace kforge::trainer;

namespace {

/// DIR/NAME holding a trainer_state.json of `step`; returns its path.
std::string checkpoint_of(const fs::path& dir, const std::string& name, std::int64_t step) {
  const auto at = dir / name;
  fs::create_directories(at);
  trainer_state st;
  st.step = step;
  st.policy_version = static_cast<std::uint64_t>(step);
  REQUIRE(write_trainer_state(at.string(), st).ok());
  return at.string();
}

}  // namespace

TEST_CASE("a checkpoint's step is checked against its step-N name") {
  const auto dir = fs::temp_directory_path() / ("kf-checkpoint-" + std::to_string(::getpid()));
  fs::remove_all(dir);

  auto ok = read_checkpoint_state(checkpoint_of(dir, "step-7", 7));
  REQUIRE(ok.ok());
  CHECK(ok->step == 7);
  CHECK(read_checkpoint_state(checkpoint_of(dir, "step-007", 7)).ok());  // the number, not the text
  CHECK(read_checkpoint_state((dir / "step-7/").string()).ok());       // a trailing slash
  CHECK(read_checkpoint_state(checkpoint_of(dir, "ckpt", 3)).ok());     // another name: not checked
  CHECK(read_checkpoint_state(checkpoint_of(dir, "step-3.old", 2)).ok());

  const auto bad = checkpoint_of(dir, "step-5", 6);
  auto r = read_checkpoint_state(bad);
  REQUIRE_FALSE(r.ok());
  CHECK(r.message().find((fs::path(bad) / checkpoint_state_file).string()) != std::string::npos);
  CHECK(r.message().find("step 6, but the checkpoint's directory is named step-5") != std::string::npos);
  auto slash = read_checkpoint_state(bad + "/");
  CHECK_FALSE(slash.ok());
  fs::remove_all(dir);
}
