#include "tests/testing/server_process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "cli/client.h"

namespace ferry::testing {

int FreePort() { return FreePortRun(1); }

int FreePortRun(int n) {
  // Below Linux's ephemeral range (32768..60999), where the kernel hands out the ports that
  // bind(0) callers (UCX's listeners among them) get: a run taken from there collides with them.
  static std::mt19937 rng(static_cast<uint32_t>(getpid()) * 2654435761u);
  for (int attempt = 0; attempt < 1000; ++attempt) {
    const int first = 20000 + static_cast<int>(rng() % (12000 - static_cast<uint32_t>(n)));
    bool all = true;
    for (int k = 0; k < n && all; ++k) {
      int fd = socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      addr.sin_port = htons(static_cast<uint16_t>(first + k));
      all = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
      close(fd);
    }
    if (all) return first;
  }
  throw std::runtime_error("no run of free ports below 32000");
}

std::string TempLog(const std::string& stem) {
  std::string tmpl = "/tmp/" + stem + "-XXXXXX.log";
  const int fd = mkstemps(tmpl.data(), 4);
  if (fd >= 0) close(fd);
  return tmpl;
}

std::string BinDir() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) throw std::runtime_error("readlink /proc/self/exe failed");
  buf[n] = '\0';
  std::string p(buf);
  return p.substr(0, p.rfind('/'));
}

Process::Process(const std::vector<std::string>& argv, const std::string& log_path) : log_path_(log_path) {
  pid_ = fork();
  if (pid_ == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    setpgid(0, 0);  // its own group: a test's signals do not reach the test runner
    int fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, 2);
      dup2(fd, 1);
    }
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
}

Process::~Process() {
  if (pid_ <= 0) return;
  kill(-pid_, SIGKILL);  // its whole process group: what serve started too
  if (!reaped_) {
    int status;
    waitpid(pid_, &status, 0);
  }
}

void Process::Signal(int sig) {
  if (!reaped_) kill(pid_, sig);
}

bool Process::Wait(std::chrono::milliseconds timeout, int* status) {
  if (reaped_) return true;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {  // checks at least once, so a zero timeout polls
    if (waitpid(pid_, status, WNOHANG) == pid_) {
      reaped_ = true;
      return true;
    }
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

std::string Process::Log() const {
  std::ifstream in(log_path_);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Server::Server(const std::string& model_dir, int ranks, const std::vector<std::string>& extra) {
  // One run: the API port, the control port, then the coordinator's metrics port and each
  // worker's (+1 + rank), the OpenAI API's last (two separate picks could hand out the same
  // still-unbound port).
  const int port = FreePortRun(8);
  metrics_port_ = port + 2;
  http_port_ = port + 7;
  address_ = "127.0.0.1:" + std::to_string(port);
  log_ = TempLog("ferry-serve");
  std::vector<std::string> argv = {BinDir() + "/ferry", "serve", "--model", model_dir, "--ranks", std::to_string(ranks),
                                   "--port", std::to_string(port), "--control-port", std::to_string(port + 1),
                                   "--metrics-port", std::to_string(metrics_port_),
                                   "--http-port", std::to_string(port + 7)};
  argv.insert(argv.end(), extra.begin(), extra.end());
  proc_ = std::make_unique<Process>(argv, log_);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    auto st = cli::CheckServing(address_, std::chrono::milliseconds(200));
    if (st.ok() && *st) {
      serving_ = true;
      return;
    }
    int status;
    if (proc_->Wait(std::chrono::milliseconds(0), &status)) break;  // died while starting
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  // Not serving: say why where the test's report shows it.
  fprintf(stderr, "ferry serve on %s did not come up; its log:\n%s\n", address_.c_str(), proc_->Log().c_str());
}

pid_t Server::CoordinatorPid() const {
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(e.path() / "stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    // pid (comm) state ppid ...: comm is cut to 15 bytes and may hold spaces, so parse after ')'.
    const size_t open = line.find('('), close = line.rfind(')');
    if (open == std::string::npos || close == std::string::npos) continue;
    const std::string comm = line.substr(open + 1, close - open - 1);
    std::istringstream rest(line.substr(close + 1));
    std::string state;
    pid_t ppid = -1;
    rest >> state >> ppid;
    if (ppid == proc_->pid() && comm.rfind("ferry-coordinat", 0) == 0) return static_cast<pid_t>(std::stoi(name));
  }
  return -1;
}

Server::~Server() {
  proc_->Signal(SIGTERM);
  int status;
  proc_->Wait(std::chrono::seconds(10), &status);
  proc_.reset();  // SIGKILLs the group if anything is left
  std::remove(log_.c_str());
}

int ConnectLoopback(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

std::string ScrapeMetrics(int port) { return HttpGet(port, "/metrics"); }

std::string HttpGet(int port, const std::string& path) {
  // Something else on the port must not hang the test: give up after 10 s without an answer.
  const HttpAnswer a = HttpCall(port, "GET", path, "", {}, std::chrono::seconds(10));
  return a.status == 0 ? "" : a.body;
}

HttpAnswer HttpCall(int port, const std::string& method, const std::string& path, const std::string& body,
                    const std::vector<std::string>& headers, std::chrono::seconds timeout) {
  HttpAnswer a;
  const int fd = ConnectLoopback(port);
  if (fd < 0) return a;
  timeval tv{static_cast<time_t>(timeout.count()), 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  std::string req = method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n";
  for (const std::string& h : headers) req += h + "\r\n";
  if (!body.empty()) req += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  req += "\r\n" + body;
  if (write(fd, req.data(), req.size()) != static_cast<ssize_t>(req.size())) {
    close(fd);
    return a;
  }
  std::string out;
  char buf[65536];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
  close(fd);
  const size_t end = out.find("\r\n\r\n");
  if (end == std::string::npos || out.size() < 12) return a;
  a.status = std::atoi(out.substr(9, 3).c_str());
  a.head = out.substr(0, end);
  std::string rest = out.substr(end + 4);
  if (a.head.find("Transfer-Encoding: chunked") == std::string::npos) {
    a.body = rest;
    return a;
  }
  for (size_t at = 0;;) {
    const size_t eol = rest.find("\r\n", at);
    if (eol == std::string::npos) break;
    const size_t size = std::stoul(rest.substr(at, eol - at), nullptr, 16);
    if (size == 0) break;
    a.body += rest.substr(eol + 2, size);
    at = eol + 2 + size + 2;
  }
  return a;
}

std::vector<std::string> SseData(const std::string& body) {
  std::vector<std::string> out;
  std::istringstream in(body);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("data: ", 0) == 0) out.push_back(line.substr(6));
  }
  return out;
}

double MetricValue(const std::string& body, const std::string& series) {
  std::istringstream in(body);
  std::string line;
  while (std::getline(in, line)) {
    // The model_name label every coordinator series carries is not part of `series`.
    const size_t label = line.find("model_name=\"");
    if (label != std::string::npos) {
      const size_t end = line.find('"', label + 12);
      size_t from = label, to = end + 1;
      if (to < line.size() && line[to] == ',') {
        ++to;  // model_name="x",rank="1" -> rank="1"
      } else if (from > 0 && line[from - 1] == ',') {
        --from;  // a="b",model_name="x" -> a="b"
      } else if (from > 0 && line[from - 1] == '{' && to < line.size() && line[to] == '}') {
        --from;  // {model_name="x"} -> nothing
        ++to;
      }
      line.erase(from, to - from);
    }
    if (line.rfind(series + " ", 0) == 0) return std::stod(line.substr(series.size() + 1));
  }
  return -1;
}

}  // namespace ferry::testing
