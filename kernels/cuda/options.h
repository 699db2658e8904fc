// Choices among some ops' forms, to compare the forms on one device: the kernel harness and the
// benchmarks set them from their flags; serving runs the defaults. Plain C++.
//
// Set them once, before the first launch: an op reads them when it first picks a form for a
// device and shape and may keep that pick (nvfp4_gemm_min_rows alone is read at every call, so a
// check may compare both forms in one run). (FERRY_PDL=0 in the environment, the kill switch of
// programmatic dependent launch, stays an environment variable: pdl.cuh.)
#pragma once

#include <cstdint>

namespace ferry::kernels::cuda {

struct KernelOptions {
  // MlaDecodeAttention takes its sm_90a wgmma form where it runs (more than 32 heads); false
  // keeps the mma.sync tensor-core kernel.
  bool mla_wgmma = true;
  // The mma.sync kernel's small form (q in registers, 99 KiB of shared memory: what a GB10 runs)
  // for every head count wherever it runs, and no wgmma form.
  bool mla_tc_small = false;
  // IndexerScores loads its 64-key tiles by TMA where pages hold a multiple of 64 rows; false
  // keeps the cp.async form.
  bool indexer_tma = true;
  // LinearNvfp4 (gemv_nvfp4.h) multiplies this many rows or more through dequantized bf16 tiles
  // and cuBLAS (a prefill's dense MLPs); fewer through GemvNvfp4, which reads the packed matrix
  // once per 32 rows.
  int64_t nvfp4_gemm_min_rows = 256;
};

void SetKernelOptions(const KernelOptions& options);
const KernelOptions& GetKernelOptions();

}  // namespace ferry::kernels::cuda
