// Real Ferry processes for integration tests: `ferry serve` (or the daemons directly) on
// loopback ports, a /metrics scrape, and cleanup that never leaves a process behind.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace ferry::testing {

// A loopback TCP port that was free a moment ago, below the kernel's ephemeral range (as
// FreePortRun(1)): a port from bind(0) is one the kernel may hand to the next bind(0) caller (the
// workers' UCX listeners) before the server binds it.
int FreePort();
// The first of n consecutive ports free now, below the kernel's ephemeral range.
int FreePortRun(int n);
// A fresh log file name under /tmp (the file exists, empty).
std::string TempLog(const std::string& stem);

// The directory holding ferry, ferry-coordinator and ferry-worker.
std::string BinDir();

// A child process with its stderr captured to a file.
class Process {
 public:
  Process(const std::vector<std::string>& argv, const std::string& log_path);
  ~Process();  // SIGKILL if still running, then reap
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  pid_t pid() const { return pid_; }
  // Sends `sig`.
  void Signal(int sig);
  // Waits up to `timeout` for the exit; true with the wait status in *status when it exited.
  bool Wait(std::chrono::milliseconds timeout, int* status);
  std::string Log() const;

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
  std::string log_path_;
};

// `ferry serve --model dir --ranks n` on free ports, started and waited for (SERVING).
class Server {
 public:
  Server(const std::string& model_dir, int ranks, const std::vector<std::string>& extra = {});
  ~Server();  // SIGTERM, then SIGKILL after 10 s

  const std::string& address() const { return address_; }
  int metrics_port() const { return metrics_port_; }
  // The OpenAI-compatible API's port (ferry serve --http-port).
  int http_port() const { return http_port_; }
  Process& process() { return *proc_; }
  bool serving() const { return serving_; }
  // The pid of serve's ferry-coordinator child (found in /proc), or -1.
  pid_t CoordinatorPid() const;

 private:
  std::string address_;
  int metrics_port_ = 0;
  int http_port_ = 0;
  std::string log_;
  std::unique_ptr<Process> proc_;
  bool serving_ = false;
};

// A TCP connection to 127.0.0.1:port (the fd), or -1.
int ConnectLoopback(int port);
// GET http://127.0.0.1:port<path>; the body, or "" on failure (10 s without an answer included).
std::string HttpGet(int port, const std::string& path);
struct HttpAnswer {
  int status = 0;  // 0: no answer
  std::string head;
  std::string body;  // de-chunked
};
// One HTTP/1.1 request to 127.0.0.1:port (Connection: close; `headers` as "Name: value" lines),
// read to the server's close (giving up after `timeout` without a byte).
HttpAnswer HttpCall(int port, const std::string& method, const std::string& path, const std::string& body = "",
                    const std::vector<std::string>& headers = {}, std::chrono::seconds timeout = std::chrono::seconds(60));
// The `data:` payloads of a server-sent event stream, in order.
std::vector<std::string> SseData(const std::string& body);
// HttpGet(port, "/metrics").
std::string ScrapeMetrics(int port);
// The value of an exposition line "name{labels} value" (labels exactly as written, or none, the
// model_name label every coordinator series carries left out); -1 when absent.
double MetricValue(const std::string& body, const std::string& series);

}  // namespace ferry::testing
