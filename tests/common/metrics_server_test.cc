// common/metrics_server.h: what a scraper sees (the registry's text, 404, 405, 400), the port
// it reports, a port already taken refused and left closed, and a stop that returns.
#include "common/metrics_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "prometheus/counter.h"
#include "prometheus/registry.h"
#include "tests/catch.h"

namespace ferry {
namespace {

// Sends `request` to 127.0.0.1:port and returns everything the server wrote back ("" when the
// connection is refused).
std::string Ask(int port, const std::string& request) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return "";
  }
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  REQUIRE(write(fd, request.data(), request.size()) == static_cast<ssize_t>(request.size()));
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
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

TEST_CASE("the metrics server refuses a port that is taken, and bad arguments", "[metrics_server]") {
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

}  // namespace
}  // namespace ferry
