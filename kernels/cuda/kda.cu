// One decode token of the KDA gated delta rule (KdaRecurrentStep in ops.h).
//
// One block of 128 threads per (head, row); thread j owns value channel j, i.e. column j of the
// head's state S [d, d], read twice and written once (coalesced across threads: S[i * d + j]).
// Every sum runs over the key channel i ascending, the order of model/blocks/kda.cc's RecurrentHead.
#include <cuda_runtime.h>

#include "kernels/cuda/check.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/pdl.cuh"

namespace ferry::kernels::cuda {
namespace {

constexpr int kMaxD = 128;

__global__ void __launch_bounds__(kMaxD)
    KdaStepKernel(float* state, const int32_t* __restrict__ slots, int64_t n_slots, int heads, int d,
                  const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
                  const float* __restrict__ g, const float* __restrict__ beta, float* __restrict__ o) {
  PdlLaunchDependents();
  PdlWait();
  __shared__ float ks[kMaxD], qs[kMaxD], decay[kMaxD];
  const int64_t h = blockIdx.x, r = blockIdx.y;
  const int j = threadIdx.x;
  const int64_t base = (r * heads + h) * d;
  const int64_t slot = slots != nullptr ? slots[r] : r;
  if (slot < 0 || slot >= n_slots) {  // block-uniform
    if (j < d) o[base + j] = __int_as_float(0x7fc00000);
    return;
  }
  if (j < d) {
    ks[j] = k[base + j];
    qs[j] = q[base + j];
    decay[j] = expf(g[base + j]);
  }
  __syncthreads();
  if (j >= d) return;
  float* S = state + (slot * heads + h) * static_cast<int64_t>(d) * d;
  // Pass 1: u = beta (v - (diag(exp g) S)^T k). Pass 2 recomputes each decayed entry (the same
  // rounded product, so the same value), adds k u^T, stores it and accumulates S^T q. Products
  // are __fmul_rn (never fused into an FMA) so that every operation rounds where the CPU's does.
  // The column is read kBatch entries at a time into registers before they are used, so that
  // kBatch loads are in flight (a thread touches only its own column: loading ahead of the
  // stores of pass 2 is safe); the sums still run over i ascending. 32: four round trips a pass
  // at d = 128 (8 took 16, ~13 us a step on the H200).
  constexpr int kBatch = 32;
  float acc = 0.0f;
  int i0 = 0;
  for (; i0 + kBatch <= d; i0 += kBatch) {
    float sv[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) sv[b] = S[static_cast<int64_t>(i0 + b) * d + j];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) acc += __fmul_rn(__fmul_rn(sv[b], decay[i0 + b]), ks[i0 + b]);
  }
  for (int i = i0; i < d; ++i) acc += __fmul_rn(__fmul_rn(S[static_cast<int64_t>(i) * d + j], decay[i]), ks[i]);
  const float u = beta[r * heads + h] * (v[base + j] - acc);
  acc = 0.0f;
  i0 = 0;
  for (; i0 + kBatch <= d; i0 += kBatch) {
    float sv[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) sv[b] = S[static_cast<int64_t>(i0 + b) * d + j];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int i = i0 + b;
      const float c = __fmul_rn(sv[b], decay[i]) + __fmul_rn(ks[i], u);
      S[static_cast<int64_t>(i) * d + j] = c;
      acc += __fmul_rn(c, qs[i]);
    }
  }
  for (int i = i0; i < d; ++i) {
    float* e = S + static_cast<int64_t>(i) * d + j;
    const float c = __fmul_rn(*e, decay[i]) + __fmul_rn(ks[i], u);
    *e = c;
    acc += __fmul_rn(c, qs[i]);
  }
  o[base + j] = acc;
}

}  // namespace

absl::Status KdaRecurrentStep(float* state, const int32_t* slots, int64_t n_slots, int64_t rows, int64_t heads,
                              int64_t d, const float* q, const float* k, const float* v, const float* g,
                              const float* beta, float* o, void* stream) {
  if (rows < 0 || rows > 65535 || heads < 1 || heads > 0x7fffffff || d < 1 || d > kMaxD || n_slots < 0) {
    return absl::InvalidArgumentError(absl::StrCat("KdaRecurrentStep: rows ", rows, ", heads ", heads, ", d ", d,
                                                   ", n_slots ", n_slots,
                                                   " (need rows <= 65535, heads >= 1, 1 <= d <= ", kMaxD, ")"));
  }
  if (rows == 0) return absl::OkStatus();
  if (state == nullptr || q == nullptr || k == nullptr || v == nullptr || g == nullptr || beta == nullptr ||
      o == nullptr) {
    return absl::InvalidArgumentError("KdaRecurrentStep: null state, q, k, v, g, beta or o");
  }
  FERRY_CUDA_RETURN_IF_ERROR(LaunchDependent(KdaStepKernel,
                                             dim3(static_cast<unsigned>(heads), static_cast<unsigned>(rows)), kMaxD, 0,
                                             static_cast<cudaStream_t>(stream), state, slots, n_slots,
                                             static_cast<int>(heads), static_cast<int>(d), q, k, v, g, beta, o));
  return absl::OkStatus();
}

}  // namespace ferry::kernels::cuda
