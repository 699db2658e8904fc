#include "common/host_memory.h"

#include "tests/catch.h"

namespace ferry {
namespace {

TEST_CASE("ParseMemAvailable reads MemAvailable in bytes - not MemFree", "[common]") {
  const char* meminfo =
      "MemTotal:       131072000 kB\n"
      "MemFree:          2048000 kB\n"
      "MemAvailable:   120000000 kB\n"
      "Cached:         110000000 kB\n";
  CHECK(ParseMemAvailable(meminfo) == int64_t{120000000} * 1024);
  CHECK(ParseMemAvailable("MemTotal: 100 kB\nMemFree: 50 kB\n") == -1);
  CHECK(ParseMemAvailable("MemAvailable: lots kB\n") == -1);
  CHECK(ParseMemAvailable("MemAvailable: 100\n") == -1);
  CHECK(ParseMemAvailable("MemAvailable: -5 kB\n") == -1);
  CHECK(ParseMemAvailable("") == -1);
}

TEST_CASE("HostAvailableBytes is this host's memory available, above zero", "[common]") {
  CHECK(HostAvailableBytes() > 0);
}

}  // namespace
}  // namespace ferry
