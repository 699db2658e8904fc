#include "common/cluster_token.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ferry {

absl::StatusOr<std::string> ReadSecretFile(const std::string& path, const std::string& flag) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " ", path, ": ", std::strerror(errno)));
  }
  if ((st.st_mode & 077) != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s %s has mode %04o: group or others can read or write it; chmod 600 it", flag, path, st.st_mode & 07777));
  }
  std::ifstream in(path);
  std::string secret;
  if (!in || !std::getline(in, secret)) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " ", path, ": cannot read a line from it"));
  }
  while (!secret.empty() && (secret.back() == '\r' || secret.back() == ' ' || secret.back() == '\t')) secret.pop_back();
  if (secret.empty()) return absl::InvalidArgumentError(absl::StrCat(flag, " ", path, " holds no secret on its first line"));
  return secret;
}

absl::StatusOr<std::string> LoadClusterToken(const std::string& token_file) {
  if (token_file.empty()) {
    const char* env = std::getenv(kClusterTokenEnv);
    return std::string(env != nullptr ? env : "");
  }
  return ReadSecretFile(token_file, "--token-file");
}

bool TokensEqual(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

bool IsLoopbackHost(const std::string& host) {
  return host == "localhost" || host == "::1" || host == "[::1]" || host.rfind("127.", 0) == 0;
}

}  // namespace ferry
