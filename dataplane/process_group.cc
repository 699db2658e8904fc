#include "dataplane/process_group.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "dataplane/group_collective.h"
#include "dataplane/ucx_dataplane.h"

namespace ferry::dataplane {
namespace {

bool WriteAll(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t k = write(fd, p, n);
    if (k <= 0) return false;
    p += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

bool ReadAll(int fd, void* data, size_t n) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t k = read(fd, p, n);
    if (k <= 0) return false;
    p += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

bool WriteBlob(int fd, const std::string& s) {
  const uint32_t n = static_cast<uint32_t>(s.size());
  return WriteAll(fd, &n, sizeof(n)) && WriteAll(fd, s.data(), s.size());
}

bool ReadBlob(int fd, std::string* s) {
  uint32_t n = 0;
  if (!ReadAll(fd, &n, sizeof(n)) || n > (1u << 20)) return false;
  s->resize(n);
  return ReadAll(fd, s->data(), n);
}

// One rank's side once the processes exist: its data plane, the address exchange (`to` and
// `from` are its pipes to and from rank 0; rank 0 has one pair per peer), then fn.
int RunRank(int rank, int world, std::chrono::milliseconds timeout, const std::vector<int>& to,
            const std::vector<int>& from, const std::function<int(int, model::Collective*)>& fn) {
  auto dp = UcxDataPlane::Create(rank, world);
  if (!dp.ok()) {
    fprintf(stderr, "rank %d: data plane: %s\n", rank, std::string(dp.status().message()).c_str());
    return 2;
  }
  std::vector<std::string> addrs(static_cast<size_t>(world));
  addrs[static_cast<size_t>(rank)] = (*dp)->address();
  // Rank 0 draws the group's data-plane nonce and sends it with the addresses.
  std::string nonce(sizeof(uint64_t), '\0');
  if (rank == 0) {
    std::random_device rd;
    const uint64_t n = static_cast<uint64_t>(rd()) << 32 | rd();
    std::memcpy(nonce.data(), &n, sizeof(n));
  }
  if (rank == 0) {
    for (int q = 1; q < world; ++q) {
      if (!ReadBlob(from[static_cast<size_t>(q)], &addrs[static_cast<size_t>(q)])) {
        fprintf(stderr, "rank 0: rank %d did not report its data plane address\n", q);
        return 2;
      }
    }
    for (int q = 1; q < world; ++q) {
      for (const std::string& a : addrs) {
        if (!WriteBlob(to[static_cast<size_t>(q)], a)) return 2;
      }
      if (!WriteBlob(to[static_cast<size_t>(q)], nonce)) return 2;
    }
  } else {
    if (!WriteBlob(to[0], addrs[static_cast<size_t>(rank)])) return 2;
    for (std::string& a : addrs) {
      if (!ReadBlob(from[0], &a)) {
        fprintf(stderr, "rank %d: no address list from rank 0\n", rank);
        return 2;
      }
    }
    if (!ReadBlob(from[0], &nonce) || nonce.size() != sizeof(uint64_t)) {
      fprintf(stderr, "rank %d: no data-plane nonce from rank 0\n", rank);
      return 2;
    }
  }
  uint64_t group_nonce = 0;
  std::memcpy(&group_nonce, nonce.data(), sizeof(group_nonce));
  if (absl::Status st = (*dp)->Connect(addrs, timeout, group_nonce); !st.ok()) {
    fprintf(stderr, "rank %d: data plane: %s\n", rank, std::string(st.message()).c_str());
    return 2;
  }
  GroupCollective comm(dp->get(), timeout);
  return fn(rank, &comm);
}

}  // namespace

int RunProcessGroup(int world, std::chrono::milliseconds timeout,
             const std::function<int(int rank, model::Collective* comm)>& fn) {
  if (world <= 1) return fn(0, nullptr);
  fflush(stdout);
  fflush(stderr);
  std::vector<int> to(static_cast<size_t>(world), -1), from(static_cast<size_t>(world), -1);
  std::vector<pid_t> pids;
  for (int r = 1; r < world; ++r) {
    int up[2], down[2];  // child -> rank 0, rank 0 -> child
    if (pipe(up) != 0 || pipe(down) != 0) {
      perror("pipe");
      return 2;
    }
    const pid_t pid = fork();
    if (pid < 0) {
      perror("fork");
      return 2;
    }
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      close(up[0]);
      close(down[1]);
      for (int q = 1; q < r; ++q) {
        close(to[static_cast<size_t>(q)]);
        close(from[static_cast<size_t>(q)]);
      }
      std::vector<int> child_to{up[1]}, child_from{down[0]};
      const int rc = RunRank(r, world, timeout, child_to, child_from, fn);
      fflush(stdout);
      fflush(stderr);
      _exit(rc);
    }
    close(up[1]);
    close(down[0]);
    from[static_cast<size_t>(r)] = up[0];
    to[static_cast<size_t>(r)] = down[1];
    pids.push_back(pid);
  }
  const int rc = RunRank(0, world, timeout, to, from, fn);
  for (int r = 1; r < world; ++r) {
    close(to[static_cast<size_t>(r)]);
    close(from[static_cast<size_t>(r)]);
  }
  // A failed rank 0 leaves its peers waiting in a collective: stop them.
  if (rc != 0) {
    for (pid_t p : pids) kill(p, SIGTERM);
  }
  int worst = rc;
  for (size_t i = 0; i < pids.size(); ++i) {
    int status = 0;
    waitpid(pids[i], &status, 0);
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (code != 0 && rc == 0) {
      fprintf(stderr, "rank %zu exited %d\n", i + 1, code);
      worst = 1;
    }
  }
  return worst;
}

}  // namespace ferry::dataplane
