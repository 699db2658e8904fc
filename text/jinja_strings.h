// Python's str algorithms over UTF-8, for the Jinja engine (text/chat_template.h): the engine's
// strings are UTF-8 bytes, Python's are code points, so lengths, indices and slices count code
// points, and whitespace, printability and case follow Python's Unicode rules (case mapping and
// character classes through ICU).
//
// Input strings are valid UTF-8 (template sources are checked at parse, render variables come from
// nlohmann::json, which checks them); an invalid byte still decodes, as U+FFFD, never past the end.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "text/tokenizer.h"

namespace ferry::text::jinja {

// The code point at s[*i], advancing *i past it.
char32_t NextCodePoint(std::string_view s, size_t* i);
using text::AppendUtf8;  // text/tokenizer.h
std::u32string ToU32(std::string_view s);
std::string FromU32(std::u32string_view s);
int64_t CodePointCount(std::string_view s);

bool IsPySpace(char32_t c);      // str.isspace(): what str.split() and str.strip() remove
bool IsPyPrintable(char32_t c);  // str.isprintable(): what repr() leaves unescaped

// str.strip / lstrip / rstrip; `chars` null strips whitespace.
std::string PyStrip(std::string_view s, const std::u32string* chars, bool left, bool right);
// str.split / str.rsplit; `sep` null splits on whitespace runs. REQUIRES: sep is not empty.
std::vector<std::string> PySplit(std::string_view s, const std::string* sep, int64_t maxsplit, bool from_right);
std::vector<std::string> PySplitLines(std::string_view s);
// str.replace(old, new, count); count < 0 replaces all.
std::string PyReplace(std::string_view s, std::string_view old_text, std::string_view new_text, int64_t count);
// str.find / rfind in code points; -1 when absent.
int64_t PyFind(std::string_view s, std::string_view sub, bool from_right);
int64_t PyCount(std::string_view s, std::string_view sub);

std::string PyUpper(std::string_view s);
std::string PyLower(std::string_view s);
std::string PyCapitalize(std::string_view s);  // str.capitalize()
std::string PyTitle(std::string_view s);       // str.title()
std::string PySwapcase(std::string_view s);
// A str.isX() predicate over the whole (non-empty) string: "alpha", "digit", "alnum", "space",
// "lower", "upper", "numeric", "decimal".
bool PyIs(std::string_view what, std::string_view s);

}  // namespace ferry::text::jinja
