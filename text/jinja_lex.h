// The Jinja engine's lexer (see text/jinja_parse.h for the rules it follows).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ferry::text::jinja {

enum class Tok : uint8_t { kData, kVarBegin, kVarEnd, kBlockBegin, kBlockEnd, kName, kString, kInt, kFloat, kOp, kEof };

struct Token {
  Tok type;
  std::string text;  // data, a name, a string's value (escapes read), an operator
  int64_t i = 0;     // kInt
  double f = 0;      // kFloat
  int line = 1, col = 1;
};

// The tokens of `source` ending with kEof. Throws Error ("line L, column C: ...") for a character
// no rule reads, an unterminated string, comment or raw block, unbalanced brackets, or invalid
// UTF-8.
std::vector<Token> Lex(std::string_view source);

// "line L, column C: what".
std::string At(int line, int col, std::string_view what);

}  // namespace ferry::text::jinja
