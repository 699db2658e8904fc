// A process's /metrics endpoint: a prometheus::Collectable (a Registry) served in the Prometheus
// text format over plain HTTP/1.x, one request per connection, on one thread of its own.
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
// that does not parse, or whose head is over 8 KiB -> 400. Connections are served one at a time;
// each read or write gives up after 2 s, so a stalled client holds up scrapes for that long at
// most.
// Thread safety: Start() and the destructor from one thread; the collectable must be safe to
// Collect() from the server's thread (prometheus::Registry is).
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "prometheus/collectable.h"

namespace ferry {

class MetricsServer {
 public:
  // Binds host:port (host a numeric IPv4/IPv6 address or a name; port 0: one the kernel picks)
  // and starts serving `metrics`. Errors: INVALID_ARGUMENT for a null collectable, a port outside
  // [0, 65535] or a host that does not resolve; UNAVAILABLE when no address can be bound or
  // listened on (nothing is left open); INTERNAL when the thread cannot start.
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(const std::string& host, int port,
                                                              std::shared_ptr<prometheus::Collectable> metrics);
  // Stops the thread (a request in progress finishes first) and closes the socket.
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
  void Loop();
  void Serve(int fd);

  const int listen_fd_, wake_read_, wake_write_, port_;
  std::shared_ptr<prometheus::Collectable> metrics_;
  std::atomic<int64_t> requests_{0};
  std::thread thread_;
};

}  // namespace ferry
