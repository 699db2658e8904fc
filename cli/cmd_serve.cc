// `ferry serve`: launches ferry-coordinator and N local ferry-worker processes, waits until the
// coordinator reports SERVING, and supervises them: SIGINT/SIGTERM shut all of them down
// cleanly; any process that dies makes serve say which and why, stop the others and exit 1.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cli/client.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "common/options.h"
#include "common/cluster_token.h"
#include "common/net_interface.h"
#include "worker/exit_status.h"

namespace ferry::cli {
namespace {

volatile sig_atomic_t g_signal = 0;
void OnSignal(int sig) { g_signal = sig; }

struct Child {
  std::string name;
  pid_t pid = -1;
  bool exited = false;
  int status = 0;
};

std::string SelfDir() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return ".";
  buf[n] = '\0';
  std::string path(buf);
  return path.substr(0, path.rfind('/'));
}

pid_t Spawn(const std::vector<std::string>& argv) {
  const pid_t pid = fork();
  if (pid != 0) return pid;
  // The child stays in our process group (a terminal ^C reaches everyone) and the kernel
  // sends it SIGTERM if serve itself dies.
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  execv(args[0], args.data());
  fprintf(stderr, "ferry serve: cannot run %s: %s\n", args[0], strerror(errno));
  _exit(127);
}

std::string Describe(int status) {
  if (WIFEXITED(status)) return absl::StrCat("exited with status ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return absl::StrCat("was killed by signal ", WTERMSIG(status), " (", strsignal(WTERMSIG(status)), ")");
  return "stopped";
}

// Reaps whatever exited; returns the children found dead this call.
std::vector<Child*> Reap(std::vector<Child>& children) {
  std::vector<Child*> dead;
  for (Child& c : children) {
    if (c.exited) continue;
    int status = 0;
    if (waitpid(c.pid, &status, WNOHANG) == c.pid) {
      c.exited = true;
      c.status = status;
      dead.push_back(&c);
    }
  }
  return dead;
}

// The processes to blame for a stop, failures first. A worker exits 0 only when the coordinator
// told it to (a refused plan, a shutdown), so when every process seen dead exited cleanly the
// one that failed is about to follow: give the others two seconds to show it.
std::vector<Child*> Culprits(std::vector<Child>& children, std::vector<Child*> dead) {
  auto failed = [](const Child* c) { return !WIFEXITED(c->status) || WEXITSTATUS(c->status) != 0; };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (std::none_of(dead.begin(), dead.end(), failed) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    for (Child* c : Reap(children)) dead.push_back(c);
  }
  std::stable_partition(dead.begin(), dead.end(), failed);
  return dead;
}

// Why a worker's exit status blames another process (worker/exit_status.h), or "".
std::string Blames(const Child& c) {
  if (c.name.rfind("worker", 0) != 0 || !WIFEXITED(c.status)) return "";
  if (WEXITSTATUS(c.status) == worker::kExitPeerTimeout) return ": a peer rank did not take part in a step in time";
  if (WEXITSTATUS(c.status) == worker::kExitLostCoordinator) {
    return ": it lost the coordinator (which exited, or stopped answering its keepalive pings)";
  }
  return "";
}

// Reports the dead; when a worker's exit blames another process, also what the coordinator holds
// as the group's failure (asked at `address` for up to 2 s: it names the rank that hung).
void ReportDead(const std::vector<Child*>& dead, const char* when, const std::string& address) {
  bool blamed = false;
  for (const Child* c : dead) {
    const std::string blame = Blames(*c);
    blamed = blamed || !blame.empty();
    fprintf(stderr, "ferry serve: %s (pid %d) %s%s%s; stopping the others\n", c->name.c_str(), c->pid,
            Describe(c->status).c_str(), blame.c_str(), when);
  }
  if (!blamed) return;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (std::chrono::steady_clock::now() < deadline) {
    auto info = GetServerInfo(address, std::chrono::milliseconds(300));
    if (info.ok() && !info->failure().empty()) {
      fprintf(stderr, "ferry serve: the coordinator says: %s\n", info->failure().c_str());
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  fprintf(stderr, "ferry serve: the coordinator did not say which rank failed (it may be the one that stopped)\n");
}

bool WaitAll(std::vector<Child>& children, std::chrono::milliseconds within) {
  const auto deadline = std::chrono::steady_clock::now() + within;
  while (true) {
    (void)Reap(children);
    bool all = true;
    for (const Child& c : children) all = all && c.exited;
    if (all) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// True when every child ended on its own with status 0, or by the SIGTERM sent to it.
bool AllClean(const std::vector<Child>& children) {
  for (const Child& c : children) {
    const bool clean = (WIFEXITED(c.status) && WEXITSTATUS(c.status) == 0) ||
                       (WIFSIGNALED(c.status) && WTERMSIG(c.status) == SIGTERM);
    if (!clean) return false;
  }
  return true;
}

// SIGTERM to the coordinator first (it tells the workers to exit), then to everyone left;
// SIGKILL whatever is still there after `grace`. children[0] is the coordinator. Returns
// whether everyone stopped cleanly (AllClean).
bool StopAll(std::vector<Child>& children, std::chrono::milliseconds grace) {
  if (!children[0].exited) kill(children[0].pid, SIGTERM);
  if (WaitAll(children, grace / 2)) return AllClean(children);
  for (Child& c : children) {
    if (c.exited) continue;
    kill(c.pid, SIGTERM);
    kill(c.pid, SIGCONT);  // a stopped process (SIGSTOP, a debugger's) takes the SIGTERM only once it runs
  }
  if (WaitAll(children, grace / 2)) return AllClean(children);
  for (Child& c : children) {
    if (!c.exited) {
      fprintf(stderr, "ferry serve: %s (pid %d) did not stop in time; killing it\n", c.name.c_str(), c.pid);
      kill(c.pid, SIGKILL);
      waitpid(c.pid, &c.status, 0);
      c.exited = true;
    }
  }
  return false;
}

}  // namespace

int RunServe() {
  std::string model = absl::GetFlag(FLAGS_model);
  // Workers resolve the path the coordinator hands them from their own working directory.
  if (!model.empty() && model[0] != '/') {
    char cwd[4096];
    if (getcwd(cwd, sizeof(cwd)) != nullptr) model = std::string(cwd) + "/" + model;
  }
  const int64_t ranks = absl::GetFlag(FLAGS_ranks);
  if (model.empty() || ranks < 1) {
    fprintf(stderr, "ferry serve: --model DIR and --ranks >= 1 are required\n");
    return 2;
  }
  if (!(absl::GetFlag(FLAGS_step_timeout) > 0 && absl::GetFlag(FLAGS_step_timeout) <= 86400) ||
      !(absl::GetFlag(FLAGS_keepalive_s) >= 0.1 && absl::GetFlag(FLAGS_keepalive_s) <= 3600)) {
    fprintf(stderr, "ferry serve: need --step-timeout in (0, 86400] s (got %g) and --keepalive-s in [0.1, 3600] (got %g)\n",
            absl::GetFlag(FLAGS_step_timeout), absl::GetFlag(FLAGS_keepalive_s));
    return 2;
  }
  if (absl::Status st = CheckDataPlane(absl::GetFlag(FLAGS_dataplane), absl::GetFlag(FLAGS_device)); !st.ok()) {
    fprintf(stderr, "ferry serve: %s\n", std::string(st.message()).c_str());
    return 2;
  }
  // --gpus: rank r's GPU and how many ranks share it (their free memory is split among them).
  std::vector<int> gpu_of(static_cast<size_t>(ranks), -1), share_of(static_cast<size_t>(ranks), 0);
  if (const std::string gpus = absl::GetFlag(FLAGS_gpus); !gpus.empty()) {
    std::vector<int> list;
    for (absl::string_view part : absl::StrSplit(gpus, ',')) {
      int g = -1;
      if (!absl::SimpleAtoi(part, &g) || g < 0) {
        fprintf(stderr, "ferry serve: --gpus %s: need GPU indices >= 0, comma-separated\n", gpus.c_str());
        return 2;
      }
      list.push_back(g);
    }
    for (int64_t r = 0; r < ranks; ++r) gpu_of[static_cast<size_t>(r)] = list[static_cast<size_t>(r) % list.size()];
    for (int64_t r = 0; r < ranks; ++r) {
      share_of[static_cast<size_t>(r)] =
          static_cast<int>(std::count(gpu_of.begin(), gpu_of.end(), gpu_of[static_cast<size_t>(r)]));
    }
  }
  const int64_t parallel = absl::GetFlag(FLAGS_parallel) > 0 ? absl::GetFlag(FLAGS_parallel) : 16;
  const std::string host = absl::GetFlag(FLAGS_host);
  const std::string address = absl::StrCat(host, ":", absl::GetFlag(FLAGS_port));
  const int control_port = absl::GetFlag(FLAGS_control_port) > 0 ? absl::GetFlag(FLAGS_control_port)
                                                                  : absl::GetFlag(FLAGS_port) + 1;
  const std::string control_address = absl::StrCat(host, ":", control_port);
  const std::string dir = SelfDir();

  signal(SIGINT, OnSignal);
  signal(SIGTERM, OnSignal);
  // A fresh secret for this deployment's control plane, so that no API client can pose as a rank:
  // the children inherit it in their environment (never argv, which any local user reads).
  std::random_device rd;
  const std::string token = absl::StrCat(absl::Hex(static_cast<uint64_t>(rd()) << 32 | rd(), absl::kZeroPad16),
                                         absl::Hex(static_cast<uint64_t>(rd()) << 32 | rd(), absl::kZeroPad16));
  setenv(kClusterTokenEnv, token.c_str(), /*overwrite=*/1);
  // The workers' data plane only on the interface the listeners bind (UCX takes every interface
  // otherwise); a UCX_NET_DEVICES the user set wins.
  if (getenv("UCX_NET_DEVICES") == nullptr) {
    if (absl::StatusOr<std::string> ifc = InterfaceOfAddress(host); ifc.ok()) {
      setenv("UCX_NET_DEVICES", ifc->c_str(), /*overwrite=*/1);
    } else {
      fprintf(stderr, "ferry serve: the data plane may use every interface (%s)\n",
              std::string(ifc.status().message()).c_str());
    }
  }
  std::vector<Child> children;
  // The coordinator and the workers get every option of their tables as serve holds them
  // (coordinator/options.h, worker/options.h, common/options.h), and what serve decides itself.
  std::vector<std::string> coordinator_args = {dir + "/ferry-coordinator", "--model=" + model,
                                               absl::StrCat("--ranks=", ranks)};
  for (std::string& a : ForwardedOptions({FERRY_COORDINATOR_OPTIONS(FERRY_OPTION_NAME) FERRY_PROCESS_OPTIONS(FERRY_OPTION_NAME)})) {
    // These two serve settles itself (0 means a default here).
    if (a.rfind("--control_port=", 0) == 0) a = absl::StrCat("--control_port=", control_port);
    if (a.rfind("--parallel=", 0) == 0) a = absl::StrCat("--parallel=", parallel);
    coordinator_args.push_back(std::move(a));
  }
  children.push_back(Child{"the coordinator", Spawn(coordinator_args)});
  const std::vector<std::string> worker_options =
      ForwardedOptions({FERRY_WORKER_OPTIONS(FERRY_OPTION_NAME) FERRY_PROCESS_OPTIONS(FERRY_OPTION_NAME)});
  for (int64_t r = 0; r < ranks; ++r) {
    std::vector<std::string> worker_args = {dir + "/ferry-worker", "--coordinator=" + control_address,
                                            absl::StrCat("--rank=", r), absl::StrCat("--world=", ranks),
                                            "--metrics_host=" + host,
                                            absl::StrCat("--gpu=", gpu_of[static_cast<size_t>(r)]),
                                            absl::StrCat("--gpu_share=", share_of[static_cast<size_t>(r)]),
                                            // Rank r's own /metrics on the port after the coordinator's (+1 + r).
                                            absl::StrCat("--metrics_port=", absl::GetFlag(FLAGS_metrics_port) > 0
                                                                                ? absl::GetFlag(FLAGS_metrics_port) + 1 + r
                                                                                : 0)};
    worker_args.insert(worker_args.end(), worker_options.begin(), worker_options.end());
    children.push_back(Child{absl::StrCat("worker rank ", r), Spawn(worker_args)});
  }

  // Up: poll the coordinator's health until it serves, a process dies, or time runs out.
  const auto up_deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int64_t>(absl::GetFlag(FLAGS_ready_timeout_s) * 1000));
  bool serving = false;
  while (!serving && g_signal == 0) {
    if (std::vector<Child*> dead = Reap(children); !dead.empty()) {
      ReportDead(Culprits(children, dead), " while starting", address);
      StopAll(children, std::chrono::seconds(10));
      return 1;
    }
    if (std::chrono::steady_clock::now() > up_deadline) {
      fprintf(stderr, "ferry serve: not serving after %.0f s; stopping\n", absl::GetFlag(FLAGS_ready_timeout_s));
      StopAll(children, std::chrono::seconds(10));
      return 1;
    }
    auto st = CheckServing(address, std::chrono::milliseconds(200));
    serving = st.ok() && *st;
    if (!serving) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (serving) {
    fprintf(stderr, "ferry serve: serving %s on %s with %lld rank(s)%s%s\n", model.c_str(), address.c_str(),
            static_cast<long long>(ranks),
            absl::GetFlag(FLAGS_http_port) > 0
                ? absl::StrCat("; OpenAI API on http://", host, ":", absl::GetFlag(FLAGS_http_port), "/v1").c_str()
                : "",
            absl::GetFlag(FLAGS_metrics_port) > 0
                ? absl::StrCat("; metrics on http://", host, ":", absl::GetFlag(FLAGS_metrics_port), "/metrics").c_str()
                : "");
  }
  // Supervise: a child's death, or the coordinator's health turning NOT_SERVING (a rank it holds
  // dead whose process still lives: stopped, hung or cut off), stops the deployment.
  auto next_health = std::chrono::steady_clock::now();
  while (g_signal == 0) {
    if (std::vector<Child*> dead = Reap(children); !dead.empty()) {
      ReportDead(Culprits(children, dead), "", address);
      StopAll(children, std::chrono::seconds(10));
      return 1;
    }
    if (std::chrono::steady_clock::now() >= next_health) {
      next_health = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
      if (auto st = CheckServing(address, std::chrono::milliseconds(300)); st.ok() && !*st) {
        auto info = GetServerInfo(address, std::chrono::milliseconds(500));
        fprintf(stderr, "ferry serve: the coordinator stopped serving: %s; stopping everyone\n",
                info.ok() && !info->failure().empty() ? info->failure().c_str() : "it did not say why");
        StopAll(children, std::chrono::seconds(10));
        return 1;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  fprintf(stderr, "ferry serve: %s: shutting down\n", strsignal(g_signal));
  if (!StopAll(children, std::chrono::seconds(15))) {
    for (const Child& c : children) {
      fprintf(stderr, "ferry serve: %s (pid %d) %s\n", c.name.c_str(), c.pid, Describe(c.status).c_str());
    }
    return 1;
  }
  return 0;
}

}  // namespace ferry::cli
