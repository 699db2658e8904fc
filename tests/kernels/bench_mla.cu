// ferry-kernel-check --bench-mla: MlaDecodeAttention's achieved memory bandwidth at the model
// shapes, against the card's measured read bandwidth.
//
// Reference: a streaming read of a 4 GiB buffer (16-byte loads, grid-stride), best of 10 runs.
// MLA: batch B query rows, each its own 8192-token conversation in 64-row pages (pages shuffled
// over the arena), 2048 selected tokens a row (random, ascending), latent 512, rope 0 or 64,
// heads 32 or 64; random data. Bytes counted: B * 2048 * (512 + rope) * 2 (the selected rows; q
// and the output are under 7% of that). To keep the cached rows out of L2 (50 MB on an H200) the
// launches rotate over enough independent input sets that >= 256 MB of other rows pass between
// two uses of one set. Each launch is timed alone with CUDA events (5 warm-up launches, then the
// median of 31), queued behind a 20 ms spin so the events see device time, not launch gaps.
// Each point runs twice: without a workspace (the cluster form) and with one (the persistent form
// where MlaDecodeWg takes it: more items than SMs); the two outputs of the last set must agree
// bit for bit (the bench fails otherwise). Then GatherKernel reads the same rows alone (no
// math): what the gather pattern itself reaches, in the same timing, against the streaming read.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "kernels/cuda/mla_decode_tc.h"
#include "kernels/cuda/ops.h"
#include "tests/kernels/harness.h"

namespace ferry::harness {
namespace {

namespace cu = kernels::cuda;

__global__ void ReadKernel(const uint4* __restrict__ p, size_t n, uint32_t* __restrict__ sink) {
  uint32_t acc = 0;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    const uint4 a = p[i], b = p[i + stride], c = p[i + 2 * stride], d = p[i + 3 * stride];
    acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^ d.w;
  }
  for (; i < n; i += stride) acc ^= p[i].x ^ p[i].y ^ p[i].z ^ p[i].w;
  if (acc == 0x9e3779b9u) sink[0] = acc;  // keeps the loads; practically never stores
}

// The rows the MLA launch reads, alone: warp w of the grid reads whole rows w, w + warps, ...
// (16-byte loads, kRowsInFlight rows a warp at once), where row i is `width` bf16 at arena +
// offs[i]. The gather's achievable bandwidth, for comparison with the streaming read's.
constexpr int kRowsInFlight = 4;
__global__ void GatherKernel(const uint16_t* __restrict__ arena, const int64_t* __restrict__ offs, int n_rows,
                             int width, uint32_t* __restrict__ sink) {
  const int lane = threadIdx.x & 31, warps = gridDim.x * (blockDim.x >> 5);
  const int chunks = width / 8;
  uint32_t acc = 0;
  for (int i0 = (blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5)) * kRowsInFlight; i0 < n_rows;
       i0 += warps * kRowsInFlight) {
    uint4 v[kRowsInFlight][3];
#pragma unroll
    for (int k = 0; k < kRowsInFlight; ++k) {
      const int i = i0 + k;
      const uint4* row = reinterpret_cast<const uint4*>(arena + (i < n_rows ? offs[i] : 0));
#pragma unroll
      for (int c = 0; c < 3; ++c) {
        v[k][c] = i < n_rows && lane + 32 * c < chunks ? row[lane + 32 * c] : make_uint4(0, 0, 0, 0);
      }
    }
#pragma unroll
    for (int k = 0; k < kRowsInFlight; ++k) {
#pragma unroll
      for (int c = 0; c < 3; ++c) acc ^= v[k][c].x ^ v[k][c].y ^ v[k][c].z ^ v[k][c].w;
    }
  }
  if (acc == 0x9e3779b9u) sink[0] = acc;
}

// Holds the stream for `ns` nanoseconds so that the host queues the timed launches (and their
// events) before the device reaches them: the events then bracket device time only.
__global__ void SpinKernel(long long ns) {
  long long start = 0, now = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
}

// bf16 of a hash-based uniform value in [-1, 1): random, non-zero data without a host round trip.
__global__ void FillKernel(uint16_t* p, size_t n, uint32_t seed) {
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    uint32_t x = static_cast<uint32_t>(i) * 0x9e3779b1u ^ seed ^ static_cast<uint32_t>(i >> 32) * 0x85ebca6bu;
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    const float v = static_cast<float>(x >> 8) * (2.0f / 16777216.0f) - 1.0f;
    const uint32_t bits = __float_as_uint(v);
    p[i] = static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
  }
}

// Best-of-10 read bandwidth over `bytes`, GB/s.
double ReadBandwidth(size_t bytes) {
  void* buf = nullptr;
  uint32_t* sink = nullptr;
  if (cudaMalloc(&buf, bytes) != cudaSuccess || cudaMalloc(&sink, 4) != cudaSuccess) return -1;
  FillKernel<<<2048, 256>>>(static_cast<uint16_t*>(buf), bytes / 2, 7);
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  float best = 1e30f;
  for (int run = 0; run < 12; ++run) {
    cudaEventRecord(a);
    ReadKernel<<<sms * 4, 512>>>(static_cast<const uint4*>(buf), bytes / 16, sink);
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    if (run >= 2) best = std::min(best, ms);
  }
  const bool ok = cudaGetLastError() == cudaSuccess;
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  cudaFree(buf);
  cudaFree(sink);
  return ok ? bytes / (best * 1e-3) / 1e9 : -1;
}

struct MlaPoint {
  int batch, heads, rope;
  double us, gbs;        // without a workspace (the cluster form)
  double gather_us, gather_gbs;  // GatherKernel over the same rows
  double us_ws, gbs_ws;  // with one (the persistent form where it applies)
  long nan, differ;      // NaN outputs; outputs that differ between the two
};

constexpr int kContext = 8192, kPageRows = 64, kSel = 2048, kLatent = 512;

// One (batch, heads, rope) point over an arena of `n_conv` conversations (bf16 rows of 576).
// per_head: q shifted off 16-byte alignment, which sends the op to its per-(row, head) kernel (the
// implementation before the tensor-core path), for the same work.
int TimeMla(uint16_t* arena, int64_t n_conv, int batch, int heads, int rope, bool per_head, std::mt19937& rng,
            void* ws, int64_t ws_bytes, MlaPoint* pt) {
  const int64_t W = kLatent + rope, pages_per_conv = kContext / kPageRows;
  const double set_bytes = double(batch) * kSel * W * 2;
  const int64_t sets = std::min<int64_t>(n_conv / batch, std::max<int64_t>(2, int64_t(256e6 / set_bytes) + 1));
  if (sets < 2) return fprintf(stderr, "bench: arena too small for batch %d\n", batch), -1;
  // Pages of all conversations shuffled over the arena; set s row b is conversation s * batch + b.
  std::vector<int32_t> pages(n_conv * pages_per_conv);
  std::iota(pages.begin(), pages.end(), 0);
  std::shuffle(pages.begin(), pages.end(), rng);
  std::vector<int32_t> sel, offsets;
  std::vector<int32_t> all(kContext);
  for (int64_t s = 0; s < sets; ++s) {
    offsets.push_back(static_cast<int32_t>(sel.size()));  // set s starts at entry s * (batch + 1)
    for (int b = 0; b < batch; ++b) {
      std::iota(all.begin(), all.end(), 0);
      std::shuffle(all.begin(), all.end(), rng);
      std::sort(all.begin(), all.begin() + kSel);
      sel.insert(sel.end(), all.begin(), all.begin() + kSel);
      offsets.push_back(static_cast<int32_t>(sel.size()));
    }
  }
  int32_t *dpages = nullptr, *dsel = nullptr, *doff = nullptr;
  uint16_t *q = nullptr, *out = nullptr;
  const size_t q_elems = size_t(sets) * batch * heads * W;
  BENCH_CHECK(cudaMalloc(&dpages, pages.size() * 4));
  BENCH_CHECK(cudaMalloc(&dsel, sel.size() * 4));
  BENCH_CHECK(cudaMalloc(&doff, offsets.size() * 4));
  BENCH_CHECK(cudaMalloc(&q, (q_elems + 8) * 2));
  BENCH_CHECK(cudaMalloc(&out, size_t(batch) * heads * kLatent * 2));
  BENCH_CHECK(cudaMemcpy(dpages, pages.data(), pages.size() * 4, cudaMemcpyHostToDevice));
  BENCH_CHECK(cudaMemcpy(dsel, sel.data(), sel.size() * 4, cudaMemcpyHostToDevice));
  BENCH_CHECK(cudaMemcpy(doff, offsets.data(), offsets.size() * 4, cudaMemcpyHostToDevice));
  FillKernel<<<1024, 256>>>(q, q_elems + 8, 11);
  // q_abs of set s at q + s * batch * heads * W, its q_pe right after (batch * heads * latent).
  bool use_ws = false;
  auto launch = [&](int64_t s) {
    uint16_t* qa = q + s * batch * heads * W + (per_head ? 4 : 0);
    cu::PagedCacheBf16 c;
    c.arena = arena;
    c.n_pages = n_conv * pages_per_conv;
    c.page_rows = kPageRows;
    c.page_stride = kPageRows * W;
    c.width = W;
    c.page_table = dpages + s * batch * pages_per_conv;
    c.table_stride = pages_per_conv;
    return cu::MlaDecodeAttention(qa, rope > 0 ? qa + int64_t(batch) * heads * kLatent : nullptr, batch, heads,
                                  kLatent, rope, c, dsel, doff + s * (batch + 1), 1.0f / 16.0f, out, nullptr,
                                  use_ws ? ws : nullptr, use_ws ? ws_bytes : 0);
  };
  // Each form's timing, then its output of the last set launched ((kWarm + kTimed - 1) % sets).
  double us = 0, us_ws = 0;
  std::vector<uint16_t> host(size_t(batch) * heads * kLatent), host_ws(host.size());
  if (BenchMedianUs(sets, launch, &us) != 0) return -1;
  BENCH_CHECK(cudaMemcpy(host.data(), out, host.size() * 2, cudaMemcpyDeviceToHost));
  use_ws = true;
  if (BenchMedianUs(sets, launch, &us_ws) != 0) return -1;
  BENCH_CHECK(cudaMemcpy(host_ws.data(), out, host.size() * 2, cudaMemcpyDeviceToHost));
  {  // the same rows by GatherKernel
    std::vector<int64_t> offs;
    for (int64_t st = 0; st < sets; ++st) {
      for (int b = 0; b < batch; ++b) {
        const int32_t* row_sel = sel.data() + offsets[st * (batch + 1) + b];
        const int32_t* table = pages.data() + (st * batch + b) * pages_per_conv;
        for (int j = 0; j < kSel; ++j) {
          offs.push_back(int64_t(table[row_sel[j] / kPageRows]) * kPageRows * W + (row_sel[j] % kPageRows) * W);
        }
      }
    }
    int64_t* doffs = nullptr;
    uint32_t* sink = nullptr;
    BENCH_CHECK(cudaMalloc(&doffs, offs.size() * 8));
    BENCH_CHECK(cudaMalloc(&sink, 4));
    BENCH_CHECK(cudaMemcpy(doffs, offs.data(), offs.size() * 8, cudaMemcpyHostToDevice));
    int sms = 0;
    BENCH_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    const int n_rows = batch * kSel;
    auto gather = [&](int64_t st) {
      GatherKernel<<<sms * 8, 256>>>(arena, doffs + st * n_rows, n_rows, static_cast<int>(W), sink);
      return cudaGetLastError() == cudaSuccess ? absl::OkStatus() : absl::InternalError("gather launch");
    };
    if (BenchMedianUs(sets, gather, &pt->gather_us) != 0) return -1;
    pt->gather_gbs = set_bytes / (pt->gather_us * 1e-6) / 1e9;
    cudaFree(doffs);
    cudaFree(sink);
  }
  pt->nan = std::count_if(host.begin(), host.end(), [](uint16_t b) { return (b & 0x7f80) == 0x7f80; });
  pt->differ = 0;
  for (size_t i = 0; i < host.size(); ++i) pt->differ += host[i] != host_ws[i];
  pt->batch = batch;
  pt->heads = heads;
  pt->rope = rope;
  pt->us = us;
  pt->gbs = set_bytes / (pt->us * 1e-6) / 1e9;
  pt->us_ws = us_ws;
  pt->gbs_ws = set_bytes / (pt->us_ws * 1e-6) / 1e9;
  cudaFree(dpages);
  cudaFree(dsel);
  cudaFree(doff);
  cudaFree(q);
  cudaFree(out);
  return 0;
}

}  // namespace

// For the other benches (bench_indexer.cu, bench_gemv.cu): the same reference read, fill, spin and timing.
double BenchReadBandwidth(size_t bytes) { return ReadBandwidth(bytes); }
void BenchFillBf16(uint16_t* p, size_t n, uint32_t seed) { FillKernel<<<4096, 256>>>(p, n, seed); }
void BenchSpin(long long ns) { SpinKernel<<<1, 1>>>(ns); }

int BenchMedianUs(int64_t sets, const std::function<absl::Status(int64_t)>& launch, double* us) {
  constexpr int kWarm = 5, kTimed = 31;
  std::vector<cudaEvent_t> ev(2 * kTimed);
  for (cudaEvent_t& e : ev) BENCH_CHECK(cudaEventCreate(&e));
  SpinKernel<<<1, 1>>>(20'000'000);
  for (int i = 0; i < kWarm + kTimed; ++i) {
    const int t = i - kWarm;
    if (t >= 0) BENCH_CHECK(cudaEventRecord(ev[2 * t]));
    if (absl::Status st = launch(i % sets); !st.ok()) {
      return fprintf(stderr, "bench: %s\n", std::string(st.message()).c_str()), -1;
    }
    if (t >= 0) BENCH_CHECK(cudaEventRecord(ev[2 * t + 1]));
  }
  BENCH_CHECK(cudaDeviceSynchronize());
  std::vector<float> ms(kTimed);
  for (int t = 0; t < kTimed; ++t) BENCH_CHECK(cudaEventElapsedTime(&ms[t], ev[2 * t], ev[2 * t + 1]));
  for (cudaEvent_t& e : ev) cudaEventDestroy(e);
  std::sort(ms.begin(), ms.end());
  *us = ms[kTimed / 2] * 1e3;
  return 0;
}

int RunMlaBench() {
  cudaDeviceProp prop{};
  BENCH_CHECK(cudaGetDeviceProperties(&prop, 0));
  const double read_gbs = ReadBandwidth(size_t{4} << 30);
  printf("device: %s, %d SMs, L2 %d MiB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);
  printf("read bandwidth (4 GiB streaming read, best of 10): %.0f GB/s\n", read_gbs);
  if (read_gbs <= 0) return 1;
  // 160 conversations of 8192 rows of 576 bf16: 1.5 GB, room for 2 sets of batch 64 and 1 of 128.
  const int64_t n_conv = 160;
  uint16_t* arena = nullptr;
  const size_t arena_elems = size_t(n_conv) * kContext * (kLatent + 64);
  BENCH_CHECK(cudaMalloc(&arena, arena_elems * 2));
  FillKernel<<<4096, 256>>>(arena, arena_elems, 3);
  BENCH_CHECK(cudaDeviceSynchronize());
  std::mt19937 rng(1);
  // The persistent form's workspace: every batch below in one launch pair.
  const int64_t ws_bytes = cu::MlaDecodeWorkspaceBytes(64, 64);
  void* ws = nullptr;
  BENCH_CHECK(cudaMalloc(&ws, ws_bytes));
  std::vector<MlaPoint> points;
  for (int heads : {64, 32}) {
    for (int rope : {64, 0}) {
      const bool tc = cu::MlaTcApplies(arena, arena, 1, heads, kLatent, rope);
      printf("heads %d rope %d: %s\n", heads, rope, tc ? "tensor-core path" : "per-head path");
      for (int batch : {1, 8, 16, 32, 64}) {
        MlaPoint pt;
        if (TimeMla(arena, n_conv, batch, heads, rope, false, rng, ws, ws_bytes, &pt) != 0) return 1;
        points.push_back(pt);
      }
    }
  }
  std::vector<MlaPoint> before;
  for (int heads : {64, 32}) {
    for (int batch : {8, 64}) {
      MlaPoint pt;
      if (TimeMla(arena, n_conv, batch, heads, 64, true, rng, nullptr, 0, &pt) != 0) return 1;
      before.push_back(pt);
    }
  }
  cudaFree(arena);
  cudaFree(ws);
  printf("\nper-head kernel (the implementation before the tensor-core path), rope 64:\n");
  printf("| batch | heads | median us | GB/s | %% of read BW |\n|---|---|---|---|---|\n");
  for (const MlaPoint& p : before) {
    printf("| %d | %d | %.1f | %.0f | %.1f%% |\n", p.batch, p.heads, p.us, p.gbs, 100.0 * p.gbs / read_gbs);
  }
  printf("\nwithout a workspace (cluster form) | with one (persistent form where it applies):\n");
  printf("| batch | heads | rope | bytes (MB) | us | GB/s | %% of read BW | us, ws | GB/s, ws | %% of read BW, ws | "
         "NaN outputs | outputs differing | gather us | gather GB/s |\n");
  printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const MlaPoint& p : points) {
    printf("| %d | %d | %d | %.1f | %.1f | %.0f | %.1f%% | %.1f | %.0f | %.1f%% | %ld | %ld | %.1f | %.0f |\n",
           p.batch, p.heads, p.rope, double(p.batch) * kSel * (kLatent + p.rope) * 2 / 1e6, p.us, p.gbs,
           100.0 * p.gbs / read_gbs, p.us_ws, p.gbs_ws, 100.0 * p.gbs_ws / read_gbs, p.nan, p.differ, p.gather_us,
           p.gather_gbs);
  }
  long differ = 0;
  for (const MlaPoint& p : points) differ += p.differ;
  if (differ != 0) {
    printf("FAILED: %ld outputs differ between the forms (they must give the same bits)\n", differ);
    return 1;
  }
  return 0;
}

}  // namespace ferry::harness
