#include "common/version.h"

#include "ferry_build_id.h"

namespace ferry {

const char* BuildCommit() { return FERRY_BUILD_COMMIT; }

std::string VersionString() { return std::string("ferry ") + kFerryRelease + " (commit " + BuildCommit() + ")"; }

}  // namespace ferry
