// Section 1: the two ceilings every ratio is taken against, measured in the same run.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/roofline.h"
#include "bench/roofline_cuda.h"
#include "common/status.h"
#include "kernels/cuda/ops.h"

namespace ferry::bench {

namespace cu = ferry::kernels::cuda;

namespace {

// A device block freed on scope exit.
struct Dev {
  void* p = nullptr;
  ~Dev() {
    if (p != nullptr) (void)cu::DeviceFree(p);
  }
};

}  // namespace

absl::StatusOr<Ceilings> MeasureCeilings(const Options& o, Table* table) {
  Ceilings c;
  table->title = "1. Ceilings (measured in this run)";
  table->explanation =
      "HBM read: one streaming read kernel (16-byte loads, 4 in flight a thread, 8 blocks of 512 a "
      "multiprocessor) over the whole buffer, bytes = the buffer. Device copy: cudaMemcpy device to device, bytes "
      "= read + written. Matrix: cuBLAS bf16 GEMM through kernels::cuda::LinearBf16 (the model's Linear path, "
      "float32 accumulation), FLOPs = 2 m n k, random operands. The ceilings are the best of the runs; the "
      "percentages below are against them.";
  const int reps = std::max(o.reps, 5);

  // HBM read bandwidth over >= 4 GiB (64 MiB in smoke runs).
  {
    const size_t bytes = o.smoke ? (size_t{64} << 20) : (size_t{4} << 30);
    Dev buf, sink;
    FERRY_ASSIGN_OR_RETURN(buf.p, cu::DeviceAlloc(bytes));
    FERRY_ASSIGN_OR_RETURN(sink.p, cu::DeviceAlloc(16));
    FERRY_RETURN_IF_ERROR(FillRandomBf16(static_cast<uint16_t*>(buf.p), static_cast<int64_t>(bytes / 2), o.seed, 1.0f));
    FERRY_ASSIGN_OR_RETURN(
        std::vector<double> ms,
        TimeEvents([&] { return StreamRead(buf.p, bytes, static_cast<uint32_t*>(sink.p)); }, o.warmup, reps));
    Row r(absl::StrFormat("HBM streaming read, %.0f GiB", static_cast<double>(bytes) / (1 << 30)));
    r.bytes = static_cast<double>(bytes);
    r.SetTimes(ms);
    c.bytes_per_s = r.bytes / (r.ms_min * 1e-3);
    r.note = absl::StrFormat("best %.0f GB/s, median %.0f GB/s", c.bytes_per_s / 1e9, r.bytes / (r.ms * 1e-3) / 1e9);
    table->rows.push_back(r);

    // For comparison with DEVICE.md's figure: a device-to-device copy of half the buffer.
    const size_t half = bytes / 2;
    FERRY_ASSIGN_OR_RETURN(
        std::vector<double> cms,
        TimeEvents([&] { return cu::CopyDeviceToDevice(static_cast<char*>(buf.p) + half, buf.p, half); }, o.warmup,
                   reps));
    Row cr(absl::StrFormat("device copy, %.0f GiB read + written", static_cast<double>(bytes) / (1 << 30)));
    cr.bytes = static_cast<double>(bytes);
    cr.SetTimes(cms);
    cr.note = absl::StrFormat("best %.0f GB/s (read + write)", cr.bytes / (cr.ms_min * 1e-3) / 1e9);
    table->rows.push_back(cr);
  }

  // bf16 matrix rate: 8192^3 (1024^3 in smoke runs).
  {
    const int64_t n = o.smoke ? 1024 : 8192;
    const size_t bytes = static_cast<size_t>(n * n) * 2;
    Dev x, w, y;
    FERRY_ASSIGN_OR_RETURN(x.p, cu::DeviceAlloc(bytes));
    FERRY_ASSIGN_OR_RETURN(w.p, cu::DeviceAlloc(bytes));
    FERRY_ASSIGN_OR_RETURN(y.p, cu::DeviceAlloc(bytes));
    FERRY_RETURN_IF_ERROR(FillRandomBf16(static_cast<uint16_t*>(x.p), n * n, o.seed + 1, 1.0f));
    FERRY_RETURN_IF_ERROR(FillRandomBf16(static_cast<uint16_t*>(w.p), n * n, o.seed + 2, 0.02f));
    FERRY_ASSIGN_OR_RETURN(std::vector<double> ms, TimeEvents(
                                                       [&] {
                                                         return cu::LinearBf16(static_cast<const uint16_t*>(x.p), n, n,
                                                                               static_cast<const uint16_t*>(w.p), n,
                                                                               static_cast<uint16_t*>(y.p));
                                                       },
                                                       o.warmup, reps));
    Row r(absl::StrCat("bf16 GEMM ", n, "^3 (LinearBf16)"));
    r.bytes = 3.0 * static_cast<double>(bytes);
    r.flops = 2.0 * static_cast<double>(n) * n * n;
    r.SetTimes(ms);
    c.flops_per_s = r.flops / (r.ms_min * 1e-3);
    r.note =
        absl::StrFormat("best %.0f TFLOP/s, median %.0f TFLOP/s", c.flops_per_s / 1e12, r.flops / (r.ms * 1e-3) / 1e12);
    table->rows.push_back(r);
  }
  return c;
}

}  // namespace ferry::bench
