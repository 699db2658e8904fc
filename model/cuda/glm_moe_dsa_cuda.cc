// GlmMoeDsaCuda: loading (the CPU loaders' shape checks, then uploads) and the step, which is
// model/families/dsa_step.h's over CudaOps.
#include "model/cuda/glm_moe_dsa_cuda.h"

#include "common/status.h"
#include "model/checkpoint/weights.h"

namespace ferry::model::cuda {

template <typename T>
absl::Status GlmMoeDsaCuda::LoadImpl(const Checkpoint& ck, const ModelConfig& c, const CudaLoadOptions& opts,
                                     const TensorParallel& tp, Impl<T>* impl, int64_t* bytes) {
  const WeightUploads up{opts.precision, bytes};
  auto upload = [&up](const Weight& w) { return up.Matrix(w); };
  auto floats = [&up](const std::vector<float>& v) { return up.Floats(v); };
  auto vocab = [&up, &c](const WeightLoader& w, const std::string& name) {
    return up.Stored(w, name, c.vocab_size, c.hidden_size);
  };
  auto ffn = [&ck, &c, &opts, &tp, bytes, impl](const WeightLoader& w, int64_t layer) {
    return impl->ops.LoadFfn(ck, w, c, layer, opts, tp, bytes);
  };
  return LoadDsaWeights<CudaOps<T>>(ck, c, tp, upload, floats, vocab, ffn, &impl->weights);
}

absl::StatusOr<std::unique_ptr<GlmMoeDsaCuda>> GlmMoeDsaCuda::Load(const Checkpoint& ck, const ModelConfig& c,
                                                                   const CacheOptions& cache,
                                                                   const CudaLoadOptions& opts,
                                                                   const TensorParallel& tp) {
  const Precision precision = opts.precision;
  FERRY_RETURN_IF_ERROR(opts.Check());
  std::unique_ptr<GlmMoeDsaCuda> m(new GlmMoeDsaCuda(c, precision, tp));
  FERRY_ASSIGN_OR_RETURN(m->latent_arena_, DeviceArena(DsaLatentRegions(c), cache, precision));
  FERRY_ASSIGN_OR_RETURN(m->keys_arena_, DeviceArena(DsaKeyRegions(c), cache, precision));
  int64_t bytes = 0;
  FERRY_RETURN_IF_ERROR(m->impl_.Make(precision, [&](auto* impl) { return LoadImpl(ck, c, opts, tp, impl, &bytes); }));
  m->set_weight_bytes(bytes);
  return m;
}

std::unique_ptr<SequenceState> GlmMoeDsaCuda::NewSequence() const {
  return NewConversation(0, DeviceStateMemory());
}

absl::StatusOr<ForwardOutput> GlmMoeDsaCuda::Forward(std::span<const ForwardSegment> segments) {
  return ForwardWithHidden(segments, nullptr);
}

absl::StatusOr<ForwardOutput> GlmMoeDsaCuda::ForwardWithHidden(std::span<const ForwardSegment> segments,
                                                               std::vector<std::vector<float>>* hidden,
                                                               const std::vector<std::vector<float>>* layer_inputs) {
  return impl_.Visit(
      [&](auto& impl) { return DsaStep(impl.ops, Context(), impl.weights, segments, hidden, layer_inputs); });
}

}  // namespace ferry::model::cuda
