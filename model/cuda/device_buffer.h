// Device memory owned by the CUDA model (plain C++ over kernels/cuda/ops.h: no CUDA headers).
//   DeviceBuffer: one cudaMalloc'd block, freed by the destructor (move-only).
//   DeviceWeight: a bf16 weight matrix [rows, cols] (PyTorch Linear layout) on the device.
//   Workspace:   per-step scratch, handed out by bumping a cursor; Reset() at the start of a
//                step invalidates everything handed out before.
// Thread safety: none; one model instance is driven by one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/checkpoint/quantization.h"
#include "model/checkpoint/weights.h"

namespace ferry::model::cuda {

// The element type of a CUDA model's activations, weights and KV pages. kBf16 serves (weights
// and activations bf16, float32 accumulation and residual stream); kF32 verifies (float32
// activations and weights, bf16 checkpoints upcast exactly: the goldens' own arithmetic, so a
// whole forward can be compared tightly; twice the bytes, not for serving).
enum class Precision { kBf16, kF32 };
inline int64_t ElemBytes(Precision p) { return p == Precision::kF32 ? 4 : 2; }
const char* PrecisionName(Precision p);  // "bf16", "f32"

// What a CUDA model is loaded as. Converts from a Precision (the rest at their defaults).
struct CudaLoadOptions {
  CudaLoadOptions(Precision p = Precision::kBf16) : precision(p) {}  // NOLINT: implicit on purpose
  Precision precision;
  // In bf16 on a device with the FP8 kernels (sm_90), routed and shared experts a checkpoint
  // stores in block-scaled FP8 stay FP8 and run as W8A8 (half their memory; the releases'
  // numerics). false upcasts them to bf16 like every other weight (the CPU reference's numerics).
  bool fp8_experts = true;
  // In bf16, the MLPs a checkpoint stores in NVFP4 (ModelOpt: routed and shared experts, dense
  // layers' MLPs) stay packed on the device (kernels/cuda/gemv_nvfp4.h: 0.5625 bytes a weight,
  // decoded exactly in registers) and run through MoeGemvNvfp4 / GemvNvfp4 at every batch size.
  // false upcasts them to bf16 (weights rounded to bf16, as the loader does for every other format).
  bool nvfp4_experts = true;
  // How NVFP4 MLPs compute (model/checkpoint/quantization.h). kW4A4 (bf16, NVFP4 kept): each
  // input rounded to NVFP4 (kernels::cuda::RoundActivationsW4A4) before the NVFP4 products, on
  // any GPU; the GB10's native FP4 mma (gemv_w4a4_sm121.h) is not used by the model yet.
  Nvfp4Numerics nvfp4_numerics = Nvfp4Numerics::kW4A16;
  // Each layer's checkpoint pages are given back once it is on the device (Checkpoint::DropPages):
  // where the GPU shares the host's memory (GB10), the page cache of the checkpoint streamed in
  // would otherwise fill the memory the device copies need. LoadCausalLMCuda sets it there.
  bool drop_checkpoint_pages = false;

  // INVALID_ARGUMENT for a combination no model loads: W4A4 numerics rounds bf16 activations for
  // the NVFP4 products, so it needs bf16 and the NVFP4 weights kept. The families' Load call it.
  absl::Status Check() const;
};

// What a CUDA model holds in its loaded precision: Impl<uint16_t> (bf16) or Impl<float> (f32),
// only one of them (a family's backend and weights).
template <template <typename> class Impl>
class PerPrecision {
 public:
  // Makes the Impl of precision `p` and fills it: load(Impl<T>*) returns an absl::Status.
  template <typename Load>
  absl::Status Make(Precision p, Load&& load) {
    if (p == Precision::kF32) {
      f32_ = std::make_unique<Impl<float>>();
      return load(f32_.get());
    }
    bf16_ = std::make_unique<Impl<uint16_t>>();
    return load(bf16_.get());
  }
  // f(Impl<T>&) on the one made; both instantiations return the same type.
  template <typename F>
  auto Visit(F&& f) {
    if (f32_) return f(*f32_);
    return f(*bf16_);
  }

 private:
  std::unique_ptr<Impl<uint16_t>> bf16_;
  std::unique_ptr<Impl<float>> f32_;
};

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  // A block of `bytes` (>= 1 byte is allocated even for 0). RESOURCE_EXHAUSTED with the bytes.
  static absl::StatusOr<DeviceBuffer> Alloc(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) { o.ptr_ = nullptr, o.bytes_ = 0; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* get() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Copies `n` elements of `host` into a new buffer.
absl::StatusOr<DeviceBuffer> Upload(const void* host, size_t bytes);

// A weight matrix [rows, cols] (PyTorch Linear layout) of bf16 bits or float32 (elem bytes).
struct DeviceWeight {
  DeviceBuffer buf;
  int64_t rows = 0, cols = 0;
  int64_t elem = 2;
  const uint16_t* ptr() const { return buf.as<const uint16_t>(); }
  // The data as T (uint16_t for bf16, float for float32). REQUIRES: sizeof(T) == elem.
  template <typename T>
  const T* as() const {
    return buf.as<const T>();
  }
  int64_t bytes() const { return rows * cols * elem; }
};

// The float32 weight rounded to bf16 (exact for a bf16 checkpoint; FP8 block-scaled weights were
// upcast by the loader and round here) and uploaded.
absl::StatusOr<DeviceWeight> UploadBf16(const Weight& w);
// The weight in precision p: UploadBf16, or float32 as it is.
absl::StatusOr<DeviceWeight> UploadWeight(const Weight& w, Precision p);
// Rows [0, a.rows) of `a` then all of `b`, one matrix (fused gate_up), in precision p.
// REQUIRES a.cols == b.cols.
absl::StatusOr<DeviceWeight> UploadStacked(const Weight& a, const Weight& b, Precision p);
// The [rows, cols] matrix `name` of `w` in precision p. In bf16, a tensor stored as bf16 is
// copied to the device as it is (Checkpoint::Bf16Data): the same bits as the float32 round trip
// of UploadWeight without it, which for the routed experts, most of a checkpoint's bytes, is
// several times the copy's cost on the host. Otherwise WeightLoader::Matrix, then UploadWeight.
// With a `slice` (a tensor-parallel shard: WeightLoader::Matrix's window), only that window.
absl::StatusOr<DeviceWeight> LoadMatrix(const WeightLoader& w, const std::string& name, int64_t rows, int64_t cols,
                                        Precision p, const Slice& slice = {});
// `a` [a_rows, cols] then `b` [b_rows, cols] as one matrix (a fused gate_up), the same way; with
// a `slice`, that window of each.
absl::StatusOr<DeviceWeight> LoadStacked(const WeightLoader& w, const std::string& a, int64_t a_rows,
                                         const std::string& b, int64_t b_rows, int64_t cols, Precision p,
                                         const Slice& slice = {});
// A float32 vector kept in float32 on the device (routing bias).
absl::StatusOr<DeviceBuffer> UploadF32(const std::vector<float>& v);

// What a CUDA loader hands a family's weight loader (LoadDsaWeights, LoadNextWeights): uploads
// in precision p that add their device bytes to *bytes.
struct WeightUploads {
  Precision p;
  int64_t* bytes;
  // A weight in p (UploadWeight).
  absl::StatusOr<DeviceWeight> Matrix(const Weight& w) const;
  // A float32 vector kept in float32.
  absl::StatusOr<DeviceBuffer> Floats(const std::vector<float>& v) const;
  // A [rows, cols] vocab-wide matrix `name` of `w`, copied as stored when bf16 (LoadMatrix).
  absl::StatusOr<DeviceWeight> Stored(const WeightLoader& w, const std::string& name, int64_t rows,
                                      int64_t cols) const;
};

class Workspace {
 public:
  // Forgets every block handed out since the last Reset(). If the last step overflowed the first
  // block, the blocks are replaced by one of the total size, so steady steps use one block.
  absl::Status Reset();
  // n elements of T, 256-byte aligned, valid until the next Reset(). Never null (n may be 0).
  template <typename T>
  absl::StatusOr<T*> Take(int64_t n) {
    absl::StatusOr<void*> p = TakeBytes(static_cast<size_t>(n < 0 ? 0 : n) * sizeof(T));
    if (!p.ok()) return p.status();
    return static_cast<T*>(*p);
  }
  size_t bytes() const;

 private:
  absl::StatusOr<void*> TakeBytes(size_t bytes);
  std::vector<DeviceBuffer> blocks_;
  size_t cursor_ = 0;  // in the last block
  size_t used_ = 0;    // over all blocks since Reset()
};

// Page-locked host memory that only grows: the staging of StepUpload and StepDownload.
class PinnedStaging {
 public:
  PinnedStaging() = default;
  ~PinnedStaging();
  PinnedStaging(const PinnedStaging&) = delete;
  PinnedStaging& operator=(const PinnedStaging&) = delete;

  // At least `bytes` of it (when short, max(bytes, twice the old size) anew: the old contents are
  // dropped). Valid until the next Reserve.
  absl::StatusOr<char*> Reserve(size_t bytes);

 private:
  void* host_ = nullptr;
  size_t bytes_ = 0;
};

// A step's small host inputs (tokens, positions, page tables) sent to the device in one
// asynchronous copy from page-locked memory: a pageable cudaMemcpy waits for the device and the
// host each time, a stall the GPU sees at every step's start.
class StepUpload {
 public:
  struct Part {
    const void* data;
    size_t bytes;
  };
  StepUpload() = default;
  ~StepUpload();
  StepUpload(const StepUpload&) = delete;
  StepUpload& operator=(const StepUpload&) = delete;

  // Lays the parts out 256-byte aligned in one block of `ws` (the host copy alike), queues the
  // copy and returns each part's device address, valid until ws.Reset(). Waits first for the
  // previous Send's copy (the staging memory is reused).
  absl::StatusOr<std::vector<void*>> Send(Workspace& ws, std::initializer_list<Part> parts);

 private:
  PinnedStaging host_;
  void* done_ = nullptr;  // event after the last copy
};

// A step's results (the logits, the MoE error word) brought back by asynchronous copies into
// page-locked memory and one wait, then host copies: measured on the H200, a pageable cudaMemcpy
// of 620 KB of logits took 73 us where the pinned copy takes 18 us and the host copy 18 us, and
// the 4-byte pageable copy of the error word 7 us more.
class StepDownload {
 public:
  struct Part {
    void* host;          // where the bytes end up
    const void* device;  // where they are (parts of 0 bytes are skipped)
    size_t bytes;
  };
  StepDownload() = default;
  StepDownload(const StepDownload&) = delete;
  StepDownload& operator=(const StepDownload&) = delete;

  // Queues the parts' copies after the device's work so far, waits for the device (an error of
  // any earlier kernel comes back here), then copies each part to its host address.
  absl::Status Receive(std::initializer_list<Part> parts);

 private:
  PinnedStaging host_;
};

}  // namespace ferry::model::cuda
