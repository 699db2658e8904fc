// Calibration prompts for `ferry quantize --calibration` (model/families/calibration.h measures
// the activations they produce).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ferry::cli {

// Prompts from a file of one a line, blank lines skipped: text encoded with the checkpoint's
// tokenizer.json (`ids` false), or token ids separated by commas or spaces (`ids` true). Errors
// name the file and line.
absl::StatusOr<std::vector<std::vector<int32_t>>> ReadCalibrationPrompts(const std::string& path, bool ids,
                                                                         const std::string& checkpoint_dir);

}  // namespace ferry::cli
