// The host memory a process can still take: /proc/meminfo's MemAvailable (free memory plus what
// the kernel would reclaim, such as the page cache of files already read), as `free` and vLLM
// report it. On a GPU that shares the host's memory (GB10) this is also the GPU's room: CUDA's
// free figure there leaves the page cache out, so the checkpoint just loaded would count twice.
#pragma once

#include <cstdint>

#include "absl/strings/string_view.h"

namespace ferry {

// MemAvailable of a /proc/meminfo text in bytes; -1 when the line is missing or malformed.
int64_t ParseMemAvailable(absl::string_view meminfo);

// This host's MemAvailable in bytes; the free pages (sysconf) where /proc/meminfo has none; 0 when
// neither is known.
int64_t HostAvailableBytes();

}  // namespace ferry
