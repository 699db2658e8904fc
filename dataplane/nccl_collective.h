// A tensor-parallel group's model::Collective over NCCL, for ranks on distinct GPUs (one process
// a GPU): its buffers may be device memory (device_buffers()), so the CUDA backend reduces and
// exchanges its values where they are instead of staging them through the host. Host buffers work
// too, staged through a device buffer of the collective's own.
//
// Same bits as the UCX data plane: AllReduceSum is dataplane/collectives.h's fixed-order
// reduction (slice q of every rank to rank q, rank q sums its slices in rank order on the device,
// then every rank gets every summed slice), not ncclAllReduce, whose summation order depends on
// the algorithm NCCL picks for the topology. A width therefore gives the same bits over NCCL and
// over UCX, run after run (finite values; a NaN's payload may differ).
//
// Forming the group: rank 0 draws NCCL's unique id and sends it to the other ranks over the
// group's host collective (the UCX data plane, whose handshakes carry the deployment's nonce);
// every rank then joins on its current GPU. ncclGetUniqueId starts NCCL's bootstrap listener in
// the process that calls it, which must take part in the group: hence a rank draws it, not the
// coordinator (which has no GPU and does not link NCCL).
//
// Watchdog: every call waits on the host for its transfers, at most `timeout`; past it the
// communicator is aborted (ncclCommAbort) and the call fails with DEADLINE_EXCEEDED, naming its
// peer when it had one (dataplane::WaitedFor; NCCL does not say which of several held it up). An
// asynchronous NCCL error (a network peer gone) ends the wait early with UNAVAILABLE; between
// GPUs of one host a dead peer raises none, and the wait runs to the timeout. Any failed call
// aborts the communicator: the group is out of step. Tearing down finalizes within `timeout`,
// else aborts. Exchange sizes are not checked: NCCL needs equal counts on both sides, and a
// mismatch hangs until the timeout.
//
// Streams: a call runs on the collective's own stream after everything the calling thread has
// queued on the default stream (an event), and returns once its transfers and copies completed,
// so later work on any stream sees its results.
//
// Thread safety: one caller at a time (a rank's step loop), on the GPU that was current at Create.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/parallel/tensor_parallel.h"

namespace ferry::dataplane {

class NcclCollective final : public model::Collective {
 public:
  // Joins the group of `world` ranks as `rank` on the current GPU. `bootstrap`: the group's host
  // collective (null when world == 1). Every rank calls it; it gives up after `timeout`
  // (DEADLINE_EXCEEDED) when a rank does not join.
  static absl::StatusOr<std::unique_ptr<NcclCollective>> Create(model::Collective* bootstrap, int rank, int world,
                                                                std::chrono::milliseconds timeout);
  ~NcclCollective() override;
  NcclCollective(const NcclCollective&) = delete;
  NcclCollective& operator=(const NcclCollective&) = delete;

  absl::Status AllReduceSum(float* data, int64_t n) override;
  absl::Status Exchange(const std::vector<std::span<const float>>& send,
                        const std::vector<std::span<float>>& recv) override;
  bool device_buffers() const override { return true; }
  int64_t TakeBytes() override;
  void Abandon() override;

 private:
  struct State;
  explicit NcclCollective(std::unique_ptr<State> state);
  absl::Status Reduce(float* data, int64_t n);
  absl::Status Swap(const std::vector<std::span<const float>>& send, const std::vector<std::span<float>>& recv);
  std::unique_ptr<State> s_;
};

// What `--dataplane` (auto, nccl or ucx) gives a group whose ranks run on GPUs: "nccl" when
// asked, or under auto when every rank has a GPU of its own (their UUIDs, exchanged over
// `bootstrap`, all differ) and world > 1; else "ucx". Every rank calls it with the same `wanted`
// and gets the same answer. Errors: INVALID_ARGUMENT for another name; FAILED_PRECONDITION for
// nccl where ranks share a GPU (naming them) or in a build without NCCL; the exchange's errors.
absl::StatusOr<std::string> ResolveDeviceDataPlane(const std::string& wanted, model::Collective* bootstrap, int rank,
                                                   int world);

// The collective a rank on a GPU reduces over: NCCL's when `dataplane` (as resolved above) is
// "nccl", else null (the caller keeps `bootstrap`, staged through host memory). Every rank calls it.
absl::StatusOr<std::unique_ptr<model::Collective>> DeviceCollective(const std::string& dataplane,
                                                                    model::Collective* bootstrap, int rank, int world,
                                                                    std::chrono::milliseconds timeout);

}  // namespace ferry::dataplane
