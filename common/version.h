// The build's identity: Ferry's release and the commit its sources came from. Hosts of one
// cluster must run the same (the launcher's preflight compares `ferry version` across hosts).
#pragma once

#include <string>

namespace ferry {

inline constexpr char kFerryRelease[] = "0.1.0";

// The source commit, "-dirty" when the tree had uncommitted changes, "unknown" outside git.
const char* BuildCommit();

// "ferry 0.1.0 (commit 0123456789ab)".
std::string VersionString();

}  // namespace ferry
