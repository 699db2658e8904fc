#include "text/jinja_lex.h"

#include <unicode/uchar.h>

#include <algorithm>
#include <charconv>
#include <cmath>

#include "text/jinja_strings.h"
#include "text/jinja_value.h"

namespace ferry::text::jinja {
namespace {

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
// Python identifiers: XID_Start or '_', then XID_Continue (what str.isidentifier() accepts).
bool IsNameStart(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  return u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_XID_START);
}
bool IsNameChar(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (c >= '0' && c <= '9');
  return u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_XID_CONTINUE);
}

// jinja2 drops one trailing newline and reads \r\n and \r as \n.
std::string Normalize(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out.push_back(source[i]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string_view source) : src_(Normalize(source)) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }
    for (size_t i = 0; i < src_.size();) {  // valid UTF-8, so that every later step may assume it
      const size_t at = i;
      if (NextCodePoint(src_, &i) == 0xFFFD && src_.compare(at, 3, "\xEF\xBF\xBD") != 0) {
        Throw(at, "the template is not valid UTF-8");
      }
    }
  }

  std::vector<Token> Run() {
    while (pos_ < src_.size()) Root();
    Push(Tok::kEof, src_.size(), "");
    return std::move(out_);
  }

 private:
  [[noreturn]] void Throw(size_t at, std::string_view what) const {
    const auto [line, col] = LineCol(at);
    throw Error{At(line, col, what), line};
  }

  std::pair<int, int> LineCol(size_t at) const {
    const auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), at) - 1;
    const size_t start = *it;
    return {static_cast<int>(it - line_starts_.begin()) + 1,
            static_cast<int>(CodePointCount(std::string_view(src_).substr(start, at - start))) + 1};
  }

  Token& Push(Tok type, size_t at, std::string text) {
    Token t;
    t.type = type;
    t.text = std::move(text);
    std::tie(t.line, t.col) = LineCol(at);
    out_.push_back(std::move(t));
    return out_.back();
  }

  // The end of the whitespace run at `i` (Python's \s*).
  size_t SkipSpace(size_t i) const {
    while (i < src_.size()) {
      size_t j = i;
      if (!IsPySpace(NextCodePoint(src_, &j))) break;
      i = j;
    }
    return i;
  }

  // Text before a tag: `sign` '-' strips all whitespace before it; otherwise, unless '+',
  // lstrip_blocks drops the spaces between the line's start and a block or comment tag.
  void Data(size_t from, size_t to, char sign, bool is_variable) {
    std::string_view text = std::string_view(src_).substr(from, to - from);
    if (sign == '-') {
      const std::string stripped = PyStrip(text, nullptr, false, true);
      text = text.substr(0, stripped.size());
    } else if (sign != '+' && !is_variable) {
      const size_t nl = text.rfind('\n');
      const size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
      if ((l_pos > 0 || line_starting_) && l_pos < text.size() && SkipSpace(from + l_pos) == to) {
        text = text.substr(0, l_pos);
      }
    }
    if (!text.empty()) Push(Tok::kData, from, std::string(text));
  }

  // The end of a `{% raw %}` opener at `at` ("{%"), or npos.
  size_t RawBegin(size_t at) const {
    size_t i = at + 2;
    if (i < src_.size() && (src_[i] == '-' || src_[i] == '+')) ++i;
    i = SkipSpace(i);
    if (src_.compare(i, 3, "raw") != 0) return std::string::npos;
    i = SkipSpace(i + 3);
    if (src_.compare(i, 3, "-%}") == 0) return SkipSpace(i + 3);
    if (src_.compare(i, 2, "%}") == 0) return i + 2;
    return std::string::npos;
  }

  // The end of a tag-closing `end` ("%}" or "#}") at `i` ("+%}", "-%}" and following whitespace,
  // or "%}" and, with `trim` (trim_blocks), one newline), or npos.
  size_t CloseAt(size_t i, std::string_view end, bool trim) const {
    if (src_[i] == '+' && src_.compare(i + 1, 2, end) == 0) return i + 3;
    if (src_[i] == '-' && src_.compare(i + 1, 2, end) == 0) return SkipSpace(i + 3);
    if (src_.compare(i, 2, end) == 0) return i + 2 + (trim && i + 2 < src_.size() && src_[i + 2] == '\n');
    return std::string::npos;
  }

  void Root() {
    size_t p = pos_;
    while ((p = src_.find('{', p)) != std::string::npos) {
      if (p + 1 < src_.size() && (src_[p + 1] == '{' || src_[p + 1] == '%' || src_[p + 1] == '#')) break;
      ++p;
    }
    if (p == std::string::npos) {
      Push(Tok::kData, pos_, src_.substr(pos_));
      pos_ = src_.size();
      return;
    }
    const char kind = src_[p + 1];
    size_t q = p + 2;
    char sign = 0;
    if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) sign = src_[q++];
    if (kind == '%') {
      const size_t raw_end = RawBegin(p);
      if (raw_end != std::string::npos) {
        Data(pos_, p, sign, false);
        line_starting_ = src_[raw_end - 1] == '\n';
        Raw(p, raw_end);
        return;
      }
    }
    Data(pos_, p, sign, kind == '{');
    line_starting_ = false;
    if (kind == '#') {
      for (size_t c = q; c < src_.size(); ++c) {
        const size_t end = CloseAt(c, "#}", true);
        if (end != std::string::npos) {
          line_starting_ = src_[end - 1] == '\n';
          pos_ = end;
          return;
        }
      }
      if (q >= src_.size()) {  // jinja2 ends quietly when nothing follows the opener
        pos_ = src_.size();
        return;
      }
      Throw(p, "missing end of comment tag '#}'");
    }
    Push(kind == '{' ? Tok::kVarBegin : Tok::kBlockBegin, p, "");
    pos_ = q;
    Tag(kind == '{');
  }

  void Raw(size_t open, size_t from) {
    for (size_t r = src_.find("{%", from); r != std::string::npos; r = src_.find("{%", r + 1)) {
      size_t i = r + 2;
      char sign = 0;
      if (i < src_.size() && (src_[i] == '-' || src_[i] == '+')) sign = src_[i++];
      i = SkipSpace(i);
      if (src_.compare(i, 6, "endraw") != 0) continue;
      i = SkipSpace(i + 6);
      const size_t end = i < src_.size() ? CloseAt(i, "%}", true) : std::string::npos;
      if (end == std::string::npos) continue;
      Data(from, r, sign, false);
      line_starting_ = src_[end - 1] == '\n';
      pos_ = end;
      return;
    }
    if (from >= src_.size()) {  // jinja2 ends quietly when nothing follows the opener
      pos_ = src_.size();
      return;
    }
    Throw(open, "missing {% endraw %} for this {% raw %}");
  }

  void Tag(bool is_variable) {
    std::vector<char> balance;  // closing brackets expected, innermost last
    while (pos_ < src_.size()) {
      const size_t at = pos_;
      if (balance.empty()) {  // an end tag only outside brackets, as jinja2 has it
        size_t end = std::string::npos;
        if (is_variable) {
          if (src_.compare(at, 3, "-}}") == 0) end = SkipSpace(at + 3);
          else if (src_.compare(at, 2, "}}") == 0) end = at + 2;
        } else {
          end = CloseAt(at, "%}", true);
        }
        if (end != std::string::npos) {
          Push(is_variable ? Tok::kVarEnd : Tok::kBlockEnd, at, "");
          line_starting_ = src_[end - 1] == '\n';
          pos_ = end;
          return;
        }
      }
      const char c = src_[at];
      const size_t space_end = SkipSpace(at);
      if (space_end != at) {
        pos_ = space_end;
      } else if (Number()) {
      } else if (size_t next = at; IsNameStart(NextCodePoint(src_, &next))) {
        size_t i = next;
        while (i < src_.size()) {
          size_t j = i;
          if (!IsNameChar(NextCodePoint(src_, &j))) break;
          i = j;
        }
        Push(Tok::kName, at, src_.substr(at, i - at));
        pos_ = i;
      } else if (c == '\'' || c == '"') {
        String(c);
      } else {
        Operator(&balance);
      }
    }
  }

  // A float or integer literal at pos_ (jinja2's float_re, then integer_re); false if none.
  bool Number() {
    const size_t at = pos_;
    const auto digits = [&](size_t i) {  // (\d+_)*\d+ from i: its end, or i when absent
      if (i >= src_.size() || !IsDigit(src_[i])) return i;
      while (i < src_.size()) {
        while (i < src_.size() && IsDigit(src_[i])) ++i;
        if (i + 1 < src_.size() && src_[i] == '_' && IsDigit(src_[i + 1])) {
          ++i;
          continue;
        }
        break;
      }
      return i;
    };
    if (at >= src_.size() || !IsDigit(src_[at])) return false;
    const size_t int_end = digits(at);
    if (at == 0 || src_[at - 1] != '.') {
      size_t i = int_end, frac_end = int_end;
      if (i < src_.size() && src_[i] == '.' && digits(i + 1) != i + 1) frac_end = digits(i + 1);
      size_t exp_end = std::string::npos;
      i = frac_end;
      if (i < src_.size() && (src_[i] == 'e' || src_[i] == 'E')) {
        size_t j = i + 1;
        if (j < src_.size() && (src_[j] == '+' || src_[j] == '-')) ++j;
        if (digits(j) != j) exp_end = digits(j);
      }
      const size_t end = exp_end != std::string::npos ? exp_end : frac_end;
      if (end != int_end) {
        std::string text;
        for (size_t k = at; k < end; ++k) {
          if (src_[k] != '_') text.push_back(src_[k]);
        }
        double f = 0;
        if (std::from_chars(text.data(), text.data() + text.size(), f).ec == std::errc::result_out_of_range) {
          const size_t e = text.find_first_of("eE");  // Python: inf beyond the range, 0.0 below it
          f = e != std::string::npos && text[e + 1] == '-' ? 0.0 : HUGE_VAL;
        }
        Push(Tok::kFloat, at, text).f = f;
        pos_ = end;
        return true;
      }
    }
    int base = 10;
    size_t i = at, end = int_end;
    if (src_[at] == '0' && at + 1 < src_.size()) {
      const char p = static_cast<char>(src_[at + 1] | 0x20);
      base = p == 'b' ? 2 : p == 'o' ? 8 : p == 'x' ? 16 : 10;
      if (base != 10) {
        const auto ok = [&](char ch) {
          ch = static_cast<char>(ch | 0x20);
          return base == 2 ? (ch == '0' || ch == '1') : base == 8 ? (ch >= '0' && ch <= '7')
                                                                   : (IsDigit(ch) || (ch >= 'a' && ch <= 'f'));
        };
        size_t j = at + 2;
        while (j < src_.size() && (ok(src_[j]) || (src_[j] == '_' && j + 1 < src_.size() && ok(src_[j + 1])))) ++j;
        if (j == at + 2) base = 10;  // "0x" alone: the integer 0, then a name
        else i = at + 2, end = j;
      }
      if (base == 10) {  // 0(_?0)*
        end = at + 1;
        while (end < src_.size() && (src_[end] == '0' || (src_[end] == '_' && end + 1 < src_.size() &&
                                                            src_[end + 1] == '0'))) {
          ++end;
        }
      }
    }
    std::string text;
    for (size_t k = i; k < end; ++k) {
      if (src_[k] != '_') text.push_back(src_[k]);
    }
    int64_t v = 0;
    const auto r = std::from_chars(text.data(), text.data() + text.size(), v, base);
    if (r.ec != std::errc()) Throw(at, "integer literal beyond int64");
    Push(Tok::kInt, at, src_.substr(at, end - at)).i = v;
    pos_ = end;
    return true;
  }

  // A quoted string at pos_, its escapes read as Python's unicode-escape codec reads them.
  void String(char quote) {
    const size_t at = pos_;
    std::string value;
    size_t i = at + 1;
    const auto hex = [&](size_t from, int n, uint32_t* cp) {
      if (from + n > src_.size()) return false;
      *cp = 0;
      for (int k = 0; k < n; ++k) {
        const char ch = src_[from + k];
        const int d = IsDigit(ch) ? ch - '0' : (ch | 0x20) >= 'a' && (ch | 0x20) <= 'f' ? (ch | 0x20) - 'a' + 10 : -1;
        if (d < 0) return false;
        *cp = *cp * 16 + d;
      }
      return true;
    };
    while (true) {
      if (i >= src_.size()) Throw(at, "unterminated string");
      const char c = src_[i];
      if (c == quote) break;
      if (c != '\\') {
        value.push_back(c);
        ++i;
        continue;
      }
      if (i + 1 >= src_.size()) Throw(at, "unterminated string");
      const char e = src_[i + 1];
      i += 2;
      uint32_t cp = 0;
      switch (e) {
        case '\n': break;
        case '\\': value.push_back('\\'); break;
        case '\'': value.push_back('\''); break;
        case '"': value.push_back('"'); break;
        case 'a': value.push_back('\a'); break;
        case 'b': value.push_back('\b'); break;
        case 'f': value.push_back('\f'); break;
        case 'n': value.push_back('\n'); break;
        case 'r': value.push_back('\r'); break;
        case 't': value.push_back('\t'); break;
        case 'v': value.push_back('\v'); break;
        case 'x':
        case 'u':
        case 'U': {
          const int n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (!hex(i, n, &cp) || cp > 0x10FFFF) Throw(at, Cat("truncated or invalid \\", std::string(1, e), " escape"));
          AppendUtf8(cp, &value);
          i += n;
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            cp = e - '0';
            for (int k = 0; k < 2 && i < src_.size() && src_[i] >= '0' && src_[i] <= '7'; ++k) {
              cp = cp * 8 + (src_[i++] - '0');
            }
            AppendUtf8(cp, &value);
          } else {  // not an escape: both characters stay
            value.push_back('\\');
            i -= 1;
          }
      }
    }
    Push(Tok::kString, at, std::move(value));
    pos_ = i + 1;
  }

  void Operator(std::vector<char>* balance) {
    const size_t at = pos_;
    static constexpr std::string_view kTwo[] = {"//", "**", "==", "!=", ">=", "<="};
    for (std::string_view op : kTwo) {
      if (src_.compare(at, 2, op) == 0) {
        Push(Tok::kOp, at, std::string(op));
        pos_ = at + 2;
        return;
      }
    }
    const char c = src_[at];
    if (std::string_view("+-/*%~[](){}><=.:|,;").find(c) == std::string_view::npos) {
      size_t j = at;
      std::string ch;
      AppendUtf8(NextCodePoint(src_, &j), &ch);
      Throw(at, Cat("unexpected character '", ch, "'"));
    }
    if (c == '{' || c == '(' || c == '[') balance->push_back(c == '{' ? '}' : c == '(' ? ')' : ']');
    if (c == '}' || c == ')' || c == ']') {
      if (balance->empty()) Throw(at, Cat("unexpected '", std::string(1, c), "'"));
      if (balance->back() != c) {
        Throw(at, Cat("unexpected '", std::string(1, c), "', expected '", std::string(1, balance->back()), "'"));
      }
      balance->pop_back();
    }
    Push(Tok::kOp, at, std::string(1, c));
    pos_ = at + 1;
  }

  std::string src_;
  std::vector<size_t> line_starts_;
  std::vector<Token> out_;
  size_t pos_ = 0;
  bool line_starting_ = true;  // whether the last match ended a line (lstrip_blocks' test)
};

}  // namespace

std::string At(int line, int col, std::string_view what) { return Cat("line ", line, ", column ", col, ": ", what); }

std::vector<Token> Lex(std::string_view source) { return Lexer(source).Run(); }

}  // namespace ferry::text::jinja
