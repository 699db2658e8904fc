// A process's /metrics endpoint: a prometheus::Collectable (a Registry) served in the Prometheus
// text format over plain HTTP/1.x, one request per connection, on one thread of its own that
// serves many connections at once.
//
// Why not prometheus::Exposer (civetweb): Debian's and Ubuntu's libcivetweb are built with
// USE_STACK_SIZE=102400, so every civetweb thread gets a 100 KiB stack, and glibc carves each
// thread's static TLS out of its stack. A process linked with cuBLAS (libcublasLt alone has 92 KiB
// of TLS, libcublas 12 KiB) has more static TLS than that, pthread_create fails with EINVAL, and
// mg_start returns no context after it has bound the port (leaving the socket listening, so a
// scrape hangs instead of being refused). This server's thread has the default stack size.
//
// What it serves: GET (or HEAD) /metrics -> 200, text/plain; version=0.0.4, the collectable's
// families (prometheus::TextSerializer); another path -> 404; another method -> 405; a request
// that does not parse, or whose head is over 8 KiB -> 400 (a head cut short by the client's
// end-of-stream is answered as it stands, likely 400).
//
// Invariants (what one client can cost the others):
//   - Connections are served at once, multiplexed on the server's one thread with poll(): up to
//     kMaxConnections (64) are open, more wait in the listen backlog. A client that drips bytes,
//     stalls, does not read or keeps its connection open holds only its own slot.
//   - Each connection gets one deadline, kConnectionDeadline (2 s) from accept, for everything:
//     reading the head, writing the response and the drain below; past it the connection is
//     closed as it stands (unanswered, or with the response cut short). Collect() runs on the
//     server's thread when a head is complete (other connections wait for it, not for clients).
//   - After the response, the server half-closes (shutdown(SHUT_WR)) and reads and discards what
//     the client still sends until it closes or the deadline passes, then closes: a request with
//     bytes the server does not need (an oversized head, a POST body) is not reset, so the client
//     can send them all and then read its 4xx.
//   - accept4 failing for want of descriptors or memory (EMFILE, ENFILE, ENOBUFS, ENOMEM) leaves
//     the listening socket unpolled for kAcceptBackoff (100 ms) instead of spinning on it;
//     ECONNABORTED, EINTR and EAGAIN are retried at the next wake.
// Thread safety: Start() and the destructor from one thread; the collectable must be safe to
// Collect() from the server's thread (prometheus::Registry is). The destructor wakes the thread
// through a pipe that every wait of it watches, so it returns within a few milliseconds whatever
// a client does (a Collect() in progress finishes first).
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "prometheus/collectable.h"

namespace ferry {

class MetricsServer {
 public:
  // The whole life of one connection, accept to close (see Invariants above).
  static constexpr std::chrono::milliseconds kConnectionDeadline{2000};
  // Connections open at once; more wait in the listen backlog.
  static constexpr size_t kMaxConnections = 64;
  // The pause after accept4 fails for want of descriptors or memory.
  static constexpr std::chrono::milliseconds kAcceptBackoff{100};

  // Binds host:port (host a numeric IPv4/IPv6 address or a name; port 0: one the kernel picks)
  // and starts serving `metrics`. Errors: INVALID_ARGUMENT for a null collectable, a port outside
  // [0, 65535] or a host that does not resolve; UNAVAILABLE when no address can be bound or
  // listened on (nothing is left open); INTERNAL when the thread cannot start.
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(const std::string& host, int port,
                                                              std::shared_ptr<prometheus::Collectable> metrics);
  // Stops the thread and closes the sockets: a connection in progress is dropped (closed, without
  // its response or with it cut short) unless its Collect() is running, which finishes first.
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // The port bound (the kernel's pick when Start() was given 0).
  int port() const { return port_; }
  // Requests answered so far (any status).
  int64_t requests() const { return requests_.load(); }

 private:
  MetricsServer(int listen_fd, int wake_read, int wake_write, int port,
                std::shared_ptr<prometheus::Collectable> metrics);
  struct Conn;

  void Loop();
  // Moves `c` on as far as its socket allows without blocking; false when it is done or dropped
  // (the caller closes it).
  bool Progress(Conn& c);

  const int listen_fd_, wake_read_, wake_write_, port_;
  std::shared_ptr<prometheus::Collectable> metrics_;
  std::atomic<int64_t> requests_{0};
  // Set by the destructor before it writes to the wake pipe (which the loop's poll sees).
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace ferry
