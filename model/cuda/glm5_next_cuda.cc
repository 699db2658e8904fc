// Glm5NextCuda: loading (the CPU loaders' shape checks, then uploads) and the sequence state; the
// step is model/families/next_step.h's over CudaOps.
#include "model/cuda/glm5_next_cuda.h"

#include "common/status.h"
#include "model/cuda/device_pages.h"
#include "model/checkpoint/weights.h"

namespace ferry::model::cuda {

template <typename T>
absl::Status Glm5NextCuda::LoadImpl(const Checkpoint& ck, const ModelConfig& c, const CudaLoadOptions& opts,
                                    const TensorParallel& tp, Impl<T>* impl, int64_t* bytes) {
  const WeightUploads up{opts.precision, bytes};
  auto upload = [&up](const Weight& w) { return up.Matrix(w); };
  auto floats = [&up](const std::vector<float>& v) { return up.Floats(v); };
  auto vocab = [&up, &c](const WeightLoader& w, const std::string& name) {
    return up.Stored(w, name, c.vocab_size, c.hidden_size);
  };
  // mHC is float32 in both precisions.
  auto mhc = [&](MhcWeights w) -> absl::StatusOr<CudaMhc> {
    CudaMhc m;
    FERRY_ASSIGN_OR_RETURN(m.fn, UploadWeight(w.fn, Precision::kF32));
    *bytes += m.fn.bytes();
    FERRY_ASSIGN_OR_RETURN(m.base, floats(std::move(w.base.data)));
    FERRY_ASSIGN_OR_RETURN(m.scale, floats(std::move(w.scale.data)));
    return m;
  };
  auto kda = [&](KdaWeights k) -> absl::StatusOr<CudaKda> {
    CudaKda d;
    d.heads = k.heads;
    d.low_rank = k.f_a.rows;
    const std::pair<DeviceWeight*, Weight*> mats[] = {
        {&d.q_proj, &k.q_proj}, {&d.k_proj, &k.k_proj}, {&d.v_proj, &k.v_proj}, {&d.f_a, &k.f_a}, {&d.f_b, &k.f_b},
        {&d.g_a, &k.g_a},       {&d.g_b, &k.g_b},       {&d.b_proj, &k.b_proj}, {&d.o_proj, &k.o_proj}};
    for (const auto& [dst, src] : mats) {
      FERRY_ASSIGN_OR_RETURN(*dst, upload(std::move(*src)));
    }
    const std::pair<DeviceBuffer*, Weight*> vecs[] = {{&d.q_conv, &k.q_conv}, {&d.k_conv, &k.k_conv},
                                                      {&d.v_conv, &k.v_conv}, {&d.a_log, &k.a_log},
                                                      {&d.dt_bias, &k.dt_bias}, {&d.o_norm, &k.o_norm}};
    for (const auto& [dst, src] : vecs) {
      FERRY_ASSIGN_OR_RETURN(*dst, floats(std::move(src->data)));
    }
    return d;
  };
  auto ffn = [&ck, &c, &opts, &tp, bytes, impl](const WeightLoader& w, int64_t layer) {
    return impl->ops.LoadFfn(ck, w, c, layer, opts, tp, bytes);
  };
  return LoadNextWeights<CudaOps<T>>(ck, c, tp, upload, floats, vocab, mhc, kda, ffn, &impl->weights);
}

absl::StatusOr<std::unique_ptr<Glm5NextCuda>> Glm5NextCuda::Load(const Checkpoint& ck, const ModelConfig& c,
                                                                 const CacheOptions& cache, const CudaLoadOptions& opts,
                                                                 const TensorParallel& tp) {
  const Precision precision = opts.precision;
  FERRY_RETURN_IF_ERROR(opts.Check());
  FERRY_RETURN_IF_ERROR(CheckNextConfig(c, ck.config_path(), cache.page_size));
  std::unique_ptr<Glm5NextCuda> m(new Glm5NextCuda(c, precision, tp));
  FERRY_ASSIGN_OR_RETURN(m->latent_arena_, DeviceArena(NextLatentRegions(c), cache, precision));
  FERRY_ASSIGN_OR_RETURN(m->keys_arena_, DeviceArena(NextKeyRegions(c), cache, precision));
  int64_t bytes = 0;
  FERRY_RETURN_IF_ERROR(m->impl_.Make(precision, [&](auto* impl) { return LoadImpl(ck, c, opts, tp, impl, &bytes); }));
  m->set_weight_bytes(bytes);
  return m;
}

std::unique_ptr<SequenceState> Glm5NextCuda::NewSequence() const {
  return NewConversation(kda_layout_.floats * static_cast<int64_t>(sizeof(float)), DeviceStateMemory());
}

absl::StatusOr<ForwardOutput> Glm5NextCuda::Forward(std::span<const ForwardSegment> segments) {
  return ForwardWithHidden(segments, nullptr);
}

absl::StatusOr<ForwardOutput> Glm5NextCuda::ForwardWithHidden(std::span<const ForwardSegment> segments,
                                                              std::vector<std::vector<float>>* hidden) {
  return impl_.Visit([&](auto& impl) { return NextStep(impl.ops, Context(), impl.weights, segments, hidden); });
}

}  // namespace ferry::model::cuda
