#include "launch/slurm_nodelist.hpp"

#include <cctype>
#include <set>

namespace kforge::launch {
namespace {

// The numbers of one bracket's body ("01-04,07"), each as text with the padding it shows.
result<std::vector<std::string>> expand_range(std::string_view body, std::string_view entry) {
  auto bad = [&](const std::string& why) {
    return error{"malformed node list entry \"" + std::string(entry) + "\": " + why};
  };
  auto is_number = [](std::string_view s) {
    if (s.empty() || s.size() > 9) return false;
    for (char c : s)
      if (!std::isdigit(static_cast<unsigned char>(c))) return false;
    return true;
  };
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= body.size()) {
    const std::size_t comma = body.find(',', start);
    const std::string_view part =
        body.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    const std::size_t dash = part.find('-');
    const std::string_view lo = part.substr(0, dash);
    const std::string_view hi = dash == std::string_view::npos ? lo : part.substr(dash + 1);
    if (!is_number(lo) || !is_number(hi))
      return bad("\"" + std::string(part) + "\" in brackets is not N or N-M");
    const long a = std::stol(std::string(lo));
    const long b = std::stol(std::string(hi));
    if (b < a) return bad("range " + std::string(part) + " runs backwards");
    if (b - a >= 100000) return bad("range " + std::string(part) + " is implausibly large");
    for (long n = a; n <= b; ++n) {
      std::string s = std::to_string(n);
      if (s.size() < lo.size()) s.insert(0, lo.size() - s.size(), '0');
      out.push_back(std::move(s));
    }
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

// One entry: literal text and bracketed ranges, expanded to every combination.
status expand_entry(std::string_view entry, std::vector<std::string>& out) {
  std::vector<std::string> names{""};
  std::size_t i = 0;
  while (i < entry.size()) {
    const std::size_t open = entry.find('[', i);
    const std::size_t close_before = entry.find(']', i);
    if (close_before != std::string_view::npos && (open == std::string_view::npos || close_before < open))
      return error{"malformed node list entry \"" + std::string(entry) + "\": ']' without '['"};
    const std::string_view literal = entry.substr(i, open == std::string_view::npos ? std::string_view::npos : open - i);
    for (auto& n : names) n += literal;
    if (open == std::string_view::npos) break;
    const std::size_t close = entry.find(']', open);
    if (close == std::string_view::npos)
      return error{"malformed node list entry \"" + std::string(entry) + "\": '[' without ']'"};
    auto numbers = expand_range(entry.substr(open + 1, close - open - 1), entry);
    if (!numbers) return numbers.err();
    std::vector<std::string> next;
    for (const auto& n : names)
      for (const auto& x : *numbers) next.push_back(n + x);
    names = std::move(next);
    i = close + 1;
  }
  for (auto& n : names) out.push_back(std::move(n));
  return {};
}

}  // namespace

result<std::vector<std::string>> expand_nodelist(std::string_view list) {
  if (list.empty()) return error{"empty node list"};
  std::vector<std::string> out;
  std::size_t start = 0;
  int depth = 0;
  // Commas inside brackets separate numbers, outside them entries.
  for (std::size_t i = 0; i <= list.size(); ++i) {
    if (i < list.size() && list[i] == '[') ++depth;
    if (i < list.size() && list[i] == ']') --depth;
    if (i < list.size() && !(list[i] == ',' && depth == 0)) continue;
    const std::string_view entry = list.substr(start, i - start);
    start = i + 1;
    if (entry.empty())
      return error{"malformed node list \"" + std::string(list) + "\": an empty entry"};
    for (char c : entry)
      if (std::isspace(static_cast<unsigned char>(c)))
        return error{"malformed node list entry \"" + std::string(entry) + "\": it holds a space"};
    if (auto s = expand_entry(entry, out); !s) return s.err();
  }
  std::set<std::string> seen;
  for (const auto& n : out) {
    if (n.empty()) return error{"malformed node list \"" + std::string(list) + "\": an empty node name"};
    if (!seen.insert(n).second)
      return error{"malformed node list \"" + std::string(list) + "\": node " + n + " is listed twice"};
  }
  return out;
}

}  // namespace kforge::launch
