// Section 2h: a dense MLP's NVFP4 gate_up product [2 inter, hidden] at prefill row counts, the two
// forms LinearNvfp4 chooses between (kernels/cuda/gemv_nvfp4.h) and the bf16 product as the
// ceiling: GemvNvfp4, which decodes the packed weights in registers and reads them once per 32 rows;
// the packed matrix dequantized into bf16 tiles then cuBLAS, which reads it once; cuBLAS over bf16
// weights. Where the second overtakes the first is KernelOptions::nvfp4_gemm_min_rows.
#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/roofline.h"
#include "bench/roofline_cuda.h"
#include "common/status.h"
#include "kernels/cuda/gemv_nvfp4.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/options.h"

namespace ferry::bench {

namespace cu = ferry::kernels::cuda;

namespace {

absl::Status RunCase(const NamedConfig& m, int64_t rows, const Options& o, Table* t) {
  const int64_t D = m.config.hidden_size, out = 2 * m.config.intermediate_size;
  DeviceBlocks b;
  FERRY_ASSIGN_OR_RETURN(uint16_t * x, b.Take<uint16_t>(rows * D));
  FERRY_ASSIGN_OR_RETURN(uint16_t * y, b.Take<uint16_t>(rows * out));
  FERRY_ASSIGN_OR_RETURN(uint16_t * w16, b.Take<uint16_t>(out * D));
  FERRY_RETURN_IF_ERROR(FillRandomBf16(x, rows * D, o.seed + 120, 1.0f));
  FERRY_RETURN_IF_ERROR(FillRandomBf16(w16, out * D, o.seed + 121, 0.02f));
  // gate and up packed apart from the same random ModelOpt bytes, each with its global scale.
  const int64_t packed_bytes = cu::Nvfp4PackedBytes(out, D), half = out / 2;
  FERRY_ASSIGN_OR_RETURN(uint8_t * packed, b.Take<uint8_t>(packed_bytes));
  FERRY_ASSIGN_OR_RETURN(uint8_t * codes, b.Take<uint8_t>(half * D / 2));
  FERRY_ASSIGN_OR_RETURN(uint8_t * scales, b.Take<uint8_t>(half * D / 16));
  FERRY_RETURN_IF_ERROR(FillRandomFp8(codes, half * D / 2, o.seed + 122, 200.0f));
  FERRY_RETURN_IF_ERROR(FillRandomFp8(scales, half * D / 16, o.seed + 123, 100.0f));
  FERRY_RETURN_IF_ERROR(cu::PackNvfp4(codes, scales, 1e-3f, half, D, packed, out, 0));
  FERRY_RETURN_IF_ERROR(cu::PackNvfp4(codes, scales, 2e-3f, half, D, packed, out, half));
  const int64_t scratch_bytes = cu::Nvfp4GemmScratchBytes(out, D);
  FERRY_ASSIGN_OR_RETURN(uint16_t * scratch, b.Take<uint16_t>(scratch_bytes / 2));

  const cu::KernelOptions engine = cu::GetKernelOptions();
  auto tiles = [&]() -> absl::Status {
    cu::KernelOptions every_row = engine;
    every_row.nvfp4_gemm_min_rows = 1;
    cu::SetKernelOptions(every_row);
    const absl::Status st = cu::LinearNvfp4(x, rows, D, packed, out, half, scratch, scratch_bytes, y);
    cu::SetKernelOptions(engine);
    return st;
  };
  const double activations = 2.0 * rows * (D + out);
  const int64_t passes = (rows + cu::kNvfp4WidePassRows - 1) / cu::kNvfp4WidePassRows;
  struct Way {
    std::string label;
    std::function<absl::Status()> fn;
    double bytes;
    std::string note;
  };
  const std::vector<Way> ways = {
      {"GemvNvfp4", [&] { return cu::GemvNvfp4(x, rows, D, packed, out, y); },
       static_cast<double>(passes) * packed_bytes + activations,
       absl::StrCat("the packed matrix read ", passes, " times")},
      {"dequantized tiles + cuBLAS", tiles, static_cast<double>(packed_bytes) + 4.0 * out * D + activations,
       absl::StrCat("bf16 tiles written and read once, pieces of ", scratch_bytes >> 20, " MiB")},
      {"bf16 weights, cuBLAS (ceiling)", [&] { return cu::LinearBf16(x, rows, D, w16, out, y); },
       2.0 * out * D + activations, ""},
  };
  for (const Way& w : ways) {
    Row r(absl::StrCat(m.name, " gate_up ", out, " x ", D, ", ", rows, " rows, ", w.label));
    absl::StatusOr<std::vector<double>> ms = TimeEvents(w.fn, o.warmup, o.reps);
    if (!ms.ok()) {
      t->rows.push_back(Row::Failed(r.name, std::string(ms.status().message())));
      continue;
    }
    r.bytes = w.bytes;
    r.flops = 2.0 * rows * out * D;
    r.SetTimes(*ms);
    r.note = w.note;
    t->rows.push_back(r);
  }
  return absl::OkStatus();
}

}  // namespace

Table Nvfp4PrefillTable(const std::vector<NamedConfig>& models, const Options& o, const Ceilings& c) {
  (void)c;
  Table t;
  t.title = "2h. A dense MLP's NVFP4 gate_up at prefill row counts: decoded in registers, dequantized tiles, bf16";
  t.explanation = absl::StrCat(
      "One dense layer's gate_up (gate and up stacked, each with its global scale; random ModelOpt bytes). bytes = "
      "what each form moves at the least: GemvNvfp4 the packed matrix once per ", cu::kNvfp4WidePassRows,
      " rows; the tiles form the packed matrix once plus its bf16 tiles written and read; cuBLAS over bf16 "
      "weights 2 a weight; + the bf16 activations. FLOPs = 2 x rows x out x hidden. The engine takes the tiles "
      "from KernelOptions::nvfp4_gemm_min_rows = ",
      cu::GetKernelOptions().nvfp4_gemm_min_rows, " rows: where they overtake GemvNvfp4 here.");
  const std::vector<int64_t> counts =
      o.smoke ? std::vector<int64_t>{256} : std::vector<int64_t>{32, 64, 128, 256, 512, 1024, 4096};
  for (const NamedConfig& m : models) {
    if (m.config.intermediate_size <= 0) continue;
    for (int64_t rows : counts) {
      if (absl::Status st = RunCase(m, rows, o, &t); !st.ok()) {
        t.rows.push_back(Row::Failed(absl::StrCat(m.name, " ", rows, " rows"), std::string(st.message())));
      }
    }
  }
  return t;
}

}  // namespace ferry::bench
