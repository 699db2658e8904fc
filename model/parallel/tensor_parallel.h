// Tensor parallelism inside a model family (Megatron-style, as the serving design splits it):
// attention heads (MLA and KDA) and FFN intermediate dimensions are split across W ranks;
// embeddings, norms, routers, indexers and hyper-connections are replicated; each rank's
// partial output of attention (o_proj, row-split) and of the FFN (down_proj, row-split) is
// summed over the ranks, one reduction after each.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace ferry::model {

// Sums a buffer over the ranks of a tensor-parallel group.
class Collective {
 public:
  virtual ~Collective() = default;
  // data[n] <- the sum over all ranks' data[n], in a fixed rank order, so every rank gets the
  // same bits and a repeated run reproduces them. Every rank calls it with the same n, in the
  // same sequence of calls.
  virtual absl::Status AllReduceSum(float* data, int64_t n) = 0;
  // Point-to-point exchange with every other rank at once: send[q] goes to rank q, recv[q] is
  // filled from what rank q sent to this rank (send[rank] and recv[rank] are ignored). Both
  // sides know every size in advance (a size mismatch is INVALID_ARGUMENT naming both; NCCL's
  // collective cannot tell, and hangs until its timeout); an empty span sends or expects nothing. Every rank calls it in the same sequence of calls.
  // UNIMPLEMENTED where the collective has no point-to-point transport.
  virtual absl::Status Exchange(const std::vector<std::span<const float>>& send,
                                const std::vector<std::span<float>>& recv);
  // True when the buffers of both calls may be CUDA device memory (NCCL's collective): a backend
  // whose values live on a GPU then hands them over as they are instead of staging them through
  // host memory. Host buffers are accepted either way.
  virtual bool device_buffers() const { return false; }
  // Bytes this rank sent since the last call (0 where the collective does not count).
  virtual int64_t TakeBytes() { return 0; }
  // The group is out of step (a step failed on this rank): later calls fail, and tearing the
  // collective down does not wait for peers.
  virtual void Abandon() {}
};

// What the latent split (docs/owner-split.md) moved on a rank (counters since load).
struct OwnerSplitStats {
  int64_t rows_shipped = 0;       // row-layers whose queries this rank sent to their owner
  int64_t rows_served = 0;        // row-layers this rank attended for another rank's heads
  int64_t rows_fetched = 0;       // latent rows this rank fetched from owners (history fetch)
  int64_t fetch_pieces = 0;       // exchanges the history fetch took
  int64_t rows_carried = 0;       // token rows of kept conversations carried to this rank (all layers)
  int64_t floats_sent = 0;        // queries, attended latents, fetched and carried rows sent
  double exchange_seconds = 0;    // time in the exchanges (waiting for peers included)
};

struct TensorParallel {
  int rank = 0;
  int world = 1;
  Collective* comm = nullptr;  // REQUIRES: non-null when world > 1; not owned

  // The [begin, end) of `n` items that this rank holds. REQUIRES: n % world == 0.
  int64_t Begin(int64_t n) const { return n / world * rank; }
  int64_t End(int64_t n) const { return n / world * (rank + 1); }
  int64_t Local(int64_t n) const { return n / world; }

  // Sums `data` over the ranks (no-op on one rank).
  absl::Status Reduce(float* data, int64_t n) const {
    return world > 1 ? comm->AllReduceSum(data, n) : absl::OkStatus();
  }
};

// Collective::Exchange of buffers larger than one message: send[q] / recv[q] (this rank's own
// entries ignored) go in pieces of at most `piece` floats, `most` / piece exchanges in all.
// `most` is the largest buffer any rank sends to any other, which every rank must compute alike
// (from what the step says), so that all call Exchange the same number of times. Adds the
// pieces, floats sent and time spent to `pieces`, `floats_sent` and `seconds` (may be null).
// REQUIRES: piece >= 1; every send and recv size <= most. Errors: the collective's.
absl::Status ExchangeInPieces(const TensorParallel& tp, const std::vector<std::span<const float>>& send,
                              const std::vector<std::span<float>>& recv, int64_t most, int64_t piece,
                              OwnerSplitStats* stats, int64_t* pieces);

// OK when `n` of `what` splits evenly over `world` ranks; otherwise INVALID_ARGUMENT with numbers.
absl::Status CheckDivisible(const std::string& what, int64_t n, int world);

}  // namespace ferry::model
