// The selection order shared by TopK, MoeRoute and SampleGreedy, on the device: the same strict
// total order as kernels/cpu/select.cc's RanksBefore (larger value first, NaN last, ties toward
// the lower index), so that every selection picks exactly the CPU twin's elements.
#pragma once

#include <cstdint>

namespace ferry::kernels::cuda {

// Strict "ranks before". -0 and +0 compare equal (then the index decides), as on the CPU.
__device__ __forceinline__ bool RanksBefore(float va, int32_t a, float vb, int32_t b) {
  const bool na = isnan(va), nb = isnan(vb);
  if (na != nb) return nb;
  if (!na && va != vb) return va > vb;
  return a < b;
}

// RanksBefore as one unsigned key: RanksBefore(va, a, vb, b) == (RankKey(va, a) > RankKey(vb, b)),
// so a candidate's rank among n is the count of larger keys. High word: the value's bits mapped to
// an ascending unsigned order (-0 taken as +0; NaN 0, below every number); low word: the
// complemented index (the lower index ranks first among equal values).
__device__ __forceinline__ uint64_t RankKey(float v, int32_t i) {
  uint32_t u = 0;
  if (!isnan(v)) {
    u = __float_as_uint(v + 0.0f);  // -0 + 0 is +0
    u = (u & 0x80000000u) != 0 ? ~u : (u | 0x80000000u);
  }
  return (static_cast<uint64_t>(u) << 32) | static_cast<uint32_t>(~static_cast<uint32_t>(i));
}

// A candidate (value, index); index -1 means "none" and ranks after every real candidate.
struct Ranked {
  float v;
  int32_t i;
};

__device__ __forceinline__ Ranked Better(Ranked x, Ranked y) {
  if (x.i < 0) return y;
  if (y.i < 0) return x;
  return RanksBefore(x.v, x.i, y.v, y.i) ? x : y;
}

// The best candidate of a full warp, returned to every lane.
__device__ __forceinline__ Ranked WarpBest(Ranked x) {
  for (int off = 16; off > 0; off >>= 1) {
    Ranked y{__shfl_xor_sync(0xffffffffu, x.v, off), __shfl_xor_sync(0xffffffffu, x.i, off)};
    x = Better(x, y);
  }
  return x;
}

}  // namespace ferry::kernels::cuda
