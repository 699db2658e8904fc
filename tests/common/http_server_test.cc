// common/http_server.h: requests with and without bodies (length, chunked, 100-continue), keep-
// alive, streamed answers, the refusals (a bad head, one too large, a body too large, too many
// connections), a client that goes away seen by its handler, and a stop during a stream.
#include "common/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "tests/catch.h"

namespace ferry {
namespace {

using namespace std::chrono_literals;

int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return fd;
}

void SendAll(int fd, const std::string& s) { REQUIRE(send(fd, s.data(), s.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(s.size())); }

// Reads until `until` appears in what came (or the server closes, or 5 s pass).
std::string ReadUntil(int fd, const std::string& until) {
  std::string out;
  char buf[4096];
  while (out.find(until) == std::string::npos) {
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

std::string ReadAll(int fd) { return ReadUntil(fd, std::string(1, '\0')); }

// Echoes method, path and body; /stream streams three pieces; /wait streams until the client is gone.
struct Echo {
  std::atomic<bool> saw_gone{false};
  std::atomic<int> served{0};
  void operator()(const HttpRequest& req, HttpResponse& resp) {
    ++served;
    if (req.path == "/stream") {
      resp.StartStream(200, "text/event-stream");
      for (const char* piece : {"data: one\n\n", "data: two\n\n", "data: [DONE]\n\n"}) resp.Write(piece);
      return;
    }
    if (req.path == "/wait") {
      resp.StartStream(200, "text/plain");
      resp.Write("started\n");
      const auto until = std::chrono::steady_clock::now() + 10s;
      while (!resp.ClientGone() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(10ms);
      saw_gone = resp.ClientGone();
      return;
    }
    const std::string* ct = req.Header("content-type");
    resp.Send(200, "text/plain", req.method + " " + req.target + " [" + req.body + "] " + (ct ? *ct : "-"));
  }
};

std::unique_ptr<HttpServer> Start(Echo* echo, HttpServer::Options options = {}) {
  auto s = HttpServer::Start("127.0.0.1", 0, [echo](const HttpRequest& r, HttpResponse& w) { (*echo)(r, w); }, options);
  REQUIRE(s.ok());
  return std::move(*s);
}

TEST_CASE("http: requests on one kept-alive connection with bodies by length and chunks", "[http]") {
  Echo echo;
  auto server = Start(&echo);
  const int fd = Connect(server->port());
  REQUIRE(fd >= 0);
  SendAll(fd, "GET /a?x=1 HTTP/1.1\r\nHost: x\r\n\r\n");
  std::string r = ReadUntil(fd, "-");
  CHECK(r.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
  CHECK(r.find("Content-Length: 15\r\n") != std::string::npos);
  CHECK(r.find("GET /a?x=1 [] -") != std::string::npos);
  SendAll(fd, "POST /b HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: 7\r\n\r\n{\"a\":1}");
  CHECK(ReadUntil(fd, "json").find("POST /b [{\"a\":1}] application/json") != std::string::npos);
  SendAll(fd, "POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n4;ext=1\r\ndefg\r\n0\r\nX-T: 1\r\n\r\n");
  CHECK(ReadUntil(fd, "] -").find("POST /c [abcdefg] -") != std::string::npos);
  // Two requests in one write (pipelined) get two answers, in order.
  SendAll(fd, "GET /1 HTTP/1.1\r\n\r\nGET /2 HTTP/1.1\r\nConnection: close\r\n\r\n");
  r = ReadAll(fd);
  CHECK(r.find("GET /1") < r.find("GET /2"));
  CHECK(r.find("Connection: close") != std::string::npos);
  close(fd);
  CHECK(echo.served == 5);
}

TEST_CASE("http: HEAD gets headers alone and HTTP/1.0 keep-alive is announced and blank lines are skipped",
          "[http]") {
  Echo echo;
  auto server = Start(&echo);
  int fd = Connect(server->port());
  // HEAD: the length of the body a GET would get, no body; the connection goes on.
  SendAll(fd, "HEAD /h HTTP/1.1\r\n\r\n");
  std::string r = ReadUntil(fd, "\r\n\r\n");
  CHECK(r.find("Content-Length: 12\r\n") != std::string::npos);
  // A stray CRLF before the next request line is ignored.
  SendAll(fd, "\r\nGET /after HTTP/1.1\r\nConnection: close\r\n\r\n");
  r = ReadAll(fd);
  CHECK(r.rfind("HTTP/1.1 200", 0) == 0);  // nothing of a HEAD body came before it
  CHECK(r.find("GET /after") != std::string::npos);
  close(fd);
  fd = Connect(server->port());
  SendAll(fd, "GET /a HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
  r = ReadUntil(fd, "GET /a [] -");
  CHECK(r.rfind("HTTP/1.0 200", 0) == 0);
  CHECK(r.find("Connection: keep-alive\r\n") != std::string::npos);
  SendAll(fd, "GET /b HTTP/1.0\r\n\r\n");
  CHECK(ReadAll(fd).find("GET /b [] -") != std::string::npos);
  close(fd);
}

TEST_CASE("http: Expect 100-continue is answered before the body is read", "[http]") {
  Echo echo;
  auto server = Start(&echo);
  const int fd = Connect(server->port());
  SendAll(fd, "POST /e HTTP/1.1\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n");
  CHECK(ReadUntil(fd, "\r\n\r\n") == "HTTP/1.1 100 Continue\r\n\r\n");
  SendAll(fd, "hello");
  CHECK(ReadUntil(fd, "] -").find("POST /e [hello]") != std::string::npos);
  close(fd);
}

TEST_CASE("http: a streamed answer arrives in chunks and HTTP/1.0 gets it until the close", "[http]") {
  Echo echo;
  auto server = Start(&echo);
  int fd = Connect(server->port());
  SendAll(fd, "GET /stream HTTP/1.1\r\n\r\n");
  std::string r = ReadUntil(fd, "0\r\n\r\n");
  CHECK(r.find("Transfer-Encoding: chunked\r\n") != std::string::npos);
  CHECK(r.find("b\r\ndata: one\n\n\r\n") != std::string::npos);
  CHECK(r.find("e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n") != std::string::npos);
  close(fd);
  fd = Connect(server->port());
  SendAll(fd, "GET /stream HTTP/1.0\r\n\r\n");
  r = ReadAll(fd);
  CHECK(r.find("Transfer-Encoding") == std::string::npos);
  CHECK(r.find("\r\n\r\ndata: one\n\ndata: two\n\ndata: [DONE]\n\n") != std::string::npos);
  close(fd);
}

TEST_CASE("http: a bad head is 400 and one too large 431 and a body too large 413", "[http]") {
  Echo echo;
  HttpServer::Options o;
  o.max_body_bytes = 100;
  auto server = Start(&echo, o);
  auto ask = [&](const std::string& request) {
    const int fd = Connect(server->port());
    SendAll(fd, request);
    const std::string r = ReadAll(fd);
    close(fd);
    return r;
  };
  CHECK(ask("NONSENSE\r\n\r\n").rfind("HTTP/1.1 400", 0) == 0);
  CHECK(ask("GET / HTTP/1.1\r\nno colon here\r\n\r\n").rfind("HTTP/1.1 400", 0) == 0);
  CHECK(ask("GET / HTTP/2.0\r\n\r\n").rfind("HTTP/1.1 400", 0) == 0);
  CHECK(ask("GET / HTTP/1.1\r\nX: " + std::string(20000, 'a') + "\r\n\r\n").rfind("HTTP/1.1 431", 0) == 0);
  const std::string big = ask("POST / HTTP/1.1\r\nContent-Length: 101\r\n\r\n" + std::string(101, 'b'));
  CHECK(big.rfind("HTTP/1.1 413", 0) == 0);
  CHECK(big.find("the body is 101 bytes; at most 100") != std::string::npos);
  CHECK(ask("POST / HTTP/1.1\r\nContent-Length: 12x\r\n\r\n").rfind("HTTP/1.1 400", 0) == 0);
  CHECK(ask("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n").rfind("HTTP/1.1 400", 0) == 0);
  CHECK(ask("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n65\r\n" + std::string(101, 'c') + "\r\n0\r\n\r\n")
            .rfind("HTTP/1.1 413", 0) == 0);
  CHECK(echo.served == 0);
  // The server still answers.
  CHECK(ask("GET /fine HTTP/1.0\r\n\r\n").find("GET /fine []") != std::string::npos);
}

TEST_CASE("http: past max_connections a connection is refused with 503 and the others are served", "[http]") {
  Echo echo;
  HttpServer::Options o;
  o.max_connections = 2;
  auto server = Start(&echo, o);
  const int a = Connect(server->port()), b = Connect(server->port());
  std::this_thread::sleep_for(100ms);  // both accepted
  const int c = Connect(server->port());
  CHECK(ReadAll(c).rfind("HTTP/1.1 503", 0) == 0);
  close(c);
  SendAll(a, "GET /a HTTP/1.0\r\n\r\n");
  CHECK(ReadAll(a).find("GET /a") != std::string::npos);
  close(a);
  close(b);
}

TEST_CASE("http: the handler learns its client went away and a stop ends a stream", "[http]") {
  Echo echo;
  auto server = Start(&echo);
  auto start_waiting = [&] {
    const int fd = Connect(server->port());
    SendAll(fd, "GET /wait HTTP/1.1\r\n\r\n");
    CHECK(ReadUntil(fd, "started").find("started") != std::string::npos);
    return fd;
  };
  int fd = start_waiting();
  close(fd);
  const auto until = std::chrono::steady_clock::now() + 5s;
  while (!echo.saw_gone && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(10ms);
  CHECK(echo.saw_gone);
  // A stream in progress when the server stops: the destructor returns (the handler sees its
  // client gone once the socket is shut down).
  echo.saw_gone = false;
  fd = start_waiting();
  const auto t0 = std::chrono::steady_clock::now();
  server.reset();
  CHECK(std::chrono::steady_clock::now() - t0 < 3s);
  CHECK(echo.saw_gone);
  close(fd);
}

TEST_CASE("http: a port taken is refused naming the server", "[http]") {
  Echo echo;
  auto first = Start(&echo);
  auto second = HttpServer::Start("127.0.0.1", first->port(), [](const HttpRequest&, HttpResponse&) {}, {}, "the API");
  REQUIRE(!second.ok());
  CHECK(std::string(second.status().message()).find("cannot serve the API on 127.0.0.1:") != std::string::npos);
  CHECK(!HttpServer::Start("127.0.0.1", 70000, [](const HttpRequest&, HttpResponse&) {}, {}).ok());
}

}  // namespace
}  // namespace ferry
