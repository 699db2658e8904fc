// A tensor-parallel group of processes on this machine, for the tools that run a model in-process
// (check-golden --ranks, the split benchmark): ranks joined by the UCX data plane as ferry-worker
// ranks are, without a coordinator.
#pragma once

#include <chrono>
#include <functional>

#include "model/parallel/tensor_parallel.h"

namespace ferry::dataplane {

// Runs `fn` on `world` ranks: this process is rank 0 and world - 1 processes forked here are
// the others (so call it before any CUDA work: a CUDA context does not survive fork). The ranks
// join the UCX data plane (their addresses pass through pipes) and each fn gets its rank and the
// group's collective (null for world 1), whose transfers wait at most `timeout`. A child dies
// with this process. Returns rank 0's result when every other rank's fn returned 0 too, else 1
// (a failing rank says why on stderr); 2 when the group cannot be formed.
int RunProcessGroup(int world, std::chrono::milliseconds timeout,
             const std::function<int(int rank, model::Collective* comm)>& fn);

}  // namespace ferry::dataplane
