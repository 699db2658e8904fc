// Shared pieces of ferry-kernel-check (tests/kernels/cuda_harness.cc): a case's result, device
// buffers that poison their outputs, random inputs, and the relative-norm error.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/dtype.h"
#include "kernels/cuda/gemv.h"
#include "kernels/cuda/ops.h"

namespace ferry::harness {

namespace cu = kernels::cuda;

struct Result {
  std::string error;  // non-empty: the case could not run
  double rel_err = 0.0;
  double tolerance = 0.0;
  long unwritten = 0;   // outputs still holding the poison (NaN) or NaN where the reference is not
  long mismatched = 0;  // outputs compared exactly (ids, untouched elements) that differ
  std::string note;     // extra facts worth printing (e.g. rows skipped as near ties)
};

struct Case {
  std::string name;
  std::function<Result(std::mt19937&)> run;
};

// Returns the enclosing case's Result `r` with the error of a non-OK absl::Status.
#define HARNESS_CHECK_OK(expr)                   \
  do {                                           \
    const ::absl::Status harness_s_ = (expr);    \
    if (!harness_s_.ok()) {                      \
      r.error = std::string(harness_s_.message()); \
      return r;                                  \
    }                                            \
  } while (0)

// Random bf16 values N(offset, scale^2), returned both as bits and as their exact float values.
inline void RandomBf16(size_t n, float scale, float offset, std::mt19937& rng, std::vector<uint16_t>* bits,
                       std::vector<float>* values) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  bits->resize(n);
  values->resize(n);
  for (size_t i = 0; i < n; ++i) {
    (*bits)[i] = F32ToBf16(offset + scale * d(rng));
    (*values)[i] = Bf16ToF32((*bits)[i]);
  }
}

inline std::vector<float> RandomF32(size_t n, float scale, float offset, std::mt19937& rng) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = offset + scale * d(rng);
  return v;
}

inline std::vector<float> ToF32(const std::vector<uint16_t>& bf16_bits) {
  std::vector<float> v(bf16_bits.size());
  for (size_t i = 0; i < bf16_bits.size(); ++i) v[i] = Bf16ToF32(bf16_bits[i]);
  return v;
}

// Owns device buffers for one case; frees them on every path. Errors land in *err (first wins).
class Device {
 public:
  explicit Device(std::string* err) : err_(err) {}
  ~Device() {
    for (void* p : ptrs_) (void)cu::DeviceFree(p);
  }
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  template <typename T>
  T* Upload(const std::vector<T>& host) {
    T* p = Alloc<T>(host.size());
    if (p != nullptr) Note(cu::CopyToDevice(p, host.data(), host.size() * sizeof(T)));
    return p;
  }
  // n elements filled with 0xff bytes: NaN for float and bf16, -1 for int32.
  template <typename T>
  T* Poisoned(size_t n) {
    T* p = Alloc<T>(n);
    if (p != nullptr) Note(cu::DeviceFill(p, 0xff, n * sizeof(T)));
    return p;
  }
  template <typename T>
  std::vector<T> Download(const T* p, size_t n) {
    std::vector<T> host(n);
    if (err_->empty()) Note(cu::CopyToHost(host.data(), p, n * sizeof(T)));
    return host;
  }

 private:
  template <typename T>
  T* Alloc(size_t n) {
    if (!err_->empty()) return nullptr;
    auto p = cu::DeviceAlloc(std::max<size_t>(n, 1) * sizeof(T));
    if (!p.ok()) return Note(p.status()), nullptr;
    ptrs_.push_back(*p);
    return static_cast<T*>(*p);
  }
  void Note(const absl::Status& s) {
    if (!s.ok() && err_->empty()) *err_ = std::string(s.message());
  }
  std::string* err_;
  std::vector<void*> ptrs_;
};

// ||got - want|| / ||want|| over the elements where got is not NaN; *nan_count counts the NaN
// ones of got where want is not NaN (unwritten or wrongly NaN). Elements NaN in both are skipped.
inline double RelErr(const std::vector<float>& got, const std::vector<float>& want, long* nan_count) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) {
      if (!std::isnan(got[i])) ++*nan_count;  // the reference is NaN, the kernel is not
      continue;
    }
    if (std::isnan(got[i])) {
      ++*nan_count;
      continue;
    }
    num += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    den += double(want[i]) * want[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

// The case groups, one file each.
void AddDenseCases(std::vector<Case>* cases);      // harness_dense.cc
void AddAttentionCases(std::vector<Case>* cases);  // harness_attention.cc
void AddIndexerCases(std::vector<Case>* cases);    // harness_indexer.cc
void AddSelectCases(std::vector<Case>* cases);     // harness_select.cc
void AddModelCases(std::vector<Case>* cases);      // harness_model.cc
void AddNextCases(std::vector<Case>* cases);       // harness_next.cc
void AddMoeCases(std::vector<Case>* cases);        // harness_moe.cc
void AddFp8Cases(std::vector<Case>* cases);        // harness_fp8.cc
void AddQuantizeCases(std::vector<Case>* cases);   // harness_quantize.cc
void AddNvfp4Cases(std::vector<Case>* cases);      // harness_nvfp4.cc
void AddW4A4Cases(std::vector<Case>* cases);       // harness_w4a4.cc (121a builds only)
// One run of host-side checks (no device needed): each failed check is printed and counted.
class HostChecks {
 public:
  void Expect(bool ok, const std::string& what) {
    if (ok) return;
    printf("host check FAILED: %s\n", what.c_str());
    ++failed_;
  }
  // Passes when `st` is INVALID_ARGUMENT and its message holds `needle`.
  void Refused(const absl::Status& st, const std::string& needle, const std::string& what) {
    Expect(absl::IsInvalidArgument(st) && std::string(st.message()).find(needle) != std::string::npos,
           what + ": got " + st.ToString());
  }
  // Prints "<name> host checks: all passed" (or FAILED) and returns the failures.
  int Finish(const char* name) const {
    printf("%s host checks: %s\n", name, failed_ == 0 ? "all passed" : "FAILED");
    return failed_;
  }

 private:
  int failed_ = 0;
};

// The FP8 ops' argument errors and layout sizes, host-side; prints what failed, returns the count
// (harness_fp8.cc).
int RunFp8HostChecks();
// The NVFP4 ops' argument errors and packed sizes, host-side (harness_nvfp4.cc).
int RunNvfp4HostChecks();
// MlaDecodeAttention's workspace sizes and argument checks (harness_attention.cc), host-side.
int RunMlaHostChecks();

// ferry-kernel-check --bench-mla (bench_mla.cu): MlaDecodeAttention's GB/s at the model shapes
// against the measured read bandwidth; prints a table, returns 0 when every point ran.
int RunMlaBench();
// ferry-kernel-check --bench-mla-load: the MLA kernel's load path alone (a ring of 64-token stages,
// no math) with more stages or L2 prefetch, against the read bandwidth (bench_mla_parts.cu).
int RunMlaLoadBench();
// ferry-kernel-check --bench-mla-tile: the sm_90a MLA tile's math alone, in parts (bench_mla_parts.cu).
int RunMlaTileBench();
// ferry-kernel-check --bench-indexer: IndexerScores GB/s at the model shapes (bench_indexer.cu).
int RunIndexerBench();
// ferry-kernel-check --bench-gemv: GemvBf16 / MoeGemvBf16 GB/s at the decode step's matrix shapes
// against cuBLAS (bench_gemv.cu).
int RunGemvBench();
// bench_mla.cu's helpers, shared with bench_indexer.cu: the best-of-10 streaming read bandwidth
// over `bytes` (GB/s, -1 on error), a hash fill of n bf16 values in [-1, 1), and a kernel that
// holds the default stream for `ns` nanoseconds.
double BenchReadBandwidth(size_t bytes);
// In the benches' int-returning functions: a failed CUDA call prints where and returns -1.
#define BENCH_CHECK(expr)                                                                                    \
  do {                                                                                                       \
    cudaError_t bench_err_ = (expr);                                                                         \
    if (bench_err_ != cudaSuccess) {                                                                         \
      fprintf(stderr, "%s failed at %s:%d: %s\n", #expr, __FILE__, __LINE__, cudaGetErrorString(bench_err_)); \
      return -1;                                                                                             \
    }                                                                                                        \
  } while (0)
void BenchFillBf16(uint16_t* p, size_t n, uint32_t seed);
void BenchSpin(long long ns);
// The benches' timing: launch(i % sets) for 5 warm-up and 31 timed launches queued behind a 20 ms
// spin (far more than the host needs to queue them), each timed alone with CUDA events; *us = the
// median in microseconds. Rotating over `sets` disjoint inputs keeps a launch's bytes out of L2.
// Returns 0, or -1 after printing a failed launch or CUDA call.
int BenchMedianUs(int64_t sets, const std::function<absl::Status(int64_t)>& launch, double* us);

}  // namespace ferry::harness
