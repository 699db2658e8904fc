// Collectives over any DataPlane, with a fixed reduction order: every rank gets bit-identical
// results, and the same inputs on the same ranks give the same bits on every run.
//
// AllReduceSum is a reduce-scatter followed by an all-gather:
//   1. the n floats are cut into `world` contiguous slices (slice q = [q*c, min((q+1)*c, n)),
//      c = ceil(n / world)); every rank sends slice q of its buffer to rank q;
//   2. rank q sums its slice over the ranks in rank order, ((x0 + x1) + x2) + ... + x(W-1),
//      starting from x0 (so -0.0 stays -0.0 when every input is -0.0);
//   3. every rank sends its summed slice to every other rank.
// Each element is therefore summed once, on one rank, in rank order, and copied to the others:
// results are bit-identical across ranks and equal the sequential sum in rank order. Traffic
// per rank is 2 (W-1)/W n floats, against (W-1) n for sending whole buffers.
//
// Every rank must call the same collectives in the same order with the same n / bytes / root /
// tag. All transfers of one call use `tag`; calls may reuse a tag once the previous call with
// it has returned on this rank (messages of one (peer, tag) pair match in posting order), but
// two collectives in flight at the same time need different tags. Tags must fit the data
// plane's tag space (48 bits for UCX).
//
// Timeouts: each call gives up after `timeout` with DEADLINE_EXCEEDED (or the transport's error,
// e.g. UNAVAILABLE for a dead peer, as soon as it is known). After an error the group is out of
// step: treat it as broken. World 1: every call is a local copy or a no-op.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "dataplane/dataplane.h"

namespace ferry::dataplane {

inline constexpr std::chrono::milliseconds kDefaultCollectiveTimeout = std::chrono::seconds(60);

// data[0..n) <- sum over ranks of data[0..n), in rank order (see above). In place.
[[nodiscard]] absl::Status AllReduceSum(DataPlane& dp, float* data, size_t n, uint64_t tag,
                                        std::chrono::milliseconds timeout =
                                            kDefaultCollectiveTimeout);

// all[r*bytes .. (r+1)*bytes) <- rank r's `mine` (bytes each, world*bytes in all). `mine` may be
// all + rank*bytes (in place); otherwise it must not overlap `all`.
[[nodiscard]] absl::Status AllGather(DataPlane& dp, const void* mine, size_t bytes, void* all,
                                     uint64_t tag,
                                     std::chrono::milliseconds timeout = kDefaultCollectiveTimeout);

// data[0..bytes) on every rank <- data[0..bytes) on `root`.
[[nodiscard]] absl::Status Broadcast(DataPlane& dp, int root, void* data, size_t bytes,
                                     uint64_t tag,
                                     std::chrono::milliseconds timeout = kDefaultCollectiveTimeout);

// Point-to-point exchange with every peer at once: send[q] (send_bytes[q] bytes) goes to rank q,
// recv[q] receives exactly recv_bytes[q] bytes from rank q (a different size is
// INVALID_ARGUMENT naming both). Entries for this rank are ignored; 0 bytes posts nothing for
// that peer. Receives are posted before sends, so any order of callers completes.
// REQUIRES: the vectors have world() entries.
[[nodiscard]] absl::Status AllToAll(DataPlane& dp, const std::vector<const void*>& send,
                                    const std::vector<size_t>& send_bytes, const std::vector<void*>& recv,
                                    const std::vector<size_t>& recv_bytes, uint64_t tag,
                                    std::chrono::milliseconds timeout = kDefaultCollectiveTimeout);

}  // namespace ferry::dataplane
