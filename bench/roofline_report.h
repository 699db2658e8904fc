// Tables of the roofline benchmark: each row a case with the bytes it must move and the FLOPs it
// must do, its measured time, and how close that comes to the ceilings measured in the same run.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ferry::bench {

// The two ceilings of this run (section 1): HBM read bandwidth and the bf16 matrix rate.
struct Ceilings {
  double bytes_per_s = 0;  // streaming read, best of the runs
  double flops_per_s = 0;  // cuBLAS bf16 GEMM 8192^3 (LinearBf16), best of the runs
};

// Median and minimum of `ms` (milliseconds); 0 for an empty list.
double Median(std::vector<double> ms);
double Min(const std::vector<double>& ms);

// What a row is held to: none, a fraction of the bandwidth (memory-bound targets), of the matrix
// rate, or of the row's roofline time.
enum class TargetKind { kNone, kBandwidth, kMatrix, kRoofline };
struct Target {
  TargetKind kind = TargetKind::kNone;
  double fraction = 0;
};

struct Row {
  explicit Row(std::string n = "") : name(std::move(n)) {}
  // A row for a case that failed with `why`.
  static Row Failed(std::string n, std::string why) {
    Row r(std::move(n));
    r.error = std::move(why);
    return r;
  }

  std::string name;
  double bytes = 0;   // the fewest bytes the case must move through device memory
  double flops = 0;   // the floating-point operations it must do
  double ms = 0;      // median measured time
  double ms_min = 0;  // best measured time
  Target target;
  std::string note;   // free text (a breakdown, an assumption)
  std::string error;  // non-empty: the case failed and this says why (nothing else is printed)

  // ms and ms_min from timed calls `times` (milliseconds), each divided by `per` (the calls'
  // count a row stands for, e.g. layers).
  void SetTimes(const std::vector<double>& times, double per = 1) {
    ms = Median(times) / per;
    ms_min = Min(times) / per;
  }
  // roofline = max(bytes / bandwidth, flops / matrix rate), in milliseconds.
  double RooflineMs(const Ceilings& c) const;
  // The measured fraction the target speaks of (achieved bandwidth / ceiling, achieved rate /
  // ceiling, or roofline / time); 0 without a target.
  double TargetValue(const Ceilings& c) const;
  bool Met(const Ceilings& c) const { return target.kind != TargetKind::kNone && TargetValue(c) >= target.fraction; }
};

struct Table {
  std::string title;
  std::string explanation;  // how bytes and FLOPs are counted, printed under the title
  std::vector<Row> rows;
};

// Prints `t` as a Markdown table to stdout: case, bytes, FLOPs, median and best ms, GB/s,
// TFLOP/s, % of bandwidth, % of matrix rate, % of roofline, target, met, note.
void PrintTable(const Table& t, const Ceilings& c);

// "1.23 GB", "456 MB", ... and "1.2 TFLOP", "34 GFLOP".
std::string FormatBytes(double bytes);
std::string FormatFlops(double flops);

}  // namespace ferry::bench
