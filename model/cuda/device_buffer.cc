#include "model/cuda/device_buffer.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "common/status.h"
#include "kernels/cuda/ops.h"

namespace ferry::model::cuda {

namespace cu = ferry::kernels::cuda;

absl::Status CudaLoadOptions::Check() const {
  if (nvfp4_numerics == Nvfp4Numerics::kW4A4 && (precision != Precision::kBf16 || !nvfp4_experts)) {
    // W4A4 rounds bf16 activations for the NVFP4 products; float32 or upcast weights have neither.
    return absl::InvalidArgumentError(absl::StrCat("--nvfp4_numerics w4a4 runs with --precision bf16 and the NVFP4 "
                                                   "weights kept (--nvfp4_experts); got --precision ",
                                                   PrecisionName(precision), nvfp4_experts ? "" : ", upcast"));
  }
  return absl::OkStatus();
}

absl::StatusOr<DeviceBuffer> DeviceBuffer::Alloc(size_t bytes) {
  absl::StatusOr<void*> p = cu::DeviceAlloc(std::max<size_t>(bytes, 1));
  if (!p.ok()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot allocate ", bytes, " bytes of device memory: ", p.status().message()));
  }
  DeviceBuffer b;
  b.ptr_ = *p;
  b.bytes_ = bytes;
  return b;
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_ != nullptr) (void)cu::DeviceFree(ptr_);
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (ptr_ != nullptr) (void)cu::DeviceFree(ptr_);
    ptr_ = o.ptr_;
    bytes_ = o.bytes_;
    o.ptr_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

absl::StatusOr<DeviceBuffer> Upload(const void* host, size_t bytes) {
  FERRY_ASSIGN_OR_RETURN(DeviceBuffer b, DeviceBuffer::Alloc(bytes));
  if (bytes > 0) FERRY_RETURN_IF_ERROR(cu::CopyToDevice(b.get(), host, bytes));
  return b;
}

absl::StatusOr<DeviceWeight> UploadBf16(const Weight& w) {
  std::vector<uint16_t> bits(w.data.size());
  for (size_t i = 0; i < bits.size(); ++i) bits[i] = F32ToBf16(w.data[i]);
  DeviceWeight d;
  FERRY_ASSIGN_OR_RETURN(d.buf, Upload(bits.data(), bits.size() * sizeof(uint16_t)));
  d.rows = w.rows;
  d.cols = w.cols;
  return d;
}

const char* PrecisionName(Precision p) { return p == Precision::kF32 ? "f32" : "bf16"; }

absl::StatusOr<DeviceWeight> UploadWeight(const Weight& w, Precision p) {
  if (p == Precision::kBf16) return UploadBf16(w);
  DeviceWeight d;
  FERRY_ASSIGN_OR_RETURN(d.buf, Upload(w.data.data(), w.data.size() * sizeof(float)));
  d.rows = w.rows;
  d.cols = w.cols;
  d.elem = 4;
  return d;
}

absl::StatusOr<DeviceWeight> UploadStacked(const Weight& a, const Weight& b, Precision p) {
  if (a.cols != b.cols) {
    return absl::InvalidArgumentError(absl::StrCat("cannot stack a [", a.rows, ", ", a.cols, "] and a [", b.rows,
                                                   ", ", b.cols, "] matrix"));
  }
  Weight both{a.data, a.rows + b.rows, a.cols};
  both.data.insert(both.data.end(), b.data.begin(), b.data.end());
  return UploadWeight(both, p);
}

namespace {

// The window `slice` of a stored [rows, cols] bf16 matrix as host bits, row-major (bits ==
// nullptr: not stored as bf16). *out_rows, *out_cols: the window's shape.
absl::StatusOr<bool> Bf16Window(const WeightLoader& w, const std::string& name, int64_t rows, int64_t cols,
                                const Slice& slice, std::vector<uint16_t>* out, int64_t* out_rows, int64_t* out_cols) {
  FERRY_ASSIGN_OR_RETURN(const void* bits, w.Bf16Matrix(name, rows, cols));
  if (bits == nullptr) return false;
  const int64_t r0 = slice.row_begin, r1 = slice.row_end < 0 ? rows : slice.row_end;
  const int64_t c0 = slice.col_begin, c1 = slice.col_end < 0 ? cols : slice.col_end;
  if (r0 < 0 || r0 > r1 || r1 > rows || c0 < 0 || c0 > c1 || c1 > cols) {
    return absl::InvalidArgumentError(absl::StrCat(w.prefix(), name, ": window rows [", r0, ", ", r1, ") cols [", c0,
                                                   ", ", c1, ") outside its [", rows, ", ", cols, "]"));
  }
  const auto* src = static_cast<const uint16_t*>(bits);
  out->resize(static_cast<size_t>((r1 - r0) * (c1 - c0)));
  for (int64_t r = r0; r < r1; ++r) {
    std::copy(src + r * cols + c0, src + r * cols + c1, out->data() + (r - r0) * (c1 - c0));
  }
  *out_rows = r1 - r0;
  *out_cols = c1 - c0;
  return true;
}

bool Whole(const Slice& s) { return s.row_begin == 0 && s.row_end < 0 && s.col_begin == 0 && s.col_end < 0; }

}  // namespace

absl::StatusOr<DeviceWeight> LoadMatrix(const WeightLoader& w, const std::string& name, int64_t rows, int64_t cols,
                                        Precision p, const Slice& slice) {
  if (p == Precision::kBf16) {
    if (Whole(slice)) {
      FERRY_ASSIGN_OR_RETURN(const void* bits, w.Bf16Matrix(name, rows, cols));
      if (bits != nullptr) {
        DeviceWeight d;
        FERRY_ASSIGN_OR_RETURN(d.buf, Upload(bits, static_cast<size_t>(rows * cols) * sizeof(uint16_t)));
        d.rows = rows;
        d.cols = cols;
        return d;
      }
    } else {
      std::vector<uint16_t> bits;
      DeviceWeight d;
      FERRY_ASSIGN_OR_RETURN(bool stored, Bf16Window(w, name, rows, cols, slice, &bits, &d.rows, &d.cols));
      if (stored) {
        FERRY_ASSIGN_OR_RETURN(d.buf, Upload(bits.data(), bits.size() * sizeof(uint16_t)));
        return d;
      }
    }
  }
  FERRY_ASSIGN_OR_RETURN(Weight m, w.Matrix(name, rows, cols, slice));
  return UploadWeight(m, p);
}

absl::StatusOr<DeviceWeight> LoadStacked(const WeightLoader& w, const std::string& a, int64_t a_rows,
                                         const std::string& b, int64_t b_rows, int64_t cols, Precision p,
                                         const Slice& slice) {
  if (p == Precision::kBf16 && Whole(slice)) {
    FERRY_ASSIGN_OR_RETURN(const void* a_bits, w.Bf16Matrix(a, a_rows, cols));
    FERRY_ASSIGN_OR_RETURN(const void* b_bits, w.Bf16Matrix(b, b_rows, cols));
    if (a_bits != nullptr && b_bits != nullptr) {
      const size_t a_bytes = static_cast<size_t>(a_rows * cols) * sizeof(uint16_t);
      const size_t b_bytes = static_cast<size_t>(b_rows * cols) * sizeof(uint16_t);
      DeviceWeight d;
      FERRY_ASSIGN_OR_RETURN(d.buf, DeviceBuffer::Alloc(a_bytes + b_bytes));
      FERRY_RETURN_IF_ERROR(cu::CopyToDevice(d.buf.get(), a_bits, a_bytes));
      FERRY_RETURN_IF_ERROR(cu::CopyToDevice(static_cast<char*>(d.buf.get()) + a_bytes, b_bits, b_bytes));
      d.rows = a_rows + b_rows;
      d.cols = cols;
      return d;
    }
  } else if (p == Precision::kBf16) {
    // A shard: its window of each, gathered on the host.
    std::vector<uint16_t> a_bits, b_bits;
    int64_t ar = 0, br = 0, ac = 0, bc = 0;
    FERRY_ASSIGN_OR_RETURN(bool a_stored, Bf16Window(w, a, a_rows, cols, slice, &a_bits, &ar, &ac));
    FERRY_ASSIGN_OR_RETURN(bool b_stored, Bf16Window(w, b, b_rows, cols, slice, &b_bits, &br, &bc));
    if (a_stored && b_stored) {
      const size_t a_bytes = a_bits.size() * sizeof(uint16_t), b_bytes = b_bits.size() * sizeof(uint16_t);
      DeviceWeight d;
      FERRY_ASSIGN_OR_RETURN(d.buf, DeviceBuffer::Alloc(a_bytes + b_bytes));
      FERRY_RETURN_IF_ERROR(cu::CopyToDevice(d.buf.get(), a_bits.data(), a_bytes));
      FERRY_RETURN_IF_ERROR(cu::CopyToDevice(static_cast<char*>(d.buf.get()) + a_bytes, b_bits.data(), b_bytes));
      d.rows = ar + br;
      d.cols = ac;
      return d;
    }
  }
  FERRY_ASSIGN_OR_RETURN(Weight ma, w.Matrix(a, a_rows, cols, slice));
  FERRY_ASSIGN_OR_RETURN(Weight mb, w.Matrix(b, b_rows, cols, slice));
  return UploadStacked(ma, mb, p);
}

absl::StatusOr<DeviceBuffer> UploadF32(const std::vector<float>& v) {
  return Upload(v.data(), v.size() * sizeof(float));
}

absl::StatusOr<DeviceWeight> WeightUploads::Matrix(const Weight& w) const {
  FERRY_ASSIGN_OR_RETURN(DeviceWeight d, UploadWeight(w, p));
  *bytes += d.bytes();
  return d;
}

absl::StatusOr<DeviceBuffer> WeightUploads::Floats(const std::vector<float>& v) const {
  *bytes += static_cast<int64_t>(v.size() * sizeof(float));
  return UploadF32(v);
}

absl::StatusOr<DeviceWeight> WeightUploads::Stored(const WeightLoader& w, const std::string& name, int64_t rows,
                                                   int64_t cols) const {
  FERRY_ASSIGN_OR_RETURN(DeviceWeight d, LoadMatrix(w, name, rows, cols, p));
  *bytes += d.bytes();
  return d;
}

absl::Status Workspace::Reset() {
  if (blocks_.size() > 1) {
    size_t total = 0;
    for (const DeviceBuffer& b : blocks_) total += b.bytes();
    blocks_.clear();
    FERRY_ASSIGN_OR_RETURN(DeviceBuffer one, DeviceBuffer::Alloc(total));
    blocks_.push_back(std::move(one));
  }
  cursor_ = 0;
  used_ = 0;
  return absl::OkStatus();
}

size_t Workspace::bytes() const {
  size_t total = 0;
  for (const DeviceBuffer& b : blocks_) total += b.bytes();
  return total;
}

absl::StatusOr<void*> Workspace::TakeBytes(size_t bytes) {
  constexpr size_t kAlign = 256;
  const size_t need = (std::max<size_t>(bytes, 1) + kAlign - 1) / kAlign * kAlign;
  if (blocks_.empty() || cursor_ + need > blocks_.back().bytes()) {
    // A new block; earlier ones stay valid until Reset().
    const size_t size = std::max<size_t>({need, size_t{1} << 20, blocks_.empty() ? 0 : 2 * blocks_.back().bytes()});
    FERRY_ASSIGN_OR_RETURN(DeviceBuffer b, DeviceBuffer::Alloc(size));
    blocks_.push_back(std::move(b));
    cursor_ = 0;
  }
  void* p = static_cast<char*>(blocks_.back().get()) + cursor_;
  cursor_ += need;
  used_ += need;
  return p;
}

PinnedStaging::~PinnedStaging() {
  if (host_ != nullptr) (void)cu::PinnedFree(host_);
}

absl::StatusOr<char*> PinnedStaging::Reserve(size_t bytes) {
  if (bytes > bytes_) {
    const size_t want = std::max(bytes, 2 * bytes_);
    void* old = host_;
    host_ = nullptr;  // never left pointing at freed memory, even when the free fails
    bytes_ = 0;
    if (old != nullptr) FERRY_RETURN_IF_ERROR(cu::PinnedFree(old));
    FERRY_ASSIGN_OR_RETURN(host_, cu::PinnedAlloc(want));
    bytes_ = want;
  }
  return static_cast<char*>(host_);
}

namespace {

constexpr size_t kStageAlign = 256;
size_t Staged(size_t bytes) { return (bytes + kStageAlign - 1) / kStageAlign * kStageAlign; }

}  // namespace

StepUpload::~StepUpload() {
  if (done_ != nullptr) {
    (void)cu::EventWait(done_);
    (void)cu::EventDestroy(done_);
  }
}

absl::StatusOr<std::vector<void*>> StepUpload::Send(Workspace& ws, std::initializer_list<Part> parts) {
  size_t total = 0;
  std::vector<size_t> at;
  for (const Part& p : parts) {
    at.push_back(total);
    total += Staged(std::max<size_t>(p.bytes, 1));
  }
  if (done_ == nullptr) {
    FERRY_ASSIGN_OR_RETURN(done_, cu::EventCreate());
  } else {
    FERRY_RETURN_IF_ERROR(cu::EventWait(done_));
  }
  FERRY_ASSIGN_OR_RETURN(char* host, host_.Reserve(total));
  FERRY_ASSIGN_OR_RETURN(char* dev, ws.Take<char>(static_cast<int64_t>(total)));
  std::vector<void*> out;
  size_t i = 0;
  for (const Part& p : parts) {
    if (p.bytes > 0) std::memcpy(host + at[i], p.data, p.bytes);
    out.push_back(dev + at[i]);
    ++i;
  }
  FERRY_RETURN_IF_ERROR(cu::CopyToDeviceAsync(dev, host, total));
  FERRY_RETURN_IF_ERROR(cu::EventRecord(done_));
  return out;
}

absl::Status StepDownload::Receive(std::initializer_list<Part> parts) {
  size_t total = 0;
  for (const Part& p : parts) total += Staged(p.bytes);
  FERRY_ASSIGN_OR_RETURN(char* host, host_.Reserve(total));
  size_t at = 0;
  for (const Part& p : parts) {
    if (p.bytes > 0) FERRY_RETURN_IF_ERROR(cu::CopyToHostAsync(host + at, p.device, p.bytes));
    at += Staged(p.bytes);
  }
  FERRY_RETURN_IF_ERROR(cu::Synchronize());
  at = 0;
  for (const Part& p : parts) {
    if (p.bytes > 0) std::memcpy(p.host, host + at, p.bytes);
    at += Staged(p.bytes);
  }
  return absl::OkStatus();
}

}  // namespace ferry::model::cuda
