// The deployment's cluster token: the secret every control call and peer carries, so that a
// client of a public port cannot pose as a rank. It comes from a file that only its owner can read
// (--token-file) or from the environment (FERRY_CLUSTER_TOKEN), never from the command line, where
// any local user reads it with `ps`.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace ferry {

inline constexpr char kClusterTokenEnv[] = "FERRY_CLUSTER_TOKEN";

// The token in `token_file` (its first line), or else FERRY_CLUSTER_TOKEN's value, or "" (no
// token) when neither is set. Errors (INVALID_ARGUMENT, naming the file): it cannot be read, it is
// readable or writable by group or others (the mode is printed: chmod 600 it), or it is empty.
absl::StatusOr<std::string> LoadClusterToken(const std::string& token_file);

// The first line of `path` (trailing blanks cut): a secret such as the cluster token or the HTTP
// API's key. INVALID_ARGUMENT naming `flag` and the file: it cannot be read, group or others can
// read or write it (the mode is printed: chmod 600 it), or its first line is empty.
absl::StatusOr<std::string> ReadSecretFile(const std::string& path, const std::string& flag);

// a == b in time that depends on their lengths only, not on where they differ.
bool TokensEqual(std::string_view a, std::string_view b);

// Whether `host` names only this machine (127.0.0.0/8, ::1, "localhost"): a listener bound
// anywhere else needs a cluster token.
bool IsLoopbackHost(const std::string& host);

}  // namespace ferry
