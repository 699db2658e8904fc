// An HTTP/1.1 server for request-response APIs whose answers may stream (server-sent events):
// a thread for accepting and one for each open connection, which reads a request, calls the
// handler and, with keep-alive, reads the next.
//
// What it takes: a request line and headers of at most kMaxHead bytes; a body by Content-Length
// or chunked transfer coding, of at most Options::max_body_bytes (past it: 413 and the connection
// closes); `Expect: 100-continue` is answered before the body is read. What it refuses itself:
// a head that does not parse (400), a head too large (431), both a length and a chunked coding
// (400), more connections than Options::max_connections (503 at once, closed).
//
// Invariants (what one client can cost the others):
//   - A connection holds only its own thread; past max_connections new ones are refused, not
//     queued, so a flood of idle sockets cannot stop answers to the rest.
//   - Reading a head or body has a deadline (Options::read_timeout from its first byte; an idle
//     keep-alive connection closes after Options::idle_timeout); a write that makes no progress
//     for Options::write_timeout fails (the client is treated as gone).
//   - The handler learns that its client went away (HttpResponse::ClientGone, without blocking),
//     so a streaming answer can end the work it waits on.
// Thread safety: the handler runs on connection threads, many at once. The destructor stops
// accepting, shuts every connection's socket down (a handler's writes then fail and ClientGone
// turns true) and joins every thread: handlers must return once their client is gone.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace ferry {

// Binds a listening TCP socket on host:port (host: a numeric IPv4/IPv6 address or a name; port 0:
// one the kernel picks), close-on-exec and non-blocking. `what` names the server in errors.
// Returns the socket and the port bound. INVALID_ARGUMENT for a port outside [0, 65535] or a host
// that does not resolve; UNAVAILABLE when no address can be bound.
absl::StatusOr<std::pair<int, int>> ListenTcp(const std::string& host, int port, std::string_view what);

struct HttpRequest {
  std::string method;   // as sent ("GET", "POST", ...)
  std::string target;   // the request target as sent ("/v1/models?x=1")
  std::string path;     // target without its query
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased, values trimmed
  std::string body;
  std::string peer;     // "address:port" of the client
  // The first header of that (lower-case) name, or null.
  const std::string* Header(std::string_view name) const;
};

// One request's answer, written by the handler on the connection's thread: either Send (a whole
// response) or StartStream then Write pieces (chunked; closed when the handler returns). A
// handler that does neither gets a 500. A HEAD request's answer carries the headers alone.
class HttpResponse {
 public:
  // `headers`: extra header lines, name and value.
  void Send(int status, std::string_view content_type, std::string_view body,
            const std::vector<std::pair<std::string, std::string>>& headers = {});
  // Starts a streamed response; false when the client is gone.
  bool StartStream(int status, std::string_view content_type,
                   const std::vector<std::pair<std::string, std::string>>& headers = {});
  // Sends one piece of a streamed response; false when the client is gone (later writes are no-ops).
  bool Write(std::string_view data);
  // Whether the client closed its connection or it failed; does not block.
  bool ClientGone();
  bool started() const { return state_ != State::kNone; }

 private:
  friend class HttpServer;
  enum class State { kNone, kSent, kStreaming };
  HttpResponse(int fd, bool http11, bool keep_alive, std::chrono::milliseconds write_timeout, bool head_only = false)
      : fd_(fd), http11_(http11), keep_alive_(keep_alive), write_timeout_(write_timeout), head_only_(head_only) {}
  bool WriteAll(std::string_view data);
  std::string StatusHead(int status, std::string_view content_type,
                         const std::vector<std::pair<std::string, std::string>>& headers) const;
  bool Finish();  // ends a stream; whether the connection may serve another request
  std::string ConnectionHeader() const;

  int fd_;
  bool http11_;
  bool keep_alive_;
  std::chrono::milliseconds write_timeout_;
  bool head_only_;  // the request was HEAD: headers only, never a body
  State state_ = State::kNone;
  bool failed_ = false;
};

using HttpHandler = std::function<void(const HttpRequest&, HttpResponse&)>;

class HttpServer {
 public:
  static constexpr size_t kMaxHead = 16 << 10;

  struct Options {
    size_t max_connections = 256;
    size_t max_body_bytes = 32 << 20;
    std::chrono::milliseconds read_timeout{30'000};
    std::chrono::milliseconds idle_timeout{75'000};
    std::chrono::milliseconds write_timeout{30'000};
  };

  // Binds host:port (see ListenTcp; `what` names the server in errors) and serves `handler`.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const std::string& host, int port, HttpHandler handler,
                                                           Options options, std::string_view what = "HTTP");
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const { return port_; }

 private:
  struct Conn {
    int fd = -1;
    std::string peer;
    std::thread thread;
    std::atomic<bool> done{false};
  };

  HttpServer(int listen_fd, int wake_read, int wake_write, int port, HttpHandler handler, Options options);
  void AcceptLoop();
  void Serve(Conn* conn);
  void ReapDone();  // joins the threads of ended connections (accept thread only)

  const int listen_fd_;
  const int wake_read_, wake_write_;
  const int port_;
  const HttpHandler handler_;
  const Options options_;
  std::atomic<bool> stopping_{false};
  std::thread accept_thread_;
  std::mutex mu_;
  std::list<std::unique_ptr<Conn>> conns_;  // GUARDED_BY(mu_)
};

}  // namespace ferry
