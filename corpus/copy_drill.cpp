#include "corpus/copy_drill.hpp"

#include <array>
#include <cctype>
#include <cstdio>

#include "corpus/kernel_writer.hpp"

namespace kforge::corpus {
namespace {

// Names a scrambled call takes: torch functions (many never in a synthesized chain, so the name
// is seen in the prompt, not recalled) and made-up words from syllables.
constexpr std::array<const char*, 64> kTorchNames = {
    "relu", "gelu", "silu", "tanh", "sigmoid", "exp", "log", "sqrt", "rsqrt", "abs", "neg",
    "sin", "cos", "erf", "softplus", "mish", "elu", "selu", "celu", "hardtanh", "hardswish",
    "hardsigmoid", "leaky_relu", "softsign", "logsigmoid", "clamp", "clamp_min", "clamp_max",
    "pow", "maximum", "minimum", "where", "sum", "mean", "amax", "amin", "prod", "var", "std",
    "softmax", "log_softmax", "logsumexp", "cumsum", "norm", "matmul", "addmm", "bmm", "linear",
    "layer_norm", "rms_norm", "square", "reciprocal", "expm1", "log1p", "sign", "floor", "ceil",
    "round", "trunc", "frac", "atan", "asinh", "logaddexp", "hypot"};
constexpr std::array<const char*, 24> kSyllables = {
    "ka", "lo", "mi", "ru", "te", "zan", "pel", "vor", "qui", "dex", "sna", "bo",
    "fi", "gra", "hu", "jin", "ost", "ply", "wen", "xu", "yal", "tor", "cri", "mu"};

std::string random_name(std::mt19937_64& rng) {
  if (rng() % 2 == 0) return kTorchNames[rng() % kTorchNames.size()];
  std::string s;
  const int syllables = 2 + static_cast<int>(rng() % 3);
  for (int i = 0; i < syllables; ++i) {
    if (i > 0 && rng() % 4 == 0) s += '_';
    s += kSyllables[rng() % kSyllables.size()];
  }
  return s;
}

}  // namespace

std::string random_number_like(const std::string& old, std::mt19937_64& rng) {
  char buf[32];
  // One draw per statement: the order of draws within one expression is unspecified, and the same
  // seed must give the same drills whatever the compiler.
  if (old.find_first_of("eE") != std::string::npos) {
    const int mantissa = 1 + static_cast<int>(rng() % 9);
    const int exponent = 1 + static_cast<int>(rng() % 9);
    std::snprintf(buf, sizeof buf, "%de-%d", mantissa, exponent);
  } else if (old.find('.') != std::string::npos) {
    const int decimals = 1 + static_cast<int>(rng() % 3);
    int scale = 1;
    for (int i = 0; i < decimals; ++i) scale *= 10;
    const int v = static_cast<int>(rng() % (scale * 10));
    std::snprintf(buf, sizeof buf, "%d.%0*d", v / scale, decimals, v % scale);
  } else {
    const bool small = rng() % 2 != 0;
    std::snprintf(buf, sizeof buf, "%d", static_cast<int>(rng() % (small ? 10 : 4096)));
  }
  return buf;
}

bool word_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

std::size_t number_end(const std::string& s, std::size_t i) {
  std::size_t j = i;
  while (j < s.size() && (std::isdigit(static_cast<unsigned char>(s[j])) || s[j] == '.' ||
                          ((s[j] == 'e' || s[j] == 'E') && j + 1 < s.size() &&
                           (s[j + 1] == '-' || s[j + 1] == '+' ||
                            std::isdigit(static_cast<unsigned char>(s[j + 1])))) ||
                          ((s[j] == '-' || s[j] == '+') && (s[j - 1] == 'e' || s[j - 1] == 'E'))))
    ++j;
  return j;
}

std::string scramble_tokens(const std::string& s, std::mt19937_64& rng,
                            const std::function<std::string(std::size_t, std::size_t)>& word,
                            const std::function<std::string(const std::string&)>& number) {
  static constexpr std::array<char, 4> kOps = {'+', '-', '*', '/'};
  std::string out;
  for (std::size_t i = 0; i < s.size();) {
    const char c = s[i];
    const char prev = i > 0 ? s[i - 1] : ' ';
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      std::size_t j = i;
      while (j < s.size() && word_char(s[j])) ++j;
      out += word(i, j);
      i = j;
    } else if (std::isdigit(static_cast<unsigned char>(c)) && !word_char(prev) && prev != '.') {
      const std::size_t j = number_end(s, i);
      out += number(s.substr(i, j - i));
      i = j;
    } else if (prev == ' ' && i + 1 < s.size() && s[i + 1] == ' ' &&
               (c == '+' || c == '-' || c == '*' || c == '/')) {
      out += kOps[rng() % kOps.size()];  // a binary operator between spaces
      ++i;
    } else {
      out += c;
      ++i;
    }
  }
  return out;
}

namespace {

std::string scramble_body(const std::string& s, std::mt19937_64& rng) {
  return scramble_tokens(
      s, rng,
      [&](std::size_t i, std::size_t j) {
        const bool called = i > 0 && s[i - 1] == '.' && j < s.size() && s[j] == '(';
        return called ? random_name(rng) : s.substr(i, j - i);
      },
      [&](const std::string& number) { return random_number_like(number, rng); });
}

}  // namespace

std::string with_body_scrambled(const std::string& reference,
                                const std::function<std::string(const std::string&)>& scramble) {
  const auto def = reference.find("def forward(");
  if (def == std::string::npos) return reference;
  const auto body = reference.find('\n', def);
  if (body == std::string::npos) return reference;
  return reference.substr(0, body) + scramble(reference.substr(body));
}

std::string task_section(const tasks::prompt_template& tmpl, const tasks::task& t,
                         const tasks::hardware_context& hw) {
  auto prompt = tmpl.render(t, hw);
  if (const auto at = prompt.find("## Task"); at != std::string::npos) prompt.erase(0, at);
  return prompt;
}

std::string scramble_reference(const std::string& reference, std::mt19937_64& rng) {
  return with_body_scrambled(reference, [&](const std::string& b) { return scramble_body(b, rng); });
}

std::vector<drill_record> copy_drills(const std::vector<tasks::task>& pool,
                                      const tasks::prompt_template& tmpl,
                                      const tasks::hardware_context& hw, int count,
                                      std::uint64_t seed) {
  std::vector<drill_record> out;
  if (pool.empty()) return out;
  std::mt19937_64 rng(seed);
  for (int n = 0; n < count; ++n) {
    tasks::task t = pool[rng() % pool.size()];
    t.reference = scramble_reference(t.reference, rng);
    // The task's own id and description name the ops the scrambled reference no longer has: a
    // prompt that contradicts itself, which a run never shows.
    const std::string source_id = t.id;
    t.id = "drill/" + std::to_string(n);
    t.description = "A task to restate.";
    auto restated = restated_reference(t);
    if (restated.empty()) continue;
    out.push_back({t.id + "/" + source_id, task_section(tmpl, t, hw), std::move(restated)});
  }
  return out;
}

}  // namespace kforge::corpus
