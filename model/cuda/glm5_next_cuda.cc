// Glm5NextCuda: loading (the CPU loaders' shape checks, then uploads) and the sequence state.
// The forward step is in glm5_next_cuda_forward.cc.
#include "model/cuda/glm5_next_cuda.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/log.h"
#include "common/status.h"
#include "kernels/cuda/ops.h"
#include "model/glm5_next.h"
#include "model/kda.h"
#include "model/mhc.h"
#include "model/mla.h"
#include "model/pooled_indexer.h"
#include "model/weights.h"

namespace ferry::model::cuda {

namespace cu = ferry::kernels::cuda;

absl::StatusOr<std::unique_ptr<Glm5NextCuda>> Glm5NextCuda::Load(const Checkpoint& ck, const ModelConfig& c,
                                                                 const CacheOptions& cache, const CudaLoadOptions& opts,
                                                                 const TensorParallel& tp) {
  const Precision precision = opts.precision;
  if (!c.index_kpool_always_select_tail) {
    return absl::UnimplementedError(absl::StrCat(ck.config_path(), ": text_config.index_kpool_always_select_tail "
                                                 "is false; only the always-selected tail is implemented"));
  }
  if (c.qk_rope_head_dim != 0 || c.hc_mult < 1 || c.hc_mult > 8) {
    return absl::UnimplementedError(absl::StrCat(ck.config_path(), ": glm5_next on CUDA expects NoPE MLA and 1 to 8 "
                                                 "streams; got rope ", c.qk_rope_head_dim, ", hc_mult ", c.hc_mult));
  }
  FERRY_RETURN_IF_ERROR(CheckDivisible("linear_num_heads", c.linear_num_heads, tp.world));
  std::unique_ptr<Glm5NextCuda> m(new Glm5NextCuda(c, precision, tp));
  const int64_t D = c.hidden_size, S = c.hc_mult;
  m->layers_.resize(static_cast<size_t>(c.num_layers));
  for (int64_t l = 0; l < c.num_layers; ++l) {
    Layer& Ly = m->layers_[static_cast<size_t>(l)];
    Ly.kda = c.layer_types[static_cast<size_t>(l)] == AttentionType::kKda;
    if (Ly.kda) continue;
    Ly.latent_region = l;
    if (c.indexer_types[static_cast<size_t>(l)] == IndexerType::kFull) {
      Ly.key_region = Glm5Next::KeyRegion(l, Glm5Next::KeyRow::kKey);
      Ly.gate_region = Glm5Next::KeyRegion(l, Glm5Next::KeyRow::kGate);
      Ly.pool_region = Glm5Next::KeyRegion(l, Glm5Next::KeyRow::kPool);
    }
  }
  FERRY_ASSIGN_OR_RETURN(m->latent_arena_, DeviceArena(Glm5Next::LatentRegions(c), cache, precision));
  FERRY_ASSIGN_OR_RETURN(m->keys_arena_, DeviceArena(Glm5Next::KeyRegions(c), cache, precision));

  WeightLoader model(ck, c.weight_prefix);
  int64_t bytes = 0;
  auto up = [&bytes, precision](DeviceWeight* dst, const absl::StatusOr<Weight>& w) -> absl::Status {
    if (!w.ok()) return w.status();
    FERRY_ASSIGN_OR_RETURN(*dst, UploadWeight(*w, precision));
    bytes += dst->bytes();
    return absl::OkStatus();
  };
  auto up32 = [&bytes](DeviceBuffer* dst, const absl::StatusOr<Weight>& w) -> absl::Status {
    if (!w.ok()) return w.status();
    FERRY_ASSIGN_OR_RETURN(*dst, UploadF32(w->data));
    bytes += static_cast<int64_t>(w->data.size() * sizeof(float));
    return absl::OkStatus();
  };
  auto up_mhc = [&](Mhc* dst, const WeightLoader& lw, const std::string& site) -> absl::Status {
    FERRY_ASSIGN_OR_RETURN(MhcWeights w, LoadMhc(lw, site, c));
    FERRY_ASSIGN_OR_RETURN(dst->fn, UploadWeight(w.fn, Precision::kF32));  // mHC is float32 in both precisions
    bytes += dst->fn.bytes();
    FERRY_RETURN_IF_ERROR(up32(&dst->base, w.base));
    return up32(&dst->scale, w.scale);
  };
  // The two vocab-wide matrices copied as stored when bf16 (LoadMatrix).
  FERRY_ASSIGN_OR_RETURN(m->embed_, LoadMatrix(model, "embed_tokens.weight", c.vocab_size, D, precision));
  bytes += m->embed_.bytes();
  FERRY_RETURN_IF_ERROR(up(&m->norm_, model.Vector("norm.weight", D)));
  FERRY_ASSIGN_OR_RETURN(m->lm_head_, c.tie_word_embeddings
                                          ? LoadMatrix(model, "embed_tokens.weight", c.vocab_size, D, precision)
                                          : LoadMatrix(WeightLoader(ck, ""), "lm_head.weight", c.vocab_size, D,
                                                       precision));
  bytes += m->lm_head_.bytes();
  FERRY_ASSIGN_OR_RETURN(m->ones_, UploadF32(std::vector<float>(static_cast<size_t>(S * D), 1.0f)));
  for (int64_t i = 0; i < c.num_layers; ++i) {
    Layer& Ly = m->layers_[static_cast<size_t>(i)];
    WeightLoader lw(ck, c.LayerPrefix(i));
    FERRY_RETURN_IF_ERROR(up(&Ly.input_norm, lw.Vector("input_layernorm.weight", D)));
    FERRY_RETURN_IF_ERROR(up(&Ly.post_norm, lw.Vector("post_attention_layernorm.weight", D)));
    FERRY_RETURN_IF_ERROR(up_mhc(&Ly.hc_attn, lw, "hc_attn"));
    FERRY_RETURN_IF_ERROR(up_mhc(&Ly.hc_ffn, lw, "hc_ffn"));
    if (Ly.kda) {
      FERRY_ASSIGN_OR_RETURN(KdaWeights k, LoadKda(lw.Sub("self_attn."), c, tp));
      Ly.low_rank = k.f_a.rows;
      Ly.heads = k.heads;
      FERRY_RETURN_IF_ERROR(up(&Ly.q_proj, k.q_proj));
      FERRY_RETURN_IF_ERROR(up(&Ly.k_proj, k.k_proj));
      FERRY_RETURN_IF_ERROR(up(&Ly.v_proj, k.v_proj));
      FERRY_RETURN_IF_ERROR(up(&Ly.f_a, k.f_a));
      FERRY_RETURN_IF_ERROR(up(&Ly.f_b, k.f_b));
      FERRY_RETURN_IF_ERROR(up(&Ly.g_a, k.g_a));
      FERRY_RETURN_IF_ERROR(up(&Ly.g_b, k.g_b));
      FERRY_RETURN_IF_ERROR(up(&Ly.b_proj, k.b_proj));
      FERRY_RETURN_IF_ERROR(up(&Ly.o_proj_kda, k.o_proj));
      FERRY_RETURN_IF_ERROR(up32(&Ly.q_conv, k.q_conv));
      FERRY_RETURN_IF_ERROR(up32(&Ly.k_conv, k.k_conv));
      FERRY_RETURN_IF_ERROR(up32(&Ly.v_conv, k.v_conv));
      FERRY_RETURN_IF_ERROR(up32(&Ly.a_log, k.a_log));
      FERRY_RETURN_IF_ERROR(up32(&Ly.dt_bias, k.dt_bias));
      FERRY_RETURN_IF_ERROR(up32(&Ly.o_norm, k.o_norm));
    } else {
      FERRY_ASSIGN_OR_RETURN(MlaWeights a, LoadMla(lw.Sub("self_attn."), c, c.rms_norm_eps, tp));
      Ly.heads = a.heads;
      FERRY_RETURN_IF_ERROR(up(&Ly.q_a, a.q_a));
      FERRY_RETURN_IF_ERROR(up(&Ly.q_a_norm, a.q_a_norm));
      FERRY_RETURN_IF_ERROR(up(&Ly.q_b, a.q_b));
      FERRY_RETURN_IF_ERROR(up(&Ly.kv_a, a.kv_a));
      FERRY_RETURN_IF_ERROR(up(&Ly.kv_a_norm, a.kv_a_norm));
      FERRY_RETURN_IF_ERROR(up(&Ly.w_uk_t, a.w_uk_t));
      FERRY_RETURN_IF_ERROR(up(&Ly.w_uv, a.w_uv));
      FERRY_RETURN_IF_ERROR(up(&Ly.o_proj, a.o_proj));
      Ly.has_indexer = Ly.key_region >= 0;
      if (Ly.has_indexer) {
        FERRY_ASSIGN_OR_RETURN(PooledIndexerWeights x, LoadPooledIndexer(lw.Sub("self_attn.indexer."), c));
        FERRY_RETURN_IF_ERROR(up(&Ly.wq_b, x.wq_b));
        FERRY_RETURN_IF_ERROR(up(&Ly.wk, x.wk));
        FERRY_RETURN_IF_ERROR(up(&Ly.k_norm_w, x.k_norm_w));
        FERRY_RETURN_IF_ERROR(up(&Ly.k_norm_b, x.k_norm_b));
        FERRY_RETURN_IF_ERROR(up(&Ly.weights_proj, x.weights_proj));
        FERRY_RETURN_IF_ERROR(up(&Ly.pool_gate, x.gate));
        FERRY_RETURN_IF_ERROR(up32(&Ly.ape, x.ape));
      }
    }
    FERRY_ASSIGN_OR_RETURN(Ly.ffn, LoadFfnCuda(lw.Sub("mlp."), c, i, opts, tp, &bytes));
  }
  m->set_weight_bytes(bytes);
  return m;
}

absl::Status Glm5NextCuda::SizeArenas(int64_t pages, int64_t latent_pages) {
  FERRY_RETURN_IF_ERROR(keys_arena_->SetCapacity(pages));
  return latent_arena_->SetCapacity(latent_pages);
}

std::unique_ptr<SequenceState> Glm5NextCuda::NewSequence() const {
  return std::make_unique<Conversation>(SplitRows(keys_arena_, latent_arena_, tp_.rank),
                                        kda_layout_.floats * static_cast<int64_t>(sizeof(float)), DeviceStateMemory());
}

}  // namespace ferry::model::cuda
