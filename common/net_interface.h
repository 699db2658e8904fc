// Which network interface holds an address: the data plane (UCX) is told to use only the
// interface the deployment's listeners bind (UCX_NET_DEVICES), so no worker listens beyond it.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace ferry {

// The name of the interface that holds IPv4 or IPv6 address `host` ("127.0.0.1" -> "lo";
// "localhost" counts as 127.0.0.1; an IPv6 address may come in brackets, "[::1]"). Host names
// other than localhost are not resolved. NOT_FOUND when no interface holds it; INVALID_ARGUMENT for a
// wildcard address (0.0.0.0, ::: every interface) or one that does not parse.
absl::StatusOr<std::string> InterfaceOfAddress(const std::string& host);

}  // namespace ferry
