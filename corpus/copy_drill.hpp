#pragma once
// Copy drills: short training records that teach only the first thing a corpus completion does,
// restating the task's reference ("The reference computes `...`."), on references whose op names
// and numbers are replaced by random ones, so the restatement can only be copied, not recalled.
//
// Why: kforge-tiny v1-v5 (bench/RESULTS.md, 2026-11-30) learnt every boilerplate token of the
// corpus and guessed the op names in the restatement from the ~50 ops it had seen instead of reading
// them from the prompt; that one copy is ~1 % of a record's targets. A drill record is the prompt's
// task section (a few hundred tokens instead of ~1,500) and the restatement alone, marked
// "prefix_only" so pretraining learns no end of turn after it.

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "tasks/prompt.hpp"
#include "tasks/task.hpp"

namespace kforge::corpus {

/// `reference` with, in forward's body (the lines after "def forward("), every called name that
/// follows a '.' ("torch.relu(", "x.sum(") and every number replaced by random ones (real torch
/// function names or made-up words; numbers of the same kind: integer, decimal or exponent form),
/// and every binary operator written between spaces (" + ", " - ", " * ", " / ") by a random one.
std::string scramble_reference(const std::string& reference, std::mt19937_64& rng);

/// A number of the same kind as `old`: an integer for an integer, a decimal (or an exponent form
/// for an exponent form) otherwise. One draw sequence per call, whatever the compiler.
std::string random_number_like(const std::string& old, std::mt19937_64& rng);

/// A letter, digit or '_'.
bool word_char(char c);

/// Where the number starting at s[i] ends ("2", "0.5", "1e-6", "3.0E+2").
std::size_t number_end(const std::string& s, std::size_t i);

/// `s` (forward's body) token by token: each word s[i, j) becomes `word(i, j)`, each number not
/// part of a name `number(text)`, each binary operator between spaces a random one of + - * /;
/// everything else stays.
std::string scramble_tokens(const std::string& s, std::mt19937_64& rng,
                            const std::function<std::string(std::size_t, std::size_t)>& word,
                            const std::function<std::string(const std::string&)>& number);

/// `reference` with forward's body (the lines after "def forward(") replaced by
/// `scramble(body)`; unchanged when it has no such body.
std::string with_body_scrambled(const std::string& reference,
                                const std::function<std::string(const std::string&)>& scramble);

/// The rendered prompt of `t` from its "## Task" heading on: what a drill shows (the task, not
/// the ABI and hardware sections every kernel record already carries).
std::string task_section(const tasks::prompt_template& tmpl, const tasks::task& t,
                         const tasks::hardware_context& hw);

struct drill_record {
  std::string task_id;     ///< "drill/<n>/<source task id>"
  /// The rendered prompt from its "## Task" heading on, the task named "drill/<n>" with a neutral
  /// description (its own would name the ops it no longer has).
  std::string prompt;
  std::string completion;  ///< "The reference computes `<scrambled body>`."
};

/// `count` drills, each from a task of `pool` picked at random (seeded), its reference
/// scrambled; tasks whose body cannot be restated are skipped (fewer records then).
std::vector<drill_record> copy_drills(const std::vector<tasks::task>& pool,
                                      const tasks::prompt_template& tmpl,
                                      const tasks::hardware_context& hw, int count,
                                      std::uint64_t seed);

}  // namespace kforge::corpus
