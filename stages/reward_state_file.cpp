#include "stages/reward_state_file.hpp"

#include <filesystem>

#include "common/text_file.hpp"

namespace fs = std::filesystem;

namespace kforge::pipeline::reward_state_file {

std::string path_in(const std::string& run_dir) {
  return (fs::path(run_dir) / "reward" / "state.json").string();
}

std::string before_path(const std::string& run_dir, std::uint64_t step) {
  return (fs::path(run_dir) / "reward" / ("state-before-step-" + std::to_string(step) + ".json"))
      .string();
}

status begin_leg(const std::string& run_dir, std::optional<std::uint64_t> resumed_at) {
  const fs::path current = path_in(run_dir);
  const auto dir = current.parent_path();
  std::error_code ec;
  if (!resumed_at) {
    fs::remove_all(dir, ec);
    if (ec) return error{"reward: cannot clear " + dir.string() + ": " + ec.message()};
  }
  fs::create_directories(dir, ec);
  if (ec) return error{"reward: cannot create " + dir.string() + ": " + ec.message()};
  if (resumed_at && fs::exists(current, ec)) {
    const auto before = before_path(run_dir, *resumed_at);
    fs::rename(current, before, ec);
    if (ec) return error{"reward: cannot move " + current.string() + " to " + before + ": " + ec.message()};
  }
  return {};
}

result<std::optional<std::string>> read_before(const std::string& run_dir, std::uint64_t step) {
  const auto file = before_path(run_dir, step);
  std::error_code ec;
  if (!fs::exists(file, ec)) return std::optional<std::string>();
  auto text = read_text_file(file);
  if (!text) return error{"reward: " + text.message()};
  return std::optional<std::string>(std::move(*text));
}

}  // namespace kforge::pipeline::reward_state_file
