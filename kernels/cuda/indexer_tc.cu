// The tensor-core path of IndexerScores (indexer_tc.h, contract in ops.h).
//
// Grid (key blocks of kIndexerTcKeys, query rows), 4 warps. A CTA first resolves its 256 keys'
// row addresses through the page table (one lookup a key, into shared memory), then issues all
// four 64-key tiles as four cp.async groups (16-byte loads, 64 KiB) before touching any, so the
// whole block's reads are in flight at once; while they land each lane loads its share of the
// row's queries straight into mma B fragments (heads x 128 bf16, the same for every key: 16
// registers per 8 heads). Per tile, warp w takes keys [16w, 16w + 16):
//   S^T = K Q^T  [16 keys x heads]: mma.sync m16n8k16 bf16 -> float32, A = the keys from
//   shared memory by ldmatrix (rows of 256 B XOR-swizzled by (row & 7): the eight row addresses
//   of an 8x8 matrix hit distinct banks), B = q from registers, 8 k-steps per 8 heads.
// The accumulator puts key g (and g + 8) of the warp's 16 on lane quad g, two heads a lane per
// 8-head tile: each lane applies scale, ReLU and its heads' weights and sums them, then the quad
// adds its four partials with two shuffles (a fixed order: bitwise the same for a key wherever it
// falls). Bytes: 256 a key; flops: heads * 128 * 2 a key, on the tensor cores.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <map>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/indexer_tc.h"

namespace ferry::kernels::cuda {
namespace {

using ptx::CpAsync16;
using ptx::CpAsyncCommit;
using ptx::CpAsyncWait;
using ptx::Ldsm4;
using ptx::Mma;

constexpr int kDim = 128;
constexpr int kRowBytes = kDim * 2;
constexpr int kChunks = kRowBytes / 16;  // 16-byte chunks a key row
constexpr int kTileKeys = 64;
constexpr int kTiles = kIndexerTcKeys / kTileKeys;
constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kKeyBytes = kIndexerTcKeys * kRowBytes;
constexpr int kSmemBytes = kKeyBytes + kIndexerTcKeys * 8;  // keys, then one row pointer a key
static_assert(kWarps * 16 == kTileKeys, "a warp computes 16 keys of a tile");
static_assert(kTiles == 4, "the wait ladder below assumes four groups");

__device__ __forceinline__ uint32_t Swz(int row, int chunk) {
  return static_cast<uint32_t>(row * kRowBytes + ((chunk ^ (row & 7)) << 4));
}
__device__ __forceinline__ float Relu(float d) { return d > 0.0f ? d : 0.0f; }  // NaN counts as 0

// NT: heads / 8.
template <int NT>
__global__ void __launch_bounds__(kThreads)
    IndexerTcKernel(const __nv_bfloat16* __restrict__ qi, const float* __restrict__ w, PagedView keys,
                    const int32_t* __restrict__ n_keys, float scale, float* __restrict__ scores,
                    int64_t score_stride) {
  extern __shared__ __align__(16) unsigned char smem[];
  const __nv_bfloat16** rowp = reinterpret_cast<const __nv_bfloat16**>(smem + kKeyBytes);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t r = blockIdx.y;
  const int64_t k0 = static_cast<int64_t>(blockIdx.x) * kIndexerTcKeys;
  float* row_scores = scores + r * score_stride;
  const int64_t n = n_keys[r];
  if (n < 0 || n > score_stride) {  // the whole row becomes NaN, each block its own range
    for (int64_t s = k0 + tid; s < k0 + kIndexerTcKeys && s < score_stride; s += kThreads) {
      row_scores[s] = __int_as_float(0x7fc00000);
    }
    return;
  }
  if (k0 >= n) return;
  const int count = n - k0 < kIndexerTcKeys ? static_cast<int>(n - k0) : kIndexerTcKeys;
  for (int i = tid; i < count; i += kThreads) rowp[i] = PagedRow(keys, r, k0 + i);
  __syncthreads();
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
#pragma unroll
  for (int t = 0; t < kTiles; ++t) {
    for (int c = tid; c < kTileKeys * kChunks; c += kThreads) {  // a warp: two keys, 512 B
      const int key = t * kTileKeys + c / kChunks, chunk = c % kChunks;
      if (key < count) {
        const __nv_bfloat16* src = rowp[key];
        if (src != nullptr) CpAsync16(base + Swz(key, chunk), src + chunk * 8);  // else: NaN below
      }
    }
    CpAsyncCommit();
  }

  // B fragments: lane (g, q4) holds q[head 8 nt + g][16 ks + 2 q4 (+1), +8 (+9)].
  const int g = lane >> 2, q4 = lane & 3;
  const int heads = NT * 8;
  uint32_t bq[NT][8][2];
  float wv[NT][2];
  const uint32_t* q32 = reinterpret_cast<const uint32_t*>(qi + r * heads * kDim);
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
    for (int ks = 0; ks < 8; ++ks) {
      const int e = (nt * 8 + g) * kDim + ks * 16 + q4 * 2;
      bq[nt][ks][0] = __ldg(q32 + e / 2);
      bq[nt][ks][1] = __ldg(q32 + e / 2 + 4);
    }
    wv[nt][0] = __ldg(w + r * heads + nt * 8 + q4 * 2);
    wv[nt][1] = __ldg(w + r * heads + nt * 8 + q4 * 2 + 1);
  }

#pragma unroll
  for (int t = 0; t < kTiles; ++t) {
    if (t * kTileKeys >= count) break;  // block-uniform; the later groups are empty
    if (t == 0) CpAsyncWait<kTiles - 1>();
    if (t == 1) CpAsyncWait<kTiles - 2>();
    if (t == 2) CpAsyncWait<kTiles - 3>();
    if (t == 3) CpAsyncWait<0>();
    __syncthreads();  // the other threads' copies of this tile are visible
    const int key0 = t * kTileKeys + warp * 16;
    if (key0 >= count) continue;  // warp-uniform
    uint32_t a[8][4];
    const int arow = key0 + (lane & 15);
#pragma unroll
    for (int ks = 0; ks < 8; ++ks) Ldsm4(a[ks], base + Swz(arow, 2 * ks + (lane >> 4)));
    float p0 = 0.0f, p1 = 0.0f;  // keys key0 + g, key0 + g + 8
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
      for (int ks = 0; ks < 8; ++ks) Mma(c, a[ks], bq[nt][ks][0], bq[nt][ks][1]);
      p0 += wv[nt][0] * Relu(c[0] * scale);
      p0 += wv[nt][1] * Relu(c[1] * scale);
      p1 += wv[nt][0] * Relu(c[2] * scale);
      p1 += wv[nt][1] * Relu(c[3] * scale);
    }
    p0 += __shfl_xor_sync(0xffffffffu, p0, 1);
    p1 += __shfl_xor_sync(0xffffffffu, p1, 1);
    p0 += __shfl_xor_sync(0xffffffffu, p0, 2);
    p1 += __shfl_xor_sync(0xffffffffu, p1, 2);
    if (q4 < 2) {  // lane q4 = 0 writes key g, lane 1 key g + 8
      const int key = key0 + g + 8 * q4;
      if (key < count) row_scores[k0 + key] = rowp[key] != nullptr ? (q4 == 0 ? p0 : p1) : __int_as_float(0x7fc00000);
    }
  }
}

template <int NT>
bool Available(int device) {
  int optin = 0, major = 0;
  if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  if (major != 9 || optin < kSmemBytes) return false;
  if (cudaFuncSetAttribute(IndexerTcKernel<NT>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes) !=
      cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return true;
}

// Available() per (device, NT), worked out once.
bool AvailableCached(int device, int nt) {
  static std::mutex mu;
  static auto* known = new std::map<std::pair<int, int>, bool>();
  std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_pair(device, nt);
  if (auto it = known->find(key); it != known->end()) return it->second;
  bool ok = false;
  if (nt == 2) ok = Available<2>(device);
  if (nt == 4) ok = Available<4>(device);
  if (nt == 6) ok = Available<6>(device);
  if (nt == 8) ok = Available<8>(device);
  (*known)[key] = ok;
  return ok;
}

template <int NT>
absl::Status Launch(const uint16_t* qi, const float* w, int64_t rows, const PagedView& keys, const int32_t* n_keys,
                    float scale, float* scores, int64_t score_stride, void* stream) {
  const int64_t key_blocks = (score_stride + kIndexerTcKeys - 1) / kIndexerTcKeys;
  if (key_blocks > 0x7fffffff) {
    return absl::InvalidArgumentError(absl::StrCat("IndexerScores: score_stride ", score_stride, " too large"));
  }
  IndexerTcKernel<NT><<<dim3(static_cast<unsigned>(key_blocks), static_cast<unsigned>(rows)), kThreads, kSmemBytes,
                        static_cast<cudaStream_t>(stream)>>>(reinterpret_cast<const __nv_bfloat16*>(qi), w, keys,
                                                             n_keys, scale, scores, score_stride);
  FERRY_CUDA_RETURN_IF_LAUNCH_ERROR();
  return absl::OkStatus();
}

}  // namespace

bool IndexerTcApplies(const void* qi, int64_t heads, int64_t dim, const PagedView& keys) {
  if (dim != kDim || heads < 16 || heads > 64 || heads % 16 != 0) return false;
  if (reinterpret_cast<uintptr_t>(qi) % 4 != 0 || reinterpret_cast<uintptr_t>(keys.arena) % 16 != 0 ||
      keys.page_stride % 8 != 0) {
    return false;
  }
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return AvailableCached(device, static_cast<int>(heads / 8));
}

absl::Status IndexerScoresTc(const uint16_t* qi, const float* w, int64_t rows, int64_t heads, const PagedView& keys,
                             const int32_t* n_keys, float scale, float* scores, int64_t score_stride,
                             void* stream) {
  switch (heads / 8) {
    case 2: return Launch<2>(qi, w, rows, keys, n_keys, scale, scores, score_stride, stream);
    case 4: return Launch<4>(qi, w, rows, keys, n_keys, scale, scores, score_stride, stream);
    case 6: return Launch<6>(qi, w, rows, keys, n_keys, scale, scores, score_stride, stream);
    default: return Launch<8>(qi, w, rows, keys, n_keys, scale, scores, score_stride, stream);
  }
}

}  // namespace ferry::kernels::cuda
