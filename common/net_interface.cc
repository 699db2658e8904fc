#include "common/net_interface.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstring>

#include "absl/strings/str_cat.h"

namespace ferry {

absl::StatusOr<std::string> InterfaceOfAddress(const std::string& host) {
  std::string ip = host == "localhost" ? "127.0.0.1" : host;
  if (ip.size() > 2 && ip.front() == '[' && ip.back() == ']') ip = ip.substr(1, ip.size() - 2);  // [::1]
  in_addr v4{};
  in6_addr v6{};
  const bool is4 = inet_pton(AF_INET, ip.c_str(), &v4) == 1;
  const bool is6 = !is4 && inet_pton(AF_INET6, ip.c_str(), &v6) == 1;
  if (!is4 && !is6) return absl::InvalidArgumentError(absl::StrCat("'", host, "' is not an IP address"));
  if ((is4 && v4.s_addr == htonl(INADDR_ANY)) || (is6 && IN6_IS_ADDR_UNSPECIFIED(&v6))) {
    return absl::InvalidArgumentError(absl::StrCat(host, " is every interface"));
  }
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return absl::InternalError(absl::StrCat("getifaddrs: ", strerror(errno)));
  std::string found;
  for (ifaddrs* a = list; a != nullptr && found.empty(); a = a->ifa_next) {
    if (a->ifa_addr == nullptr) continue;
    if (is4 && a->ifa_addr->sa_family == AF_INET &&
        reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr.s_addr == v4.s_addr) {
      found = a->ifa_name;
    } else if (is6 && a->ifa_addr->sa_family == AF_INET6 &&
               std::memcmp(&reinterpret_cast<sockaddr_in6*>(a->ifa_addr)->sin6_addr, &v6, sizeof(v6)) == 0) {
      found = a->ifa_name;
    }
  }
  freeifaddrs(list);
  // 127.0.0.0/8 beyond 127.0.0.1 is loopback too, held by lo without being listed.
  if (found.empty() && is4 && (ntohl(v4.s_addr) >> 24) == 127) found = "lo";
  if (found.empty()) return absl::NotFoundError(absl::StrCat("no interface of this machine holds ", host));
  return found;
}

}  // namespace ferry
