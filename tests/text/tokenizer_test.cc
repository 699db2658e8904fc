// text/tokenizer.h against Hugging Face `tokenizers`: the test tokenizer (GLM's configuration,
// scripts/make_test_tokenizer.py) and its encodings and decodings of a varied corpus
// (tests/data/tokenizer/cases.json: English, Chinese, emoji, code, digit and whitespace runs,
// special tokens inside text).
#include "text/tokenizer.h"

#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/catch.h"
#include "tests/testing/files.h"

namespace ferry::text {
namespace {

const std::string kData = FERRY_TEST_DATA_DIR;

Tokenizer Load() {
  auto t = Tokenizer::Load(kData + "/glm-dsa-tiny/tokenizer.json");
  INFO(t.status().ToString());
  REQUIRE(t.ok());
  return std::move(*t);
}

nlohmann::json Cases() {
  std::ifstream in(kData + "/tokenizer/cases.json");
  REQUIRE(in.good());
  return nlohmann::json::parse(in);
}

TEST_CASE("the tokenizer encodes and decodes as Hugging Face tokenizers does", "[tokenizer]") {
  const Tokenizer t = Load();
  const nlohmann::json cases = Cases();
  CHECK(t.vocab_size() == cases["vocab_size"].get<int64_t>());
  REQUIRE(cases["cases"].size() >= 20);
  for (const auto& c : cases["cases"]) {
    const std::string text = c["text"].get<std::string>();
    const std::vector<int32_t> want = c["ids"].get<std::vector<int32_t>>();
    INFO("text: " << text);
    auto ids = t.Encode(text);
    REQUIRE(ids.ok());
    CHECK(*ids == want);
    auto decoded = t.Decode(want);
    REQUIRE(decoded.ok());
    CHECK(*decoded == c["decoded"].get<std::string>());
    auto skipped = t.Decode(want, /*skip_special=*/true);
    REQUIRE(skipped.ok());
    CHECK(*skipped == c["decoded_skip_special"].get<std::string>());
  }
}

TEST_CASE("a stream of ids decodes to the same text - never splitting a character", "[tokenizer]") {
  const Tokenizer t = Load();
  for (const auto& c : Cases()["cases"]) {
    const std::vector<int32_t> ids = c["ids"].get<std::vector<int32_t>>();
    INFO("text: " << c["text"].get<std::string>());
    StreamDecoder stream(&t, /*skip_special=*/false);
    std::string joined;
    for (int32_t id : ids) {
      const std::string piece = stream.Add(id);
      std::string whole;
      CHECK(AppendUtf8Lossy(piece, /*final=*/false, &whole) == piece.size());  // complete characters only
      joined += piece;
    }
    joined += stream.Finish();
    CHECK(joined == c["decoded"].get<std::string>());
  }
}

TEST_CASE("UTF-8 read lossily: each maximal invalid part is one U+FFFD - a stream holds a partial character",
          "[tokenizer]") {
  const std::string fffd = "\xEF\xBF\xBD";
  auto lossy = [](const std::string& s) {
    std::string out;
    AppendUtf8Lossy(s, true, &out);
    return out;
  };
  CHECK(lossy("a\xC3\xA9z") == "a\xC3\xA9z");
  CHECK(lossy("a\xFFz") == "a" + fffd + "z");
  CHECK(lossy("\xE2\x82") == fffd);              // a truncated 3-byte character: one replacement
  CHECK(lossy("\xE2\x82x") == fffd + "x");
  CHECK(lossy("\xED\xA0\x80") == fffd + fffd + fffd);  // a surrogate: each byte its own part
  CHECK(lossy("\xF0\x9F\x98") == fffd);
  std::string out;
  CHECK(AppendUtf8Lossy("ok\xF0\x9F\x98", false, &out) == 2);  // the emoji may still complete
  CHECK(out == "ok");
}

TEST_CASE("encoding refuses invalid UTF-8 - decoding refuses an id outside the vocabulary", "[tokenizer]") {
  const Tokenizer t = Load();
  auto bad = t.Encode("ok\xC3(");
  CHECK(bad.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(bad.status().message()).find("byte 2") != std::string::npos);
  const std::vector<int32_t> ids = {5, 384};
  CHECK(t.Decode(ids).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(t.TokenId("<|user|>").value_or(-1) == 359);
  CHECK(t.IsSpecial(359));
  CHECK_FALSE(t.IsSpecial(t.TokenId("<think>").value_or(-1)));
}

TEST_CASE("a missing or malformed tokenizer.json is a clear error at load", "[tokenizer]") {
  ferry::testing::TempDir dir;
  auto missing = Tokenizer::Load(dir.File("tokenizer.json"));
  CHECK(missing.status().code() == absl::StatusCode::kNotFound);
  auto with = [&](const std::string& body) {
    ferry::testing::WriteFile(dir.File("t.json"), body);
    return Tokenizer::Load(dir.File("t.json")).status();
  };
  CHECK(with("{not json").code() == absl::StatusCode::kInvalidArgument);
  CHECK(with("{}").code() == absl::StatusCode::kInvalidArgument);
  // A real file, changed one thing at a time.
  std::ifstream in(kData + "/glm-dsa-tiny/tokenizer.json");
  const nlohmann::json good = nlohmann::json::parse(in);
  nlohmann::json j = good;
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\s+";
  absl::Status st = with(j.dump());
  CHECK(st.code() == absl::StatusCode::kUnimplemented);
  CHECK(std::string(st.message()).find("is not GLM's") != std::string::npos);
  j = good;
  j["normalizer"] = {{"type", "NFC"}};
  CHECK(with(j.dump()).code() == absl::StatusCode::kUnimplemented);
  j = good;
  j["model"]["vocab"].erase("Ġ");
  st = with(j.dump());
  CHECK(st.code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(st.message()).find("lacks byte 0x20") != std::string::npos);
  j = good;
  j["model"]["merges"][0] = 7;
  CHECK(with(j.dump()).code() == absl::StatusCode::kInvalidArgument);
  j = good;
  j["model"]["byte_fallback"] = true;  // would change the ids: refused, not ignored
  CHECK(with(j.dump()).code() == absl::StatusCode::kUnimplemented);
  j = good;
  j["pre_tokenizer"]["pretokenizers"][1] = 7;  // a field of another type
  CHECK(with(j.dump()).code() == absl::StatusCode::kInvalidArgument);
  j = good;
  j["added_tokens"][0]["id"] = int64_t{1} << 40;
  CHECK(with(j.dump()).code() == absl::StatusCode::kInvalidArgument);
  CHECK(with(good.dump()).ok());
}

TEST_CASE("a run of one character two million long encodes and decodes back", "[tokenizer]") {
  const Tokenizer t = Load();
  // The merge loop is a heap over a linked list (a second or so here); one merge a pass over the
  // whole piece, as before, would take hours and meet ctest's timeout.
  const std::string run(2000000, ' ');
  auto ids = t.Encode(run);
  REQUIRE(ids.ok());
  CHECK(!ids->empty());
  auto back = t.Decode(*ids);
  REQUIRE(back.ok());
  CHECK(*back == run);
}

}  // namespace
}  // namespace ferry::text
