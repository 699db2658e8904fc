// The tensor-core path of IndexerScores (indexer_tc.h, contract in ops.h).
//
// Grid (key blocks of kIndexerTcKeys, query rows), 4 warps. A CTA issues all four 64-key tiles
// (64 KiB) before touching any, so the whole block's reads are in flight at once:
//   TMA form (pages of a multiple of 64 rows, the usual case): four threads look up one page
//     each and issue its tile as two TMA boxes (64 keys x 64 values, 128-byte swizzle) counted on
//     the tile's mbarrier;
//   cp.async form (other page sizes): the CTA resolves its 256 keys' row addresses through the
//     page table (one lookup a key, into shared memory), then issues the tiles as four cp.async
//     groups of 16-byte loads.
// H200, GLM-5.2 shapes, 128K keys: batch 64 0.80 -> 0.54 ms with TMA (86% of the read
// bandwidth), batch 8 0.116 -> 0.081 (bench/results/h200-indexer.md). While the tiles land each
// lane loads its share of the row's queries straight into mma B fragments (heads x 128 bf16, the
// same for every key: 16 registers per 8 heads). Per tile, warp w takes keys [16w, 16w + 16):
//   S^T = K Q^T  [16 keys x heads]: mma.sync m16n8k16 bf16 -> float32, A = the keys from
//   shared memory by ldmatrix (16-byte chunks XOR-swizzled by (row & 7) in either layout: the
//   eight row addresses of an 8x8 matrix hit distinct banks), B = q from registers, 8 k-steps per
//   8 heads. Both forms compute the same values in the same order: the same bits.
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
#include "kernels/cuda/options.h"
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/indexer_tc.h"
#include "kernels/cuda/tma.h"

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
// The TMA form: 1024 bytes of slack to align the tiles' swizzle atoms, the keys, four mbarriers
// and four tile flags.
constexpr int kSmemBytesTma = 1024 + kKeyBytes + kTiles * 8 + kTiles * 4;
static_assert(kWarps * 16 == kTileKeys, "a warp computes 16 keys of a tile");
static_assert(kTiles == 4, "the wait ladder below assumes four groups");

__device__ __forceinline__ uint32_t Swz(int row, int chunk) {
  return static_cast<uint32_t>(row * kRowBytes + ((chunk ^ (row & 7)) << 4));
}
// The TMA form's layout: tile row >> 6 at 16 KiB steps, in it dims [0, 64) then [64, 128) as
// 64 rows of 128 bytes each, 16-byte chunks XOR-swizzled by (row & 7) (TMA's 128-byte swizzle):
// ldmatrix's eight row addresses still hit distinct banks.
__device__ __forceinline__ uint32_t SwzTma(int row, int chunk) {
  return static_cast<uint32_t>((row >> 6) * (kTileKeys * kRowBytes) + (chunk >> 3) * (kTileKeys * 128) +
                               (row & 63) * 128 + (((chunk & 7) ^ (row & 7)) << 4));
}
__device__ __forceinline__ float Relu(float d) { return d > 0.0f ? d : 0.0f; }  // NaN counts as 0

// NT: heads / 8. kTma: a tile (64 keys, which then share one page: page_rows a multiple of 64)
// comes in as two TMA boxes of 64 rows x 64 values (keys_map: EncodePagedRowsMap with box_rows
// 64) after one page-table lookup, instead of 256 lookups and 4096 cp.async a CTA; a tile whose
// page cannot be addressed scores NaN, as a key does in the cp.async form.
template <int NT, bool kTma>
__global__ void __launch_bounds__(kThreads)
    IndexerTcKernel(const __nv_bfloat16* __restrict__ qi, const float* __restrict__ w, PagedView keys,
                    const __grid_constant__ CUtensorMap keys_map, const int32_t* __restrict__ n_keys, float scale,
                    float* __restrict__ scores, int64_t score_stride) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const uint32_t raw = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  unsigned char* smem = kTma ? smem_raw + ((1024 - (raw & 1023)) & 1023) : smem_raw;
  const __nv_bfloat16** rowp = reinterpret_cast<const __nv_bfloat16**>(smem + kKeyBytes);
  const uint32_t bars = static_cast<uint32_t>(__cvta_generic_to_shared(smem)) + kKeyBytes;  // kTma
  int* tile_ok = reinterpret_cast<int*>(smem + kKeyBytes + kTiles * 8);                      // kTma
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
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  if constexpr (kTma) {
    if (tid == 0) {
      for (int t = 0; t < kTiles; ++t) ptx::MbarInit(bars + 8 * t, 1);
      ptx::MbarInitFence();
    }
    __syncthreads();
    if (tid < kTiles && tid * kTileKeys < count) {  // thread t: tile t's page, then its two boxes
      const int64_t key = k0 + tid * kTileKeys, page_index = key >> keys.page_shift;
      const int32_t page = page_index < keys.table_stride ? keys.page_table[r * keys.table_stride + page_index] : -1;
      const bool ok = page >= 0 && page < keys.n_pages;
      tile_ok[tid] = ok ? 1 : 0;
      const uint32_t bar = bars + 8 * tid;
      if (ok) {
        const int slot = static_cast<int>(key & ((int64_t{1} << keys.page_shift) - 1));
        ptx::MbarArriveExpectTx(bar, kTileKeys * kRowBytes);
        const uint32_t dst = base + tid * kTileKeys * kRowBytes;
        ptx::TmaRowBlock(dst, &keys_map, 0, slot, page, bar, ptx::EvictFirstPolicy());
        ptx::TmaRowBlock(dst + kTileKeys * 128, &keys_map, 1, slot, page, bar, ptx::EvictFirstPolicy());
      } else {
        ptx::MbarArrive(bar);  // NaN below
      }
    }
  } else {
    for (int i = tid; i < count; i += kThreads) rowp[i] = PagedRow(keys, r, k0 + i);
    __syncthreads();
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
    bool ok = true;  // kTma: the tile's page could be addressed
    if constexpr (kTma) {
      ptx::MbarWait(bars + 8 * t, 0);
      ok = tile_ok[t] != 0;
    } else {
      if (t == 0) CpAsyncWait<kTiles - 1>();
      if (t == 1) CpAsyncWait<kTiles - 2>();
      if (t == 2) CpAsyncWait<kTiles - 3>();
      if (t == 3) CpAsyncWait<0>();
      __syncthreads();  // the other threads' copies of this tile are visible
    }
    const int key0 = t * kTileKeys + warp * 16;
    if (key0 >= count) continue;  // warp-uniform
    uint32_t a[8][4];
    const int arow = key0 + (lane & 15);
#pragma unroll
    for (int ks = 0; ks < 8; ++ks) {
      const int chunk = 2 * ks + (lane >> 4);
      Ldsm4(a[ks], base + (kTma ? SwzTma(arow, chunk) : Swz(arow, chunk)));
    }
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
      if (key < count) {
        const bool addressed = kTma ? ok : rowp[key] != nullptr;
        row_scores[k0 + key] = addressed ? (q4 == 0 ? p0 : p1) : __int_as_float(0x7fc00000);
      }
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
  // TMA, mbarriers and mma.sync: sm_90 and later (the GB10's sm_121 included, within its 99 KiB).
  if (major < 9 || optin < std::max(kSmemBytes, kSmemBytesTma)) return false;
  if (cudaFuncSetAttribute(IndexerTcKernel<NT, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes) !=
          cudaSuccess ||
      cudaFuncSetAttribute(IndexerTcKernel<NT, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytesTma) !=
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
  // The TMA form where a 64-key tile always lies in one page and the arena maps
  // (KernelOptions::indexer_tma false keeps the cp.async form, for comparisons).
  const bool tma_wanted = GetKernelOptions().indexer_tma;
  CUtensorMap map{};
  const int64_t page_rows = int64_t{1} << keys.page_shift;
  const bool tma = tma_wanted && page_rows % kTileKeys == 0 &&
                   EncodePagedRowsMap(&map, keys.arena, kDim, page_rows, keys.page_stride, keys.n_pages, kTileKeys);
  const dim3 grid(static_cast<unsigned>(key_blocks), static_cast<unsigned>(rows));
  auto* st = static_cast<cudaStream_t>(stream);
  const auto* q = reinterpret_cast<const __nv_bfloat16*>(qi);
  if (tma) {
    IndexerTcKernel<NT, true><<<grid, kThreads, kSmemBytesTma, st>>>(q, w, keys, map, n_keys, scale, scores,
                                                                     score_stride);
  } else {
    IndexerTcKernel<NT, false><<<grid, kThreads, kSmemBytes, st>>>(q, w, keys, map, n_keys, scale, scores,
                                                                   score_stride);
  }
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
