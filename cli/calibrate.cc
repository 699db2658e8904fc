#include "cli/calibrate.h"

#include <charconv>
#include <fstream>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "text/tokenizer.h"

namespace ferry::cli {

absl::StatusOr<std::vector<std::vector<int32_t>>> ReadCalibrationPrompts(const std::string& path, bool ids,
                                                                         const std::string& checkpoint_dir) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read calibration prompts from ", path));
  std::optional<text::Tokenizer> tokenizer;
  if (!ids) {
    absl::StatusOr<text::Tokenizer> loaded = text::Tokenizer::Load(checkpoint_dir + "/tokenizer.json");
    if (!loaded.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "calibration text needs the checkpoint's tokenizer: ", loaded.status().message(),
          " (give token ids with --calibration_ids instead)"));
    }
    tokenizer = std::move(*loaded);
  }
  std::vector<std::vector<int32_t>> prompts;
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    if (absl::StripAsciiWhitespace(line).empty()) continue;
    std::vector<int32_t> p;
    if (ids) {
      for (absl::string_view piece : absl::StrSplit(line, absl::ByAnyChar(", \t\r"), absl::SkipEmpty())) {
        int32_t id = 0;
        const auto [end, ec] = std::from_chars(piece.data(), piece.data() + piece.size(), id);
        if (ec != std::errc() || end != piece.data() + piece.size() || id < 0) {
          return absl::InvalidArgumentError(
              absl::StrCat(path, ":", number, ": '", piece, "' is not a token id (a non-negative integer)"));
        }
        p.push_back(id);
      }
    } else {
      absl::StatusOr<std::vector<int32_t>> enc = tokenizer->Encode(line);
      if (!enc.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ":", number, ": ", enc.status().message()));
      p = std::move(*enc);
    }
    if (!p.empty()) prompts.push_back(std::move(p));
  }
  if (prompts.empty()) return absl::InvalidArgumentError(absl::StrCat(path, " holds no calibration prompt"));
  return prompts;
}

}  // namespace ferry::cli
