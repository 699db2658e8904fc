#include "common/metrics_server.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "prometheus/text_serializer.h"

namespace ferry {
namespace {

constexpr size_t kMaxHead = 8192;
constexpr int kIoTimeoutSeconds = 2;

void WriteAll(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    const ssize_t n = send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the client went away or stalled: nothing more to do for it
    off += static_cast<size_t>(n);
  }
}

std::string Response(int code, const char* reason, const std::string& content_type, const std::string& body,
                     bool head_only) {
  std::string r = absl::StrCat("HTTP/1.1 ", code, " ", reason, "\r\nContent-Type: ", content_type,
                               "\r\nContent-Length: ", body.size(), "\r\nConnection: close\r\n\r\n");
  if (!head_only) r += body;
  return r;
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(const std::string& host, int port,
                                                                    std::shared_ptr<prometheus::Collectable> metrics) {
  if (metrics == nullptr) return absl::InvalidArgumentError("MetricsServer: no metrics to serve");
  if (port < 0 || port > 65535) return absl::InvalidArgumentError(absl::StrCat("metrics port ", port, " is outside [0, 65535]"));
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (const int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &found); rc != 0) {
    return absl::InvalidArgumentError(absl::StrCat("metrics address ", host, ":", port, ": ", gai_strerror(rc)));
  }
  int fd = -1;
  std::string why = "no address";
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      why = absl::StrCat("socket: ", std::strerror(errno));
      continue;
    }
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, 64) != 0) {
      why = std::strerror(errno);
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(found);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("cannot serve /metrics on ", host, ":", port, ": ", why));
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
  const int bound_port = bound.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                                                     : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  int wake[2];
  if (pipe2(wake, O_CLOEXEC) != 0) {
    close(fd);
    return absl::InternalError(absl::StrCat("MetricsServer: pipe: ", std::strerror(errno)));
  }
  std::unique_ptr<MetricsServer> s(new MetricsServer(fd, wake[0], wake[1], bound_port, std::move(metrics)));
  try {
    s->thread_ = std::thread([p = s.get()] { p->Loop(); });
  } catch (const std::system_error& e) {
    return absl::InternalError(absl::StrCat("MetricsServer: cannot start its thread: ", e.what()));
  }
  return s;
}

MetricsServer::MetricsServer(int listen_fd, int wake_read, int wake_write, int port,
                             std::shared_ptr<prometheus::Collectable> metrics)
    : listen_fd_(listen_fd), wake_read_(wake_read), wake_write_(wake_write), port_(port), metrics_(std::move(metrics)) {}

MetricsServer::~MetricsServer() {
  if (thread_.joinable()) {
    const char b = 0;
    while (write(wake_write_, &b, 1) < 0 && errno == EINTR) {
    }
    thread_.join();
  }
  close(listen_fd_);
  close(wake_read_);
  close(wake_write_);
}

void MetricsServer::Loop() {
  pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_read_, POLLIN, 0}};
  for (;;) {
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents != 0) return;
    if ((fds[0].revents & POLLIN) == 0) continue;
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;  // the client gave up already, or fds ran out: the next poll retries
    Serve(fd);
    close(fd);
  }
}

void MetricsServer::Serve(int fd) {
  timeval tv{kIoTimeoutSeconds, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  std::string head;
  char buf[1024];
  while (head.find("\r\n\r\n") == std::string::npos && head.find("\n\n") == std::string::npos) {
    if (head.size() > kMaxHead) break;
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // closed, or timed out: answer what came (a bad request, likely)
    head.append(buf, static_cast<size_t>(n));
  }
  ++requests_;
  const std::string text = "text/plain; charset=utf-8";
  // Request line: METHOD SP TARGET SP VERSION.
  const size_t eol = head.find_first_of("\r\n");
  const std::string line = head.substr(0, eol);
  const size_t sp1 = line.find(' '), sp2 = sp1 == std::string::npos ? sp1 : line.find(' ', sp1 + 1);
  if (head.size() > kMaxHead || sp2 == std::string::npos || line.compare(sp2 + 1, 5, "HTTP/") != 0) {
    WriteAll(fd, Response(400, "Bad Request", text, "bad request\n", false));
    return;
  }
  const std::string method = line.substr(0, sp1), target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  const std::string path = target.substr(0, target.find('?'));
  const bool head_only = method == "HEAD";
  if (method != "GET" && !head_only) {
    WriteAll(fd, Response(405, "Method Not Allowed", text, "GET /metrics only\n", false));
    return;
  }
  if (path != "/metrics") {
    WriteAll(fd, Response(404, "Not Found", text, "see /metrics\n", head_only));
    return;
  }
  const std::string body = prometheus::TextSerializer().Serialize(metrics_->Collect());
  WriteAll(fd, Response(200, "OK", "text/plain; version=0.0.4; charset=utf-8", body, head_only));
}

}  // namespace ferry
