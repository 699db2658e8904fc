// ferry-kernel-check --bench-indexer: IndexerScores's achieved memory bandwidth at the model
// shapes (32 heads x 128, bf16 keys in 64-row pages), against the card's measured read bandwidth
// (bench_mla.cu's reference: a streaming read of 4 GiB, best of 10).
//
// Batch B rows of n keys each (every row its own conversation, all n keys visible), pages drawn at
// random from a 4 GiB arena. Bytes counted: B * n * 256 (the keys; q, w and the float32 scores are
// under 2% of that). To keep keys out of L2 (50 MB on an H200) the launches rotate over enough
// disjoint page sets that >= 256 MB of other keys pass between two uses of one set. Each launch is
// timed alone with CUDA events (5 warm-up launches, then the median of 31) behind a 20 ms spin, as
// in bench_mla.cu. "old": the CUDA-core kernel, reached by passing qi at a 2-byte offset (the
// tensor-core path needs it 4-byte aligned), for the same work. max rel diff: the largest
// |tc - old| / max |old| over one launch's scores.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/ops.h"
#include "tests/kernels/harness.h"

namespace ferry::harness {
namespace {

namespace cu = kernels::cuda;

constexpr int64_t kHeads = 32, kDim = 128, kPageRows = 64;
constexpr int64_t kArenaPages = (int64_t{4} << 30) / (kPageRows * kDim * 2);  // 4 GiB of keys

struct Point {
  int batch;
  int64_t keys;
  double us_old, us_new, rel_diff;
};

int TimePoint(const uint16_t* arena, int batch, int64_t keys, std::mt19937& rng, Point* pt) {
  const int64_t ppr = keys / kPageRows;
  const double set_bytes = double(batch) * keys * kDim * 2;
  const int64_t sets = std::min<int64_t>(kArenaPages / (batch * ppr), int64_t(256e6 / set_bytes) + 2);
  if (sets < 2) return fprintf(stderr, "bench: arena too small for batch %d x %ld\n", batch, long(keys)), -1;
  std::vector<int32_t> pages(kArenaPages);
  std::iota(pages.begin(), pages.end(), 0);
  std::shuffle(pages.begin(), pages.end(), rng);
  pages.resize(sets * batch * ppr);  // set s row b: entries (s * batch + b) * ppr ..
  std::vector<int32_t> n_keys(batch, static_cast<int32_t>(keys));
  int32_t *dpages = nullptr, *dn = nullptr;
  uint16_t* q = nullptr;
  float *w = nullptr, *scores = nullptr, *ref = nullptr;
  const size_t q_elems = size_t(sets) * batch * kHeads * kDim;
  BENCH_CHECK(cudaMalloc(&dpages, pages.size() * 4));
  BENCH_CHECK(cudaMalloc(&dn, batch * 4));
  BENCH_CHECK(cudaMalloc(&q, (q_elems + 8) * 2));
  BENCH_CHECK(cudaMalloc(&w, size_t(batch) * kHeads * 4));
  BENCH_CHECK(cudaMalloc(&scores, size_t(batch) * keys * 4));
  BENCH_CHECK(cudaMalloc(&ref, size_t(batch) * keys * 4));
  BENCH_CHECK(cudaMemcpy(dpages, pages.data(), pages.size() * 4, cudaMemcpyHostToDevice));
  BENCH_CHECK(cudaMemcpy(dn, n_keys.data(), batch * 4, cudaMemcpyHostToDevice));
  std::vector<float> wh(size_t(batch) * kHeads, 1.0f / std::sqrt(float(kHeads)));
  BENCH_CHECK(cudaMemcpy(w, wh.data(), wh.size() * 4, cudaMemcpyHostToDevice));
  BenchFillBf16(q, q_elems + 8, 11);
  auto launcher = [&](bool old, float* out) {
    return [=](int64_t s) {
      cu::PagedCacheBf16 c;
      c.arena = arena;
      c.n_pages = kArenaPages;
      c.page_rows = kPageRows;
      c.page_stride = kPageRows * kDim;
      c.width = kDim;
      c.page_table = dpages + s * batch * ppr;
      c.table_stride = ppr;
      return cu::IndexerScores(q + s * batch * kHeads * kDim + (old ? 1 : 0), w, batch, kHeads, kDim, c, dn,
                               1.0f / std::sqrt(float(kDim)), out, keys);
    };
  };
  if (BenchMedianUs(sets, launcher(false, scores), &pt->us_new) != 0) return -1;
  if (BenchMedianUs(sets, launcher(true, ref), &pt->us_old) != 0) return -1;
  // Set 0 both ways, on the same queries: the old kernel reads a copy of them at a 2-byte offset.
  const size_t n = size_t(batch) * keys;
  std::vector<float> a(n), b(n);
  {
    cu::PagedCacheBf16 c;
    c.arena = arena;
    c.n_pages = kArenaPages;
    c.page_rows = kPageRows;
    c.page_stride = kPageRows * kDim;
    c.width = kDim;
    c.page_table = dpages;
    c.table_stride = ppr;
    uint16_t* qm = nullptr;
    BENCH_CHECK(cudaMalloc(&qm, (size_t(batch) * kHeads * kDim + 8) * 2));
    BENCH_CHECK(cudaMemcpy(qm + 1, q, size_t(batch) * kHeads * kDim * 2, cudaMemcpyDeviceToDevice));
    const float scale = 1.0f / std::sqrt(float(kDim));
    absl::Status s1 = cu::IndexerScores(q, w, batch, kHeads, kDim, c, dn, scale, scores, keys);
    absl::Status s2 = cu::IndexerScores(qm + 1, w, batch, kHeads, kDim, c, dn, scale, ref, keys);
    if (!s1.ok() || !s2.ok()) return fprintf(stderr, "bench: check launch failed\n"), -1;
    BENCH_CHECK(cudaDeviceSynchronize());
    BENCH_CHECK(cudaMemcpy(a.data(), scores, n * 4, cudaMemcpyDeviceToHost));
    BENCH_CHECK(cudaMemcpy(b.data(), ref, n * 4, cudaMemcpyDeviceToHost));
    cudaFree(qm);
  }
  double mx = 0, diff = 0;
  for (size_t i = 0; i < n; ++i) {
    mx = std::max(mx, double(std::fabs(b[i])));
    diff = std::max(diff, double(std::fabs(a[i] - b[i])));
    if (std::isnan(a[i]) != std::isnan(b[i])) diff = INFINITY;
  }
  pt->batch = batch;
  pt->keys = keys;
  pt->rel_diff = mx > 0 ? diff / mx : diff;
  cudaFree(dpages);
  cudaFree(dn);
  cudaFree(q);
  cudaFree(w);
  cudaFree(scores);
  cudaFree(ref);
  return 0;
}

}  // namespace

int RunIndexerBench() {
  cudaDeviceProp prop{};
  BENCH_CHECK(cudaGetDeviceProperties(&prop, 0));
  const double read_gbs = BenchReadBandwidth(size_t{4} << 30);
  printf("device: %s, %d SMs, L2 %d MiB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);
  printf("read bandwidth (4 GiB streaming read, best of 10): %.0f GB/s\n", read_gbs);
  if (read_gbs <= 0) return 1;
  uint16_t* arena = nullptr;
  const size_t arena_elems = size_t(kArenaPages) * kPageRows * kDim;
  BENCH_CHECK(cudaMalloc(&arena, arena_elems * 2));
  BenchFillBf16(arena, arena_elems, 3);
  BENCH_CHECK(cudaDeviceSynchronize());
  std::mt19937 rng(1);
  std::vector<Point> points;
  for (int batch : {1, 8, 64}) {
    for (int64_t keys : {4096, 32768, 131072}) {
      Point pt;
      if (TimePoint(arena, batch, keys, rng, &pt) != 0) return 1;
      points.push_back(pt);
    }
  }
  cudaFree(arena);
  printf("\nIndexerScores, %ld heads x %ld, bf16 keys in %ld-row pages (old: CUDA-core kernel; new: tensor cores)\n",
         long(kHeads), long(kDim), long(kPageRows));
  printf("| batch | keys | MB read | old us | old GB/s | old %% BW | new us | new GB/s | new %% BW | speed-up |"
         " max rel diff |\n|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const Point& p : points) {
    const double bytes = double(p.batch) * p.keys * kDim * 2;
    const double go = bytes / (p.us_old * 1e-6) / 1e9, gn = bytes / (p.us_new * 1e-6) / 1e9;
    printf("| %d | %ld | %.1f | %.1f | %.0f | %.1f%% | %.1f | %.0f | %.1f%% | %.2fx | %.1e |\n", p.batch,
           long(p.keys), bytes / 1e6, p.us_old, go, 100.0 * go / read_gbs, p.us_new, gn, 100.0 * gn / read_gbs,
           p.us_old / p.us_new, p.rel_diff);
  }
  return 0;
}

}  // namespace ferry::harness
