// Runs a UCX group as real processes on loopback, for the data plane's tests.
//
// RunUcxRanks(world, body) forks `world` children of the test process. The parent is the
// bootstrap, as the control plane is in the real system: each child creates its UcxDataPlane and
// sends its worker address up a socketpair; the parent sends every child the full list; each
// child connects, runs `body`, and reports (status, payload bytes, seconds) back. The parent then
// releases all children together (so no rank shuts down while another still runs its body),
// they destroy their data plane and _exit(). The parent reaps every child before returning,
// killing whatever is still running at `limit`; a guard does the same if the parent unwinds.
//
// Children never return into the test framework: every path ends in _exit(). UCX is only ever
// initialised in the children (UCX does not survive fork()), and the parent starts no threads.
#pragma once

#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "dataplane/ucx_dataplane.h"

namespace ferry::dataplane::testing {

struct RankReport {
  bool reported = false;  // the child sent a report (false: it died or exited first)
  absl::Status status;    // what the body returned (or why setup failed)
  std::string payload;    // what the body wrote
  double seconds = 0;     // time spent in the body
  int exit_code = -1;     // exit status; 128 + signal when killed by a signal
};

using RankBody = std::function<absl::Status(UcxDataPlane& dp, std::string* payload)>;

namespace internal {

inline bool WriteAll(int fd, const void* data, size_t size) {
  const auto* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = ::send(fd, p, size, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

inline bool ReadAll(int fd, void* data, size_t size) {
  auto* p = static_cast<char*>(data);
  while (size > 0) {
    ssize_t n = ::read(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

inline void AppendU64(std::string& out, uint64_t v) { out.append(reinterpret_cast<char*>(&v), 8); }
inline void AppendBlob(std::string& out, const std::string& s) {
  AppendU64(out, s.size());
  out += s;
}

// A frame on the wire: 8-byte length, then the bytes; the first byte names the kind.
inline bool SendFrame(int fd, char kind, const std::string& body) {
  std::string frame;
  AppendU64(frame, body.size() + 1);
  frame += kind;
  frame += body;
  return WriteAll(fd, frame.data(), frame.size());
}

inline bool ReadBlob(const std::string& in, size_t& pos, std::string* out) {
  uint64_t n = 0;
  if (pos + 8 > in.size()) return false;
  std::memcpy(&n, in.data() + pos, 8);
  pos += 8;
  if (pos + n > in.size()) return false;
  out->assign(in, pos, n);
  pos += n;
  return true;
}

// The child's side; never returns.
[[noreturn]] inline void ChildMain(int fd, int rank, int world, const RankBody& body, uint64_t nonce) {
  auto report = [&](const absl::Status& st, const std::string& payload, double seconds) {
    std::string r;
    AppendU64(r, static_cast<uint64_t>(st.code()));
    AppendBlob(r, std::string(st.message()));
    AppendBlob(r, payload);
    AppendBlob(r, std::string(reinterpret_cast<const char*>(&seconds), sizeof(seconds)));
    SendFrame(fd, 'R', r);
  };
  try {
    auto created = UcxDataPlane::Create(rank, world);
    if (!created.ok()) {
      report(created.status(), "", 0);
      _exit(1);
    }
    std::unique_ptr<UcxDataPlane> dp = std::move(created).value();
    if (!SendFrame(fd, 'A', dp->address())) _exit(2);
    uint64_t len = 0;
    if (!ReadAll(fd, &len, 8)) _exit(2);
    std::string list(len, '\0');
    if (!ReadAll(fd, list.data(), len)) _exit(2);
    std::vector<std::string> addresses(world);
    size_t pos = 0;
    for (int r = 0; r < world; ++r) {
      if (!ReadBlob(list, pos, &addresses[r])) _exit(2);
    }
    absl::Status st = dp->Connect(addresses, std::chrono::seconds(10), nonce);
    std::string payload;
    double seconds = 0;
    if (st.ok()) {
      const auto t0 = std::chrono::steady_clock::now();
      st = body(*dp, &payload);
      seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    report(st, payload, seconds);
    char go = 0;
    ReadAll(fd, &go, 1);  // the parent's release (or EOF when it is gone)
    dp.reset();           // clean shutdown: close endpoints, destroy worker and context
    _exit(0);
  } catch (...) {
    _exit(3);
  }
}

// Kills and reaps the children still listed, whatever path the parent leaves by.
struct ChildGuard {
  std::vector<pid_t> pids;  // -1 once reaped
  ~ChildGuard() {
    for (size_t i = 0; i < pids.size(); ++i) {
      if (pids[i] <= 0) continue;
      ::kill(pids[i], SIGKILL);
      int status = 0;
      while (::waitpid(pids[i], &status, 0) < 0 && errno == EINTR) {
      }
      pids[i] = -1;
    }
  }
  static int Code(int status) {
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return -1;
  }
};

}  // namespace internal

// `nonce_of(rank)`: the deployment nonce each rank connects with (default: one for all).
inline std::vector<RankReport> RunUcxRanks(int world, const RankBody& body,
                                           std::chrono::milliseconds limit = std::chrono::seconds(15),
                                           const std::function<uint64_t(int)>& nonce_of = nullptr) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + limit;
  std::vector<RankReport> reports(world);
  std::vector<int> parent_fd(world, -1);
  std::vector<int> child_fd(world, -1);
  struct FdCloser {
    std::vector<int>* fds;
    ~FdCloser() {
      for (int& fd : *fds) {
        if (fd >= 0) ::close(fd);
        fd = -1;
      }
    }
  } close_parent{&parent_fd}, close_child{&child_fd};
  for (int r = 0; r < world; ++r) {
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
      reports[r].status = absl::InternalError("socketpair failed");
      return reports;
    }
    parent_fd[r] = sv[0];
    child_fd[r] = sv[1];
  }
  internal::ChildGuard guard;
  guard.pids.assign(world, -1);
  // Children inherit stdio buffers; UCX logs to stdout and flushes, which would print whatever
  // the test framework had buffered once more per child.
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t parent = ::getpid();
  for (int r = 0; r < world; ++r) {
    pid_t pid = ::fork();
    if (pid < 0) {
      reports[r].status = absl::InternalError("fork failed");
      return reports;  // the guard kills and reaps the ones started
    }
    if (pid == 0) {
      // Die with the test process, even when it is killed before it can reap us.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) _exit(4);
      for (int q = 0; q < world; ++q) {
        ::close(parent_fd[q]);
        if (q != r) ::close(child_fd[q]);
      }
      internal::ChildMain(child_fd[r], r, world, body, nonce_of ? nonce_of(r) : 0x5eed);
    }
    guard.pids[r] = pid;
  }
  for (int& fd : child_fd) {
    ::close(fd);
    fd = -1;
  }

  // What each child sent that is not yet parsed into frames.
  std::vector<std::string> inbox(world);
  std::vector<bool> eof(world, false);
  auto next_frame = [&](int r, std::string* frame) {
    std::string& in = inbox[r];
    if (in.size() < 8) return false;
    uint64_t n = 0;
    std::memcpy(&n, in.data(), 8);
    if (in.size() < 8 + n) return false;
    frame->assign(in, 8, n);
    in.erase(0, 8 + n);
    return true;
  };
  auto take_report = [&](int r, const std::string& frame) {
    size_t pos = 1;
    uint64_t code = 0;
    std::memcpy(&code, frame.data() + pos, 8);
    pos += 8;
    std::string message, secs;
    internal::ReadBlob(frame, pos, &message);
    internal::ReadBlob(frame, pos, &reports[r].payload);
    internal::ReadBlob(frame, pos, &secs);
    reports[r].reported = true;
    reports[r].status = absl::Status(static_cast<absl::StatusCode>(code), message);
    if (secs.size() == sizeof(double)) std::memcpy(&reports[r].seconds, secs.data(), sizeof(double));
  };
  // Polls until every child produced its next frame or closed (or the deadline passed).
  auto gather = [&](std::vector<std::string>& frames) {
    frames.assign(world, std::string());
    std::vector<bool> have(world, false);
    while (true) {
      std::vector<pollfd> fds;
      std::vector<int> who;
      for (int r = 0; r < world; ++r) {
        if (!have[r] && next_frame(r, &frames[r])) have[r] = true;
        if (have[r] || eof[r]) continue;
        fds.push_back({parent_fd[r], POLLIN, 0});
        who.push_back(r);
      }
      if (fds.empty()) return;
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) return;
      int n = ::poll(fds.data(), fds.size(), static_cast<int>(left.count()));
      if (n < 0 && errno != EINTR) return;
      for (size_t i = 0; i < fds.size(); ++i) {
        if (fds[i].revents == 0) continue;
        char buf[65536];
        ssize_t got = ::read(fds[i].fd, buf, sizeof(buf));
        if (got > 0) {
          inbox[who[i]].append(buf, static_cast<size_t>(got));
        } else if (got == 0 || (errno != EINTR && errno != EAGAIN)) {
          eof[who[i]] = true;
        }
      }
    }
  };

  // 1. Addresses up, the list down.
  std::vector<std::string> frames;
  gather(frames);
  std::string list;
  bool all_addresses = true;
  for (int r = 0; r < world; ++r) {
    if (!frames[r].empty() && frames[r][0] == 'A') {
      internal::AppendBlob(list, frames[r].substr(1));
    } else {
      all_addresses = false;
      if (!frames[r].empty() && frames[r][0] == 'R') take_report(r, frames[r]);
    }
  }
  if (all_addresses) {
    std::string msg;
    internal::AppendU64(msg, list.size());
    msg += list;
    for (int r = 0; r < world; ++r) internal::WriteAll(parent_fd[r], msg.data(), msg.size());
    // 2. Reports up.
    gather(frames);
    for (int r = 0; r < world; ++r) {
      if (!frames[r].empty() && frames[r][0] == 'R') take_report(r, frames[r]);
    }
  }
  // 3. Release everyone together, then reap.
  for (int r = 0; r < world; ++r) {
    char go = 'G';
    internal::WriteAll(parent_fd[r], &go, 1);
    ::close(parent_fd[r]);  // a child still waiting for its address list sees EOF and exits
    parent_fd[r] = -1;
  }
  for (int r = 0; r < world; ++r) {
    if (!reports[r].reported && reports[r].status.ok()) {
      reports[r].status = absl::UnknownError(
          absl::StrCat("rank ", r, " sent no report", Clock::now() >= deadline ? " in time" : ""));
    }
  }
  const auto reap_deadline = std::max(deadline, Clock::now() + std::chrono::seconds(5));
  for (int r = 0; r < world; ++r) {
    int status = 0;
    while (true) {
      pid_t got = ::waitpid(guard.pids[r], &status, WNOHANG);
      if (got == guard.pids[r]) {
        reports[r].exit_code = internal::ChildGuard::Code(status);
        guard.pids[r] = -1;
        break;
      }
      if (got < 0 && errno != EINTR) {
        guard.pids[r] = -1;
        break;
      }
      if (Clock::now() >= reap_deadline) {
        ::kill(guard.pids[r], SIGKILL);
        while (::waitpid(guard.pids[r], &status, 0) < 0 && errno == EINTR) {
        }
        reports[r].exit_code = internal::ChildGuard::Code(status);
        guard.pids[r] = -1;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
  return reports;
}

// Bytes <-> values, for payloads.
template <typename T>
std::string ToBytes(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}
template <typename T>
std::vector<T> FromBytes(const std::string& s) {
  std::vector<T> v(s.size() / sizeof(T));
  if (!v.empty()) std::memcpy(v.data(), s.data(), v.size() * sizeof(T));
  return v;
}

}  // namespace ferry::dataplane::testing
