#pragma once
// A small C++ lexer for the static checks: enough of translation phases 1-3 to see identifiers,
// literals and preprocessor directives the way the compiler will, with every token on its original
// line. Comments vanish, line splices are joined, digraphs are mapped to what they spell (`%:` is
// `#`, `<%` is `{`), string literals keep their text but are never mistaken for identifiers.
// It does not expand macros: the checks run a second time on nvcc's preprocessed output for that.

#include <string>
#include <string_view>
#include <vector>

namespace kforge::sandbox {

enum class token_kind {
  identifier,
  number,
  string,       ///< "..." (any prefix, raw strings too); text is the contents without quotes
  character,    ///< '...'
  header_name,  ///< <...> right after #include; text is what is between the brackets
  punct,        ///< an operator or punctuator; digraphs normalised
};

struct token {
  token_kind kind;
  std::string text;
  int line = 0;        ///< original line (1-based) the token starts on
  int directive = -1;  ///< index of the preprocessor directive this token belongs to, or -1
  bool non_ascii =
      false;  ///< identifier spelled with a universal character name or non-ASCII bytes
  bool space_before = false;  ///< whitespace or a comment separates it from the previous token
};

struct lexed_source {
  std::vector<token> tokens;
  /// First token index of each directive (the `#`); directive i runs while tokens carry i.
  std::vector<std::size_t> directive_start;
};

/// Lexes `text`. Physical line i (0-based) of `text` is reported as `line_numbers[i]` when that
/// vector is given (the preprocessed pass keeps only the candidate's lines), else as i + 1.
lexed_source lex_source(std::string_view text, const std::vector<int>* line_numbers = nullptr);

}  // namespace kforge::sandbox
