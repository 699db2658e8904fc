#include "bench/roofline_report.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_format.h"

namespace ferry::bench {

double Median(std::vector<double> ms) {
  if (ms.empty()) return 0;
  std::sort(ms.begin(), ms.end());
  const size_t n = ms.size();
  return n % 2 == 1 ? ms[n / 2] : 0.5 * (ms[n / 2 - 1] + ms[n / 2]);
}

double Min(const std::vector<double>& ms) { return ms.empty() ? 0 : *std::min_element(ms.begin(), ms.end()); }

double Row::RooflineMs(const Ceilings& c) const {
  const double mem = c.bytes_per_s > 0 ? bytes / c.bytes_per_s : 0;
  const double mat = c.flops_per_s > 0 ? flops / c.flops_per_s : 0;
  return 1e3 * std::max(mem, mat);
}

double Row::TargetValue(const Ceilings& c) const {
  if (ms <= 0) return 0;
  switch (target.kind) {
    case TargetKind::kBandwidth:
      return bytes / (ms * 1e-3) / c.bytes_per_s;
    case TargetKind::kMatrix:
      return flops / (ms * 1e-3) / c.flops_per_s;
    case TargetKind::kRoofline:
      return RooflineMs(c) / ms;
    case TargetKind::kNone:
      break;
  }
  return 0;
}

std::string FormatBytes(double b) {
  if (b >= 1e9) return absl::StrFormat("%.2f GB", b / 1e9);
  if (b >= 1e6) return absl::StrFormat("%.1f MB", b / 1e6);
  if (b >= 1e3) return absl::StrFormat("%.1f kB", b / 1e3);
  return absl::StrFormat("%.0f B", b);
}

std::string FormatFlops(double f) {
  if (f >= 1e12) return absl::StrFormat("%.2f TFLOP", f / 1e12);
  if (f >= 1e9) return absl::StrFormat("%.1f GFLOP", f / 1e9);
  if (f >= 1e6) return absl::StrFormat("%.1f MFLOP", f / 1e6);
  return absl::StrFormat("%.0f FLOP", f);
}

namespace {

std::string TargetText(const Target& t) {
  switch (t.kind) {
    case TargetKind::kBandwidth:
      return absl::StrFormat(">= %.0f%% BW", 100 * t.fraction);
    case TargetKind::kMatrix:
      return absl::StrFormat(">= %.0f%% matrix", 100 * t.fraction);
    case TargetKind::kRoofline:
      return absl::StrFormat(">= %.0f%% roofline", 100 * t.fraction);
    case TargetKind::kNone:
      break;
  }
  return "";
}

}  // namespace

void PrintTable(const Table& t, const Ceilings& c) {
  std::printf("\n### %s\n\n", t.title.c_str());
  if (!t.explanation.empty()) std::printf("%s\n\n", t.explanation.c_str());
  std::printf(
      "| case | bytes | FLOPs | median ms | best ms | GB/s | TFLOP/s | %% BW | %% matrix | %% roofline | target "
      "| met | note |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---|\n");
  for (const Row& r : t.rows) {
    if (!r.error.empty()) {
      std::printf("| %s | | | | | | | | | | %s | FAILED | %s |\n", r.name.c_str(), TargetText(r.target).c_str(),
                  r.error.c_str());
      continue;
    }
    const double s = r.ms * 1e-3;
    const double gbs = s > 0 ? r.bytes / s / 1e9 : 0, tfs = s > 0 ? r.flops / s / 1e12 : 0;
    const double pbw = c.bytes_per_s > 0 ? 100 * gbs * 1e9 / c.bytes_per_s : 0;
    const double pmx = c.flops_per_s > 0 ? 100 * tfs * 1e12 / c.flops_per_s : 0;
    const double proof = r.ms > 0 ? 100 * r.RooflineMs(c) / r.ms : 0;
    const char* met = r.target.kind == TargetKind::kNone ? "" : (r.Met(c) ? "met" : "not met");
    std::printf("| %s | %s | %s | %.4g | %.4g | %.0f | %.1f | %.1f | %.1f | %.1f | %s | %s | %s |\n", r.name.c_str(),
                FormatBytes(r.bytes).c_str(), FormatFlops(r.flops).c_str(), r.ms, r.ms_min, gbs, tfs, pbw, pmx, proof,
                TargetText(r.target).c_str(), met, r.note.c_str());
  }
  std::fflush(stdout);
}

}  // namespace ferry::bench
