// The checkpoint's tokenizer: Hugging Face's tokenizer.json as GLM-5.x ships it, in C++.
//
// What is read (anything else is refused at load with what was found):
//   model           BPE: vocab (token -> id) and merges (ranked pairs; "a b" strings or [a, b])
//   added_tokens    id, content, special (matched in the raw text, leftmost-longest, before any
//                   splitting; lstrip, rstrip and single_word must be false)
//   normalizer      none
//   pre_tokenizer   a Sequence of Split (GLM's pattern, below, "Isolated") and ByteLevel
//                   (add_prefix_space false, use_regex false), or that ByteLevel alone
//   decoder         ByteLevel
// GLM's split (the GPT-4 pattern, which keeps digit runs of up to three):
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
//   \s*[\r\n]+|\s+(?!\S)|\s+
// matched here by hand with ICU's character properties (\p{L}: the L* categories, \p{N}: N*,
// \s: White_Space), the alternatives tried in order at each position as the regex engine does.
//
// Encoding and decoding equal `tokenizers`' (tests/data/tokenizer: its ids and decodings of a
// varied corpus). Decoding follows the byte-level decoder: each token's characters mapped back to
// bytes (a token with a character outside the byte alphabet, such as an added token, as its own
// UTF-8), the bytes read as UTF-8 with each maximal invalid part replaced by U+FFFD.
//
// Thread safety: a loaded Tokenizer is immutable; Encode and Decode may run concurrently.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"

namespace ferry::text {

class Tokenizer {
 public:
  // Reads tokenizer.json. Errors name the file and what is missing or unsupported.
  static absl::StatusOr<Tokenizer> Load(const std::string& path);

  // The ids of `text` (valid UTF-8; INVALID_ARGUMENT with the byte offset otherwise). Added and
  // special tokens written in the text become their ids; nothing is added around it.
  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text) const;

  // The text of `ids`; `skip_special` leaves special tokens out. INVALID_ARGUMENT for an id
  // outside the vocabulary.
  absl::StatusOr<std::string> Decode(std::span<const int32_t> ids, bool skip_special = false) const;

  // The raw bytes one id stands for (before UTF-8 is read from them); empty for an unknown id.
  std::string TokenBytes(int32_t id) const;
  bool IsSpecial(int32_t id) const;
  // The id of a token written exactly so (an added token's content, or a vocabulary entry).
  std::optional<int32_t> TokenId(std::string_view token) const;
  // One past the largest id.
  int64_t vocab_size() const { return static_cast<int64_t>(id_to_token_.size()); }

 private:
  struct Added {
    std::string content;
    int32_t id;
    bool special;
  };
  static absl::StatusOr<Tokenizer> LoadJson(const std::string& path);
  // BPE over one pre-tokenized piece (its byte-level characters), appending ids.
  void EncodePiece(std::string_view piece, std::vector<int32_t>* out) const;

  struct Merge {
    int32_t rank;    // lower merges first
    int32_t merged;  // the id of left + right
  };
  std::unordered_map<std::string, int32_t> vocab_;  // byte-level token -> id
  std::unordered_map<uint64_t, Merge> merges_;      // (left id << 32 | right id) -> the merge
  std::array<int32_t, 256> byte_id_{};              // the id of each byte's token
  std::vector<std::string> id_to_token_;                 // "" where no token has the id
  std::vector<char> is_added_, is_special_;              // by id
  std::vector<Added> added_;                             // longest first
  std::array<bool, 256> added_first_byte_{};             // bytes some added token starts with
  bool split_ = true;                                    // GLM's split before ByteLevel
};

// Decodes a stream of ids into text pieces that never end inside a UTF-8 character: bytes of an
// incomplete character are held until it completes. The pieces joined equal Tokenizer::Decode of
// all the ids (invalid bytes become U+FFFD as there).
class StreamDecoder {
 public:
  StreamDecoder(const Tokenizer* tokenizer, bool skip_special) : tok_(tokenizer), skip_special_(skip_special) {}
  // The text that `id` completes (maybe empty).
  std::string Add(int32_t id);
  // What is held back, at the end of the stream (U+FFFD for an incomplete character).
  std::string Finish();

 private:
  const Tokenizer* tok_;
  bool skip_special_;
  std::string pending_;  // bytes of an incomplete character
};

// Appends code point `cp` to `out` as UTF-8 (1 to 4 bytes).
void AppendUtf8(char32_t cp, std::string* out);

// Appends `bytes` read as UTF-8 to `out`, each maximal invalid part replaced by U+FFFD. With
// `final` false, a trailing incomplete (but so far valid) character is not read: the number of
// bytes consumed is returned.
size_t AppendUtf8Lossy(std::string_view bytes, bool final, std::string* out);

}  // namespace ferry::text
