// common/metrics_server.h: what a scraper sees (the registry's text, 404, 405, 400), the port
// it reports, a port already taken refused and left closed, and a stop that returns; what a
// client cannot do to it: hold up a scrape past the connection deadline by dripping its request,
// hold up the destructor, lose a 4xx to a reset by sending more than is read, or make it spin
// when accept4 runs out of descriptors.
#include "common/metrics_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "prometheus/counter.h"
#include "prometheus/registry.h"
#include "tests/catch.h"

namespace ferry {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// A socket connected to 127.0.0.1:port, reads giving up after `timeout`; -1 when refused.
int Connect(int port, milliseconds timeout = milliseconds(5000)) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  timeval tv{static_cast<time_t>(timeout.count() / 1000), static_cast<suseconds_t>(timeout.count() % 1000 * 1000)};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  return fd;
}

// Everything readable from `fd` until end-of-stream, a reset or the read timeout.
std::string ReadAll(int fd) {
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
  return out;
}

// Sends `request` to 127.0.0.1:port and returns everything the server wrote back ("" when the
// connection is refused).
std::string Ask(int port, const std::string& request, milliseconds timeout = milliseconds(5000)) {
  const int fd = Connect(port, timeout);
  if (fd < 0) return "";
  REQUIRE(write(fd, request.data(), request.size()) == static_cast<ssize_t>(request.size()));
  std::string out = ReadAll(fd);
  close(fd);
  return out;
}

TEST_CASE("the metrics server answers GET /metrics with the registry's text", "[metrics_server]") {
  auto registry = std::make_shared<prometheus::Registry>();
  auto& c = prometheus::BuildCounter().Name("ferry_test:things_total").Help("Things").Register(*registry).Add({{"rank", "3"}});
  c.Increment(7);
  auto s = MetricsServer::Start("127.0.0.1", 0, registry);
  REQUIRE(s.ok());
  const int port = (*s)->port();
  CHECK(port > 0);

  const std::string ok = Ask(port, "GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n");
  CHECK(ok.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
  CHECK(ok.find("Content-Type: text/plain; version=0.0.4") != std::string::npos);
  CHECK(ok.find("\r\n\r\n# HELP ferry_test:things_total Things\n") != std::string::npos);
  CHECK(ok.find("ferry_test:things_total{rank=\"3\"} 7") != std::string::npos);
  const size_t body = ok.find("\r\n\r\n") + 4;
  CHECK(ok.find("Content-Length: " + std::to_string(ok.size() - body) + "\r\n") != std::string::npos);

  const std::string head = Ask(port, "HEAD /metrics?x=1 HTTP/1.1\r\nHost: x\r\n\r\n");
  CHECK(head.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
  CHECK(head.substr(head.find("\r\n\r\n") + 4).empty());

  CHECK(Ask(port, "GET / HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 404 ", 0) == 0);
  CHECK(Ask(port, "POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n").rfind("HTTP/1.1 405 ", 0) == 0);
  CHECK(Ask(port, "hello\r\n\r\n").rfind("HTTP/1.1 400 ", 0) == 0);
  CHECK(Ask(port, "GET /metrics HTTP/1.0\r\nX: " + std::string(10000, 'a') + "\r\n\r\n").rfind("HTTP/1.1 400 ", 0) == 0);
  CHECK((*s)->requests() == 6);

  // The counter moves; the next scrape shows it.
  c.Increment(1);
  CHECK(Ask(port, "GET /metrics HTTP/1.0\r\n\r\n").find("ferry_test:things_total{rank=\"3\"} 8") != std::string::npos);

  s->reset();  // stops and closes: the port refuses connections now
  CHECK(Ask(port, "GET /metrics HTTP/1.0\r\n\r\n").empty());
}

TEST_CASE("the metrics server refuses a port that is taken - and bad arguments", "[metrics_server]") {
  auto registry = std::make_shared<prometheus::Registry>();
  auto first = MetricsServer::Start("127.0.0.1", 0, registry);
  REQUIRE(first.ok());
  auto second = MetricsServer::Start("127.0.0.1", (*first)->port(), registry);
  REQUIRE_FALSE(second.ok());
  CHECK(second.status().code() == absl::StatusCode::kUnavailable);
  CHECK(second.status().message().find("cannot serve /metrics on 127.0.0.1:" + std::to_string((*first)->port())) !=
        std::string::npos);
  // The first still answers.
  CHECK(Ask((*first)->port(), "GET /metrics HTTP/1.0\r\n\r\n").rfind("HTTP/1.1 200 OK", 0) == 0);

  CHECK(MetricsServer::Start("127.0.0.1", 70000, registry).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(MetricsServer::Start("127.0.0.1", 0, nullptr).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(MetricsServer::Start("no-such-host.invalid", 0, registry).status().code() ==
        absl::StatusCode::kInvalidArgument);
}

TEST_CASE("idle and dripping clients do not hold up a scrape - and are dropped at their deadline", "[metrics_server]") {
  auto registry = std::make_shared<prometheus::Registry>();
  auto s = MetricsServer::Start("127.0.0.1", 0, registry);
  REQUIRE(s.ok());
  const int port = (*s)->port();
  // Three connections that never send a byte, and one that drips its request (one byte every
  // 300 ms: its head would take 40 min to finish).
  std::vector<int> idle;
  for (int i = 0; i < 3; ++i) {
    idle.push_back(Connect(port, milliseconds(1000)));
    REQUIRE(idle.back() >= 0);
  }
  const int drip = Connect(port, milliseconds(1000));
  REQUIRE(drip >= 0);
  std::atomic<bool> stop{false};
  std::thread dripper([&] {
    const std::string request = "GET /metrics HTTP/1.1\r\nX-Slow: " + std::string(8000, 'a');
    for (const char c : request) {
      if (send(drip, &c, 1, MSG_NOSIGNAL) != 1) return;  // dropped
      for (int i = 0; i < 30; ++i) {
        if (stop.load()) return;
        std::this_thread::sleep_for(milliseconds(10));
      }
    }
  });
  std::this_thread::sleep_for(milliseconds(100));  // the server holds all four

  // Scrapes are answered at once, well inside the others' 2 s deadline.
  for (int i = 0; i < 3; ++i) {
    const auto t0 = Clock::now();
    const std::string ok = Ask(port, "GET /metrics HTTP/1.0\r\n\r\n", milliseconds(4000));
    CHECK(ok.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
    CHECK(Clock::now() - t0 < milliseconds(500));
  }
  // At their deadline the idle and dripping clients are dropped unanswered: end-of-stream (or a
  // reset, if a byte was in flight), not a read timeout; only the scrapes count as answered.
  std::this_thread::sleep_for(MetricsServer::kConnectionDeadline);
  for (int fd : idle) {
    char b;
    errno = 0;
    const ssize_t n = recv(fd, &b, 1, MSG_DONTWAIT);
    CHECK((n == 0 || (n < 0 && errno == ECONNRESET)));
    close(fd);
  }
  char b;
  errno = 0;
  const ssize_t n = recv(drip, &b, 1, 0);
  CHECK((n == 0 || (n < 0 && errno == ECONNRESET)));
  CHECK((*s)->requests() == 3);
  stop.store(true);
  dripper.join();
  close(drip);
}

TEST_CASE("more clients than the server holds at once wait in the backlog and are served", "[metrics_server]") {
  auto registry = std::make_shared<prometheus::Registry>();
  auto s = MetricsServer::Start("127.0.0.1", 0, registry);
  REQUIRE(s.ok());
  const int port = (*s)->port();
  std::vector<int> idle;
  for (size_t i = 0; i < MetricsServer::kMaxConnections; ++i) {
    idle.push_back(Connect(port, milliseconds(1000)));
    REQUIRE(idle.back() >= 0);
  }
  std::this_thread::sleep_for(milliseconds(100));
  // Every slot is held: this scrape waits for the idle ones' deadline, then is served.
  const auto t0 = Clock::now();
  const std::string ok = Ask(port, "GET /metrics HTTP/1.0\r\n\r\n", milliseconds(5000));
  CHECK(ok.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
  CHECK(Clock::now() - t0 < MetricsServer::kConnectionDeadline + milliseconds(1000));
  for (int fd : idle) close(fd);
}

TEST_CASE("destroying the metrics server returns at once whatever a client does", "[metrics_server]") {
  auto registry = std::make_shared<prometheus::Registry>();
  const auto timed_reset = [](std::unique_ptr<MetricsServer>& s) {
    const auto t0 = Clock::now();
    s.reset();
    return Clock::now() - t0;
  };
  {  // Connected and silent: the server waits for its request.
    auto s = MetricsServer::Start("127.0.0.1", 0, registry);
    REQUIRE(s.ok());
    const int fd = Connect((*s)->port());
    REQUIRE(fd >= 0);
    std::this_thread::sleep_for(milliseconds(100));
    CHECK(timed_reset(*s) < milliseconds(1000));
    close(fd);
  }
  {  // Asked, read the answer, and keeps the connection open: the server waits for its close.
    auto s = MetricsServer::Start("127.0.0.1", 0, registry);
    REQUIRE(s.ok());
    const int fd = Connect((*s)->port());
    REQUIRE(fd >= 0);
    const std::string request = "GET /metrics HTTP/1.0\r\n\r\n";
    REQUIRE(write(fd, request.data(), request.size()) == static_cast<ssize_t>(request.size()));
    CHECK(ReadAll(fd).rfind("HTTP/1.1 200 OK\r\n", 0) == 0);  // ends at the server's half-close
    CHECK(timed_reset(*s) < milliseconds(1000));
    close(fd);
  }
}

TEST_CASE("a request larger than the server reads still gets its 4xx", "[metrics_server]") {
  auto registry = std::make_shared<prometheus::Registry>();
  auto s = MetricsServer::Start("127.0.0.1", 0, registry);
  REQUIRE(s.ok());
  const int port = (*s)->port();
  const auto send_then_read = [&](const std::string& request) {
    const int fd = Connect(port, milliseconds(2000));
    REQUIRE(fd >= 0);
    // The server stops reading after 8 KiB of head (or at the body): the rest must not make it
    // reset the connection. More comes after the answer, as from a client that writes its request
    // in pieces: sent to a closed socket, it would draw the reset that discards the answer.
    size_t off = 0;
    while (off < request.size()) {
      const ssize_t n = send(fd, request.data() + off, std::min<size_t>(16384, request.size() - off), MSG_NOSIGNAL);
      if (n <= 0) break;
      off += static_cast<size_t>(n);
      std::this_thread::sleep_for(milliseconds(20));
    }
    CHECK(off == request.size());
    std::string out = ReadAll(fd);
    close(fd);
    return out;
  };
  CHECK(send_then_read("GET /metrics HTTP/1.1\r\nX: " + std::string(100000, 'a') + "\r\n\r\n")
            .rfind("HTTP/1.1 400 Bad Request\r\n", 0) == 0);
  CHECK(send_then_read("POST /metrics HTTP/1.1\r\nContent-Length: 100000\r\n\r\n" + std::string(100000, 'b'))
            .rfind("HTTP/1.1 405 Method Not Allowed\r\n", 0) == 0);
  CHECK((*s)->requests() == 2);
}

TEST_CASE("the metrics server backs off while accept4 has no descriptor to give", "[metrics_server]") {
  auto registry = std::make_shared<prometheus::Registry>();
  auto s = MetricsServer::Start("127.0.0.1", 0, registry);
  REQUIRE(s.ok());
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>((*s)->port()));
  const int client = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(client >= 0);

  // Every descriptor below a lowered limit taken, then a connection queued: accept4 gets EMFILE
  // and the listening socket stays readable. Nothing REQUIREs until the limit is back.
  rlimit old{};
  REQUIRE(getrlimit(RLIMIT_NOFILE, &old) == 0);
  rlimit low = old;
  low.rlim_cur = std::min<rlim_t>(old.rlim_cur, 256);
  REQUIRE(setrlimit(RLIMIT_NOFILE, &low) == 0);
  std::vector<int> taken;
  for (int d; (d = dup(client)) >= 0;) taken.push_back(d);
  const bool connected = connect(client, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  const auto cpu = [] {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return std::chrono::seconds(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
           std::chrono::microseconds(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
  };
  const auto cpu0 = cpu();
  std::this_thread::sleep_for(milliseconds(500));
  const auto spent = cpu() - cpu0;
  for (const int d : taken) close(d);
  setrlimit(RLIMIT_NOFILE, &old);

  CHECK(connected);
  // Spinning on poll + accept4 burns the 500 ms; backing off 100 ms at a time, a few syscalls.
  CHECK(spent < milliseconds(100));
  // With descriptors back, the queued connection is served after the back-off.
  timeval tv{3, 0};
  setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  const std::string request = "GET /metrics HTTP/1.0\r\n\r\n";
  CHECK(write(client, request.data(), request.size()) == static_cast<ssize_t>(request.size()));
  CHECK(ReadAll(client).rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
  close(client);
}

}  // namespace
}  // namespace ferry
