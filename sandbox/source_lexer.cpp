#include "sandbox/source_lexer.hpp"

#include <cctype>

namespace kforge::sandbox {

namespace {

bool ident_start(unsigned char c) { return std::isalpha(c) || c == '_' || c == '$' || c >= 0x80; }
bool ident_char(unsigned char c) { return std::isalnum(c) || c == '_' || c == '$' || c >= 0x80; }

bool is_string_prefix(const std::string& s) {
  return s == "L" || s == "u" || s == "U" || s == "u8";
}
bool is_raw_prefix(const std::string& s) {
  return s == "R" || s == "LR" || s == "uR" || s == "UR" || s == "u8R";
}

struct lexer {
  std::string s;          // the text after line splicing
  std::vector<int> line;  // original line of each character of s
  std::size_t i = 0;
  lexed_source out;
  int directive = -1;
  bool line_start = true;  // nothing but whitespace and comments so far on this logical line
  bool space = false;      // whitespace or a comment since the last token

  char at(std::size_t k) const { return k < s.size() ? s[k] : '\0'; }

  void push(token_kind kind, std::string text, std::size_t start, bool non_ascii = false) {
    out.tokens.push_back({kind, std::move(text), line[start], directive, non_ascii, space});
    line_start = false;
    space = false;
  }

  // In the head of #include / #include_next / #import, `<...>` is one header-name token.
  bool expecting_header_name() const {
    if (directive < 0) return false;
    const std::size_t first = out.directive_start[directive];
    if (out.tokens.size() != first + 2) return false;
    const auto& t = out.tokens[first + 1].text;
    return t == "include" || t == "include_next" || t == "import";
  }

  void quoted(char quote, token_kind kind, std::size_t start) {
    std::size_t k = i + 1;
    std::string text;
    while (k < s.size() && s[k] != quote && s[k] != '\n') {
      if (s[k] == '\\' && k + 1 < s.size() && s[k + 1] != '\n') {
        text += s[k];
        ++k;
      }
      text += s[k];
      ++k;
    }
    i = (k < s.size() && s[k] == quote) ? k + 1 : k;
    push(kind, std::move(text), start);
  }

  void raw_string(std::size_t start) {
    // i is at the opening quote: R"delim( ... )delim"
    std::size_t k = i + 1;
    std::string delim;
    while (k < s.size() && s[k] != '(' && s[k] != '\n' && delim.size() <= 16) delim += s[k++];
    const std::string close = ")" + delim + "\"";
    const std::size_t body = k + 1;
    const std::size_t end = s.find(close, body);
    if (at(k) != '(' || end == std::string::npos) {  // malformed: take the rest of the line
      quoted('"', token_kind::string, start);
      return;
    }
    i = end + close.size();
    push(token_kind::string, s.substr(body, end - body), start);
  }

  void run() {
    while (i < s.size()) {
      const unsigned char c = s[i];
      const std::size_t start = i;
      if (c == '\n') {
        line_start = true;
        directive = -1;
        space = true;
        ++i;
      } else if (std::isspace(c)) {
        space = true;
        ++i;
      } else if (c == '/' && at(i + 1) == '/') {
        while (i < s.size() && s[i] != '\n') ++i;
      } else if (c == '/' && at(i + 1) == '*') {
        const std::size_t end = s.find("*/", i + 2);
        i = end == std::string::npos ? s.size() : end + 2;
        space = true;
      } else if (ident_start(c) || (c == '\\' && (at(i + 1) == 'u' || at(i + 1) == 'U'))) {
        std::string text;
        bool non_ascii = false;
        while (i < s.size()) {
          const unsigned char d = s[i];
          if (ident_char(d)) {
            non_ascii |= d >= 0x80;
            text += s[i++];
          } else if (d == '\\' && (at(i + 1) == 'u' || at(i + 1) == 'U')) {
            non_ascii = true;
            const std::size_t n = at(i + 1) == 'u' ? 6 : 10;
            text += s.substr(i, n);
            i += n;
          } else {
            break;
          }
        }
        if (is_raw_prefix(text) && at(i) == '"') {
          raw_string(start);
        } else if (is_string_prefix(text) && (at(i) == '"' || at(i) == '\'')) {
          quoted(s[i], at(i) == '"' ? token_kind::string : token_kind::character, start);
        } else {
          push(token_kind::identifier, std::move(text), start, non_ascii);
        }
      } else if (std::isdigit(c) ||
                 (c == '.' && std::isdigit(static_cast<unsigned char>(at(i + 1))))) {
        std::string text;
        while (i < s.size()) {
          const unsigned char d = s[i];
          if ((d == '+' || d == '-') && !text.empty() &&
              std::string("eEpP").find(text.back()) != std::string::npos) {
            text += s[i++];
          } else if (std::isalnum(d) || d == '_' || d == '.' || d == '\'') {
            text += s[i++];
          } else {
            break;
          }
        }
        push(token_kind::number, std::move(text), start);
      } else if (c == '"') {
        quoted('"', token_kind::string, start);
      } else if (c == '\'') {
        quoted('\'', token_kind::character, start);
      } else if (c == '<' && expecting_header_name()) {
        const std::size_t end = s.find_first_of(">\n", i + 1);
        const std::size_t stop = end == std::string::npos ? s.size() : end;
        push(token_kind::header_name, s.substr(i + 1, stop - i - 1), start);
        i = (stop < s.size() && s[stop] == '>') ? stop + 1 : stop;
      } else {
        punct(start);
      }
    }
  }

  void punct(std::size_t start) {
    const std::string_view rest(s.data() + i, s.size() - i);
    auto starts = [&](std::string_view p) { return rest.substr(0, p.size()) == p; };
    std::string text;
    std::size_t len = 1;
    if (starts("%:%:")) {
      text = "##", len = 4;
    } else if (starts("##")) {
      text = "##", len = 2;
    } else if (starts("%:")) {
      text = "#", len = 2;
    } else if (starts("<%")) {
      text = "{", len = 2;
    } else if (starts("%>")) {
      text = "}", len = 2;
    } else if (starts("<:") && !(starts("<::") && at(i + 3) != ':' && at(i + 3) != '>')) {
      text = "[", len = 2;
    } else if (starts(":>")) {
      text = "]", len = 2;
    } else if (starts("::")) {
      text = "::", len = 2;
    } else if (starts("->")) {
      text = "->", len = 2;
    } else {
      text = std::string(1, s[i]);
    }
    const bool opens_directive = text == "#" && line_start;
    if (opens_directive) {
      directive = static_cast<int>(out.directive_start.size());
      out.directive_start.push_back(out.tokens.size());
    }
    i += len;
    push(token_kind::punct, std::move(text), start);
  }
};

}  // namespace

lexed_source lex_source(std::string_view text, const std::vector<int>* line_numbers) {
  lexer lx;
  lx.s.reserve(text.size());
  lx.line.reserve(text.size());
  std::size_t physical = 0;
  auto line_of = [&](std::size_t p) {
    if (!line_numbers) return static_cast<int>(p) + 1;
    return p < line_numbers->size() ? (*line_numbers)[p]
                                    : (line_numbers->empty() ? 0 : line_numbers->back());
  };
  for (std::size_t k = 0; k < text.size(); ++k) {
    // Phase 2: a backslash at the end of a line joins it to the next one.
    if (text[k] == '\\') {
      std::size_t n = k + 1;
      if (n < text.size() && text[n] == '\r') ++n;
      if (n < text.size() && text[n] == '\n') {
        k = n;
        ++physical;
        continue;
      }
    }
    if (text[k] == '\r' && k + 1 < text.size() && text[k + 1] == '\n') continue;
    lx.s += text[k];
    lx.line.push_back(line_of(physical));
    if (text[k] == '\n') ++physical;
  }
  lx.run();
  return std::move(lx.out);
}

}  // namespace kforge::sandbox
