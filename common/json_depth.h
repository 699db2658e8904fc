// How deeply a JSON text nests arrays and objects, found without parsing it. nlohmann::json parses
// and destroys deep values without recursion but copies and compares them recursively, so text
// from a client or a model is measured first and refused past a bound (kMaxJsonDepth), before a
// copy of it could overflow the stack.
#pragma once

#include <string_view>

namespace ferry {

inline constexpr int kMaxJsonDepth = 64;

// The largest nesting of '[' and '{' outside strings (0 for a scalar); malformed text is measured
// as far as it goes.
inline int JsonDepth(std::string_view text) {
  int depth = 0, deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > deepest) deepest = depth;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

}  // namespace ferry
