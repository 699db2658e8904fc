// Command-line helpers shared by Ferry's binaries.
#pragma once

#include <string>
#include <vector>

namespace ferry {

// absl flag names use underscores; users type dashes (--max-tokens). Returns argv with the
// dashes of every "--flag" name (before any '=') turned into underscores; other arguments and
// flag values are unchanged.
std::vector<std::string> NormaliseFlagArgs(int argc, char** argv, int first = 1);

// Pointers into `args` for absl::ParseCommandLine. REQUIRES: `args` outlives the result.
std::vector<char*> ArgvOf(std::vector<std::string>& args);

}  // namespace ferry
