// The data plane: tagged point-to-point transfers between the ranks of one serving group, the
// one small interface every transport implements (UCX on host memory: tcp/shm in tests, RoCE
// verbs on GB10; NCCL on device memory later). Collectives with a fixed reduction order are
// built on top of it (dataplane/collectives.h), so every run reduces the same way.
//
// Buffer lifetime: a posted transfer reads or writes the caller's buffer until its Request
// completes (Test() returned true or Wait() returned OK). The caller keeps the buffer alive and
// untouched until then; destroying an incomplete Request cancels it first. A Wait() that times
// out does not cancel the transfer: the buffer stays in use until the Request completes or is
// destroyed.
//
// Matching: a receive matches the send from `peer` with the same `tag`; transfers between one
// pair with one tag complete in the order they were posted. A message longer than the posted
// receive buffer is an error on the receiving side (INVALID_ARGUMENT naming both sizes).
//
// Thread safety: one thread drives a DataPlane (posting, testing, waiting). Different
// DataPlane objects are independent.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ferry::dataplane {

// A transfer that did not finish in time (DEADLINE_EXCEEDED) names the peers it waited for in
// a payload of its status, which survives copies and FERRY_RETURN_IF_ERROR on the way up, so a
// worker can report whom it waited for without parsing messages. WithWaitedFor attaches them;
// WaitedFor reads them back (empty when none were attached).
absl::Status WithWaitedFor(absl::Status st, const std::vector<int>& peers);
std::vector<int> WaitedFor(const absl::Status& st);

struct Capabilities {
  std::string transport;       // e.g. "ucx(tcp,posix)", "local"
  bool host_memory = true;     // buffers may be ordinary host memory
  bool device_memory = false;  // buffers may be CUDA device memory
};

class Request {
 public:
  virtual ~Request() = default;
  // Drives progress once; true when the transfer has completed (successfully or not).
  virtual bool Test() = 0;
  // Blocks until completion or `timeout`. OK on success; the transfer's error if it failed;
  // DEADLINE_EXCEEDED on timeout (the transfer stays posted: see the file comment).
  virtual absl::Status Wait(std::chrono::milliseconds timeout) = 0;
  // Bytes received (receives) or sent (sends), once complete.
  virtual size_t bytes() const = 0;
};

class DataPlane {
 public:
  virtual ~DataPlane() = default;
  virtual int rank() const = 0;
  virtual int world() const = 0;
  virtual Capabilities capabilities() const = 0;

  // Posts a send of `bytes` at `data` to `peer` (!= rank()). Errors: INVALID_ARGUMENT for a bad
  // peer; UNAVAILABLE when the peer is gone.
  virtual absl::StatusOr<std::unique_ptr<Request>> PostSend(int peer, uint64_t tag, const void* data,
                                                            size_t bytes) = 0;
  // Posts a receive of at most `capacity` bytes into `data` from `peer`.
  virtual absl::StatusOr<std::unique_ptr<Request>> PostRecv(int peer, uint64_t tag, void* data,
                                                            size_t capacity) = 0;
};

}  // namespace ferry::dataplane
