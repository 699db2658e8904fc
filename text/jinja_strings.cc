#include "text/jinja_strings.h"

#include <unicode/uchar.h>
#include <unicode/ustring.h>

#include <algorithm>

namespace ferry::text::jinja {
namespace {

constexpr char32_t kReplacement = 0xFFFD;

bool InChars(char32_t c, const std::u32string* chars) {
  return chars == nullptr ? IsPySpace(c) : chars->find(c) != std::u32string::npos;
}

// ICU's full case mapping (root locale) of a whole string: `upper` true maps to upper case.
std::string MapCase(std::string_view s, bool upper) {
  UErrorCode err = U_ZERO_ERROR;
  int32_t n16 = 0;
  u_strFromUTF8WithSub(nullptr, 0, &n16, s.data(), static_cast<int32_t>(s.size()), kReplacement, nullptr, &err);
  std::u16string src(n16, u'\0');
  err = U_ZERO_ERROR;
  u_strFromUTF8WithSub(src.data(), n16, nullptr, s.data(), static_cast<int32_t>(s.size()), kReplacement, nullptr,
                       &err);
  std::u16string dst(src.size() * 3 + 4, u'\0');  // full mappings expand by at most 3
  err = U_ZERO_ERROR;
  const int32_t n = upper ? u_strToUpper(dst.data(), static_cast<int32_t>(dst.size()), src.data(), n16, "", &err)
                          : u_strToLower(dst.data(), static_cast<int32_t>(dst.size()), src.data(), n16, "", &err);
  if (U_FAILURE(err)) return std::string(s);
  std::string out;
  int32_t n8 = 0;
  err = U_ZERO_ERROR;
  u_strToUTF8(nullptr, 0, &n8, dst.data(), n, &err);
  out.resize(n8);
  err = U_ZERO_ERROR;
  u_strToUTF8(out.data(), n8, nullptr, dst.data(), n, &err);
  return out;
}

bool IsCased(char32_t c) { return u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_CASED); }

}  // namespace

char32_t NextCodePoint(std::string_view s, size_t* i) {
  const auto b = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
  const uint8_t c = b(*i);
  int n = 0;
  char32_t cp = 0;
  if (c < 0x80) {
    ++*i;
    return c;
  } else if ((c & 0xE0) == 0xC0) {
    n = 1, cp = c & 0x1F;
  } else if ((c & 0xF0) == 0xE0) {
    n = 2, cp = c & 0x0F;
  } else if ((c & 0xF8) == 0xF0) {
    n = 3, cp = c & 0x07;
  } else {
    ++*i;
    return kReplacement;
  }
  if (*i + n >= s.size()) {  // truncated sequence
    ++*i;
    return kReplacement;
  }
  for (int k = 1; k <= n; ++k) {
    if ((b(*i + k) & 0xC0) != 0x80) {
      ++*i;
      return kReplacement;
    }
    cp = (cp << 6) | (b(*i + k) & 0x3F);
  }
  *i += n + 1;
  return cp;
}

std::u32string ToU32(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) out.push_back(NextCodePoint(s, &i));
  return out;
}

std::string FromU32(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) AppendUtf8(c, &out);
  return out;
}

int64_t CodePointCount(std::string_view s) {
  int64_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

bool IsPySpace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

bool IsPyPrintable(char32_t c) {
  if (c == ' ') return true;
  switch (u_charType(static_cast<UChar32>(c))) {
    case U_CONTROL_CHAR:
    case U_FORMAT_CHAR:
    case U_SURROGATE:
    case U_PRIVATE_USE_CHAR:
    case U_UNASSIGNED:
    case U_LINE_SEPARATOR:
    case U_PARAGRAPH_SEPARATOR:
    case U_SPACE_SEPARATOR:
      return false;
    default:
      return true;
  }
}

std::string PyStrip(std::string_view s, const std::u32string* chars, bool left, bool right) {
  const std::u32string u = ToU32(s);
  size_t b = 0, e = u.size();
  if (left) {
    while (b < e && InChars(u[b], chars)) ++b;
  }
  if (right) {
    while (e > b && InChars(u[e - 1], chars)) --e;
  }
  return FromU32(std::u32string_view(u).substr(b, e - b));
}

std::vector<std::string> PySplit(std::string_view s, const std::string* sep, int64_t maxsplit, bool from_right) {
  std::vector<std::string> out;
  if (maxsplit < 0) maxsplit = INT64_MAX;
  if (sep != nullptr) {
    if (!from_right) {
      size_t pos = 0;
      while (maxsplit-- > 0) {
        const size_t at = s.find(*sep, pos);
        if (at == std::string_view::npos) break;
        out.emplace_back(s.substr(pos, at - pos));
        pos = at + sep->size();
      }
      out.emplace_back(s.substr(pos));
    } else {
      size_t end = s.size();
      while (maxsplit-- > 0 && end >= sep->size()) {
        const size_t at = s.rfind(*sep, end - sep->size());
        if (at == std::string_view::npos) break;
        out.emplace_back(s.substr(at + sep->size(), end - at - sep->size()));
        end = at;
      }
      out.emplace_back(s.substr(0, end));
      std::reverse(out.begin(), out.end());
    }
    return out;
  }
  // Whitespace: runs of whitespace separate, none at either end; once maxsplit is reached the
  // rest is one piece, whitespace and all.
  const std::u32string u = ToU32(s);
  if (!from_right) {
    size_t i = 0;
    while (true) {
      while (i < u.size() && IsPySpace(u[i])) ++i;
      if (i == u.size()) break;
      if (maxsplit-- <= 0) {  // the rest, as it is
        out.push_back(FromU32(std::u32string_view(u).substr(i)));
        break;
      }
      size_t j = i;
      while (j < u.size() && !IsPySpace(u[j])) ++j;
      out.push_back(FromU32(std::u32string_view(u).substr(i, j - i)));
      i = j;
    }
  } else {
    size_t i = u.size();
    while (true) {
      while (i > 0 && IsPySpace(u[i - 1])) --i;
      if (i == 0) break;
      if (maxsplit-- <= 0) {
        out.push_back(FromU32(std::u32string_view(u).substr(0, i)));
        break;
      }
      size_t j = i;
      while (j > 0 && !IsPySpace(u[j - 1])) --j;
      out.push_back(FromU32(std::u32string_view(u).substr(j, i - j)));
      i = j;
    }
    std::reverse(out.begin(), out.end());
  }
  return out;
}

std::vector<std::string> PySplitLines(std::string_view s) {
  // Line boundaries of str.splitlines(): \n \r \r\n \v \f \x1c \x1d \x1e \x85 \u2028 \u2029.
  std::vector<std::string> out;
  const std::u32string u = ToU32(s);
  size_t start = 0;
  for (size_t i = 0; i < u.size(); ++i) {
    const char32_t c = u[i];
    if (c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E || c == 0x85 ||
        c == 0x2028 || c == 0x2029) {
      out.push_back(FromU32(std::u32string_view(u).substr(start, i - start)));
      if (c == '\r' && i + 1 < u.size() && u[i + 1] == '\n') ++i;
      start = i + 1;
    }
  }
  if (start < u.size()) out.push_back(FromU32(std::u32string_view(u).substr(start)));
  return out;
}

std::string PyReplace(std::string_view s, std::string_view old_text, std::string_view new_text, int64_t count) {
  if (count < 0) count = INT64_MAX;
  std::string out;
  if (old_text.empty()) {  // inserts `new_text` before every character and at the end
    size_t i = 0;
    while (i < s.size() && count > 0) {
      out.append(new_text);
      const size_t at = i;
      NextCodePoint(s, &i);
      out.append(s.substr(at, i - at));
      --count;
    }
    if (count > 0) out.append(new_text);
    out.append(s.substr(i));
    return out;
  }
  size_t pos = 0;
  while (count-- > 0) {
    const size_t at = s.find(old_text, pos);
    if (at == std::string_view::npos) break;
    out.append(s.substr(pos, at - pos));
    out.append(new_text);
    pos = at + old_text.size();
  }
  out.append(s.substr(pos));
  return out;
}

int64_t PyFind(std::string_view s, std::string_view sub, bool from_right) {
  const size_t at = from_right ? s.rfind(sub) : s.find(sub);
  return at == std::string_view::npos ? -1 : CodePointCount(s.substr(0, at));
}

int64_t PyCount(std::string_view s, std::string_view sub) {
  if (sub.empty()) return CodePointCount(s) + 1;
  int64_t n = 0;
  for (size_t at = s.find(sub); at != std::string_view::npos; at = s.find(sub, at + sub.size())) ++n;
  return n;
}

std::string PyUpper(std::string_view s) { return MapCase(s, true); }
std::string PyLower(std::string_view s) { return MapCase(s, false); }

std::string PyCapitalize(std::string_view s) {
  if (s.empty()) return "";
  size_t i = 0;
  const char32_t first = NextCodePoint(s, &i);
  std::string out;
  AppendUtf8(static_cast<char32_t>(u_totitle(static_cast<UChar32>(first))), &out);
  return out + PyLower(s.substr(i));
}

std::string PyTitle(std::string_view s) {
  std::string out;
  bool previous_cased = false;
  for (size_t i = 0; i < s.size();) {
    const size_t at = i;
    const char32_t c = NextCodePoint(s, &i);
    if (previous_cased) {
      out += PyLower(s.substr(at, i - at));
    } else {
      AppendUtf8(static_cast<char32_t>(u_totitle(static_cast<UChar32>(c))), &out);
    }
    previous_cased = IsCased(c);
  }
  return out;
}

std::string PySwapcase(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    const size_t at = i;
    const char32_t c = NextCodePoint(s, &i);
    const std::string_view one = s.substr(at, i - at);
    out += u_isupper(static_cast<UChar32>(c)) ? PyLower(one) : u_islower(static_cast<UChar32>(c)) ? PyUpper(one)
                                                                                                   : std::string(one);
  }
  return out;
}

bool PyIs(std::string_view what, std::string_view s) {
  if (s.empty()) return false;
  const std::u32string u = ToU32(s);
  if (what == "lower" || what == "upper") {  // at least one cased character, none of the other case
    bool cased = false;
    for (char32_t c : u) {
      const bool up = u_isupper(static_cast<UChar32>(c)) || u_istitle(static_cast<UChar32>(c));
      const bool low = u_islower(static_cast<UChar32>(c));
      if ((what == "lower" && up) || (what == "upper" && low)) return false;
      cased = cased || up || low;
    }
    return cased;
  }
  for (char32_t c : u) {
    const UChar32 k = static_cast<UChar32>(c);
    const int8_t cat = u_charType(k);
    const bool alpha = cat == U_UPPERCASE_LETTER || cat == U_LOWERCASE_LETTER || cat == U_TITLECASE_LETTER ||
                       cat == U_MODIFIER_LETTER || cat == U_OTHER_LETTER;
    const bool decimal = cat == U_DECIMAL_DIGIT_NUMBER;
    const bool digit = decimal || u_getIntPropertyValue(k, UCHAR_NUMERIC_TYPE) == U_NT_DIGIT;
    const bool numeric = digit || u_getIntPropertyValue(k, UCHAR_NUMERIC_TYPE) != U_NT_NONE;
    bool ok = false;
    if (what == "alpha") ok = alpha;
    if (what == "digit") ok = digit;
    if (what == "decimal") ok = decimal;
    if (what == "numeric") ok = numeric;
    if (what == "alnum") ok = alpha || numeric;
    if (what == "space") ok = IsPySpace(c);
    if (!ok) return false;
  }
  return true;
}

}  // namespace ferry::text::jinja
