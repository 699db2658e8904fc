#include "dataplane/nccl_collective.h"

#include <cuda_runtime.h>
#include <unistd.h>
#if FERRY_WITH_NCCL
#include <nccl.h>
#endif

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <thread>
#include <utility>

#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status.h"
#include "dataplane/dataplane.h"
#include "kernels/cuda/ops.h"

namespace ferry::dataplane {
namespace {

using Clock = std::chrono::steady_clock;

// What a call is, told only when it fails (the message is not built on the decode path).
using What = absl::FunctionRef<std::string()>;

absl::Status CudaStatus(cudaError_t e, What what) {
  if (e == cudaSuccess) return absl::OkStatus();
  cudaGetLastError();  // a non-sticky error must not fail the next call
  return absl::InternalError(absl::StrCat(what(), ": ", cudaGetErrorString(e)));
}
absl::Status CudaStatus(cudaError_t e, const char* what) {
  return CudaStatus(e, [what] { return std::string(what); });
}

// `words` 4-byte words at `data` from rank 0 to every other rank, over the host collective.
absl::Status FromRank0(model::Collective* bootstrap, int rank, int world, float* data, size_t words) {
  std::vector<std::span<const float>> send(static_cast<size_t>(world));
  std::vector<std::span<float>> recv(static_cast<size_t>(world));
  for (int q = 1; q < world; ++q) {
    if (rank == 0) send[static_cast<size_t>(q)] = std::span<const float>(data, words);
  }
  if (rank != 0) recv[0] = std::span<float>(data, words);
  return bootstrap->Exchange(send, recv);
}

// What tells GPUs apart for NCCL, 32 bytes: the current GPU's UUID (16 bytes, the same whichever
// process or index names it), this host's identity (8: its name and boot, hashed) and the GPU's
// PCI address (8): NCCL refuses two ranks on one PCI device of one host, which MIG slices of one
// GPU are although their UUIDs differ.
[[maybe_unused]] absl::StatusOr<std::string> CurrentGpuIdentity() {
  int device = 0;
  FERRY_RETURN_IF_ERROR(CudaStatus(cudaGetDevice(&device), "cudaGetDevice"));
  cudaDeviceProp p{};
  FERRY_RETURN_IF_ERROR(CudaStatus(cudaGetDeviceProperties(&p, device), "cudaGetDeviceProperties"));
  std::string host(256, '\0');
  if (gethostname(host.data(), host.size() - 1) != 0) host.clear();
  host.resize(std::strlen(host.c_str()));
  if (std::FILE* f = std::fopen("/proc/sys/kernel/random/boot_id", "r")) {
    char boot[64] = {};
    if (std::fgets(boot, sizeof(boot), f) != nullptr) host += boot;
    std::fclose(f);
  }
  uint64_t hash = 1469598103934665603ull;  // FNV-1a
  for (unsigned char ch : host) hash = (hash ^ ch) * 1099511628211ull;
  const uint64_t pci = static_cast<uint64_t>(p.pciDomainID) << 32 | static_cast<uint64_t>(p.pciBusID) << 16 |
                       static_cast<uint64_t>(p.pciDeviceID);
  std::string id(p.uuid.bytes, sizeof(p.uuid.bytes));
  id.append(reinterpret_cast<const char*>(&hash), sizeof(hash));
  id.append(reinterpret_cast<const char*>(&pci), sizeof(pci));
  return id;
}

// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as nvidia-smi -L prints it.
[[maybe_unused]] std::string UuidText(const std::string& u) {
  std::string out = "GPU-";
  for (size_t i = 0; i < u.size(); ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out += '-';
    absl::StrAppendFormat(&out, "%02x", static_cast<unsigned char>(u[i]));
  }
  return out;
}

}  // namespace

#if FERRY_WITH_NCCL

namespace {

bool OnDevice(const void* p) {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

std::string Ms(std::chrono::milliseconds t) { return absl::StrFormat("%.1f s", static_cast<double>(t.count()) / 1000); }

}  // namespace

struct NcclCollective::State {
  int rank = 0, world = 1;
  std::chrono::milliseconds timeout{0};
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  cudaEvent_t ready = nullptr, done = nullptr;
  float* scratch = nullptr;  // device: the reduction's slices and staged host buffers
  size_t scratch_floats = 0;
  bool broken = false;
  int64_t bytes = 0;

  ~State() {
    if (comm != nullptr && !broken) {
      // Finalize (flushes this rank's part; nonblocking here) within the timeout, then destroy;
      // a peer that keeps it waiting gets the communicator aborted instead.
      ncclResult_t r = ncclCommFinalize(comm);
      const Clock::time_point deadline = Clock::now() + timeout;
      while (r == ncclInProgress && Clock::now() < deadline) {
        if (ncclCommGetAsyncError(comm, &r) != ncclSuccess) break;
        if (r == ncclInProgress) std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
      if (r == ncclSuccess) {
        ncclCommDestroy(comm);
        comm = nullptr;
      }
    }
    if (comm != nullptr) ncclCommAbort(comm);
    if (scratch != nullptr) cudaFree(scratch);
    if (ready != nullptr) cudaEventDestroy(ready);
    if (done != nullptr) cudaEventDestroy(done);
    if (stream != nullptr) cudaStreamDestroy(stream);
  }

  void Abort() {
    if (comm != nullptr) ncclCommAbort(comm);
    comm = nullptr;
    broken = true;
  }

  // A failed NCCL call: the communicator is given up (the group is out of step).
  absl::Status NcclError(ncclResult_t r, What what) {
    std::string detail = comm != nullptr ? ncclGetLastError(comm) : "";
    Abort();
    return absl::UnavailableError(absl::StrCat(what(), ": NCCL ", ncclGetErrorString(r),
                                               detail.empty() ? "" : absl::StrCat(" (", detail, ")")));
  }

  absl::StatusOr<float*> Scratch(size_t floats) {
    if (floats > scratch_floats) {  // grown geometrically: a cudaFree waits for the whole device
      if (scratch != nullptr) FERRY_RETURN_IF_ERROR(CudaStatus(cudaFree(scratch), "cudaFree"));
      scratch = nullptr;
      const size_t want = std::max(floats, 2 * scratch_floats);
      scratch_floats = 0;
      FERRY_RETURN_IF_ERROR(CudaStatus(cudaMalloc(&scratch, want * sizeof(float)),
                                       [&] { return absl::StrCat("the NCCL collective's scratch of ", want, " floats"); }));
      scratch_floats = want;
    }
    return scratch;
  }

  // The call's work follows everything the default stream holds.
  absl::Status Begin(const char* what) {
    if (broken) return absl::FailedPreconditionError(absl::StrCat(what, ": the NCCL group failed earlier"));
    FERRY_RETURN_IF_ERROR(CudaStatus(cudaEventRecord(ready, nullptr), "cudaEventRecord"));
    return CudaStatus(cudaStreamWaitEvent(stream, ready, 0), "cudaStreamWaitEvent");
  }

  // The first failure among a group's calls (a nonblocking communicator answers ncclInProgress
  // while it queues them).
  ncclResult_t group_error = ncclSuccess;
  void Note(ncclResult_t r) {
    if (r != ncclSuccess && r != ncclInProgress && group_error == ncclSuccess) group_error = r;
  }
  ncclResult_t GroupEnd() {
    const ncclResult_t end = ncclGroupEnd();
    const ncclResult_t first = std::exchange(group_error, ncclSuccess);
    return first != ncclSuccess ? first : end;
  }

  // A grouped call's ncclGroupEnd result: a nonblocking communicator may still be queueing it.
  absl::Status Queued(ncclResult_t r, Clock::time_point deadline, const std::vector<int>& peers,
                      What what) {
    while (r == ncclInProgress) {
      if (ncclResult_t e = ncclCommGetAsyncError(comm, &r); e != ncclSuccess) return NcclError(e, what);
      if (r != ncclInProgress) break;
      if (Clock::now() > deadline) return TimedOut(peers, what);
      std::this_thread::yield();
    }
    return r == ncclSuccess ? absl::OkStatus() : NcclError(r, what);
  }

  // NCCL does not say which of a call's peers held it up: with one peer the coordinator is told
  // that one (dataplane::WaitedFor), with several none, and it finds the rank that never answered
  // the step by its own deadline (naming a peer that was itself waiting would blame a live rank).
  absl::Status TimedOut(const std::vector<int>& peers, What what) {
    Abort();
    absl::Status st = absl::DeadlineExceededError(
        absl::StrCat(what(), " did not complete within ", Ms(timeout), " (waiting for rank", peers.size() == 1 ? " " : "s ",
                     absl::StrJoin(peers, ", "), "); the NCCL communicator is aborted"));
    return peers.size() == 1 ? WithWaitedFor(std::move(st), peers) : st;
  }

  // Waits on the host until everything queued on the stream completed, an NCCL error, or the
  // deadline.
  absl::Status Finish(Clock::time_point deadline, const std::vector<int>& peers, What what) {
    FERRY_RETURN_IF_ERROR(CudaStatus(cudaEventRecord(done, stream), "cudaEventRecord"));
    for (int spins = 0;; ++spins) {
      const cudaError_t e = cudaEventQuery(done);
      if (e == cudaSuccess) return absl::OkStatus();
      if (e != cudaErrorNotReady) {
        broken = true;
        return CudaStatus(e, what);
      }
      ncclResult_t async = ncclSuccess;
      if (ncclResult_t r = ncclCommGetAsyncError(comm, &async); r != ncclSuccess) return NcclError(r, what);
      if (async != ncclSuccess && async != ncclInProgress) {
        absl::Status st = NcclError(async, what);
        return peers.size() == 1 ? WithWaitedFor(std::move(st), peers) : st;
      }
      if (Clock::now() > deadline) return TimedOut(peers, what);
      // Spin first (a decode step's reductions take microseconds), then let the core go.
      if (spins < 2000) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    }
  }
};

NcclCollective::NcclCollective(std::unique_ptr<State> state) : s_(std::move(state)) {}
NcclCollective::~NcclCollective() = default;

absl::StatusOr<std::unique_ptr<NcclCollective>> NcclCollective::Create(model::Collective* bootstrap, int rank,
                                                                       int world, std::chrono::milliseconds timeout) {
  if (world < 1 || rank < 0 || rank >= world || (world > 1 && bootstrap == nullptr)) {
    return absl::InvalidArgumentError(absl::StrCat("NCCL group: rank ", rank, " of ", world,
                                                   world > 1 && bootstrap == nullptr ? " without a host collective" : ""));
  }
  // The group only sends and receives: NVLink multicast (NVLS) would take memory and setup for
  // nothing, and it is known to misbehave on some hosts. An explicit setting is left alone. (The
  // worker's other threads, gRPC's, do not read the environment while it is set.)
  setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);
  // A GPU that shares the host's memory (GB10) has no device memory of its own for the NIC to
  // reach: GPUDirect RDMA there is reported to hang joining the group, and staging through host
  // memory copies within the same memory. Off unless the environment says otherwise.
  int device = 0, integrated = 0;
  if (cudaGetDevice(&device) == cudaSuccess &&
      cudaDeviceGetAttribute(&integrated, cudaDevAttrIntegrated, device) == cudaSuccess && integrated != 0) {
    setenv("NCCL_NET_GDR_LEVEL", "LOC", /*overwrite=*/0);
  }
  cudaGetLastError();
  ncclUniqueId id{};
  static_assert(sizeof(ncclUniqueId) % sizeof(float) == 0);
  absl::Status id_status;
  if (rank == 0) {
    if (ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess) {
      id_status = absl::UnavailableError(absl::StrCat("ncclGetUniqueId: ", ncclGetErrorString(r)));
      id = ncclUniqueId{};  // the peers get zeros, which tell them rank 0 failed (not a timeout)
    }
  }
  if (world > 1) {
    std::vector<float> words(sizeof(id) / sizeof(float));
    std::memcpy(words.data(), &id, sizeof(id));
    const absl::Status sent = FromRank0(bootstrap, rank, world, words.data(), words.size());
    FERRY_RETURN_IF_ERROR(id_status);  // rank 0's own failure first: it is the cause
    FERRY_RETURN_IF_ERROR(sent);
    std::memcpy(&id, words.data(), sizeof(id));
  }
  FERRY_RETURN_IF_ERROR(id_status);
  if (std::all_of(std::begin(id.internal), std::end(id.internal), [](char c) { return c == 0; })) {
    return absl::UnavailableError(absl::StrCat("NCCL group: rank 0 could not create the group's id (rank ", rank,
                                               " of ", world, " got none)"));
  }
  auto s = std::make_unique<State>();
  s->rank = rank;
  s->world = world;
  s->timeout = timeout;
  FERRY_RETURN_IF_ERROR(CudaStatus(cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking), "cudaStreamCreate"));
  FERRY_RETURN_IF_ERROR(CudaStatus(cudaEventCreateWithFlags(&s->ready, cudaEventDisableTiming), "cudaEventCreate"));
  FERRY_RETURN_IF_ERROR(CudaStatus(cudaEventCreateWithFlags(&s->done, cudaEventDisableTiming), "cudaEventCreate"));
  // Nonblocking, so that a rank that never joins cannot hold this one past the timeout.
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  const auto what = [&] { return absl::StrCat("joining the NCCL group of ", world, " ranks as rank ", rank); };
  const Clock::time_point deadline = Clock::now() + timeout;
  ncclResult_t r = ncclCommInitRankConfig(&s->comm, world, id, rank, &config);
  if (r != ncclSuccess && r != ncclInProgress) return s->NcclError(r, what);
  std::vector<int> peers;
  for (int q = 0; q < world; ++q) {
    if (q != rank) peers.push_back(q);
  }
  FERRY_RETURN_IF_ERROR(s->Queued(r, deadline, peers, what));
  return std::unique_ptr<NcclCollective>(new NcclCollective(std::move(s)));
}

absl::Status NcclCollective::AllReduceSum(float* data, int64_t n) {
  // A call that fails part way may leave transfers queued that still read or write its buffers:
  // the communicator goes with it (the group is out of step anyway).
  absl::Status st = Reduce(data, n);
  if (!st.ok()) s_->Abort();
  return st;
}

absl::Status NcclCollective::Exchange(const std::vector<std::span<const float>>& send,
                                      const std::vector<std::span<float>>& recv) {
  absl::Status st = Swap(send, recv);
  if (!st.ok()) s_->Abort();
  return st;
}

void NcclCollective::Abandon() { s_->Abort(); }

absl::Status NcclCollective::Reduce(float* data, int64_t n) {
  State& s = *s_;
  const int W = s.world, me = s.rank;
  if (W == 1 || n == 0) return absl::OkStatus();
  const auto what = [&] { return absl::StrCat("the reduction of ", n, " floats over ", W, " ranks"); };
  const Clock::time_point deadline = Clock::now() + s.timeout;
  FERRY_RETURN_IF_ERROR(s.Begin("the reduction"));
  // Slice q = [q c, min((q + 1) c, n)), as dataplane/collectives.h cuts it.
  const int64_t c = (n + W - 1) / W;
  auto begin = [&](int q) { return std::min<int64_t>(q * c, n); };
  auto len = [&](int q) { return std::min<int64_t>(begin(q) + c, n) - begin(q); };
  const int64_t m = len(me);
  const bool host = !OnDevice(data);
  FERRY_ASSIGN_OR_RETURN(float* scratch, s.Scratch(static_cast<size_t>(W * m + (host ? n : 0))));
  float* parts = scratch;  // [W, m]: every rank's copy of this rank's slice
  float* x = host ? scratch + W * m : data;
  const size_t fb = sizeof(float);
  if (host) {
    FERRY_RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(x, data, n * fb, cudaMemcpyHostToDevice, s.stream), what));
  }
  std::vector<int> peers;
  for (int q = 0; q < W; ++q) {
    if (q != me) peers.push_back(q);
  }
  // 1. Slice q of this rank's buffer to rank q; every rank's copy of this rank's slice here.
  s.Note(ncclGroupStart());
  for (int q : peers) {
    if (m > 0) s.Note(ncclRecv(parts + q * m, static_cast<size_t>(m), ncclFloat, q, s.comm, s.stream));
    if (len(q) > 0) s.Note(ncclSend(x + begin(q), static_cast<size_t>(len(q)), ncclFloat, q, s.comm, s.stream));
  }
  FERRY_RETURN_IF_ERROR(s.Queued(s.GroupEnd(), deadline, peers, what));
  if (m > 0) {
    FERRY_RETURN_IF_ERROR(CudaStatus(
        cudaMemcpyAsync(parts + me * m, x + begin(me), m * fb, cudaMemcpyDeviceToDevice, s.stream), what));
    // 2. The slice summed in rank order, into its place.
    FERRY_RETURN_IF_ERROR(kernels::cuda::SumInRankOrderF32(parts, W, m, m, x + begin(me), s.stream));
  }
  // 3. The summed slices to every rank.
  s.Note(ncclGroupStart());
  for (int q : peers) {
    if (m > 0) s.Note(ncclSend(x + begin(me), static_cast<size_t>(m), ncclFloat, q, s.comm, s.stream));
    if (len(q) > 0) s.Note(ncclRecv(x + begin(q), static_cast<size_t>(len(q)), ncclFloat, q, s.comm, s.stream));
  }
  FERRY_RETURN_IF_ERROR(s.Queued(s.GroupEnd(), deadline, peers, what));
  int64_t floats = (W - 1) * m;
  for (int q : peers) floats += len(q);
  s.bytes += floats * static_cast<int64_t>(fb);
  FERRY_RETURN_IF_ERROR(s.Finish(deadline, peers, what));
  // Back to pageable host memory only now: such a copy blocks the host until the stream gets to
  // it, which must not be a wait on a peer outside the watchdog.
  return host ? CudaStatus(cudaMemcpy(data, x, n * fb, cudaMemcpyDeviceToHost), what) : absl::OkStatus();
}

absl::Status NcclCollective::Swap(const std::vector<std::span<const float>>& send,
                                  const std::vector<std::span<float>>& recv) {
  State& s = *s_;
  const int W = s.world, me = s.rank;
  if (static_cast<int>(send.size()) != W || static_cast<int>(recv.size()) != W) {
    return absl::InvalidArgumentError(absl::StrCat("Exchange over ", W, " ranks got ", send.size(), " sends and ",
                                                   recv.size(), " receives"));
  }
  const Clock::time_point deadline = Clock::now() + s.timeout;
  FERRY_RETURN_IF_ERROR(s.Begin("the exchange"));
  // Host buffers go through the scratch: sends first, then receives, each at its offset.
  std::vector<const float*> from(static_cast<size_t>(W), nullptr);
  std::vector<float*> into(static_cast<size_t>(W), nullptr);
  std::vector<size_t> send_at(static_cast<size_t>(W), SIZE_MAX), recv_at(static_cast<size_t>(W), SIZE_MAX);
  size_t staged = 0;
  int64_t floats = 0;
  std::vector<int> peers;
  for (int q = 0; q < W; ++q) {
    if (q == me) continue;
    const size_t k = static_cast<size_t>(q);
    if (!send[k].empty() && !OnDevice(send[k].data())) send_at[k] = std::exchange(staged, staged + send[k].size());
    if (!recv[k].empty() && !OnDevice(recv[k].data())) recv_at[k] = std::exchange(staged, staged + recv[k].size());
    if (!send[k].empty() || !recv[k].empty()) peers.push_back(q);
    floats += static_cast<int64_t>(send[k].size());
  }
  if (peers.empty()) return absl::OkStatus();
  const auto what = [&] {
    return absl::StrCat("the exchange of ", floats, " words with rank", peers.size() == 1 ? " " : "s ",
                        absl::StrJoin(peers, ", "));
  };
  float* scratch = nullptr;
  if (staged > 0) {
    FERRY_ASSIGN_OR_RETURN(scratch, s.Scratch(staged));
  }
  const size_t fb = sizeof(float);
  for (int q : peers) {
    const size_t k = static_cast<size_t>(q);
    from[k] = send[k].data();
    into[k] = recv[k].data();
    if (send_at[k] != SIZE_MAX) {
      from[k] = scratch + send_at[k];
      FERRY_RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(scratch + send_at[k], send[k].data(), send[k].size() * fb,
                                                       cudaMemcpyHostToDevice, s.stream), what));
    }
    if (recv_at[k] != SIZE_MAX) into[k] = scratch + recv_at[k];
  }
  s.Note(ncclGroupStart());
  for (int q : peers) {
    const size_t k = static_cast<size_t>(q);
    if (!recv[k].empty()) s.Note(ncclRecv(into[k], recv[k].size(), ncclFloat, q, s.comm, s.stream));
    if (!send[k].empty()) s.Note(ncclSend(from[k], send[k].size(), ncclFloat, q, s.comm, s.stream));
  }
  FERRY_RETURN_IF_ERROR(s.Queued(s.GroupEnd(), deadline, peers, what));
  s.bytes += floats * static_cast<int64_t>(fb);
  FERRY_RETURN_IF_ERROR(s.Finish(deadline, peers, what));
  for (int q : peers) {  // staged receives back to the host once they arrived (see AllReduceSum)
    const size_t k = static_cast<size_t>(q);
    if (recv_at[k] == SIZE_MAX) continue;
    FERRY_RETURN_IF_ERROR(CudaStatus(cudaMemcpy(recv[k].data(), into[k], recv[k].size() * fb, cudaMemcpyDeviceToHost), what));
  }
  return absl::OkStatus();
}

int64_t NcclCollective::TakeBytes() { return std::exchange(s_->bytes, 0); }

#else  // no NCCL in this build

struct NcclCollective::State {};
NcclCollective::NcclCollective(std::unique_ptr<State> state) : s_(std::move(state)) {}
NcclCollective::~NcclCollective() = default;
absl::StatusOr<std::unique_ptr<NcclCollective>> NcclCollective::Create(model::Collective*, int, int,
                                                                       std::chrono::milliseconds) {
  return absl::FailedPreconditionError("this build has no NCCL (libnccl was not found when it was built): use "
                                       "--dataplane ucx");
}
absl::Status NcclCollective::AllReduceSum(float*, int64_t) { return absl::FailedPreconditionError("no NCCL"); }
absl::Status NcclCollective::Exchange(const std::vector<std::span<const float>>&,
                                      const std::vector<std::span<float>>&) {
  return absl::FailedPreconditionError("no NCCL");
}
int64_t NcclCollective::TakeBytes() { return 0; }
void NcclCollective::Abandon() {}

#endif

absl::StatusOr<std::string> ResolveDeviceDataPlane(const std::string& wanted, model::Collective* bootstrap, int rank,
                                                   int world) {
  if (wanted != "auto" && wanted != "nccl" && wanted != "ucx") {
    return absl::InvalidArgumentError(absl::StrCat("--dataplane ", wanted, ": use auto, nccl or ucx"));
  }
  if (wanted == "ucx") return wanted;
#if !FERRY_WITH_NCCL
  if (wanted == "nccl") return NcclCollective::Create(nullptr, rank, world, {}).status();
  return std::string("ucx");
#else
  if (world == 1) return std::string(wanted == "nccl" ? "nccl" : "ucx");
  if (bootstrap == nullptr) return absl::InvalidArgumentError("--dataplane: no host collective to compare GPUs over");
  // Every rank's GPU identity to every rank (8 words each). A rank that cannot tell its own still
  // takes part (zeros), so that no peer waits for it, and fails after.
  const absl::StatusOr<std::string> mine = CurrentGpuIdentity();
  constexpr size_t kBytes = 32, kWords = kBytes / sizeof(float);
  std::vector<float> own(kWords, 0.0f), all(kWords * static_cast<size_t>(world));
  if (mine.ok()) std::memcpy(own.data(), mine->data(), std::min(mine->size(), kBytes));
  std::vector<std::span<const float>> send(static_cast<size_t>(world), own);
  std::vector<std::span<float>> recv(static_cast<size_t>(world));
  for (int q = 0; q < world; ++q) recv[static_cast<size_t>(q)] = std::span<float>(all.data() + q * kWords, kWords);
  std::memcpy(all.data() + rank * kWords, own.data(), kBytes);
  FERRY_RETURN_IF_ERROR(bootstrap->Exchange(send, recv));
  if (!mine.ok()) return mine.status();
  auto field = [&](int q, size_t at, size_t n) {
    return std::string(reinterpret_cast<const char*>(all.data() + q * kWords) + at, n);
  };
  for (int a = 0; a < world; ++a) {
    for (int b = a + 1; b < world; ++b) {
      const bool same_gpu = field(a, 0, 16) == field(b, 0, 16);
      const bool same_device = field(a, 16, 16) == field(b, 16, 16);  // one host, one PCI device
      if (!same_gpu && !same_device) continue;
      if (wanted == "auto") return std::string("ucx");
      return absl::FailedPreconditionError(absl::StrCat(
          "--dataplane nccl: ranks ", a, " and ", b, same_gpu ? " share GPU " : " share the PCI device of GPU ",
          UuidText(field(a, 0, 16)), "; NCCL needs a GPU a rank (give each rank its own GPU, or use --dataplane ucx)"));
    }
  }
  return std::string("nccl");
#endif
}

absl::StatusOr<std::unique_ptr<model::Collective>> DeviceCollective(const std::string& dataplane,
                                                                    model::Collective* bootstrap, int rank, int world,
                                                                    std::chrono::milliseconds timeout) {
  if (dataplane != "nccl") return std::unique_ptr<model::Collective>();
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<NcclCollective> nccl, NcclCollective::Create(bootstrap, rank, world, timeout));
  return std::unique_ptr<model::Collective>(std::move(nccl));
}

}  // namespace ferry::dataplane
