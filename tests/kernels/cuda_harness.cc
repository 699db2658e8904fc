// ferry-kernel-check: runs every CUDA op on fresh random inputs and compares it with its CPU
// reference (kernels/cpu, model/blocks/mhc.cc) by relative norm error, or exactly for ids, after
// poisoning the outputs so that unwritten elements show up as NaN (or -1 ids). Without a CUDA
// device it says so and skips every device case (exit 0), which is what CI (no GPU) sees.
//
//   ferry-kernel-check [--seed N] [--filter SUBSTRING]
//   ferry-kernel-check --bench-mla     (MlaDecodeAttention GB/s vs read bandwidth; bench_mla.cu)
//   ferry-kernel-check --bench-mla-load (the MLA kernel's load path alone; bench_mla_parts.cu)
//   ferry-kernel-check --bench-mla-tile (the MLA tile's math alone, in parts; bench_mla_parts.cu)
//   ferry-kernel-check --bench-indexer (IndexerScores GB/s vs read bandwidth; bench_indexer.cu)
//   ferry-kernel-check --bench-gemv (GemvBf16 / MoeGemvBf16 GB/s vs read bandwidth and cuBLAS; bench_gemv.cu)
//
// The cases live in harness_dense.cc (linear, rope, swiglu, kda, mhc), harness_attention.cc
// (MLA decode, indexer scores), harness_select.cc (top-k, routing, greedy sampling),
// harness_model.cc (the model glue: embedding, casts, norms, row copies, paged writes, MoE combine),
// harness_next.cc (glm5_next: mHC mixing, KDA conv / norms / gates, pool keys and selection) and
// harness_moe.cc (the decode MoE dispatch: expert-ordered pairs, grouped matrix-vector products) and
// harness_nvfp4.cc (the NVFP4 decode products: packing, matrix-vector and MoE forms).
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/cuda/options.h"
#include "tests/kernels/harness.h"

namespace ferry::harness {
namespace {

namespace cpu = kernels::cpu;

Result RmsNormCase(std::mt19937& rng, int64_t rows, int64_t dim) {
  Result r;
  r.tolerance = 1e-2;  // bf16 output rounding: about 2^-9 relative
  std::vector<uint16_t> xb, wb;
  std::vector<float> xf, wf;
  RandomBf16(rows * dim, 2.0f, 0.0f, rng, &xb, &xf);
  RandomBf16(dim, 0.1f, 1.0f, rng, &wb, &wf);
  std::vector<float> want(rows * dim);
  cpu::RmsNorm(xf.data(), rows, dim, wf.data(), 1e-5f, want.data());
  Device dev(&r.error);
  uint16_t* x = dev.Upload(xb);
  uint16_t* w = dev.Upload(wb);
  uint16_t* y = dev.Poisoned<uint16_t>(rows * dim);
  if (!r.error.empty()) return r;
  HARNESS_CHECK_OK(cu::RmsNormBf16(x, rows, dim, w, 1e-5f, y));
  HARNESS_CHECK_OK(cu::Synchronize());
  std::vector<float> got = ToF32(dev.Download(y, rows * dim));
  if (!r.error.empty()) return r;
  r.rel_err = RelErr(got, want, &r.unwritten);
  return r;
}

std::vector<Case> AllCases() {
  std::vector<Case> cases;
  for (auto [rows, dim] : std::vector<std::pair<int64_t, int64_t>>{{1, 64}, {7, 4096}, {64, 6144}, {3, 1000}}) {
    cases.push_back({"rms_norm_bf16 rows=" + std::to_string(rows) + " dim=" + std::to_string(dim),
                     [rows = rows, dim = dim](std::mt19937& rng) { return RmsNormCase(rng, rows, dim); }});
  }
  AddDenseCases(&cases);
  AddAttentionCases(&cases);
  AddIndexerCases(&cases);
  AddSelectCases(&cases);
  AddModelCases(&cases);
  AddNextCases(&cases);
  AddMoeCases(&cases);
  AddFp8Cases(&cases);
  AddQuantizeCases(&cases);
  AddNvfp4Cases(&cases);
#ifdef FERRY_CUDA_SM121A
  AddW4A4Cases(&cases);  // the GB10 kernels exist only in sm_121a builds
#endif
  return cases;
}

}  // namespace
}  // namespace ferry::harness

int main(int argc, char** argv) {
  unsigned seed = std::random_device{}();
  std::string filter;
  bool bench_mla = false, bench_mla_load = false, bench_mla_tile = false, bench_indexer = false, bench_gemv = false;
  ferry::kernels::cuda::KernelOptions options;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--seed") == 0 && i + 1 < argc) seed = static_cast<unsigned>(std::stoul(argv[++i]));
    else if (std::strcmp(argv[i], "--filter") == 0 && i + 1 < argc) filter = argv[++i];
    else if (std::strcmp(argv[i], "--bench-mla") == 0) bench_mla = true;
    else if (std::strcmp(argv[i], "--bench-mla-load") == 0) bench_mla_load = true;
    else if (std::strcmp(argv[i], "--bench-mla-tile") == 0) bench_mla_tile = true;
    else if (std::strcmp(argv[i], "--bench-indexer") == 0) bench_indexer = true;
    else if (std::strcmp(argv[i], "--bench-gemv") == 0) bench_gemv = true;
    else if (std::strcmp(argv[i], "--mla-tc-small") == 0) options.mla_tc_small = true;
    else if (std::strcmp(argv[i], "--no-mla-wgmma") == 0) options.mla_wgmma = false;
    else if (std::strcmp(argv[i], "--no-indexer-tma") == 0) options.indexer_tma = false;
    else {
      fprintf(stderr,
              "usage: ferry-kernel-check [--seed N] [--filter SUBSTRING] | --bench-mla | --bench-mla-load | "
              "--bench-mla-tile | --bench-indexer | --bench-gemv\n"
              "  forms (kernels/cuda/options.h): [--mla-tc-small] [--no-mla-wgmma] [--no-indexer-tma]\n");
      return 2;
    }
  }
  ferry::kernels::cuda::SetKernelOptions(options);
  const auto cases = ferry::harness::AllCases();
  // A failed host check ends the run before any line the ctest pass pattern matches (it would
  // otherwise pass on "no CUDA device: skipped", whatever the exit status).
  const int host_failed = ferry::harness::RunFp8HostChecks() + ferry::harness::RunMlaHostChecks() +
                          ferry::harness::RunNvfp4HostChecks();
  if (host_failed != 0) {
    printf("ferry-kernel-check: %d host checks FAILED\n", host_failed);
    return 1;
  }
  if (ferry::kernels::cuda::DeviceCount() == 0) {
    printf("ferry-kernel-check: no CUDA device: skipped %zu device cases\n", cases.size());
    return 0;
  }
  if (bench_mla) return ferry::harness::RunMlaBench() == 0 ? 0 : 1;
  if (bench_mla_load) return ferry::harness::RunMlaLoadBench() == 0 ? 0 : 1;
  if (bench_mla_tile) return ferry::harness::RunMlaTileBench() == 0 ? 0 : 1;
  if (bench_indexer) return ferry::harness::RunIndexerBench() == 0 ? 0 : 1;
  if (bench_gemv) return ferry::harness::RunGemvBench() == 0 ? 0 : 1;
  auto name = ferry::kernels::cuda::DeviceName(0);
  printf("device: %s; seed %u\n", name.ok() ? name->c_str() : "?", seed);
  std::mt19937 rng(seed);
  int passed = 0, failed = 0;
  for (const auto& c : cases) {
    if (!filter.empty() && c.name.find(filter) == std::string::npos) continue;
    ferry::harness::Result r = c.run(rng);
    const bool ok = r.error.empty() && r.unwritten == 0 && r.mismatched == 0 && r.rel_err <= r.tolerance;
    if (!r.error.empty()) {
      printf("%-60s ERROR %s\n", c.name.c_str(), r.error.c_str());
    } else {
      printf("%-60s rel_err %.3e (tol %.0e) unwritten %ld mismatched %ld  %s%s%s\n", c.name.c_str(), r.rel_err,
             r.tolerance, r.unwritten, r.mismatched, ok ? "ok" : "FAIL", r.note.empty() ? "" : "  ",
             r.note.c_str());
    }
    (ok ? passed : failed)++;
  }
  printf("kernels: %d passed, %d failed\n", passed, failed);
  return failed == 0 && host_failed == 0 ? 0 : 1;
}
