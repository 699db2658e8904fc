#include "common/metrics_server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <system_error>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/http_server.h"
#include "prometheus/text_serializer.h"

namespace ferry {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kMaxHead = 8192;

// Where the request head ends (just past its blank line), or npos while it has not.
size_t HeadEnd(const std::string& head) {
  const size_t crlf = head.find("\r\n\r\n"), lf = head.find("\n\n");
  if (crlf != std::string::npos && (lf == std::string::npos || crlf < lf)) return crlf + 4;
  return lf == std::string::npos ? lf : lf + 2;
}

std::string Response(int code, const char* reason, const std::string& content_type, const std::string& body,
                     bool head_only) {
  std::string r = absl::StrCat("HTTP/1.1 ", code, " ", reason, "\r\nContent-Type: ", content_type,
                               "\r\nContent-Length: ", body.size(), "\r\nConnection: close\r\n\r\n");
  if (!head_only) r += body;
  return r;
}

// The response to `head` (what came of the request, complete or not; see the header).
std::string Answer(const std::string& head, prometheus::Collectable& metrics) {
  const std::string text = "text/plain; charset=utf-8";
  const size_t end = HeadEnd(head);
  const bool oversized = end == std::string::npos ? head.size() > kMaxHead : end > kMaxHead;
  // Request line: METHOD SP TARGET SP VERSION.
  const std::string line = head.substr(0, head.find_first_of("\r\n"));
  const size_t sp1 = line.find(' '), sp2 = sp1 == std::string::npos ? sp1 : line.find(' ', sp1 + 1);
  if (oversized || sp2 == std::string::npos || line.compare(sp2 + 1, 5, "HTTP/") != 0) {
    return Response(400, "Bad Request", text, "bad request\n", false);
  }
  const std::string method = line.substr(0, sp1), target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  const std::string path = target.substr(0, target.find('?'));
  const bool head_only = method == "HEAD";
  if (method != "GET" && !head_only) return Response(405, "Method Not Allowed", text, "GET /metrics only\n", false);
  if (path != "/metrics") return Response(404, "Not Found", text, "see /metrics\n", head_only);
  const std::string body = prometheus::TextSerializer().Serialize(metrics.Collect());
  return Response(200, "OK", "text/plain; version=0.0.4; charset=utf-8", body, head_only);
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(const std::string& host, int port,
                                                                    std::shared_ptr<prometheus::Collectable> metrics) {
  if (metrics == nullptr) return absl::InvalidArgumentError("MetricsServer: no metrics to serve");
  auto listening = ListenTcp(host, port, "/metrics");
  if (!listening.ok()) return listening.status();
  const auto [fd, bound_port] = *listening;
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
    stopping_.store(true);
    const char b = 0;
    while (write(wake_write_, &b, 1) < 0 && errno == EINTR) {
    }
    thread_.join();
  }
  close(listen_fd_);
  close(wake_read_);
  close(wake_write_);
}

// One connection's progress: reading the request head, writing the response, then reading and
// discarding what the client still sends after the half-close (see the header).
struct MetricsServer::Conn {
  int fd = -1;
  Clock::time_point deadline;
  enum class Phase { kHead, kWrite, kDrain } phase = Phase::kHead;
  std::string head;
  std::string response;
  size_t sent = 0;
};

void MetricsServer::Loop() {
  std::vector<Conn> conns;
  Clock::time_point accept_paused_until{};
  std::vector<pollfd> fds;
  for (;;) {
    const Clock::time_point now = Clock::now();
    // Past its deadline a connection is closed as it stands (unanswered, or cut short).
    for (size_t c = 0; c < conns.size();) {
      if (now >= conns[c].deadline) {
        close(conns[c].fd);
        conns[c] = std::move(conns.back());
        conns.pop_back();
      } else {
        ++c;
      }
    }
    const bool accepting = conns.size() < kMaxConnections && now >= accept_paused_until;
    fds.assign({{wake_read_, POLLIN, 0}, {accepting ? listen_fd_ : -1, POLLIN, 0}});
    Clock::time_point wake_at = accepting ? Clock::time_point::max() : accept_paused_until;
    for (const Conn& c : conns) {
      fds.push_back({c.fd, static_cast<short>(c.phase == Conn::Phase::kWrite ? POLLOUT : POLLIN), 0});
      wake_at = std::min(wake_at, c.deadline);
    }
    int timeout_ms = -1;
    if (wake_at != Clock::time_point::max()) {
      timeout_ms = static_cast<int>(std::clamp<int64_t>(
          std::chrono::ceil<std::chrono::milliseconds>(wake_at - now).count(), 0, 60'000));
    }
    if (poll(fds.data(), fds.size(), timeout_ms) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (fds[0].revents != 0) break;  // the destructor
    for (size_t c = conns.size(); c-- > 0;) {
      if (fds[2 + c].revents == 0) continue;
      if (!Progress(conns[c])) {
        close(conns[c].fd);
        conns[c] = std::move(conns.back());
        conns.pop_back();
      }
    }
    if (fds[1].revents == 0) continue;
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      // The client gave up already, or a signal came: try again now. Anything else (EMFILE,
      // ENFILE, ENOBUFS, ENOMEM, ...) leaves the connection queued and the socket readable, so
      // retrying at once would spin: leave the listening socket alone for a while.
      if (errno != ECONNABORTED && errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK) {
        accept_paused_until = Clock::now() + kAcceptBackoff;
      }
      continue;
    }
    Conn conn;
    conn.fd = fd;
    conn.deadline = Clock::now() + kConnectionDeadline;
    conns.push_back(std::move(conn));
  }
  for (const Conn& c : conns) close(c.fd);
}

bool MetricsServer::Progress(Conn& c) {
  char buf[4096];
  for (;;) {
    if (c.phase == Conn::Phase::kWrite) {
      const ssize_t n = send(c.fd, c.response.data() + c.sent, c.response.size() - c.sent, MSG_NOSIGNAL);
      if (n > 0) {
        c.sent += static_cast<size_t>(n);
        if (c.sent < c.response.size()) continue;
        // Closing with unread bytes (the rest of an oversized head, a POST body), or before the
        // client has sent all of them, sends a reset that can cost the client its answer:
        // half-close, and read to the client's end-of-stream (bounded by the deadline) first.
        shutdown(c.fd, SHUT_WR);
        c.phase = Conn::Phase::kDrain;
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);  // else the client went away
    }
    // Reading: the head, or what follows the response.
    const ssize_t n = recv(c.fd, buf, sizeof(buf), 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno == EAGAIN || errno == EWOULDBLOCK;  // else reset: drop it
    }
    if (c.phase == Conn::Phase::kDrain) {
      if (n == 0) return false;  // the client's end-of-stream: done
      continue;                  // discarded (a flood still ends at the deadline)
    }
    if (n > 0) c.head.append(buf, static_cast<size_t>(n));
    // A head cut short by end-of-stream is answered as it stands (the client may still read).
    if (n == 0 || HeadEnd(c.head) != std::string::npos || c.head.size() > kMaxHead) {
      ++requests_;
      c.response = Answer(c.head, *metrics_);
      c.head.clear();
      c.phase = Conn::Phase::kWrite;
    }
  }
}

}  // namespace ferry
