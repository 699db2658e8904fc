#include "model/cuda/decision_tap.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "common/status.h"
#include "kernels/cuda/ops.h"

namespace ferry::model::cuda {

namespace cu = ferry::kernels::cuda;

absl::Status TapMoeRoute(const DecisionTap& tap, const float* logits, int64_t rows,
                         const kernels::cpu::RoutingParams& p, int32_t* experts, float* weights) {
  if (tap.log == nullptr || rows == 0) return absl::OkStatus();
  const int64_t K = p.top_k, E = p.n_experts;
  std::vector<int32_t> ids(static_cast<size_t>(rows * K));
  FERRY_RETURN_IF_ERROR(cu::CopyToHost(ids.data(), experts, ids.size() * sizeof(int32_t)));
  FERRY_ASSIGN_OR_RETURN(bool pinned, tap.log->Decide(DecisionSite::kMoeExperts, tap.layer, rows, K, ids));
  if (!pinned) return absl::OkStatus();
  for (int32_t e : ids) {
    if (e < 0 || e >= E) {
      return absl::InternalError(absl::StrCat("layer ", tap.layer, ": a pinned expert id ", e, " outside [0, ", E, ")"));
    }
  }
  std::vector<float> host_logits(static_cast<size_t>(rows * E)), w(ids.size());
  FERRY_RETURN_IF_ERROR(cu::CopyToHost(host_logits.data(), logits, host_logits.size() * sizeof(float)));
  for (int64_t r = 0; r < rows; ++r) {
    PinnedRouteWeights(host_logits.data() + r * E, std::span<const int32_t>(ids.data() + r * K, static_cast<size_t>(K)),
                       p, w.data() + r * K);
  }
  FERRY_RETURN_IF_ERROR(cu::CopyToDevice(experts, ids.data(), ids.size() * sizeof(int32_t)));
  return cu::CopyToDevice(weights, w.data(), w.size() * sizeof(float));
}

absl::Status TapTopK(const DecisionTap& tap, int64_t rows, int64_t k, int32_t* ids, int32_t* counts) {
  if (tap.log == nullptr || rows == 0) return absl::OkStatus();
  std::vector<int32_t> h(static_cast<size_t>(rows * k));
  if (k > 0) FERRY_RETURN_IF_ERROR(cu::CopyToHost(h.data(), ids, h.size() * sizeof(int32_t)));
  FERRY_ASSIGN_OR_RETURN(bool pinned, tap.log->Decide(DecisionSite::kIndexerTopK, tap.layer, rows, k, h));
  if (!pinned) return absl::OkStatus();
  if (k > 0) FERRY_RETURN_IF_ERROR(cu::CopyToDevice(ids, h.data(), h.size() * sizeof(int32_t)));
  if (counts == nullptr) return absl::OkStatus();
  std::vector<int32_t> n(static_cast<size_t>(rows), 0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < k; ++j) n[r] += h[r * k + j] >= 0 ? 1 : 0;
  }
  return cu::CopyToDevice(counts, n.data(), n.size() * sizeof(int32_t));
}

std::vector<Fp4RowId> Fp4RowsOf(const DecisionTap& tap, int64_t mlp, int64_t row0, int64_t n) {
  std::vector<Fp4RowId> ids;
  if (tap.log == nullptr) return ids;
  for (int64_t i = 0; i < n; ++i) ids.push_back({mlp, row0 + i});
  return ids;
}

absl::Status TapFp4Rows(const DecisionTap& tap, int64_t input, std::span<const Fp4RowId> ids, uint16_t* rows,
                        int64_t cols) {
  if (tap.log == nullptr || ids.empty()) return absl::OkStatus();
  std::vector<uint16_t> bits(ids.size() * static_cast<size_t>(cols));
  FERRY_RETURN_IF_ERROR(cu::CopyToHost(bits.data(), rows, bits.size() * sizeof(uint16_t)));
  std::vector<float> row(static_cast<size_t>(cols));
  bool pinned = false;
  for (size_t i = 0; i < ids.size(); ++i) {
    uint16_t* b = bits.data() + i * static_cast<size_t>(cols);
    for (int64_t c = 0; c < cols; ++c) row[static_cast<size_t>(c)] = Bf16ToF32(b[c]);
    FERRY_ASSIGN_OR_RETURN(const bool set, tap.log->Fp4Row(tap.layer, ids[i].mlp, input, ids[i].token, row));
    if (!set) continue;
    for (int64_t c = 0; c < cols; ++c) b[c] = F32ToBf16(row[static_cast<size_t>(c)]);
    pinned = true;
  }
  if (!pinned) return absl::OkStatus();
  return cu::CopyToDevice(rows, bits.data(), bits.size() * sizeof(uint16_t));
}

}  // namespace ferry::model::cuda
