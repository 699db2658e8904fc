// common/net_interface.h: the interface that holds an address.
#include "common/net_interface.h"

#include "tests/catch.h"

namespace ferry {
namespace {

TEST_CASE("the interface of an address: loopback - none - a wildcard - not an address", "[net]") {
  auto lo = InterfaceOfAddress("127.0.0.1");
  REQUIRE(lo.ok());
  CHECK(*lo == "lo");
  CHECK(InterfaceOfAddress("localhost").value_or("") == "lo");
  CHECK(InterfaceOfAddress("127.0.0.2").value_or("") == "lo");  // all of 127/8 is loopback
  CHECK(InterfaceOfAddress("[::1]").value_or("") == "lo");
  CHECK(InterfaceOfAddress("::1").value_or("") == "lo");
  // TEST-NET-3 (RFC 5737): documentation only, on no interface of a test machine.
  CHECK(InterfaceOfAddress("203.0.113.77").status().code() == absl::StatusCode::kNotFound);
  CHECK(InterfaceOfAddress("0.0.0.0").status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(InterfaceOfAddress("::").status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(InterfaceOfAddress("spark-a").status().code() == absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ferry
