#!/usr/bin/env python3
"""A diagnostic build of the persistent MLA decode form: per-CTA phase timings.

Rewrites three files of the working tree in place, saving them first under .git/mla-trace/ (never
commit them instrumented: `--revert` puts the saved ones back; edits made in between are lost):
  kernels/cuda/mla_decode_wg_persistent.cu and mla_decode_wg_fold.cu  every instrumented line ends
      in "// TR": clock64 sums
      of each phase a CTA (consumers: waiting for q, for a stage, the tile, the item stores;
      warpgroup 1's products; producer: waiting for a stage, issuing copies, lookups) and
      %globaltimer stamps (CTA start, first tile ready, consumer and producer end, the fold's first
      start and last end) into a __device__ table, read back by MlaTraceRead.
  tests/kernels/bench_mla.cu  after each 64-head point, two more launches of the persistent form,
      each followed by a summary ("TRACE batch B rope R: ...") averaged over the CTAs.

Usage (from the repository root; a separate build directory keeps the normal one clean):
  bench/tools/mla_trace.py             # instrument
  ninja -C build-bench ferry-kernel-check && cp build-bench/bin/ferry-kernel-check /tmp/fkc-trace
  bench/tools/mla_trace.py --revert    # restore the three files
  ... on the GPU: fkc-trace --bench-mla | grep -A6 TRACE

The instrumentation slows the item kernel by about 10% (bench/results/h200-mla-decode.md, session
11): read the phases as shares, the clean build's times as the times. The insertions are anchored
on the current source text; when it changes, the script stops with the anchor it could not find.
"""
import os
import shutil
import subprocess
import sys

KERNEL = 'kernels/cuda/mla_decode_wg_persistent.cu'
FOLD = 'kernels/cuda/mla_decode_wg_fold.cu'
BENCH = 'tests/kernels/bench_mla.cu'


class Source:
    def __init__(self, path):
        self.path = path
        self.text = open(path).read()
        if '// TR' in self.text or 'MlaTraceRead' in self.text:
            sys.exit(f'{path} is instrumented already (run with --revert first)')

    def find(self, anchor, start=0):
        i = self.text.find(anchor, start)
        if i < 0:
            sys.exit(f'{self.path}: anchor not found: {anchor[:80]!r}')
        return i

    def after(self, anchor, insert, start=0):
        i = self.find(anchor, start) + len(anchor)
        self.text = self.text[:i] + insert + self.text[i:]

    def replace(self, anchor, new, start=0):
        i = self.find(anchor, start)
        self.text = self.text[:i] + new + self.text[i + len(anchor):]

    def save(self):
        open(self.path, 'w').write(self.text)


def instrument_kernel(k):
    # Slots of g_tr[cta]: 0 start stamp, 1 consumers' end stamp, 2 / 3 clock at start / end (for
    # the clock rate), 4 waiting for a stage, 5 tiles (warpgroup 0), 6 item stores, 7 waiting for
    # q, 8 producer waiting for a stage, 9 issuing, 10 lookups, 11 producer end stamp, 12 tiles of
    # the CTA, 13 / 14 clock / stamp when the first tile is ready, 15 warpgroup 1's products.
    k.after('namespace ferry::kernels::cuda {\n', '''constexpr int kTrCtas = 160, kTrSlots = 16;  // TR
__device__ unsigned long long g_tr[kTrCtas][kTrSlots];  // TR
void MlaTraceFoldReset();  // TR: mla_decode_wg_fold.cu
void MlaTraceFoldRead(unsigned long long* out);  // TR
__device__ __forceinline__ unsigned long long Gt() {  // TR
  unsigned long long t;  // TR
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));  // TR
  return t;  // TR
}  // TR
__device__ __forceinline__ unsigned long long Ck() { return clock64(); }  // TR
void MlaTraceReset() {  // TR
  static unsigned long long z[kTrCtas * kTrSlots] = {};  // TR
  cudaMemcpyToSymbol(g_tr, z, sizeof(z));  // TR
  MlaTraceFoldReset();  // TR
}  // TR
void MlaTraceRead(unsigned long long* out) {  // TR
  cudaMemcpyFromSymbol(out, g_tr, sizeof(g_tr));  // TR
  MlaTraceFoldRead(out + kTrCtas * kTrSlots);  // TR
}  // TR
''')
    k.after('  const int tid = threadIdx.x;\n',
            '  unsigned long long* tr = g_tr[min(static_cast<int>(blockIdx.x), kTrCtas - 1)];  // TR\n'
            '  if (tid == 0) { tr[0] = Gt(); tr[2] = Ck(); }  // TR\n', k.find('MlaDecodeWgPersistentKernel(const'))
    # The producer.
    k.after('    const __nv_bfloat16* src = resolve(0, id0, load_page(0, id0));\n',
            '    unsigned long long c_empty = 0, c_issue = 0, c_look = 0;  // TR\n')
    k.after('    for (int ft = 0; ft < total; ++ft) {\n      const int s = ft & 1;\n',
            '      unsigned long long c0 = Ck();  // TR\n', k.find('unsigned long long c_empty = 0'))
    wait = ('      if (ft >= 2) ptx::MbarWait(empty0 + 8 * s, ((ft >> 1) + 1) & 1);'
            '  // the consumers released tile ft - 2\n')
    k.replace(wait, '      unsigned long long w0 = Ck();  // TR\n' + wait + '      c_empty += Ck() - w0;  // TR\n')
    k.after('      ptx::CpAsyncMbarArrive(full0 + 8 * s);\n', '''      unsigned long long c2 = Ck();  // TR
      c_issue += c2 - c0;  // TR
''')
    k.after('      id2 = id3;\n',
            '      if (reinterpret_cast<uintptr_t>(src) == 1) __trap();  // TR: waits for the lookups\n'
            '      c_look += Ck() - c2;  // TR\n')
    k.replace('    ptx::CpAsyncWait<0>();\n    return;', '''    ptx::CpAsyncWait<0>();
    if (p == 0) { tr[8] = c_empty; tr[9] = c_issue - c_empty; tr[10] = c_look; tr[11] = Gt(); }  // TR
    return;''')
    # Warpgroup 0.
    k.after('  if (total == 0) return;\n',
            '  unsigned long long c_full = 0, c_tile = 0, c_store = 0, c_q = 0;  // TR\n')
    i = k.find('wgmma::IncMaxRegs<kScoreRegs>();')
    k.replace('      if (q_pending) {\n', '      unsigned long long a0 = Ck();  // TR\n      if (q_pending) {\n', i)
    k.after('        q_pending = false;\n      }\n',
            '      unsigned long long a1 = Ck();  // TR\n      c_q += a1 - a0;  // TR\n', i)
    k.after('      ptx::MbarWait(full0 + 8 * (ft & 1), (ft >> 1) & 1);\n', '''      unsigned long long a2 = Ck();  // TR
      c_full += a2 - a1;  // TR
      if (ft == 0 && tid == 0) { tr[13] = a2; tr[14] = Gt(); }  // TR
''', i)
    k.after("      ptx::MbarArrive(empty0 + 8 * (ft & 1));  // this warpgroup's products are complete\n",
            '      unsigned long long a3 = Ck();  // TR\n      c_tile += a3 - a2;  // TR\n', i)
    k.after('        l_run[0][0] = l_run[0][1] = l_run[1][0] = l_run[1][1] = 0.0f;\n',
            '        c_store += Ck() - a3;  // TR\n', i)
    # Warpgroup 1.
    i = k.find('wgmma::DecMaxRegs<kOutRegs>();')
    k.after('wgmma::DecMaxRegs<kOutRegs>();\n', '    unsigned long long c_wg1 = 0;  // TR\n', i - 1)
    k.after('      BarSync(kReady);\n', '      unsigned long long b2 = Ck();  // TR\n', i)
    k.after('      ptx::MbarArrive(empty0 + 8 * (ft & 1));\n', '      c_wg1 += Ck() - b2;  // TR\n', i)
    k.replace('    }\n  }\n#else\n  __trap();  // built without sm_90a', '''    }
    if (tid == 128) tr[15] = c_wg1;  // TR
  }
  if (tid == 0) { tr[1] = Gt(); tr[3] = Ck(); tr[4] = c_full; tr[5] = c_tile; tr[6] = c_store; }  // TR
  if (tid == 0) { tr[7] = c_q; tr[12] = total; }  // TR
#else
  __trap();  // built without sm_90a''')


def instrument_fold(f):
    # g_tr_fold: the first fold CTA's start past its wait and the last one's end (stamps).
    f.after('namespace ferry::kernels::cuda {\n', '''__device__ unsigned long long g_tr_fold[2];  // TR
__device__ __forceinline__ unsigned long long Gt() {  // TR
  unsigned long long t;  // TR
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));  // TR
  return t;  // TR
}  // TR
void MlaTraceFoldReset() {  // TR
  unsigned long long v[2] = {~0ull, 0};  // TR
  cudaMemcpyToSymbol(g_tr_fold, v, sizeof(v));  // TR
}  // TR
void MlaTraceFoldRead(unsigned long long* out) { cudaMemcpyFromSymbol(out, g_tr_fold, sizeof(g_tr_fold)); }  // TR
''')
    f.replace('  PdlWait();\n  FoldSlice(',
              '  PdlWait();\n  if (threadIdx.x == 0) atomicMin(&g_tr_fold[0], Gt());  // TR\n  FoldSlice(')
    i = f.find(');\n', f.find('FoldSlice(', f.find('atomicMin(&g_tr_fold[0]'))) + 3
    f.text = (f.text[:i] + '  __syncthreads();  // TR\n' +
              '  if (threadIdx.x == 0) atomicMax(&g_tr_fold[1], Gt());  // TR\n' + f.text[i:])


def instrument_bench(b):
    b.replace('namespace ferry::harness {\nnamespace {\n', '''namespace ferry::kernels::cuda {
void MlaTraceReset();
void MlaTraceRead(unsigned long long* out);
}  // namespace ferry::kernels::cuda
namespace ferry::harness {
namespace {

// The instrumented kernel's table (bench/tools/mla_trace.py), averaged over the CTAs.
void PrintTrace(int batch, int rope) {
  constexpr int C = 160, S = 16;
  std::vector<unsigned long long> t(C * S + 2);
  ferry::kernels::cuda::MlaTraceRead(t.data());
  unsigned long long g0 = ~0ull;
  int n = 0;
  for (int c = 0; c < C; ++c) {
    if (t[c * S] != 0) g0 = std::min(g0, t[c * S]), ++n;
  }
  if (n == 0) return;
  double freq = 0, first = 0, firstmax = 0, endm = 0, endmax = 0, endmin = 1e30, pend = 0, pendmax = 0, tiles = 0;
  double full = 0, tile = 0, store = 0, qw = 0, pe = 0, pi = 0, pl = 0, setup = 0, wg1 = 0;
  for (int c = 0; c < C; ++c) {
    const unsigned long long* r = &t[c * S];
    if (r[0] == 0) continue;
    const double f = double(r[3] - r[2]) / double(r[1] - r[0]);  // clocks a ns
    freq += f / n;
    first += double(r[14] - g0) / n;
    firstmax = std::max(firstmax, double(r[14] - g0));
    endm += double(r[1] - g0) / n;
    endmax = std::max(endmax, double(r[1] - g0));
    endmin = std::min(endmin, double(r[1] - g0));
    pend += double(r[11] - g0) / n;
    pendmax = std::max(pendmax, double(r[11] - g0));
    tiles += double(r[12]) / n;
    full += r[4] / f / n, tile += r[5] / f / n, store += r[6] / f / n, qw += r[7] / f / n;
    pe += r[8] / f / n, pi += r[9] / f / n, pl += r[10] / f / n, wg1 += r[15] / f / n;
    setup += double(r[13] - r[2]) / f / n;
  }
  const double fs = double(t[C * S] - g0), fe = double(t[C * S + 1] - g0);
  printf("TRACE batch %d rope %d: %d CTAs, %.2f GHz, %.1f tiles a CTA (us from the first CTA's start)\\n", batch,
         rope, n, freq, tiles);
  printf("  first tile ready mean %.2f max %.2f (clock: %.2f)\\n", first / 1e3, firstmax / 1e3, setup / 1e3);
  printf("  consumers end min %.2f mean %.2f max %.2f; producer end mean %.2f max %.2f; fold %.2f .. %.2f\\n",
         endmin / 1e3, endm / 1e3, endmax / 1e3, pend / 1e3, pendmax / 1e3, fs / 1e3, fe / 1e3);
  printf("  warpgroup 0 a CTA: wait stage %.2f, tiles %.2f, stores %.2f, wait q %.2f; a tile: %.3f / %.3f\\n",
         full / 1e3, tile / 1e3, store / 1e3, qw / 1e3, full / 1e3 / tiles, tile / 1e3 / tiles);
  printf("  warpgroup 1 products a tile %.3f\\n", wg1 / 1e3 / tiles);
  printf("  producer a CTA: wait stage %.2f, issue %.2f, lookups %.2f; a tile: %.3f / %.3f / %.3f\\n", pe / 1e3,
         pi / 1e3, pl / 1e3, pe / 1e3 / tiles, pi / 1e3 / tiles, pl / 1e3 / tiles);
}
''')
    b.after('  BENCH_CHECK(cudaMemcpy(host_ws.data(), out, host.size() * 2, cudaMemcpyDeviceToHost));\n',
            '''  if (heads == 64 && !per_head) {  // two traced launches of the persistent form
    for (int rep = 0; rep < 2; ++rep) {
      BENCH_CHECK(cudaDeviceSynchronize());
      ferry::kernels::cuda::MlaTraceReset();
      SpinKernel<<<1, 1>>>(2'000'000);
      if (!launch(rep % sets).ok()) return -1;
      BENCH_CHECK(cudaDeviceSynchronize());
      PrintTrace(batch, rope);
    }
  }
''')


def main():
    backup = subprocess.run(['git', 'rev-parse', '--git-path', 'mla-trace'], check=True, capture_output=True,
                            text=True).stdout.strip()
    if sys.argv[1:] == ['--revert']:
        # The files as they were before instrumenting (edits made since are lost with it).
        for path in (KERNEL, FOLD, BENCH):
            saved = os.path.join(backup, os.path.basename(path))
            if not os.path.exists(saved):
                sys.exit(f'no saved copy of {path} in {backup}: not instrumented by this script')
            shutil.copyfile(saved, path)
            os.remove(saved)
        print(f'restored {KERNEL}, {FOLD} and {BENCH}')
        return
    if sys.argv[1:]:
        sys.exit('usage: bench/tools/mla_trace.py [--revert]')
    k, f, b = Source(KERNEL), Source(FOLD), Source(BENCH)
    instrument_kernel(k)
    instrument_fold(f)
    instrument_bench(b)
    os.makedirs(backup, exist_ok=True)
    for path in (KERNEL, FOLD, BENCH):
        shutil.copyfile(path, os.path.join(backup, os.path.basename(path)))
    for src in (k, f, b):
        src.save()
    print(f'instrumented {KERNEL}, {FOLD} and {BENCH}; bench/tools/mla_trace.py --revert restores them')


if __name__ == '__main__':
    main()
