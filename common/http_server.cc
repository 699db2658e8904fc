#include "common/http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>
#include <system_error>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace ferry {
namespace {

using Clock = std::chrono::steady_clock;

const char* Reason(int status) {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 411: return "Length Required";
    case 413: return "Content Too Large";
    case 422: return "Unprocessable Content";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 499: return "Client Closed Request";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    default: return "Status";
  }
}

std::string PeerName(const sockaddr_storage& a) {
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (a.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&a);
    inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
    port = ntohs(in->sin_port);
    return absl::StrCat(host, ":", port);
  }
  if (a.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&a);
    inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
    port = ntohs(in6->sin6_port);
    return absl::StrCat("[", host, "]:", port);
  }
  return "?";
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  return out;
}

std::string Trimmed(std::string_view s) {
  const size_t first = s.find_first_not_of(" \t");
  if (first == std::string_view::npos) return "";
  return std::string(s.substr(first, s.find_last_not_of(" \t") - first + 1));
}

int MillisUntil(Clock::time_point deadline) {
  return static_cast<int>(std::clamp<int64_t>(
      std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count(), 0, 1000));
}

// Reads what is there into `buf`, waiting until `deadline` (rechecking `stopping` each second).
// > 0: bytes added; 0: the client's end-of-stream; -1: deadline, error or stopping.
ssize_t ReadSome(int fd, std::string& buf, Clock::time_point deadline, const std::atomic<bool>& stopping) {
  char chunk[16384];
  for (;;) {
    const ssize_t n = recv(fd, chunk, sizeof(chunk), 0);
    if (n > 0) {
      buf.append(chunk, static_cast<size_t>(n));
      return n;
    }
    if (n == 0) return 0;
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return -1;
    if (stopping.load() || Clock::now() >= deadline) return -1;
    pollfd p{fd, POLLIN, 0};
    poll(&p, 1, MillisUntil(deadline));
  }
}

struct Head {
  std::string method, target, version;
  std::vector<std::pair<std::string, std::string>> headers;
};

// Parses a request head (without its blank line); an error names what is wrong.
absl::StatusOr<Head> ParseHead(std::string_view text) {
  Head h;
  size_t eol = text.find('\n');
  std::string_view line = text.substr(0, eol);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos) {
    return absl::InvalidArgumentError("the request line is not METHOD TARGET HTTP/1.x");
  }
  h.method = std::string(line.substr(0, sp1));
  h.target = std::string(line.substr(sp1 + 1, sp2 - sp1 - 1));
  h.version = std::string(line.substr(sp2 + 1));
  if (h.method.empty() || h.target.empty() || (h.version != "HTTP/1.1" && h.version != "HTTP/1.0")) {
    return absl::InvalidArgumentError("the request line is not METHOD TARGET HTTP/1.x");
  }
  while (eol != std::string_view::npos) {
    const size_t start = eol + 1;
    eol = text.find('\n', start);
    std::string_view l = text.substr(start, eol == std::string_view::npos ? std::string_view::npos : eol - start);
    if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
    if (l.empty()) continue;
    const size_t colon = l.find(':');
    if (colon == std::string_view::npos || colon == 0 || l[0] == ' ' || l[0] == '\t' ||
        l.substr(0, colon).find_first_of(" \t") != std::string_view::npos) {
      return absl::InvalidArgumentError("a header line is not NAME: VALUE");
    }
    h.headers.emplace_back(Lower(l.substr(0, colon)), Trimmed(l.substr(colon + 1)));
  }
  return h;
}

// Where the head ends (the index after its blank line), or npos.
size_t HeadEnd(std::string_view buf) {
  for (size_t i = buf.find('\n'); i != std::string_view::npos; i = buf.find('\n', i + 1)) {
    if (i + 1 < buf.size() && buf[i + 1] == '\n') return i + 2;
    if (i + 2 < buf.size() && buf[i + 1] == '\r' && buf[i + 2] == '\n') return i + 3;
  }
  return std::string_view::npos;
}

}  // namespace

absl::StatusOr<std::pair<int, int>> ListenTcp(const std::string& host, int port, std::string_view what_view) {
  const std::string what(what_view);
  if (port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(what, " port ", port, " is outside [0, 65535]"));
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (const int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &found); rc != 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, " address ", host, ":", port, ": ", gai_strerror(rc)));
  }
  int fd = -1;
  std::string why = "no address";
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) {
      why = absl::StrCat("socket: ", std::strerror(errno));
      continue;
    }
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, 128) != 0) {
      why = std::strerror(errno);
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(found);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("cannot serve ", what, " on ", host, ":", port, ": ", why));
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
  const int bound_port = bound.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                                                     : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  return std::make_pair(fd, bound_port);
}

const std::string* HttpRequest::Header(std::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (k == name) return &v;
  }
  return nullptr;
}

bool HttpResponse::WriteAll(std::string_view data) {
  if (failed_) return false;
  Clock::time_point deadline = Clock::now() + write_timeout_;
  while (!data.empty()) {
    const ssize_t n = send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
      deadline = Clock::now() + write_timeout_;  // the timeout is on progress
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && Clock::now() < deadline) {
      pollfd p{fd_, POLLOUT, 0};
      poll(&p, 1, MillisUntil(deadline));
      continue;
    }
    failed_ = true;
    return false;
  }
  return true;
}

std::string HttpResponse::StatusHead(int status, std::string_view content_type,
                                     const std::vector<std::pair<std::string, std::string>>& headers) const {
  std::string head = absl::StrCat(http11_ ? "HTTP/1.1 " : "HTTP/1.0 ", status, " ", Reason(status), "\r\n");
  if (!content_type.empty()) absl::StrAppend(&head, "Content-Type: ", std::string(content_type), "\r\n");
  for (const auto& [k, v] : headers) absl::StrAppend(&head, k, ": ", v, "\r\n");
  return head;
}

void HttpResponse::Send(int status, std::string_view content_type, std::string_view body,
                        const std::vector<std::pair<std::string, std::string>>& headers) {
  if (state_ != State::kNone) return;
  state_ = State::kSent;
  std::string out = StatusHead(status, content_type, headers);
  absl::StrAppend(&out, "Content-Length: ", body.size(), "\r\n", ConnectionHeader(), "\r\n");
  if (!head_only_) out.append(body);
  WriteAll(out);
}

bool HttpResponse::StartStream(int status, std::string_view content_type,
                               const std::vector<std::pair<std::string, std::string>>& headers) {
  if (state_ != State::kNone) return false;
  state_ = State::kStreaming;
  std::string out = StatusHead(status, content_type, headers);
  // HTTP/1.0 has no chunked coding: the stream ends with the connection.
  if (http11_) {
    absl::StrAppend(&out, "Transfer-Encoding: chunked\r\n");
  } else {
    keep_alive_ = false;
  }
  absl::StrAppend(&out, ConnectionHeader(), "\r\n");
  return WriteAll(out);
}

std::string HttpResponse::ConnectionHeader() const {
  if (!keep_alive_) return "Connection: close\r\n";
  return http11_ ? "" : "Connection: keep-alive\r\n";  // HTTP/1.0 closes unless told
}

bool HttpResponse::Write(std::string_view data) {
  if (state_ != State::kStreaming) return false;
  if (head_only_) return !failed_;
  if (data.empty()) return !failed_;
  if (!http11_) return WriteAll(data);
  return WriteAll(absl::StrCat(absl::Hex(data.size()), "\r\n", std::string(data), "\r\n"));
}

bool HttpResponse::Finish() {
  if (state_ == State::kStreaming && http11_ && !head_only_) WriteAll("0\r\n\r\n");
  return keep_alive_ && !failed_;
}

bool HttpResponse::ClientGone() {
  if (failed_) return true;
  pollfd p{fd_, static_cast<short>(POLLIN | POLLRDHUP), 0};
  if (poll(&p, 1, 0) <= 0) return false;
  if ((p.revents & (POLLERR | POLLHUP | POLLRDHUP)) != 0) return true;
  if ((p.revents & POLLIN) != 0) {
    char c;
    const ssize_t n = recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
  }
  return false;
}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const std::string& host, int port, HttpHandler handler,
                                                              Options options, std::string_view what_view) {
  const std::string what(what_view);
  auto listening = ListenTcp(host, port, what);
  if (!listening.ok()) return listening.status();
  int wake[2];
  if (pipe2(wake, O_CLOEXEC) != 0) {
    close(listening->first);
    return absl::InternalError(absl::StrCat(what, " server: pipe: ", std::strerror(errno)));
  }
  std::unique_ptr<HttpServer> s(
      new HttpServer(listening->first, wake[0], wake[1], listening->second, std::move(handler), options));
  try {
    s->accept_thread_ = std::thread([p = s.get()] { p->AcceptLoop(); });
  } catch (const std::system_error& e) {
    return absl::InternalError(absl::StrCat(what, " server: cannot start its thread: ", e.what()));
  }
  return s;
}

HttpServer::HttpServer(int listen_fd, int wake_read, int wake_write, int port, HttpHandler handler, Options options)
    : listen_fd_(listen_fd),
      wake_read_(wake_read),
      wake_write_(wake_write),
      port_(port),
      handler_(std::move(handler)),
      options_(options) {}

HttpServer::~HttpServer() {
  stopping_.store(true);
  if (accept_thread_.joinable()) {
    const char b = 0;
    while (write(wake_write_, &b, 1) < 0 && errno == EINTR) {
    }
    accept_thread_.join();
  }
  std::list<std::unique_ptr<Conn>> conns;
  {
    std::lock_guard<std::mutex> lock(mu_);
    conns.swap(conns_);
  }
  for (auto& c : conns) shutdown(c->fd, SHUT_RDWR);  // reads and writes fail; ClientGone() is true
  for (auto& c : conns) {
    if (c->thread.joinable()) c->thread.join();
    close(c->fd);
  }
  close(listen_fd_);
  close(wake_read_);
  close(wake_write_);
}

void HttpServer::ReapDone() {
  std::list<std::unique_ptr<Conn>> ended;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = conns_.begin(); it != conns_.end();) {
      if ((*it)->done.load()) {
        ended.push_back(std::move(*it));
        it = conns_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& c : ended) {
    c->thread.join();
    close(c->fd);
  }
}

void HttpServer::AcceptLoop() {
  Clock::time_point paused_until{};
  while (!stopping_.load()) {
    ReapDone();
    const bool accepting = Clock::now() >= paused_until;
    pollfd fds[2] = {{wake_read_, POLLIN, 0}, {accepting ? listen_fd_ : -1, POLLIN, 0}};
    if (poll(fds, 2, accepting ? 1000 : 100) < 0 && errno != EINTR) break;
    if (fds[0].revents != 0) break;
    if (fds[1].revents == 0) continue;
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    const int fd = accept4(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      // Out of descriptors or memory leaves the connection queued: back off instead of spinning.
      if (errno != ECONNABORTED && errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK) {
        paused_until = Clock::now() + std::chrono::milliseconds(100);
      }
      continue;
    }
    size_t open = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      open = conns_.size();
    }
    if (open >= options_.max_connections) {
      HttpResponse busy(fd, true, false, std::chrono::milliseconds(200));
      busy.Send(503, "text/plain", absl::StrCat("the server holds ", open, " connections; at most ",
                                                options_.max_connections, "\n"));
      close(fd);
      continue;
    }
    auto conn = std::make_unique<Conn>();
    conn->fd = fd;
    conn->peer = PeerName(addr);
    Conn* c = conn.get();
    std::lock_guard<std::mutex> lock(mu_);
    try {
      c->thread = std::thread([this, c] { Serve(c); });
    } catch (const std::system_error&) {
      close(fd);  // out of threads: this connection is refused, the server goes on
      continue;
    }
    conns_.push_back(std::move(conn));
  }
}

void HttpServer::Serve(Conn* conn) {
  const int fd = conn->fd;
  std::string buf;
  auto reply_and_close = [&](int status, const std::string& why) {
    HttpResponse r(fd, true, false, options_.write_timeout);
    r.Send(status, "text/plain", absl::StrCat(why, "\n"));
    // Unread bytes would turn the close into a reset that can cost the client its answer: read
    // (briefly) to its end-of-stream first.
    shutdown(fd, SHUT_WR);
    std::string sink;
    const Clock::time_point until = Clock::now() + std::chrono::seconds(1);
    while (ReadSome(fd, sink, until, stopping_) > 0) sink.clear();
  };
  while (!stopping_.load()) {
    // Blank lines before a request line are ignored (some clients end a body with an extra CRLF).
    buf.erase(0, std::min(buf.find_first_not_of("\r\n"), buf.size()));
    // The head: idle_timeout for its first byte, read_timeout from there.
    size_t head_end = HeadEnd(buf);
    Clock::time_point deadline = Clock::now() + (buf.empty() ? options_.idle_timeout : options_.read_timeout);
    bool started = !buf.empty();
    while (head_end == std::string::npos && buf.size() <= kMaxHead) {
      const ssize_t n = ReadSome(fd, buf, deadline, stopping_);
      if (n <= 0) {
        if (n < 0 && started && !stopping_.load()) reply_and_close(408, "the request head did not arrive in time");
        conn->done = true;
        return;
      }
      if (!started) buf.erase(0, std::min(buf.find_first_not_of("\r\n"), buf.size()));
      if (!started && !buf.empty()) {
        started = true;
        deadline = Clock::now() + options_.read_timeout;
      }
      head_end = HeadEnd(buf);
    }
    if (head_end == std::string::npos || head_end > kMaxHead) {
      reply_and_close(431, absl::StrCat("the request head is over ", kMaxHead, " bytes"));
      break;
    }
    absl::StatusOr<Head> head = ParseHead(std::string_view(buf).substr(0, head_end));
    buf.erase(0, head_end);
    if (!head.ok()) {
      reply_and_close(400, std::string(head.status().message()));
      break;
    }
    HttpRequest req;
    req.method = std::move(head->method);
    req.target = std::move(head->target);
    req.path = req.target.substr(0, req.target.find('?'));
    req.headers = std::move(head->headers);
    req.peer = conn->peer;
    const bool http11 = head->version == "HTTP/1.1";
    const std::string* connection = req.Header("connection");
    const std::string conn_value = connection ? Lower(*connection) : "";
    bool keep_alive = http11 ? conn_value.find("close") == std::string::npos
                             : conn_value.find("keep-alive") != std::string::npos;
    // The body: by Content-Length, or chunked.
    const std::string* length = req.Header("content-length");
    const std::string* coding = req.Header("transfer-encoding");
    const bool chunked = coding != nullptr && Lower(*coding) == "chunked";
    if (coding != nullptr && (!chunked || length != nullptr)) {
      reply_and_close(400, coding != nullptr && !chunked ? absl::StrCat("transfer coding ", *coding, " is not supported")
                                                         : "both Content-Length and Transfer-Encoding");
      break;
    }
    uint64_t body_bytes = 0;
    if (length != nullptr && (!absl::SimpleAtoi(*length, &body_bytes) || length->find_first_not_of("0123456789") != std::string::npos)) {
      reply_and_close(400, absl::StrCat("Content-Length '", *length, "' is not a number"));
      break;
    }
    if (body_bytes > options_.max_body_bytes) {
      reply_and_close(413, absl::StrCat("the body is ", body_bytes, " bytes; at most ", options_.max_body_bytes));
      break;
    }
    if ((body_bytes > 0 || chunked) && buf.empty()) {
      if (const std::string* expect = req.Header("expect");
          expect != nullptr && Lower(*expect) == "100-continue" && http11) {
        HttpResponse cont(fd, true, true, options_.write_timeout);
        cont.WriteAll("HTTP/1.1 100 Continue\r\n\r\n");
      }
    }
    deadline = Clock::now() + options_.read_timeout;
    bool body_ok = true;
    std::string body_error;
    if (chunked) {
      // size CRLF data CRLF ... 0 CRLF (trailers) CRLF
      for (;;) {
        size_t eol = buf.find("\r\n");
        while (eol == std::string::npos && buf.size() < 64) {
          if (ReadSome(fd, buf, deadline, stopping_) <= 0) break;
          eol = buf.find("\r\n");
        }
        uint64_t size = 0;
        const std::string_view size_text = std::string_view(buf).substr(0, std::min(eol, buf.find(';')));
        if (eol == std::string::npos || size_text.empty() || size_text.size() > 15 ||
            size_text.find_first_not_of("0123456789abcdefABCDEF") != std::string_view::npos ||
            !absl::SimpleHexAtoi(std::string(size_text), &size)) {
          body_ok = false;
          body_error = "the chunked body does not parse";
          break;
        }
        if (req.body.size() + size > options_.max_body_bytes) {
          body_ok = false;
          body_error = absl::StrCat("the body is over ", options_.max_body_bytes, " bytes");
          break;
        }
        buf.erase(0, eol + 2);
        if (size == 0) {
          // Trailers (ignored) up to the blank line.
          size_t end;
          while ((end = buf.find("\r\n")) != 0) {
            if (end != std::string::npos) {
              buf.erase(0, end + 2);
              continue;
            }
            if (buf.size() > kMaxHead || ReadSome(fd, buf, deadline, stopping_) <= 0) break;
          }
          if (buf.rfind("\r\n", 0) == 0) buf.erase(0, 2);
          break;
        }
        while (buf.size() < size + 2) {
          if (ReadSome(fd, buf, deadline, stopping_) <= 0) break;
        }
        if (buf.size() < size + 2 || buf.compare(size, 2, "\r\n") != 0) {
          body_ok = false;
          body_error = "the chunked body ended early or does not parse";
          break;
        }
        req.body.append(buf, 0, size);
        buf.erase(0, size + 2);
      }
    } else {
      while (buf.size() < body_bytes) {
        if (ReadSome(fd, buf, deadline, stopping_) <= 0) break;
      }
      if (buf.size() < body_bytes) {
        body_ok = false;
        body_error = absl::StrCat("the body ended at ", buf.size(), " of ", body_bytes, " bytes");
      } else {
        req.body = buf.substr(0, body_bytes);
        buf.erase(0, body_bytes);
      }
    }
    if (!body_ok) {
      reply_and_close(body_error.find("over") != std::string::npos ? 413 : 400, body_error);
      break;
    }
    HttpResponse resp(fd, http11, keep_alive && !stopping_.load(), options_.write_timeout, req.method == "HEAD");
    // A handler's exception ends its answer (500 when nothing was sent) and this connection,
    // never the process.
    try {
      handler_(req, resp);
    } catch (const std::exception& e) {
      if (!resp.started()) resp.Send(500, "text/plain", absl::StrCat("the handler failed: ", e.what(), "\n"));
      break;
    }
    if (!resp.started()) resp.Send(500, "text/plain", "the handler gave no answer\n");
    if (!resp.Finish()) break;
  }
  shutdown(fd, SHUT_RDWR);
  conn->done = true;
}

}  // namespace ferry
