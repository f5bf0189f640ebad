#include "stages/seen_kernels_journal.hpp"

#include <charconv>
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string_view>
#include <utility>

#include "common/text_file.hpp"

namespace fs = std::filesystem;

namespace kforge::pipeline {

namespace {

constexpr std::string_view before_prefix = "seen_kernels-before-step-";

// The whole of `digits` as an unsigned number in `base`; false for anything else (a sign, a
// prefix, trailing characters, overflow).
bool parse_whole(std::string_view digits, int base, std::uint64_t& value) {
  const auto* end = digits.data() + digits.size();
  const auto [stop, why] = std::from_chars(digits.data(), end, value, base);
  return !digits.empty() && why == std::errc() && stop == end;
}

// "PROMPT_HASH CODE_HASH": exactly two 16-digit hex numbers, as append writes them.
bool parse_line(std::string_view line, seen_kernels_journal::pair& p) {
  return line.size() == 33 && line[16] == ' ' && parse_whole(line.substr(0, 16), 16, p.first) &&
         parse_whole(line.substr(17), 16, p.second);
}

status read_file(const fs::path& file, std::vector<seen_kernels_journal::pair>& out) {
  std::ifstream in(file);
  if (!in) return error{"buffer: cannot read " + file.string()};
  std::string line;
  for (std::size_t n = 1; std::getline(in, line); ++n) {
    seen_kernels_journal::pair p;
    if (!parse_line(line, p))
      return error{"buffer: " + file.string() + ":" + std::to_string(n) +
                   ": not \"PROMPT_HASH CODE_HASH\" (two 16-digit hex numbers): the run's record "
                   "of the kernels it saw is damaged (remove the file to go on without it)"};
    out.push_back(p);
  }
  return {};
}

// The before-step files of `dir`, by step.
std::map<std::uint64_t, fs::path> before_files(const fs::path& dir) {
  std::map<std::uint64_t, fs::path> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const auto name = e.path().filename().string();
    if (name.rfind(before_prefix, 0) != 0 || e.path().extension() != ".txt") continue;
    const auto digits = name.substr(before_prefix.size(), name.size() - before_prefix.size() - 4);
    if (std::uint64_t step = 0; parse_whole(digits, 10, step)) out.emplace(step, e.path());
  }
  return out;
}

}  // namespace

std::string seen_kernels_journal::path_in(const std::string& run_dir) {
  return (fs::path(run_dir) / "buffer" / "seen_kernels.txt").string();
}

result<std::vector<seen_kernels_journal::pair>> seen_kernels_journal::read_before(
    const std::string& run_dir, std::uint64_t step) {
  std::vector<pair> out;
  for (const auto& [m, file] : before_files(fs::path(path_in(run_dir)).parent_path())) {
    if (m > step) break;
    if (auto s = read_file(file, out); !s) return s.err();
  }
  return out;
}

result<seen_kernels_journal> seen_kernels_journal::open(const std::string& run_dir,
                                                        std::optional<std::uint64_t> resumed_at) {
  seen_kernels_journal j;
  j.path_ = path_in(run_dir);
  const auto dir = fs::path(j.path_).parent_path();
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return error{"buffer: cannot create " + dir.string() + ": " + ec.message()};
  if (resumed_at && fs::exists(j.path_, ec)) {
    const auto before = dir / (std::string(before_prefix) + std::to_string(*resumed_at) + ".txt");
    if (!fs::exists(before, ec)) {
      fs::rename(j.path_, before, ec);
      if (ec)
        return error{"buffer: cannot move " + j.path_ + " to " + before.string() + ": " +
                     ec.message()};
    } else {  // a leg that resumed at this step before and stopped without a new checkpoint
      auto pairs = read_text_file(j.path_);
      if (!pairs) return error{"buffer: " + pairs.message()};
      if (auto s = append_to_file(before.string(), *pairs); !s)
        return error{"buffer: cannot append " + j.path_ + " to it: " + s.message()};
    }
  } else if (!resumed_at) {
    for (const auto& [m, file] : before_files(dir)) fs::remove(file, ec);
  }
  auto out = file_writer::open(j.path_, file_writer::mode::truncate);
  if (!out) return error{"buffer: " + out.message()};
  j.out_.emplace(std::move(*out));
  return j;
}

status seen_kernels_journal::append(pair p) {
  char line[40];
  std::snprintf(line, sizeof line, "%016" PRIx64 " %016" PRIx64 "\n", p.first, p.second);
  if (auto s = out_->append(line); !s) return error{"buffer: " + s.message()};
  return {};
}

}  // namespace kforge::pipeline
