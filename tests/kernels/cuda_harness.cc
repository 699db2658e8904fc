// ferry-kernel-check: runs every CUDA op on fresh random inputs and compares it with its CPU
// reference (kernels/cpu) by relative norm error, after poisoning the outputs so that unwritten
// elements show up as NaN. Without a CUDA device it says so and skips every device case (exit 0),
// which is what CI (no GPU) sees.
//
//   ferry-kernel-check [--seed N] [--filter SUBSTRING]
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/ops.h"

namespace ferry {
namespace {

namespace cpu = kernels::cpu;
namespace cu = kernels::cuda;

struct Result {
  std::string error;  // non-empty: the case could not run
  double rel_err = 0.0;
  double tolerance = 0.0;
  long unwritten = 0;  // outputs still holding the poison
};

struct Case {
  std::string name;
  std::function<Result(std::mt19937&)> run;
};

// Random bf16 values, returned both as bits and as their exact float values.
void RandomBf16(size_t n, float scale, float offset, std::mt19937& rng, std::vector<uint16_t>* bits,
                std::vector<float>* values) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  bits->resize(n);
  values->resize(n);
  for (size_t i = 0; i < n; ++i) {
    (*bits)[i] = F32ToBf16(offset + scale * d(rng));
    (*values)[i] = Bf16ToF32((*bits)[i]);
  }
}

// Owns device buffers for one case; frees them on every path.
class Device {
 public:
  ~Device() {
    for (void* p : ptrs_) (void)cu::DeviceFree(p);
  }
  template <typename T>
  T* Upload(const std::vector<T>& host, std::string* err) {
    auto p = cu::DeviceAlloc(host.size() * sizeof(T));
    if (!p.ok()) return *err = std::string(p.status().message()), nullptr;
    ptrs_.push_back(*p);
    if (auto s = cu::CopyToDevice(*p, host.data(), host.size() * sizeof(T)); !s.ok()) {
      *err = std::string(s.message());
    }
    return static_cast<T*>(*p);
  }
  template <typename T>
  T* Poisoned(size_t n, std::string* err) {
    auto p = cu::DeviceAlloc(n * sizeof(T));
    if (!p.ok()) return *err = std::string(p.status().message()), nullptr;
    ptrs_.push_back(*p);
    if (auto s = cu::DeviceFill(*p, 0xff, n * sizeof(T)); !s.ok()) *err = std::string(s.message());
    return static_cast<T*>(*p);
  }

 private:
  std::vector<void*> ptrs_;
};

double RelErr(const std::vector<float>& got, const std::vector<float>& want, long* nan_count) {
  double num = 0, den = 0;
  *nan_count = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i])) {
      ++*nan_count;
      continue;
    }
    num += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    den += double(want[i]) * want[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

Result RmsNormCase(std::mt19937& rng, int64_t rows, int64_t dim) {
  Result r;
  r.tolerance = 1e-2;  // bf16 output rounding: about 2^-9 relative
  std::vector<uint16_t> xb, wb;
  std::vector<float> xf, wf;
  RandomBf16(rows * dim, 2.0f, 0.0f, rng, &xb, &xf);
  RandomBf16(dim, 0.1f, 1.0f, rng, &wb, &wf);
  std::vector<float> want(rows * dim);
  cpu::RmsNorm(xf.data(), rows, dim, wf.data(), 1e-5f, want.data());
  Device dev;
  uint16_t* x = dev.Upload(xb, &r.error);
  uint16_t* w = dev.Upload(wb, &r.error);
  uint16_t* y = dev.Poisoned<uint16_t>(rows * dim, &r.error);
  if (!r.error.empty()) return r;
  if (auto s = cu::RmsNormBf16(x, rows, dim, w, 1e-5f, y); !s.ok()) return r.error = std::string(s.message()), r;
  if (auto s = cu::Synchronize(); !s.ok()) return r.error = std::string(s.message()), r;
  std::vector<uint16_t> yb(rows * dim);
  if (auto s = cu::CopyToHost(yb.data(), y, yb.size() * 2); !s.ok()) return r.error = std::string(s.message()), r;
  std::vector<float> got(yb.size());
  for (size_t i = 0; i < yb.size(); ++i) got[i] = Bf16ToF32(yb[i]);
  r.rel_err = RelErr(got, want, &r.unwritten);
  return r;
}

std::vector<Case> AllCases() {
  std::vector<Case> cases;
  for (auto [rows, dim] : std::vector<std::pair<int64_t, int64_t>>{{1, 64}, {7, 4096}, {64, 6144}, {3, 1000}}) {
    cases.push_back({"rms_norm_bf16 rows=" + std::to_string(rows) + " dim=" + std::to_string(dim),
                     [rows = rows, dim = dim](std::mt19937& rng) { return RmsNormCase(rng, rows, dim); }});
  }
  return cases;
}

}  // namespace
}  // namespace ferry

int main(int argc, char** argv) {
  unsigned seed = std::random_device{}();
  std::string filter;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--seed") == 0 && i + 1 < argc) seed = static_cast<unsigned>(std::stoul(argv[++i]));
    else if (std::strcmp(argv[i], "--filter") == 0 && i + 1 < argc) filter = argv[++i];
    else {
      fprintf(stderr, "usage: ferry-kernel-check [--seed N] [--filter SUBSTRING]\n");
      return 2;
    }
  }
  const auto cases = ferry::AllCases();
  if (ferry::kernels::cuda::DeviceCount() == 0) {
    printf("ferry-kernel-check: no CUDA device: skipped %zu device cases\n", cases.size());
    return 0;
  }
  auto name = ferry::kernels::cuda::DeviceName(0);
  printf("device: %s; seed %u\n", name.ok() ? name->c_str() : "?", seed);
  std::mt19937 rng(seed);
  int passed = 0, failed = 0;
  for (const auto& c : cases) {
    if (!filter.empty() && c.name.find(filter) == std::string::npos) continue;
    ferry::Result r = c.run(rng);
    const bool ok = r.error.empty() && r.unwritten == 0 && r.rel_err <= r.tolerance;
    if (!r.error.empty()) printf("%-44s ERROR %s\n", c.name.c_str(), r.error.c_str());
    else printf("%-44s rel_err %.3e (tol %.0e) unwritten %ld  %s\n", c.name.c_str(), r.rel_err, r.tolerance,
                r.unwritten, ok ? "ok" : "FAIL");
    (ok ? passed : failed)++;
  }
  printf("kernels: %d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
