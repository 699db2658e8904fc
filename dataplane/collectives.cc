#include "dataplane/collectives.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace ferry::dataplane {
namespace {

using Clock = std::chrono::steady_clock;

// One posted transfer of a collective, with what it must deliver.
struct Pending {
  std::unique_ptr<Request> req;
  bool recv = false;
  int peer = -1;
  size_t expected = 0;  // receives: the exact size the peer must send
};

std::chrono::milliseconds Left(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return std::max(left, std::chrono::milliseconds(0));
}

absl::Status Annotate(absl::string_view op, const DataPlane& dp, const absl::Status& st) {
  return WithContext(absl::StrCat(op, " on rank ", dp.rank(), " of ", dp.world()), st);
}

// Waits for every transfer, returning the first error seen (of any of them, not only the one
// waited on), or DEADLINE_EXCEEDED at `deadline`. Requests left on return are destroyed by the
// caller, which cancels them.
absl::Status WaitAll(std::vector<Pending>& pending, Clock::time_point deadline) {
  size_t left = pending.size();
  std::vector<bool> done(pending.size(), false);
  while (left > 0) {
    bool any = false;
    for (size_t i = 0; i < pending.size(); ++i) {
      if (done[i] || !pending[i].req->Test()) continue;
      done[i] = true;
      --left;
      any = true;
      Pending& p = pending[i];
      FERRY_RETURN_IF_ERROR(p.req->Wait(std::chrono::milliseconds(0)));
      if (p.recv && p.req->bytes() != p.expected) {
        return absl::InvalidArgumentError(
            absl::StrCat("rank ", p.peer, " sent ", p.req->bytes(), " bytes where ", p.expected,
                         " were expected: the ranks disagree on the collective's size"));
      }
    }
    if (left == 0 || any) continue;
    if (Clock::now() >= deadline) {
      std::string waiting;
      std::vector<int> peers;
      for (size_t i = 0; i < pending.size(); ++i) {
        if (done[i]) continue;
        absl::StrAppend(&waiting, waiting.empty() ? "" : ", ",
                        pending[i].recv ? "receive from rank " : "send to rank ", pending[i].peer);
        peers.push_back(pending[i].peer);
      }
      return WithWaitedFor(
          absl::DeadlineExceededError(absl::StrCat(left, " transfers not complete at the deadline, waiting for: ", waiting)),
          peers);
    }
    // Nothing finished in a sweep: block a little on the first open transfer. A LocalDataPlane
    // sleeps on its condition variable; UCX progresses the whole worker, which serves them all.
    for (size_t i = 0; i < pending.size(); ++i) {
      if (done[i]) continue;
      absl::Status st = pending[i].req->Wait(std::min(Left(deadline), std::chrono::milliseconds(1)));
      if (!st.ok() && !absl::IsDeadlineExceeded(st)) return st;
      break;
    }
  }
  return absl::OkStatus();
}

absl::Status PostRecv(DataPlane& dp, std::vector<Pending>& pending, int peer, uint64_t tag,
                      void* data, size_t bytes) {
  FERRY_ASSIGN_OR_RETURN(auto req, dp.PostRecv(peer, tag, data, bytes));
  pending.push_back(Pending{std::move(req), true, peer, bytes});
  return absl::OkStatus();
}

absl::Status PostSend(DataPlane& dp, std::vector<Pending>& pending, int peer, uint64_t tag,
                      const void* data, size_t bytes) {
  FERRY_ASSIGN_OR_RETURN(auto req, dp.PostSend(peer, tag, data, bytes));
  pending.push_back(Pending{std::move(req), false, peer, bytes});
  return absl::OkStatus();
}

absl::Status AllReduceSumImpl(DataPlane& dp, float* data, size_t n, uint64_t tag,
                              Clock::time_point deadline) {
  const int world = dp.world();
  const int me = dp.rank();
  const size_t chunk = (n + world - 1) / world;
  auto begin = [&](int q) { return std::min(static_cast<size_t>(q) * chunk, n); };
  auto end = [&](int q) { return std::min(begin(q) + chunk, n); };
  const size_t my_len = end(me) - begin(me);

  // 1. Reduce-scatter: rank q receives everyone's slice q. contributions[q] holds rank q's copy
  //    of this rank's slice (our own copied in, so the sum below never reads a slot it wrote).
  std::vector<float> contributions(static_cast<size_t>(world) * my_len);
  {
    std::vector<Pending> pending;
    for (int q = 0; q < world; ++q) {
      if (q == me || my_len == 0) continue;
      FERRY_RETURN_IF_ERROR(PostRecv(dp, pending, q, tag, contributions.data() + q * my_len,
                                     my_len * sizeof(float)));
    }
    for (int q = 0; q < world; ++q) {
      if (q == me || end(q) == begin(q)) continue;
      FERRY_RETURN_IF_ERROR(
          PostSend(dp, pending, q, tag, data + begin(q), (end(q) - begin(q)) * sizeof(float)));
    }
    if (my_len > 0) {
      std::memcpy(contributions.data() + me * my_len, data + begin(me), my_len * sizeof(float));
    }
    // The sends read `data`, and step 3 writes into it: finish them all first.
    FERRY_RETURN_IF_ERROR(WaitAll(pending, deadline));
  }

  // 2. The sum in rank order, ((x0 + x1) + x2) + ..., element by element.
  float* out = data + begin(me);
  if (my_len > 0) {
    std::memcpy(out, contributions.data(), my_len * sizeof(float));
    for (int q = 1; q < world; ++q) {
      const float* x = contributions.data() + q * my_len;
      for (size_t i = 0; i < my_len; ++i) out[i] += x[i];
    }
  }

  // 3. All-gather of the summed slices.
  std::vector<Pending> pending;
  for (int q = 0; q < world; ++q) {
    if (q == me || end(q) == begin(q)) continue;
    FERRY_RETURN_IF_ERROR(
        PostRecv(dp, pending, q, tag, data + begin(q), (end(q) - begin(q)) * sizeof(float)));
  }
  for (int q = 0; q < world; ++q) {
    if (q == me || my_len == 0) continue;
    FERRY_RETURN_IF_ERROR(PostSend(dp, pending, q, tag, out, my_len * sizeof(float)));
  }
  return WaitAll(pending, deadline);
}

}  // namespace

absl::Status AllReduceSum(DataPlane& dp, float* data, size_t n, uint64_t tag,
                          std::chrono::milliseconds timeout) {
  if (dp.world() == 1 || n == 0) return absl::OkStatus();
  absl::Status st = AllReduceSumImpl(dp, data, n, tag, Clock::now() + timeout);
  return st.ok() ? st : Annotate(absl::StrCat("AllReduceSum of ", n, " floats"), dp, st);
}

absl::Status AllGather(DataPlane& dp, const void* mine, size_t bytes, void* all, uint64_t tag,
                       std::chrono::milliseconds timeout) {
  const int world = dp.world();
  const int me = dp.rank();
  auto* out = static_cast<unsigned char*>(all);
  unsigned char* my_slot = out + static_cast<size_t>(me) * bytes;
  if (bytes == 0) return absl::OkStatus();
  if (mine != my_slot) std::memcpy(my_slot, mine, bytes);
  if (world == 1) return absl::OkStatus();

  const auto deadline = Clock::now() + timeout;
  std::vector<Pending> pending;
  absl::Status st;
  for (int q = 0; q < world && st.ok(); ++q) {
    if (q != me) st = PostRecv(dp, pending, q, tag, out + static_cast<size_t>(q) * bytes, bytes);
  }
  // Sends read our slot of `all` (the same bytes as `mine`).
  for (int q = 0; q < world && st.ok(); ++q) {
    if (q != me) st = PostSend(dp, pending, q, tag, my_slot, bytes);
  }
  if (st.ok()) st = WaitAll(pending, deadline);
  return st.ok() ? st : Annotate(absl::StrCat("AllGather of ", bytes, " bytes"), dp, st);
}

absl::Status Broadcast(DataPlane& dp, int root, void* data, size_t bytes, uint64_t tag,
                       std::chrono::milliseconds timeout) {
  const int world = dp.world();
  if (root < 0 || root >= world) {
    return absl::InvalidArgumentError(
        absl::StrCat("Broadcast: root ", root, " is outside the world of ", world));
  }
  if (world == 1 || bytes == 0) return absl::OkStatus();

  const auto deadline = Clock::now() + timeout;
  std::vector<Pending> pending;
  absl::Status st;
  if (dp.rank() == root) {
    // A flat tree: worlds are small (a TP group), and every copy leaves the root at once.
    for (int q = 0; q < world && st.ok(); ++q) {
      if (q != root) st = PostSend(dp, pending, q, tag, data, bytes);
    }
  } else {
    st = PostRecv(dp, pending, root, tag, data, bytes);
  }
  if (st.ok()) st = WaitAll(pending, deadline);
  return st.ok() ? st
                 : Annotate(absl::StrCat("Broadcast of ", bytes, " bytes from rank ", root), dp, st);
}

absl::Status AllToAll(DataPlane& dp, const std::vector<const void*>& send, const std::vector<size_t>& send_bytes,
                      const std::vector<void*>& recv, const std::vector<size_t>& recv_bytes, uint64_t tag,
                      std::chrono::milliseconds timeout) {
  const int world = dp.world();
  if (static_cast<int>(send.size()) != world || send_bytes.size() != send.size() ||
      static_cast<int>(recv.size()) != world || recv_bytes.size() != recv.size()) {
    return absl::InvalidArgumentError(absl::StrCat("AllToAll on rank ", dp.rank(), " of ", world, ": ", send.size(),
                                                   " send and ", recv.size(), " receive buffers"));
  }
  const Clock::time_point deadline = Clock::now() + timeout;
  std::vector<Pending> pending;
  for (int q = 0; q < world; ++q) {
    if (q == dp.rank() || recv_bytes[q] == 0) continue;
    if (absl::Status st = PostRecv(dp, pending, q, tag, recv[q], recv_bytes[q]); !st.ok()) {
      return Annotate("AllToAll", dp, st);
    }
  }
  for (int q = 0; q < world; ++q) {
    if (q == dp.rank() || send_bytes[q] == 0) continue;
    if (absl::Status st = PostSend(dp, pending, q, tag, send[q], send_bytes[q]); !st.ok()) {
      return Annotate("AllToAll", dp, st);
    }
  }
  if (absl::Status st = WaitAll(pending, deadline); !st.ok()) return Annotate("AllToAll", dp, st);
  return absl::OkStatus();
}

}  // namespace ferry::dataplane
