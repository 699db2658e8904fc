// Who may join a deployment and where its processes listen: the cluster token (from a private
// file, required off loopback, never on a command line), a port another server holds, every
// listening socket on loopback, and the options serve hands its children (real coordinator and
// worker processes on loopback).
#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cli/client.h"
#include "tests/catch.h"
#include "tests/integration/serve_client.h"
#include "tests/testing/files.h"
#include "tests/testing/server_process.h"

namespace ferry {
namespace {

using ferry::testing::Server;
using namespace ferry::serve_test;  // NOLINT: the tests' client helpers

// A token file with `mode`, holding `token`.
std::string TokenFile(const testing::TempDir& dir, const std::string& name, const std::string& token, mode_t mode) {
  const std::string path = dir.File(name);
  testing::WriteFile(path, token + "\n");
  REQUIRE(chmod(path.c_str(), mode) == 0);
  return path;
}

TEST_CASE("coordinator: a worker without the cluster token cannot register", "[serve]") {
  const int port = testing::FreePortRun(2);
  const std::string address = "127.0.0.1:" + std::to_string(port);
  const std::string control = "127.0.0.1:" + std::to_string(port + 1);
  const std::string bin = testing::BinDir();
  testing::TempDir dir;
  const std::string secret = TokenFile(dir, "secret", "s3cret", 0600), guess = TokenFile(dir, "guess", "guess", 0600);
  const std::string coord_log = testing::TempLog("ferry-coord"), bad_log = testing::TempLog("ferry-wbad"),
                    good_log = testing::TempLog("ferry-wgood");
  testing::Process coord({bin + "/ferry-coordinator", "--model", kDsa, "--ranks", "1", "--port", std::to_string(port),
                          "--control-port", std::to_string(port + 1), "--metrics-port", "0", "--http-port", "0",
                          "--token-file", secret},
                         coord_log);
  testing::Process bad({bin + "/ferry-worker", "--coordinator", control, "--rank", "0", "--token-file", guess}, bad_log);
  int status = 0;
  REQUIRE(bad.Wait(std::chrono::seconds(20), &status));
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 1);
  CHECK(bad.Log().find("cluster token") != std::string::npos);
  testing::Process good({bin + "/ferry-worker", "--coordinator", control, "--rank", "0", "--token-file", secret},
                        good_log);
  CHECK(Eventually([&] { auto s = cli::CheckServing(address, std::chrono::milliseconds(200)); return s.ok() && *s; },
                   30000));
  CHECK(coord.Log().find("no or a wrong cluster token") != std::string::npos);  // the refusal is logged
  coord.Signal(SIGTERM);
  CHECK(coord.Wait(std::chrono::seconds(10), &status));
  CHECK(good.Wait(std::chrono::seconds(10), &status));
  CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  for (const std::string& f : {coord_log, bad_log, good_log}) std::remove(f.c_str());
}

TEST_CASE("coordinator: the cluster token comes from a private file - and is required off loopback", "[serve]") {
  const std::string bin = testing::BinDir();
  testing::TempDir dir;
  const std::string shared = TokenFile(dir, "shared", "s3cret", 0644);
  auto refused = [&](std::vector<std::string> argv, const std::string& why) {
    const std::string log = testing::TempLog("ferry-refused");
    testing::Process p(argv, log);
    int status = 0;
    REQUIRE(p.Wait(std::chrono::seconds(20), &status));
    INFO(p.Log());
    CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 2));
    CHECK(p.Log().find(why) != std::string::npos);
    std::remove(log.c_str());
  };
  refused({bin + "/ferry-coordinator", "--model", kDsa, "--port", std::to_string(testing::FreePort()), "--metrics-port",
           "0", "--token-file", shared},
          "has mode 0644: group or others can read or write it; chmod 600 it");
  refused({bin + "/ferry-worker", "--coordinator", "127.0.0.1:1", "--token-file", shared}, "has mode 0644");
  refused({bin + "/ferry-coordinator", "--model", kDsa, "--host", "0.0.0.0", "--port",
           std::to_string(testing::FreePort()), "--metrics-port", "0"},
          "--host 0.0.0.0 listens beyond this machine: give the cluster token");
  refused({bin + "/ferry-worker", "--coordinator", "192.0.2.1:50052"}, "is beyond this machine: give the cluster token");
  refused({bin + "/ferry-worker", "--coordinator", "127.0.0.1:1", "--metrics-host", "0.0.0.0", "--metrics-port", "9"},
          "is beyond this machine: give the cluster token");
}

TEST_CASE("coordinator: a port another server holds is refused - never shared", "[serve]") {
  Server server(kDsa, 1);
  REQUIRE(server.serving());
  const std::string port = server.address().substr(server.address().rfind(':') + 1);
  const std::string log = testing::TempLog("ferry-second");
  testing::Process second({testing::BinDir() + "/ferry-coordinator", "--model", kDsa, "--port", port,
                           "--control-port", std::to_string(testing::FreePort()), "--metrics-port", "0", "--http-port",
                           "0"},
                          log);
  int status = 0;
  REQUIRE(second.Wait(std::chrono::seconds(20), &status));
  INFO(second.Log());
  CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 2));
  CHECK(second.Log().find("cannot listen on 127.0.0.1:" + port) != std::string::npos);
  // Its API port free but its control port taken: it exits the same way, naming the control
  // address (after shutting down the API server it had started).
  const std::string third_log = testing::TempLog("ferry-third");
  testing::Process third({testing::BinDir() + "/ferry-coordinator", "--model", kDsa, "--port",
                          std::to_string(testing::FreePort()), "--control-port", port, "--metrics-port", "0",
                          "--http-port", "0"},
                         third_log);
  status = 0;
  REQUIRE(third.Wait(std::chrono::seconds(20), &status));
  INFO(third.Log());
  CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 2));
  CHECK(third.Log().find("cannot listen on 127.0.0.1:" + port + " for the control service") != std::string::npos);
  std::remove(third_log.c_str());
  // The first still answers for its own ranks.
  auto info = cli::GetServerInfo(server.address());
  REQUIRE(info.ok());
  CHECK(info->ranks(0).pid() > 0);
  std::remove(log.c_str());
}

TEST_CASE("serve: the cluster token never appears on a command line", "[serve]") {
  Server server(kDsa, 2);
  REQUIRE(server.serving());
  auto info = cli::GetServerInfo(server.address());
  REQUIRE(info.ok());
  std::vector<pid_t> pids = {server.process().pid(), server.CoordinatorPid()};
  for (const auto& r : info->ranks()) pids.push_back(static_cast<pid_t>(r.pid()));
  auto read = [](const std::string& path) {
    std::ifstream in(path);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  // The children got it in their environment (which only their user can read).
  const std::string env = read("/proc/" + std::to_string(server.CoordinatorPid()) + "/environ");
  const size_t at = env.find("FERRY_CLUSTER_TOKEN=");
  REQUIRE(at != std::string::npos);
  const std::string token = env.substr(at + 20, env.find('\0', at) - at - 20);
  REQUIRE(token.size() == 32);
  for (pid_t pid : pids) {
    const std::string args = read("/proc/" + std::to_string(pid) + "/cmdline");
    INFO("pid " << pid);
    CHECK_FALSE(args.empty());
    CHECK(args.find(token) == std::string::npos);
    CHECK(args.find("cluster") == std::string::npos);
  }
}

TEST_CASE("serve: every option of the coordinator's and the workers' tables reaches them as given", "[serve]") {
  Server server(kDsa, 2, {"--connect-timeout-s", "17", "--ready-timeout-s", "55.5", "--prompt-cache-gib", "0.5",
                          "--carry-min-tokens", "999", "--served-model-name", "tiny"});
  REQUIRE(server.serving());
  auto info = cli::GetServerInfo(server.address());
  REQUIRE(info.ok());
  auto args_of = [](pid_t pid) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/cmdline");
    std::string a((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::replace(a.begin(), a.end(), '\0', ' ');
    return a;
  };
  const std::string coordinator = args_of(server.CoordinatorPid());
  INFO(coordinator);
  for (const char* want : {"--ready_timeout_s=55.5", "--prompt_cache_gib=0.5", "--carry_min_tokens=999",
                           "--served_model_name=tiny", "--http_port=", "--keepalive_s=10"}) {
    CHECK(coordinator.find(want) != std::string::npos);
  }
  for (const auto& r : info->ranks()) {
    const std::string worker = args_of(static_cast<pid_t>(r.pid()));
    INFO(worker);
    CHECK(worker.find("--connect_timeout_s=17") != std::string::npos);
    CHECK(worker.find("--device=cpu") != std::string::npos);
    CHECK(worker.find("--step_timeout=60") != std::string::npos);
  }
}

// The TCP sockets process `pid` listens on, as "address:port" in /proc/net/tcp's hex (IPv4) and
// tcp6 notation: the LISTEN (0A) entries whose inode is one of the process's open sockets.
std::vector<std::string> ListeningSockets(pid_t pid) {
  std::set<std::string> inodes;
  const std::string fd_dir = "/proc/" + std::to_string(pid) + "/fd";
  if (DIR* d = opendir(fd_dir.c_str())) {
    while (dirent* e = readdir(d)) {
      char target[256];
      const ssize_t n = readlink((fd_dir + "/" + e->d_name).c_str(), target, sizeof(target) - 1);
      if (n <= 0) continue;
      const std::string t(target, static_cast<size_t>(n));
      if (t.rfind("socket:[", 0) == 0) inodes.insert(t.substr(8, t.size() - 9));
    }
    closedir(d);
  }
  std::vector<std::string> out;
  for (const char* table : {"/net/tcp", "/net/tcp6"}) {
    std::ifstream in("/proc/" + std::to_string(pid) + table);
    std::string line;
    std::getline(in, line);  // the header
    while (std::getline(in, line)) {
      std::istringstream f(line);
      std::string slot, local, remote, state, queues, timer, retr, uid, timeout, inode;
      f >> slot >> local >> remote >> state >> queues >> timer >> retr >> uid >> timeout >> inode;
      if (state == "0A" && inodes.count(inode) > 0) out.push_back(local);
    }
  }
  return out;
}

TEST_CASE("serve --host 127.0.0.1: no process listens beyond loopback - the workers' data plane included",
          "[serve]") {
  Server server(kDsa, 2);
  REQUIRE(server.serving());
  auto info = cli::GetServerInfo(server.address());
  REQUIRE(info.ok());
  std::vector<pid_t> pids = {server.CoordinatorPid()};
  for (const auto& r : info->ranks()) pids.push_back(static_cast<pid_t>(r.pid()));
  int workers_listening = 0;
  for (pid_t pid : pids) {
    const std::vector<std::string> sockets = ListeningSockets(pid);
    INFO("pid " << pid);
    CHECK_FALSE(sockets.empty());
    for (const std::string& s : sockets) {
      INFO(s);
      // 0100007F = 127.0.0.1 in /proc/net/tcp's little-endian hex; in tcp6, ::1 and
      // ::ffff:127.0.0.1 (gRPC binds 127.0.0.1 on a dual-stack socket).
      const std::string addr = s.substr(0, s.find(':'));
      CHECK((addr == "0100007F" || addr == "00000000000000000000000001000000" ||
             addr == "0000000000000000FFFF00000100007F"));
    }
    workers_listening += pid != server.CoordinatorPid() && !sockets.empty();
  }
  CHECK(workers_listening == 2);  // each worker's data plane and /metrics listen, on loopback only
}

}  // namespace
}  // namespace ferry
