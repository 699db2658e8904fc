#include "model/families/glm_moe_dsa.h"

#include "common/status.h"
#include "model/blocks/ffn.h"

namespace ferry::model {

absl::StatusOr<std::unique_ptr<GlmMoeDsa>> GlmMoeDsa::Load(const Checkpoint& ck, const ModelConfig& c,
                                                           const TensorParallel& tp, const CacheOptions& cache, Nvfp4Numerics nvfp4) {
  std::unique_ptr<GlmMoeDsa> m(new GlmMoeDsa(c, tp));
  m->latent_arena_ = std::make_shared<PageArena>(DsaLatentRegions(c), cache.page_size, cache.capacity_pages);
  m->keys_arena_ = std::make_shared<PageArena>(DsaKeyRegions(c), cache.page_size, cache.capacity_pages);
  auto upload = [](Weight w) -> absl::StatusOr<Weight> { return w; };
  auto floats = [](std::vector<float> v) -> absl::StatusOr<Weight> {
    const int64_t n = static_cast<int64_t>(v.size());
    return Weight{std::move(v), n, 1};
  };
  auto vocab = [&c](const WeightLoader& w, const std::string& name) {
    return w.Matrix(name, c.vocab_size, c.hidden_size);
  };
  auto ffn = [&c, &tp, nvfp4](const WeightLoader& w, int64_t layer) { return LoadFfn(w, c, layer, tp, nvfp4); };
  FERRY_RETURN_IF_ERROR(LoadDsaWeights<CpuOps>(ck, c, tp, upload, floats, vocab, ffn, &m->weights_));
  return m;
}

std::unique_ptr<SequenceState> GlmMoeDsa::NewSequence() const {
  return NewConversation(0, HostStateMemory());
}

absl::StatusOr<ForwardOutput> GlmMoeDsa::Forward(std::span<const ForwardSegment> segments) {
  return ForwardWithHidden(segments, nullptr);
}

absl::StatusOr<ForwardOutput> GlmMoeDsa::ForwardWithHidden(std::span<const ForwardSegment> segments,
                                                           std::vector<std::vector<float>>* hidden) {
  const DsaStepContext ctx{&config_, keys_arena_.get(), latent_arena_.get(), tp_, &split_stats_, decision_log(),
                             ffn_observer()};
  return DsaStep(ops_, ctx, weights_, segments, hidden, nullptr);
}

}  // namespace ferry::model
