// An in-process data plane: W ranks in one process, one DataPlane per rank, each driven by its
// own thread (the unit tests of tensor parallelism run W model shards on W threads this way).
//
// Payloads are copied through a shared hub under one mutex. Sends are eager: a send completes
// as soon as its payload is queued (or copied into a receive already posted), so a send never
// waits for its receive. Matching follows dataplane.h: (peer, tag) exactly, in posting order,
// and a message longer than the receive buffer completes that receive with INVALID_ARGUMENT
// (the message is consumed, as UCX does).
//
// Peer failure: destroying rank r's DataPlane marks r gone. Sends to r then fail with
// UNAVAILABLE, and a receive from r that no queued message can satisfy completes with
// UNAVAILABLE (messages r queued before it went away are still delivered).
//
// Requests hold the hub alive, so they may outlive their DataPlane (they then report the peer
// as gone); they are still driven by one thread, like the DataPlane that posted them.
#pragma once

#include <memory>
#include <vector>

#include "dataplane/dataplane.h"

namespace ferry::dataplane {

// Creates `world` connected in-process ranks; element i is rank i. world >= 1.
std::vector<std::unique_ptr<DataPlane>> MakeLocalGroup(int world);

}  // namespace ferry::dataplane
