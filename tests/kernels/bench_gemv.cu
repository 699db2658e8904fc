// ferry-kernel-check --bench-gemv: the decode-sized products' achieved memory bandwidth at the
// models' matrix shapes (the matrices of one batch-1 decode step of GLM-5.2 and GLM-5.3-Flash),
// against the card's measured read bandwidth (bench_mla.cu's reference).
//
// Each point: LinearBf16 over `rows` rows (GemvBf16 up to kGemvMaxRows) and, for comparison, the
// same call with x at a 2-byte offset, which GemvApplies refuses, so it takes cuBLAS ("cublas"; on
// an x that is not 16-byte aligned cuBLAS may pick other kernels than the model's calls get);
// for the experts, MoeGemvBf16 over top-8 + the shared expert against GroupedLinearBf16 over the
// same nine matrices. Bytes counted: the matrices read (x and y are under 1%). Matrices rotate
// over enough copies that >= 256 MB of others pass between two uses of one (none is in L2); each
// launch is timed alone with CUDA events behind a 20 ms spin (5 warm-up, median of 31), as in
// bench_mla.cu.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "kernels/cuda/gemv.h"
#include "kernels/cuda/ops.h"
#include "tests/kernels/harness.h"

namespace ferry::harness {
namespace {

namespace cu = kernels::cuda;

struct Shape {
  const char* name;
  int64_t in, out;
  bool experts;  // nine [out, in] matrices (8 routed + shared) through the MoE dispatch
};

// One shape at `rows` rows: prints a table line. Returns 0 when both ways ran.
int TimeShape(const Shape& s, int64_t rows, double read_gbs) {
  const int64_t mats = s.experts ? 9 : 1;
  const double bytes = double(mats) * s.in * s.out * 2;
  const int64_t copies = std::max<int64_t>(2, int64_t(256e6 / bytes) + 2);
  uint16_t *w = nullptr, *x = nullptr, *y = nullptr;
  const size_t w_elems = size_t(copies) * mats * s.in * s.out;
  BENCH_CHECK(cudaMalloc(&w, w_elems * 2));
  BENCH_CHECK(cudaMalloc(&x, (size_t(rows) * 9 * s.in + 8) * 2));
  BENCH_CHECK(cudaMalloc(&y, size_t(rows) * 10 * s.out * 2));
  BenchFillBf16(w, w_elems, 7);
  BenchFillBf16(x, size_t(rows) * 9 * s.in + 8, 8);
  auto mat = [&](int64_t copy, int64_t m) { return w + (size_t(copy) * mats + m) * s.in * s.out; };
  double us_new = 0, us_old = 0;
  int rc = 0;
  if (!s.experts) {
    rc |= BenchMedianUs(copies, [&](int64_t c) { return cu::LinearBf16(x, rows, s.in, mat(c, 0), s.out, y); }, &us_new);
    rc |= BenchMedianUs(copies, [&](int64_t c) { return cu::LinearBf16(x + 1, rows, s.in, mat(c, 0), s.out, y); },
                     &us_old);
  } else {
    // Routing: row r takes experts 0..7, the shared expert is matrix 8 (the table's last entry).
    const int64_t K = 8, E = 8;
    std::vector<int32_t> ids(size_t(rows * K));
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t k = 0; k < K; ++k) ids[size_t(r * K + k)] = static_cast<int32_t>(k);
    }
    int32_t *d_ids = nullptr, *d_buf = nullptr;
    const uint16_t** tables = nullptr;
    const int64_t groups = cu::MoeMaxGroups(rows, K, E, true), pairs = rows * K + rows;
    BENCH_CHECK(cudaMalloc(&d_ids, ids.size() * 4));
    BENCH_CHECK(cudaMalloc(&d_buf, size_t(3 * groups + 2 + 2 * pairs) * 4));
    BENCH_CHECK(cudaMalloc(&tables, size_t(copies) * 9 * sizeof(uint16_t*)));
    BENCH_CHECK(cudaMemcpy(d_ids, ids.data(), ids.size() * 4, cudaMemcpyHostToDevice));
    std::vector<const uint16_t*> host_tables;
    for (int64_t c = 0; c < copies; ++c) {
      for (int64_t m = 0; m < 9; ++m) host_tables.push_back(mat(c, m));
    }
    BENCH_CHECK(cudaMemcpy(tables, host_tables.data(), host_tables.size() * sizeof(uint16_t*),
                           cudaMemcpyHostToDevice));
    const cu::MoePairs p{d_buf, d_buf + groups, d_buf + 2 * groups, d_buf + 3 * groups,
                         d_buf + 3 * groups + 2, d_buf + 3 * groups + 2 + pairs};
    if (absl::Status st = cu::MoeGroupPairs(d_ids, rows, K, E, true, p, d_buf + 3 * groups + 1); !st.ok()) {
      return fprintf(stderr, "bench: %s\n", std::string(st.message()).c_str()), -1;
    }
    // gate_up's layout: the gathered rows of x in, one output row a pair (the pair list is fixed).
    rc |= BenchMedianUs(copies, [&](int64_t c) {
      return cu::MoeGemvBf16(tables + c * 9, p, groups, rows, x, true, s.in, s.out, y, false, nullptr);
    }, &us_new);
    std::vector<cu::LinearGroupBf16> g(9);
    rc |= BenchMedianUs(copies, [&](int64_t c) {
      for (int64_t m = 0; m < 9; ++m) g[size_t(m)] = {x + 1, rows, mat(c, m), y + m * rows * s.out};
      return cu::GroupedLinearBf16(g.data(), 9, s.in, s.out);
    }, &us_old);
    cudaFree(d_ids);
    cudaFree(d_buf);
    cudaFree(tables);
  }
  cudaFree(w);
  cudaFree(x);
  cudaFree(y);
  if (rc != 0) return -1;
  const double gbs_new = bytes / (us_new * 1e3), gbs_old = bytes / (us_old * 1e3);
  printf("| %s | %ld x %ld%s | %ld | %.1f | %.1f | %.0f (%.1f%%) | %.1f | %.0f (%.1f%%) |\n", s.name, long(s.out),
         long(s.in), s.experts ? " x 9" : "", long(rows), bytes / 1e6, us_new, gbs_new, 100 * gbs_new / read_gbs, us_old,
         gbs_old, 100 * gbs_old / read_gbs);
  return 0;
}

}  // namespace

int RunGemvBench() {
  const double read_gbs = BenchReadBandwidth(size_t{4} << 30);
  if (read_gbs <= 0) return -1;
  printf("read bandwidth (best of 10, 4 GiB): %.0f GB/s\n\n", read_gbs);
  printf("| matrix | out x in | rows | MB | gemv us | gemv GB/s (%% read) | cublas us | cublas GB/s (%% read) |\n");
  printf("|---|---|---|---|---|---|---|---|\n");
  const Shape shapes[] = {
      {"glm-5.2 q_a", 6144, 2048, false},        {"glm-5.2 q_b", 2048, 16384, false},
      {"glm-5.2 kv_a", 6144, 576, false},        {"glm-5.2 indexer wk", 6144, 128, false},
      {"glm-5.2 indexer wq_b", 2048, 4096, false}, {"glm-5.2 o_proj", 16384, 6144, false},
      {"glm-5.2 mlp gate_up", 6144, 24576, false}, {"glm-5.2 mlp down", 12288, 6144, false},
      {"glm-5.2 experts gate_up", 6144, 4096, true}, {"glm-5.2 experts down", 2048, 6144, true},
      {"glm-5.3-flash kda q/k/v", 4096, 8192, false}, {"glm-5.3-flash kda o", 8192, 4096, false},
      {"glm-5.3-flash kda f_a", 4096, 128, false},
      {"glm-5.3-flash experts gate_up", 4096, 4096, true}, {"glm-5.3-flash experts down", 2048, 4096, true},
  };
  int failed = 0;
  for (int64_t rows : {int64_t{1}, int64_t{4}}) {
    for (const Shape& s : shapes) failed += TimeShape(s, rows, read_gbs) != 0;
  }
  return failed == 0 ? 0 : -1;
}

}  // namespace ferry::harness
