#include "model/families/glm5_next.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/log.h"
#include "common/status.h"
#include "model/blocks/ffn.h"

namespace ferry::model {

absl::StatusOr<std::unique_ptr<Glm5Next>> Glm5Next::Load(const Checkpoint& ck, const ModelConfig& c,
                                                         const TensorParallel& tp, const CacheOptions& cache, Nvfp4Numerics nvfp4) {
  FERRY_RETURN_IF_ERROR(CheckNextConfig(c, ck.config_path(), cache.page_size));
  std::unique_ptr<Glm5Next> m(new Glm5Next(c, tp));
  // A token's rows at an MLA layer: the latent row (latent arena) and, on full indexer layers,
  // the indexer key, the pool gate and (one a pool) the pooled key (key arena). KDA layers cache
  // nothing per token.
  m->latent_arena_ = std::make_shared<PageArena>(NextLatentRegions(c), cache.page_size, cache.capacity_pages);
  m->keys_arena_ = std::make_shared<PageArena>(NextKeyRegions(c), cache.page_size, cache.capacity_pages);
  int64_t visual = 0;
  for (const std::string& name : ck.TensorNames()) visual += name.rfind("model.visual.", 0) == 0;
  if (visual > 0) {
    FERRY_LOG(INFO) << "glm5_next: text serving; the " << visual << " vision-tower tensors (model.visual.*) "
                    << "are not loaded";
  }
  auto same = [](auto w) -> absl::StatusOr<decltype(w)> { return w; };
  auto floats = [](std::vector<float> v) -> absl::StatusOr<Weight> {
    const int64_t n = static_cast<int64_t>(v.size());
    return Weight{std::move(v), n, 1};
  };
  auto vocab = [&c](const WeightLoader& w, const std::string& name) {
    return w.Matrix(name, c.vocab_size, c.hidden_size);
  };
  auto ffn = [&c, &tp, nvfp4](const WeightLoader& w, int64_t layer) { return LoadFfn(w, c, layer, tp, nvfp4); };
  FERRY_RETURN_IF_ERROR(LoadNextWeights<CpuOps>(ck, c, tp, same, floats, vocab, same, same, ffn, &m->weights_));
  return m;
}

std::unique_ptr<SequenceState> Glm5Next::NewSequence() const {
  return NewConversation(kda_layout_.floats * static_cast<int64_t>(sizeof(float)), HostStateMemory());
}

absl::StatusOr<ForwardOutput> Glm5Next::Forward(std::span<const ForwardSegment> segments) {
  return ForwardWithOptions(segments, nullptr, kKdaChunk);
}

absl::StatusOr<ForwardOutput> Glm5Next::ForwardWithOptions(std::span<const ForwardSegment> segments,
                                                           std::vector<std::vector<float>>* hidden,
                                                           int64_t kda_chunk) {
  NextStepContext ctx{&config_, keys_arena_.get(), latent_arena_.get(), tp_, &split_stats_, decision_log(), &kda_layout_,
                      kda_chunk, ffn_observer()};
  return NextStep(ops_, ctx, weights_, segments, hidden);
}

}  // namespace ferry::model
