#include "trainer/checkpoint.hpp"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/file_writer.hpp"

namespace kforge::trainer {
namespace {

namespace fs = std::filesystem;

std::string to_hex(const std::vector<std::uint8_t>& bytes) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (auto b : bytes) {
    out.push_back(digits[b >> 4]);
    out.push_back(digits[b & 15]);
  }
  return out;
}

bool from_hex(const std::string& text, std::vector<std::uint8_t>& out) {
  if (text.size() % 2 != 0) return false;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  out.clear();
  out.reserve(text.size() / 2);
  for (std::size_t i = 0; i < text.size(); i += 2) {
    const int hi = nibble(text[i]), lo = nibble(text[i + 1]);
    if (hi < 0 || lo < 0) return false;
    out.push_back(static_cast<std::uint8_t>(hi * 16 + lo));
  }
  return true;
}

}  // namespace

std::string to_json(const trainer_state& s) {
  nlohmann::json cuda = nlohmann::json::array();
  for (const auto& g : s.cuda_rng) cuda.push_back(to_hex(g));
  // Nested as an object (readable); text that is not JSON (not kl_controller's) stays a string.
  auto kl = nlohmann::json::parse(s.kl_controller.empty() ? "null" : s.kl_controller, nullptr, false);
  if (kl.is_discarded()) kl = s.kl_controller;
  return nlohmann::json{{"version", 1},
                        {"step", s.step},
                        {"policy_version", s.policy_version},
                        {"seed", s.seed},
                        {"kl_controller", kl},
                        {"rng", {{"cpu", to_hex(s.cpu_rng)}, {"cuda", cuda}}}}
      .dump(1);
}

result<trainer_state> parse_trainer_state(std::string_view text, const std::string& source) {
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return error{source + ": not a JSON object"};
  trainer_state s;
  try {
    if (j.at("version").get<int>() != 1) return error{source + ": version: unsupported (expected 1)"};
    s.step = j.at("step").get<std::int64_t>();
    if (s.step < 0) return error{source + ": step: negative"};
    s.policy_version = j.at("policy_version").get<std::uint64_t>();
    s.seed = j.at("seed").get<std::uint64_t>();
    const auto& kl = j.at("kl_controller");
    s.kl_controller = kl.is_null() ? std::string() : kl.is_string() ? kl.get<std::string>() : kl.dump();
    const auto& rng = j.at("rng");
    if (!from_hex(rng.at("cpu").get<std::string>(), s.cpu_rng))
      return error{source + ": rng.cpu: not a hex string"};
    for (const auto& g : rng.at("cuda")) {
      s.cuda_rng.emplace_back();
      if (!from_hex(g.get<std::string>(), s.cuda_rng.back()))
        return error{source + ": rng.cuda: not a list of hex strings"};
    }
  } catch (const nlohmann::json::exception& e) {
    return error{source + ": " + e.what()};
  }
  return s;
}

result<trainer_state> read_trainer_state(const std::string& dir) {
  const auto path = (fs::path(dir) / checkpoint_state_file).string();
  std::ifstream in(path, std::ios::binary);
  if (!in) return error{path + ": cannot open"};
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_trainer_state(ss.str(), path);
}

result<trainer_state> read_checkpoint_state(const std::string& dir) {
  auto st = read_trainer_state(dir);
  if (!st) return st;
  auto path = fs::path(dir).lexically_normal();
  if (!path.has_filename()) path = path.parent_path();  // "step-3/"
  const auto name = path.filename().string();
  const bool step_named = name.size() > 5 && name.size() <= 5 + 18 && name.rfind("step-", 0) == 0 &&
                          name.find_first_not_of("0123456789", 5) == std::string::npos;
  if (step_named && std::stoll(name.substr(5)) != st->step)
    return error{(fs::path(dir) / checkpoint_state_file).string() + ": step " +
                 std::to_string(st->step) + ", but the checkpoint's directory is named " + name +
                 "; a resume would go on from another step than the one it was asked for"};
  return st;
}

status write_trainer_state(const std::string& dir, const trainer_state& state) {
  return write_file_atomically((fs::path(dir) / checkpoint_state_file).string(), to_json(state) + "\n");
}

result<std::string> begin_checkpoint_dir(const std::string& dir) {
  const std::string tmp = dir + ".tmp";
  std::error_code ec;
  fs::remove_all(tmp, ec);
  if (ec) return error{tmp + ": cannot remove a stale checkpoint: " + ec.message()};
  fs::create_directories(tmp, ec);
  if (ec) return error{tmp + ": cannot create: " + ec.message()};
  return tmp;
}

status commit_checkpoint_dir(const std::string& dir) {
  const std::string tmp = dir + ".tmp", old = dir + ".old";
  std::error_code ec;
  if (!fs::is_directory(tmp, ec)) return error{tmp + ": no checkpoint being written"};
  // Every file on the disk before the swap: written by LibTorch and the model's writer, which
  // do not sync, they could otherwise reach it after the rename and leave a torn checkpoint
  // where a crash of the host finds the whole one.
  for (fs::recursive_directory_iterator it(tmp, ec), end; !ec && it != end; it.increment(ec))
    if (it->is_regular_file())
      if (auto s = sync_file(it->path().string()); !s) return s;
  if (ec) return error{tmp + ": cannot list: " + ec.message()};
  fs::remove_all(old, ec);
  if (ec) return error{old + ": cannot remove: " + ec.message()};
  if (fs::exists(dir, ec)) {
    fs::rename(dir, old, ec);
    if (ec) return error{dir + ": cannot move the previous checkpoint aside: " + ec.message()};
  }
  fs::rename(tmp, dir, ec);
  if (ec) return error{dir + ": cannot move the new checkpoint into place: " + ec.message()};
  fs::remove_all(old, ec);  // the new one is whole; a left-over .old is harmless
  return {};
}

}  // namespace kforge::trainer
