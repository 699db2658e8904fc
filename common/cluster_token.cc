#include "common/cluster_token.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ferry {

absl::StatusOr<std::string> LoadClusterToken(const std::string& token_file) {
  if (token_file.empty()) {
    const char* env = std::getenv(kClusterTokenEnv);
    return std::string(env != nullptr ? env : "");
  }
  struct stat st {};
  if (stat(token_file.c_str(), &st) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("--token-file ", token_file, ": ", std::strerror(errno)));
  }
  if ((st.st_mode & 077) != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--token-file %s has mode %04o: group or others can read or write it; chmod 600 it", token_file,
        st.st_mode & 07777));
  }
  std::ifstream in(token_file);
  std::string token;
  if (!in || !std::getline(in, token)) {
    return absl::InvalidArgumentError(absl::StrCat("--token-file ", token_file, ": cannot read a line from it"));
  }
  while (!token.empty() && (token.back() == '\r' || token.back() == ' ' || token.back() == '\t')) token.pop_back();
  if (token.empty()) return absl::InvalidArgumentError(absl::StrCat("--token-file ", token_file, " holds no token"));
  return token;
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
