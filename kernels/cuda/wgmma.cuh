// The warpgroup matrix multiply of sm_90a (wgmma.mma_async), for mla_decode_wg.cu,
// mla_decode_wg_persistent.cu, linear_fp8.cu and linear_w8a8.cu: shared-memory matrix descriptors for the 128-byte-swizzled
// layouts, the instruction shapes they use, and the fences around them. Device code only, and
// only meaningful when compiled for sm_90a (__CUDA_ARCH_FEAT_SM90_ALL); other targets must not
// call these.
//
// Layouts (PTX ISA, "Shared Memory Matrix Layout"), bf16, 128-byte swizzle: a matrix is stored as
// column blocks of 64 values (128 bytes) a row; inside a block, row r's 16-byte chunk c sits at
// r * 128 + ((c ^ (r & 7)) << 4), blocks 1024-byte aligned. K-major operand (rows = M or N, the
// 64 values = K): the descriptor's stride byte offset is the step between 8-row groups (1024);
// a k16 step inside a block advances the start address by 32 bytes. MN-major operand (rows = K,
// the 64 values = N): leading byte offset = the step to the next 64 values of N (the next column
// block), stride byte offset = the step to the next 8 rows of K (1024).
#pragma once

#include <cstdint>

namespace ferry::kernels::cuda::wgmma {

// A shared-memory matrix descriptor, 128-byte swizzle, for shared address `addr` (byte offsets
// `lbo` and `sbo` as above; multiples of 16).
__device__ __forceinline__ uint64_t Desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) | (static_cast<uint64_t>((lbo & 0x3FFFF) >> 4) << 16) |
         (static_cast<uint64_t>((sbo & 0x3FFFF) >> 4) << 32) | (uint64_t{1} << 62);
}

// Orders this thread's earlier register accesses before the warpgroup's next wgmma (needed
// whenever accumulator registers were touched since the last one).
__device__ __forceinline__ void Fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
// Closes the group of wgmma issued since the last commit.
__device__ __forceinline__ void Commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
// Waits until at most N committed groups are in flight.
template <int N>
__device__ __forceinline__ void Wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Makes this thread's generic-proxy shared-memory writes (st.shared, cp.async) visible to the
// async proxy that wgmma reads through.
__device__ __forceinline__ void ProxyFence() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// Moves this warp's register budget to kRegs (a multiple of 8 in [24, 256]): Dec gives
// registers back to the block's pool, Inc takes them from it (waiting until there are enough).
// Every warp of the warpgroup must execute the same one; the launch's per-thread count is the
// starting budget.
template <int kRegs>
__device__ __forceinline__ void DecMaxRegs() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
template <int kRegs>
__device__ __forceinline__ void IncMaxRegs() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
// Keeps the compiler from moving accesses of an accumulator register across a wgmma boundary.
__device__ __forceinline__ void Pin(float& r) { asm volatile("" : "+f"(r)::"memory"); }

// The accumulator layouts: thread t of the warpgroup (warp v = t / 32, lane l) holds, for each
// 8-column block j, d[4 j + e] = D[16 v + l / 4 + 8 (e / 2)][8 j + 2 (l % 4) + (e % 2)].

// d (+)= A B, m64n32k16: A [64 x 16] and B (K-major) [32 x 16] from shared-memory descriptors.
__device__ __forceinline__ void WgmmaM64N32(float (&d)[16], uint64_t a, uint64_t b, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}"
      ", %16, %17, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
      : "l"(a), "l"(b), "r"(accumulate));
}

// The 128 accumulator operands of an m64n256 wgmma, d[0 .. 127].
#define FERRY_WG_D128 \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), \
    "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), \
    "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), \
    "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), \
    "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), \
    "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), \
    "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), \
    "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
    "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), \
    "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), \
    "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), \
    "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), \
    "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), \
    "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), \
    "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), \
    "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), \
    "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), \
    "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), \
    "+f"(d[126]), "+f"(d[127])

// Their names in the instruction text: "{%0, ..., %127}".
#define FERRY_WG_S128 \
  "{" "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15," \
  "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31," \
  "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47," \
  "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63," \
  "%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79," \
  "%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95," \
  "%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111," \
  "%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127" "}"

// d = A B (accumulate == 0) or d += A B, m64n64k16: A [64 x 16] and B [64 x 16], both K-major,
// from shared-memory descriptors.
__device__ __forceinline__ void WgmmaM64N64(float (&d)[32], uint64_t a, uint64_t b, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,"
      "%26,%27,%28,%29,%30,%31}"
      ", %32, %33, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]),
        "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
        "+f"(d[30]), "+f"(d[31])
      : "l"(a), "l"(b), "r"(accumulate));
}

// d += A B, m64n256k16: A [64 x 16] from registers (WgmmaM64NKRegA's fragment layout), B [16 x
// 256] MN-major (transposed) from a descriptor. `a` must stay unchanged until the wgmma completes.
__device__ __forceinline__ void WgmmaM64N256TRegA(float (&d)[128], const uint32_t (&a)[4], uint64_t b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.eq.u32 p, 1, 1;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 " FERRY_WG_S128
      ", {%128, %129, %130, %131}, %132, p, 1, 1, 1;\n}\n"
      : FERRY_WG_D128
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
}

// d (+)= A B, m64n256k16: A [64 x 16] K-major, B [16 x 256] MN-major (transposed), from descriptors.
__device__ __forceinline__ void WgmmaM64N256T(float (&d)[128], uint64_t a, uint64_t b, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 " FERRY_WG_S128
      ", %128, %129, p, 1, 1, 0, 1;\n}\n"
      : FERRY_WG_D128
      : "l"(a), "l"(b), "r"(accumulate));
}

// The wgmma forms over a width N = 16, 32, ..., 128 chosen at run time (WithWidth in
// linear_fp8_shared.cuh): the accumulator is d[0, N / 2) of a 64-register array. An asm operand
// list is fixed text, so the lists are spelled in blocks of 8 registers (FERRY_WG_S*: the "%i"
// names, FERRY_WG_D*: the operands; FERRY_WG_SU* / DU*: the first k blocks) and each width is
// one line below.
#define FERRY_WG_S0 "%0,%1,%2,%3,%4,%5,%6,%7"
#define FERRY_WG_S1 "%8,%9,%10,%11,%12,%13,%14,%15"
#define FERRY_WG_S2 "%16,%17,%18,%19,%20,%21,%22,%23"
#define FERRY_WG_S3 "%24,%25,%26,%27,%28,%29,%30,%31"
#define FERRY_WG_S4 "%32,%33,%34,%35,%36,%37,%38,%39"
#define FERRY_WG_S5 "%40,%41,%42,%43,%44,%45,%46,%47"
#define FERRY_WG_S6 "%48,%49,%50,%51,%52,%53,%54,%55"
#define FERRY_WG_S7 "%56,%57,%58,%59,%60,%61,%62,%63"
#define FERRY_WG_D0 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), \
    "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
#define FERRY_WG_D1 "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), \
    "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
#define FERRY_WG_D2 "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), \
    "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23])
#define FERRY_WG_D3 "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), \
    "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define FERRY_WG_D4 "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), \
    "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39])
#define FERRY_WG_D5 "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), \
    "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47])
#define FERRY_WG_D6 "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), \
    "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55])
#define FERRY_WG_D7 "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), \
    "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define FERRY_WG_SU1 FERRY_WG_S0
#define FERRY_WG_DU1 FERRY_WG_D0
#define FERRY_WG_SU2 FERRY_WG_SU1 "," FERRY_WG_S1
#define FERRY_WG_DU2 FERRY_WG_DU1, FERRY_WG_D1
#define FERRY_WG_SU3 FERRY_WG_SU2 "," FERRY_WG_S2
#define FERRY_WG_DU3 FERRY_WG_DU2, FERRY_WG_D2
#define FERRY_WG_SU4 FERRY_WG_SU3 "," FERRY_WG_S3
#define FERRY_WG_DU4 FERRY_WG_DU3, FERRY_WG_D3
#define FERRY_WG_SU5 FERRY_WG_SU4 "," FERRY_WG_S4
#define FERRY_WG_DU5 FERRY_WG_DU4, FERRY_WG_D4
#define FERRY_WG_SU6 FERRY_WG_SU5 "," FERRY_WG_S5
#define FERRY_WG_DU6 FERRY_WG_DU5, FERRY_WG_D5
#define FERRY_WG_SU7 FERRY_WG_SU6 "," FERRY_WG_S6
#define FERRY_WG_DU7 FERRY_WG_DU6, FERRY_WG_D6
#define FERRY_WG_SU8 FERRY_WG_SU7 "," FERRY_WG_S7
#define FERRY_WG_DU8 FERRY_WG_DU7, FERRY_WG_D7

// d (+)= A B, m64nNk16: A [64 x 16] and B [N x 16], both K-major, from shared-memory descriptors
// (accumulate == 0 overwrites d).
template <int N>
__device__ __forceinline__ void WgmmaM64NK(float (&d)[64], uint64_t a, uint64_t b, int accumulate);
// d (+)= A B, m64nNk16 with A [64 x 16] from registers (each warp its 16 rows as the
// mma.m16n8k16 A fragment: a[0] = row l / 4, columns 2 (l % 4) + {0, 1}; a[1] the same 8 rows
// down; a[2] and a[3] those 8 columns right) and B [N x 16] K-major from a descriptor. `a` must
// stay unchanged until the wgmma has completed (Wait).
template <int N>
__device__ __forceinline__ void WgmmaM64NKRegA(float (&d)[64], const uint32_t (&a)[4], uint64_t b, int accumulate);
// d (+)= A B, m64nNk32 over E4M3: A [64 x 32] and B [N x 32] (bytes), both K-major, from
// shared-memory descriptors (a k32 step advances a descriptor by 32 bytes, as bf16's k16).
template <int N>
__device__ __forceinline__ void WgmmaM64NK32E4M3(float (&d)[64], uint64_t a, uint64_t b, int accumulate);

// The specializations: IA, IB, IACC are the operand numbers after the N / 2 accumulators (the
// descriptors and the accumulate flag); AREGS the four A registers' names.
#define FERRY_WGMMA_SS(N, IA, IB, IACC, NAMES, ...)                                                          \
  template <>                                                                                                \
  __device__ __forceinline__ void WgmmaM64NK<N>(float(&d)[64], uint64_t a, uint64_t b, int accumulate) {    \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #IACC ", 0;\n"                                         \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32.bf16.bf16 {" NAMES "}, %" #IA ", %" #IB       \
                 ", p, 1, 1, 0, 0;\n}\n"                                                                      \
                 : __VA_ARGS__                                                                               \
                 : "l"(a), "l"(b), "r"(accumulate));                                                         \
  }
#define FERRY_WGMMA_RS(N, AREGS, IB, IACC, NAMES, ...)                                                       \
  template <>                                                                                                \
  __device__ __forceinline__ void WgmmaM64NKRegA<N>(float(&d)[64], const uint32_t(&a)[4], uint64_t b,       \
                                                    int accumulate) {                                        \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #IACC ", 0;\n"                                         \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32.bf16.bf16 {" NAMES "}, {" AREGS "}, %" #IB   \
                 ", p, 1, 1, 0;\n}\n"                                                                         \
                 : __VA_ARGS__                                                                               \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate));                     \
  }
#define FERRY_WGMMA_SS8(N, IA, IB, IACC, NAMES, ...)                                                         \
  template <>                                                                                                \
  __device__ __forceinline__ void WgmmaM64NK32E4M3<N>(float(&d)[64], uint64_t a, uint64_t b, int accumulate) { \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #IACC ", 0;\n"                                         \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k32.f32.e4m3.e4m3 {" NAMES "}, %" #IA ", %" #IB       \
                 ", p, 1, 1;\n}\n"                                                                            \
                 : __VA_ARGS__                                                                               \
                 : "l"(a), "l"(b), "r"(accumulate));                                                         \
  }
FERRY_WGMMA_SS(16, 8, 9, 10, FERRY_WG_SU1, FERRY_WG_DU1)
FERRY_WGMMA_SS(32, 16, 17, 18, FERRY_WG_SU2, FERRY_WG_DU2)
FERRY_WGMMA_SS(48, 24, 25, 26, FERRY_WG_SU3, FERRY_WG_DU3)
FERRY_WGMMA_SS(64, 32, 33, 34, FERRY_WG_SU4, FERRY_WG_DU4)
FERRY_WGMMA_SS(80, 40, 41, 42, FERRY_WG_SU5, FERRY_WG_DU5)
FERRY_WGMMA_SS(96, 48, 49, 50, FERRY_WG_SU6, FERRY_WG_DU6)
FERRY_WGMMA_SS(112, 56, 57, 58, FERRY_WG_SU7, FERRY_WG_DU7)
FERRY_WGMMA_SS(128, 64, 65, 66, FERRY_WG_SU8, FERRY_WG_DU8)
FERRY_WGMMA_RS(16, "%8,%9,%10,%11", 12, 13, FERRY_WG_SU1, FERRY_WG_DU1)
FERRY_WGMMA_RS(32, "%16,%17,%18,%19", 20, 21, FERRY_WG_SU2, FERRY_WG_DU2)
FERRY_WGMMA_RS(48, "%24,%25,%26,%27", 28, 29, FERRY_WG_SU3, FERRY_WG_DU3)
FERRY_WGMMA_RS(64, "%32,%33,%34,%35", 36, 37, FERRY_WG_SU4, FERRY_WG_DU4)
FERRY_WGMMA_RS(80, "%40,%41,%42,%43", 44, 45, FERRY_WG_SU5, FERRY_WG_DU5)
FERRY_WGMMA_RS(96, "%48,%49,%50,%51", 52, 53, FERRY_WG_SU6, FERRY_WG_DU6)
FERRY_WGMMA_RS(112, "%56,%57,%58,%59", 60, 61, FERRY_WG_SU7, FERRY_WG_DU7)
FERRY_WGMMA_RS(128, "%64,%65,%66,%67", 68, 69, FERRY_WG_SU8, FERRY_WG_DU8)
FERRY_WGMMA_SS8(16, 8, 9, 10, FERRY_WG_SU1, FERRY_WG_DU1)
FERRY_WGMMA_SS8(32, 16, 17, 18, FERRY_WG_SU2, FERRY_WG_DU2)
FERRY_WGMMA_SS8(48, 24, 25, 26, FERRY_WG_SU3, FERRY_WG_DU3)
FERRY_WGMMA_SS8(64, 32, 33, 34, FERRY_WG_SU4, FERRY_WG_DU4)
FERRY_WGMMA_SS8(80, 40, 41, 42, FERRY_WG_SU5, FERRY_WG_DU5)
FERRY_WGMMA_SS8(96, 48, 49, 50, FERRY_WG_SU6, FERRY_WG_DU6)
FERRY_WGMMA_SS8(112, 56, 57, 58, FERRY_WG_SU7, FERRY_WG_DU7)
FERRY_WGMMA_SS8(128, 64, 65, 66, FERRY_WG_SU8, FERRY_WG_DU8)

#undef FERRY_WG_D128
#undef FERRY_WG_S128
#undef FERRY_WGMMA_SS
#undef FERRY_WGMMA_SS8
#undef FERRY_WGMMA_RS
#undef FERRY_WG_S0
#undef FERRY_WG_D0
#undef FERRY_WG_S1
#undef FERRY_WG_D1
#undef FERRY_WG_S2
#undef FERRY_WG_D2
#undef FERRY_WG_S3
#undef FERRY_WG_D3
#undef FERRY_WG_S4
#undef FERRY_WG_D4
#undef FERRY_WG_S5
#undef FERRY_WG_D5
#undef FERRY_WG_S6
#undef FERRY_WG_D6
#undef FERRY_WG_S7
#undef FERRY_WG_D7
#undef FERRY_WG_SU1
#undef FERRY_WG_DU1
#undef FERRY_WG_SU2
#undef FERRY_WG_DU2
#undef FERRY_WG_SU3
#undef FERRY_WG_DU3
#undef FERRY_WG_SU4
#undef FERRY_WG_DU4
#undef FERRY_WG_SU5
#undef FERRY_WG_DU5
#undef FERRY_WG_SU6
#undef FERRY_WG_DU6
#undef FERRY_WG_SU7
#undef FERRY_WG_DU7
#undef FERRY_WG_SU8
#undef FERRY_WG_DU8

}  // namespace ferry::kernels::cuda::wgmma
