#include "text/tokenizer.h"

#include <unicode/uchar.h>

#include <algorithm>
#include <array>
#include <fstream>
#include <limits>
#include <queue>
#include <sstream>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"

namespace ferry::text {
namespace {

using json = nlohmann::json;

constexpr char kGlmSplit[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";


// The byte-level alphabet: each byte as one printable character (the printable Latin-1 bytes as
// themselves, the others from U+0100 on, in byte order), and back.
struct ByteAlphabet {
  std::array<std::string, 256> of_byte;
  std::unordered_map<char32_t, uint8_t> to_byte;
  ByteAlphabet() {
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      const char32_t cp = printable ? static_cast<char32_t>(b) : next++;
      AppendUtf8(cp, &of_byte[b]);
      to_byte[cp] = static_cast<uint8_t>(b);
    }
  }
};
const ByteAlphabet& Bytes() {
  static const ByteAlphabet* a = new ByteAlphabet();
  return *a;
}

// The code point at s[i] (strict UTF-8); its length in *len, or 0 when the bytes are not valid.
char32_t DecodeAt(std::string_view s, size_t i, size_t* len) {
  const auto b = [&](size_t k) { return static_cast<uint8_t>(s[i + k]); };
  const uint8_t c = b(0);
  *len = 0;
  if (c < 0x80) {
    *len = 1;
    return c;
  }
  int n = 0;
  uint8_t lo = 0x80, hi = 0xBF;
  char32_t cp = 0;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2, cp = c & 0x1F;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3, cp = c & 0x0F;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4, cp = c & 0x07;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (i + static_cast<size_t>(n) > s.size()) return 0;
  for (int k = 1; k < n; ++k) {
    const uint8_t t = b(static_cast<size_t>(k));
    if (t < (k == 1 ? lo : 0x80) || t > (k == 1 ? hi : 0xBF)) return 0;
    cp = (cp << 6) | (t & 0x3F);
  }
  *len = static_cast<size_t>(n);
  return cp;
}

// \p{L} and \p{N}: the general categories L* and N*.
bool IsLetter(char32_t c) { return (U_GET_GC_MASK(static_cast<UChar32>(c)) & U_GC_L_MASK) != 0; }
bool IsNumber(char32_t c) { return (U_GET_GC_MASK(static_cast<UChar32>(c)) & U_GC_N_MASK) != 0; }
bool IsSpace(char32_t c) { return u_isUWhiteSpace(static_cast<UChar32>(c)); }
bool IsNewline(char32_t c) { return c == '\r' || c == '\n'; }
// [^\s\p{L}\p{N}]
bool IsOther(char32_t c) { return !IsSpace(c) && !IsLetter(c) && !IsNumber(c); }

// The end (a code point index) of GLM's split's match at code point i of `c` (always > i).
size_t MatchAt(const std::vector<char32_t>& c, size_t i) {
  const size_t n = c.size();
  auto lower = [&](size_t k) -> char32_t {
    if (k >= n) return 0;
    const char32_t x = c[k];
    if (x >= 'A' && x <= 'Z') return x - 'A' + 'a';
    if (x == 0x17F) return 's';  // long s folds to s
    return x;
  };
  // (?i:'s|'t|'re|'ve|'m|'ll|'d)
  if (c[i] == '\'') {
    const char32_t a = lower(i + 1), b = lower(i + 2);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') {
      // 'r..., 'v..., 'l... need their second letter; these need nothing more.
      return i + 2;
    }
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
  }
  // [^\r\n\p{L}\p{N}]?\p{L}+
  {
    size_t j = i;
    if (!IsNewline(c[i]) && !IsLetter(c[i]) && !IsNumber(c[i]) && i + 1 < n && IsLetter(c[i + 1])) j = i + 1;
    if (IsLetter(c[j])) {
      while (j < n && IsLetter(c[j])) ++j;
      return j;
    }
  }
  // \p{N}{1,3}
  if (IsNumber(c[i])) {
    size_t j = i;
    while (j < n && j < i + 3 && IsNumber(c[j])) ++j;
    return j;
  }
  //  ?[^\s\p{L}\p{N}]+[\r\n]*
  {
    size_t j = i;
    if (c[i] == ' ' && i + 1 < n && IsOther(c[i + 1])) j = i + 1;
    if (IsOther(c[j])) {
      while (j < n && IsOther(c[j])) ++j;
      while (j < n && IsNewline(c[j])) ++j;
      return j;
    }
  }
  // The rest start with whitespace (every other character matched above).
  size_t k = i;
  while (k < n && IsSpace(c[k])) ++k;
  // \s*[\r\n]+: up to the run's last newline.
  for (size_t m = k; m > i; --m) {
    if (IsNewline(c[m - 1])) return m;
  }
  // \s+(?!\S): the run, less its last character when a non-space follows.
  if (k == n) return k;
  if (k - 1 > i) return k - 1;
  // \s+
  return k;
}

absl::Status Malformed(const std::string& path, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", what));
}

}  // namespace

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

size_t AppendUtf8Lossy(std::string_view s, bool final, std::string* out) {
  static constexpr char kReplacement[] = "\xEF\xBF\xBD";
  size_t i = 0;
  while (i < s.size()) {
    size_t len = 0;
    DecodeAt(s, i, &len);
    if (len > 0) {
      out->append(s.substr(i, len));
      i += len;
      continue;
    }
    // Invalid here: the maximal subpart is the lead byte and the continuation bytes that a valid
    // sequence could still have had.
    const uint8_t c = static_cast<uint8_t>(s[i]);
    int n = 0;
    uint8_t lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
      n = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      n = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    } else if (c >= 0xF0 && c <= 0xF4) {
      n = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    }
    size_t valid = 1;  // bytes of the subpart
    while (n > 0 && valid < static_cast<size_t>(n) && i + valid < s.size()) {
      const uint8_t t = static_cast<uint8_t>(s[i + valid]);
      if (t < (valid == 1 ? lo : 0x80) || t > (valid == 1 ? hi : 0xBF)) break;
      ++valid;
    }
    if (!final && n > 0 && i + valid == s.size() && valid < static_cast<size_t>(n)) return i;  // may complete
    out->append(kReplacement);
    i += valid;
  }
  return i;
}

absl::StatusOr<Tokenizer> Tokenizer::Load(const std::string& path) {
  try {
    return LoadJson(path);
  } catch (const nlohmann::json::exception& e) {  // a field of another type than the format's
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", e.what()));
  }
}

absl::StatusOr<Tokenizer> Tokenizer::LoadJson(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot read it (the checkpoint's tokenizer.json)"));
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    return Malformed(path, absl::StrCat("not JSON: ", e.what()));
  }
  if (!j.is_object() || !j.contains("model") || !j["model"].is_object()) return Malformed(path, "no \"model\" object");
  const json& model = j["model"];
  if (model.value("type", "BPE") != "BPE") {
    return absl::UnimplementedError(absl::StrCat(path, ": model type ", model.value("type", ""), "; only BPE is read"));
  }
  // BPE options that would change the ids: only their defaults are read.
  if (model.value("ignore_merges", false) || model.value("byte_fallback", false) ||
      !model.value("continuing_subword_prefix", json()).is_null() ||
      !model.value("end_of_word_suffix", json()).is_null() || !model.value("dropout", json()).is_null()) {
    return absl::UnimplementedError(absl::StrCat(
        path, ": BPE options ignore_merges, byte_fallback, continuing_subword_prefix, end_of_word_suffix or dropout "
              "are set; only their defaults are read"));
  }
  if (!model.contains("vocab") || !model["vocab"].is_object() || !model.contains("merges") ||
      !model["merges"].is_array()) {
    return Malformed(path, "the BPE model needs \"vocab\" (an object) and \"merges\" (an array)");
  }
  if (j.contains("normalizer") && !j["normalizer"].is_null()) {
    return absl::UnimplementedError(absl::StrCat(path, ": a normalizer (", j["normalizer"].dump(), ") is not read"));
  }
  // The pre-tokenizer: GLM's split, then ByteLevel without its own regex.
  Tokenizer t;
  auto byte_level_ok = [](const json& p) {
    return p.value("type", "") == "ByteLevel" && !p.value("add_prefix_space", true) && !p.value("use_regex", true);
  };
  const json& pre = j.value("pre_tokenizer", json());
  if (pre.is_object() && pre.value("type", "") == "Sequence" && pre.contains("pretokenizers") &&
      pre["pretokenizers"].size() == 2 && pre["pretokenizers"][0].value("type", "") == "Split" &&
      byte_level_ok(pre["pretokenizers"][1])) {
    const json& split = pre["pretokenizers"][0];
    const std::string pattern = split.contains("pattern") && split["pattern"].contains("Regex")
                                    ? split["pattern"]["Regex"].get<std::string>()
                                    : "";
    if (pattern != kGlmSplit || split.value("behavior", "") != "Isolated" || split.value("invert", false)) {
      return absl::UnimplementedError(absl::StrCat(path, ": the Split pre-tokenizer ", split.dump(),
                                                   " is not GLM's (pattern ", kGlmSplit, ", Isolated)"));
    }
    t.split_ = true;
  } else if (pre.is_object() && byte_level_ok(pre)) {
    t.split_ = false;
  } else {
    return absl::UnimplementedError(absl::StrCat(path, ": pre_tokenizer ", pre.dump(),
                                                 "; read: GLM's Split then ByteLevel (no prefix space, no regex)"));
  }
  if (!j.contains("decoder") || !j["decoder"].is_object() || j["decoder"].value("type", "") != "ByteLevel") {
    return absl::UnimplementedError(
        absl::StrCat(path, ": decoder ", j.value("decoder", json()).dump(), "; only ByteLevel is read"));
  }
  int64_t max_id = -1;
  for (const auto& [token, id] : model["vocab"].items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > (int64_t{1} << 24)) {
      return Malformed(path, absl::StrCat("vocab entry '", token, "' has id ", id.dump()));
    }
    t.vocab_[token] = id.get<int32_t>();
    max_id = std::max<int64_t>(max_id, id.get<int64_t>());
  }
  // Every byte must be a token, or some text could not be encoded.
  for (int b = 0; b < 256; ++b) {
    auto it = t.vocab_.find(Bytes().of_byte[b]);
    if (it == t.vocab_.end()) {
      return Malformed(path, absl::StrCat("the vocabulary lacks byte 0x", absl::Hex(b), " ('", Bytes().of_byte[b],
                                          "'): not a byte-level BPE"));
    }
    t.byte_id_[static_cast<size_t>(b)] = it->second;
  }
  int32_t rank = 0;
  for (const json& m : model["merges"]) {
    std::string left, right;
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos) return Malformed(path, absl::StrCat("merge ", rank, " '", s, "' is not 'left right'"));
      left = s.substr(0, sp), right = s.substr(sp + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      left = m[0].get<std::string>(), right = m[1].get<std::string>();
    } else {
      return Malformed(path, absl::StrCat("merge ", rank, " is ", m.dump()));
    }
    auto l = t.vocab_.find(left), r = t.vocab_.find(right), lr = t.vocab_.find(left + right);
    if (l == t.vocab_.end() || r == t.vocab_.end() || lr == t.vocab_.end()) {
      return Malformed(path, absl::StrCat("merge ", rank, " '", left, " ", right, "' names tokens the vocabulary lacks"));
    }
    const uint64_t key = static_cast<uint64_t>(static_cast<uint32_t>(l->second)) << 32 | static_cast<uint32_t>(r->second);
    t.merges_.emplace(key, Merge{rank, lr->second});  // the first (lowest) rank of a pair wins
    ++rank;
  }
  if (j.contains("added_tokens")) {
    for (const json& a : j["added_tokens"]) {
      if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() || !a.contains("content") ||
          !a["content"].is_string() || a["content"].get<std::string>().empty() || a["id"].get<int64_t>() < 0 ||
          a["id"].get<int64_t>() > (int64_t{1} << 24)) {
        return Malformed(path, absl::StrCat("added token ", a.dump(), " needs an id (0 to 2^24) and non-empty content"));
      }
      if (a.value("lstrip", false) || a.value("rstrip", false) || a.value("single_word", false)) {
        return absl::UnimplementedError(
            absl::StrCat(path, ": added token ", a.dump(), ": lstrip, rstrip and single_word are not read"));
      }
      t.added_.push_back({a["content"].get<std::string>(), a["id"].get<int32_t>(), a.value("special", false)});
      max_id = std::max<int64_t>(max_id, a["id"].get<int64_t>());
    }
  }
  std::stable_sort(t.added_.begin(), t.added_.end(),
                   [](const Added& a, const Added& b) { return a.content.size() > b.content.size(); });
  for (const Added& a : t.added_) t.added_first_byte_[static_cast<unsigned char>(a.content[0])] = true;
  t.id_to_token_.assign(static_cast<size_t>(max_id + 1), "");
  t.is_added_.assign(t.id_to_token_.size(), 0);
  t.is_special_.assign(t.id_to_token_.size(), 0);
  for (const auto& [token, id] : t.vocab_) t.id_to_token_[static_cast<size_t>(id)] = token;
  for (const Added& a : t.added_) {
    t.id_to_token_[static_cast<size_t>(a.id)] = a.content;
    t.is_added_[static_cast<size_t>(a.id)] = 1;
    t.is_special_[static_cast<size_t>(a.id)] = a.special ? 1 : 0;
  }
  return t;
}

void Tokenizer::EncodePiece(std::string_view piece, std::vector<int32_t>* out) const {
  // The byte tokens as a linked list; the best-ranked adjacent pair (the leftmost of equals) is
  // merged until none is a merge, through a heap of candidate pairs checked when popped:
  // O(m log m) in the piece's bytes, so a long run of one letter costs no more than its length.
  const size_t m = piece.size();
  std::vector<int32_t> id(m);
  std::vector<int64_t> prev(m), next(m);
  std::vector<uint32_t> version(m, 0);
  for (size_t k = 0; k < m; ++k) {
    id[k] = byte_id_[static_cast<unsigned char>(piece[k])];
    prev[k] = static_cast<int64_t>(k) - 1;
    next[k] = k + 1 < m ? static_cast<int64_t>(k + 1) : -1;
  }
  struct Candidate {
    int32_t rank;
    int64_t left;            // symbol index (its first byte: leftmost first among equal ranks)
    uint32_t left_version, right_version;
    int64_t right;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap;
  auto consider = [&](int64_t l) {
    if (l < 0 || next[static_cast<size_t>(l)] < 0) return;
    const int64_t r = next[static_cast<size_t>(l)];
    const uint64_t key = static_cast<uint64_t>(static_cast<uint32_t>(id[static_cast<size_t>(l)])) << 32 |
                         static_cast<uint32_t>(id[static_cast<size_t>(r)]);
    auto it = merges_.find(key);
    if (it != merges_.end()) {
      heap.push({it->second.rank, l, version[static_cast<size_t>(l)], version[static_cast<size_t>(r)], r});
    }
  };
  for (size_t k = 0; k + 1 < m; ++k) consider(static_cast<int64_t>(k));
  std::vector<char> dead(m, 0);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    const size_t l = static_cast<size_t>(c.left), r = static_cast<size_t>(c.right);
    // Stale: either side merged since, or no longer neighbours.
    if (dead[l] || dead[r] || version[l] != c.left_version || version[r] != c.right_version ||
        next[l] != c.right) {
      continue;
    }
    const uint64_t key = static_cast<uint64_t>(static_cast<uint32_t>(id[l])) << 32 | static_cast<uint32_t>(id[r]);
    id[l] = merges_.at(key).merged;
    ++version[l];
    dead[r] = 1;
    next[l] = next[r];
    if (next[r] >= 0) prev[static_cast<size_t>(next[r])] = static_cast<int64_t>(l);
    consider(prev[l]);
    consider(static_cast<int64_t>(l));
  }
  for (int64_t k = m > 0 ? 0 : -1; k >= 0; k = next[static_cast<size_t>(k)]) out->push_back(id[static_cast<size_t>(k)]);
}

absl::StatusOr<std::vector<int32_t>> Tokenizer::Encode(std::string_view text) const {
  // Code points (strict UTF-8) with their byte offsets.
  std::vector<char32_t> cps;
  std::vector<size_t> offs;
  for (size_t i = 0; i < text.size();) {
    size_t len = 0;
    const char32_t cp = DecodeAt(text, i, &len);
    if (len == 0) return absl::InvalidArgumentError(absl::StrCat("the text is not valid UTF-8 at byte ", i));
    cps.push_back(cp);
    offs.push_back(i);
    i += len;
  }
  offs.push_back(text.size());
  std::vector<int32_t> ids;
  // A stretch between added tokens: split, then BPE each piece.
  auto encode_span = [&](size_t from, size_t to) {  // code point indices
    if (from >= to) return;
    if (!split_) {
      EncodePiece(text.substr(offs[from], offs[to] - offs[from]), &ids);
      return;
    }
    std::vector<char32_t> sub(cps.begin() + static_cast<std::ptrdiff_t>(from), cps.begin() + static_cast<std::ptrdiff_t>(to));
    for (size_t i = 0; i < sub.size();) {
      const size_t e = MatchAt(sub, i);
      EncodePiece(text.substr(offs[from + i], offs[from + e] - offs[from + i]), &ids);
      i = e;
    }
  };
  // Added tokens, leftmost-longest, on code point boundaries.
  size_t start = 0;
  for (size_t i = 0; i < cps.size();) {
    const Added* hit = nullptr;
    if (!added_first_byte_[static_cast<unsigned char>(text[offs[i]])]) {  // no added token starts so
      ++i;
      continue;
    }
    for (const Added& a : added_) {  // longest first
      if (text.compare(offs[i], a.content.size(), a.content) == 0) {
        hit = &a;
        break;
      }
    }
    if (hit == nullptr) {
      ++i;
      continue;
    }
    encode_span(start, i);
    ids.push_back(hit->id);
    const size_t end_byte = offs[i] + hit->content.size();
    while (i < cps.size() && offs[i] < end_byte) ++i;
    start = i;
  }
  encode_span(start, cps.size());
  return ids;
}

std::string Tokenizer::TokenBytes(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size()) return "";
  const std::string& tok = id_to_token_[static_cast<size_t>(id)];
  // Byte-level characters back to bytes; a token with any other character is its own UTF-8.
  std::string bytes;
  for (size_t i = 0; i < tok.size();) {
    size_t len = 0;
    const char32_t cp = DecodeAt(tok, i, &len);
    auto it = len > 0 ? Bytes().to_byte.find(cp) : Bytes().to_byte.end();
    if (it == Bytes().to_byte.end()) return tok;
    bytes.push_back(static_cast<char>(it->second));
    i += len;
  }
  return bytes;
}

bool Tokenizer::IsSpecial(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < is_special_.size() && is_special_[static_cast<size_t>(id)];
}

std::optional<int32_t> Tokenizer::TokenId(std::string_view token) const {
  for (const Added& a : added_) {
    if (a.content == token) return a.id;
  }
  auto it = vocab_.find(std::string(token));
  if (it != vocab_.end()) return it->second;
  return std::nullopt;
}

absl::StatusOr<std::string> Tokenizer::Decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string bytes;
  for (int32_t id : ids) {
    if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size() || id_to_token_[static_cast<size_t>(id)].empty()) {
      return absl::InvalidArgumentError(absl::StrCat("token id ", id, " is not in the vocabulary (", vocab_size(), ")"));
    }
    if (skip_special && IsSpecial(id)) continue;
    bytes += TokenBytes(id);
  }
  std::string out;
  AppendUtf8Lossy(bytes, /*final=*/true, &out);
  return out;
}

std::string StreamDecoder::Add(int32_t id) {
  if (skip_special_ && tok_->IsSpecial(id)) return "";
  pending_ += tok_->TokenBytes(id);
  std::string out;
  pending_.erase(0, AppendUtf8Lossy(pending_, /*final=*/false, &out));
  return out;
}

std::string StreamDecoder::Finish() {
  std::string out;
  AppendUtf8Lossy(pending_, /*final=*/true, &out);
  pending_.clear();
  return out;
}

}  // namespace ferry::text
