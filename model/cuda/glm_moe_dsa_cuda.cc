// GlmMoeDsaCuda: loading (the CPU loaders' shape checks, then bf16 uploads) and the sequence
// state. The forward step is in glm_moe_dsa_cuda_forward.cc.
#include "model/cuda/glm_moe_dsa_cuda.h"

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "model/dsa_indexer.h"
#include "model/mla.h"
#include "model/weights.h"

namespace ferry::model::cuda {

namespace cpu = ferry::kernels::cpu;

namespace {

// A [rows, cols] window of a float32 matrix as its own matrix.
Weight Rows(const Weight& w, int64_t begin, int64_t end) {
  Weight out{std::vector<float>(w.data.begin() + begin * w.cols, w.data.begin() + end * w.cols), end - begin, w.cols};
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<GlmMoeDsaCuda>> GlmMoeDsaCuda::Load(const Checkpoint& ck, const ModelConfig& c,
                                                                   const CacheOptions& cache, const CudaLoadOptions& opts) {
  const Precision precision = opts.precision;
  std::unique_ptr<GlmMoeDsaCuda> m(new GlmMoeDsaCuda(c, precision));
  const int64_t D = c.hidden_size, L = c.kv_lora_rank, P = c.qk_rope_head_dim;
  if (P > c.index_head_dim || P % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("qk_rope_head_dim ", P, " must be even and at most index_head_dim ",
                                                   c.index_head_dim, " (the indexer ropes its first dims)"));
  }
  // Region l of each arena is layer l's: its latent rows, and its indexer keys on full layers.
  std::vector<PageRegion> latent, keys;
  m->layers_.resize(static_cast<size_t>(c.num_layers));
  for (int64_t l = 0; l < c.num_layers; ++l) {
    Layer& Ly = m->layers_[static_cast<size_t>(l)];
    const bool full = c.indexer_types[static_cast<size_t>(l)] == IndexerType::kFull;
    Ly.latent_region = l;
    Ly.key_region = full ? l : -1;
    latent.emplace_back(c.latent_row_width());
    keys.emplace_back(full ? c.index_head_dim : 0);
  }
  FERRY_ASSIGN_OR_RETURN(m->latent_arena_, DeviceArena(latent, cache, precision));
  FERRY_ASSIGN_OR_RETURN(m->keys_arena_, DeviceArena(keys, cache, precision));

  WeightLoader top(ck, "");
  WeightLoader model(ck, c.weight_prefix);
  int64_t bytes = 0;
  auto up = [&bytes, precision](DeviceWeight* dst, const absl::StatusOr<Weight>& w) -> absl::Status {
    if (!w.ok()) return w.status();
    FERRY_ASSIGN_OR_RETURN(*dst, UploadWeight(*w, precision));
    bytes += dst->bytes();
    return absl::OkStatus();
  };
  // The two vocab-wide matrices copied as stored when bf16 (LoadMatrix).
  FERRY_ASSIGN_OR_RETURN(m->embed_, LoadMatrix(model, "embed_tokens.weight", c.vocab_size, D, precision));
  bytes += m->embed_.bytes();
  FERRY_RETURN_IF_ERROR(up(&m->norm_, model.Vector("norm.weight", D)));
  FERRY_ASSIGN_OR_RETURN(m->lm_head_, c.tie_word_embeddings
                                          ? LoadMatrix(model, "embed_tokens.weight", c.vocab_size, D, precision)
                                          : LoadMatrix(top, "lm_head.weight", c.vocab_size, D, precision));
  bytes += m->lm_head_.bytes();
  if (P > 0) {
    FERRY_ASSIGN_OR_RETURN(m->inv_freq_, UploadF32(cpu::RopeInvFreq(P, c.rope_theta)));
  }
  for (int64_t i = 0; i < c.num_layers; ++i) {
    Layer& Ly = m->layers_[static_cast<size_t>(i)];
    WeightLoader lw(ck, c.LayerPrefix(i));
    FERRY_RETURN_IF_ERROR(up(&Ly.input_norm, lw.Vector("input_layernorm.weight", D)));
    FERRY_RETURN_IF_ERROR(up(&Ly.post_norm, lw.Vector("post_attention_layernorm.weight", D)));
    {
      FERRY_ASSIGN_OR_RETURN(MlaWeights a, LoadMla(lw.Sub("self_attn."), c, 1e-6f));
      FERRY_RETURN_IF_ERROR(up(&Ly.q_a, a.q_a));
      FERRY_RETURN_IF_ERROR(up(&Ly.q_a_norm, a.q_a_norm));
      FERRY_RETURN_IF_ERROR(up(&Ly.q_b, a.q_b));
      FERRY_RETURN_IF_ERROR(up(&Ly.kv_a_c, Rows(a.kv_a, 0, L)));
      if (P > 0) FERRY_RETURN_IF_ERROR(up(&Ly.kv_a_pe, Rows(a.kv_a, L, L + P)));
      FERRY_RETURN_IF_ERROR(up(&Ly.kv_a_norm, a.kv_a_norm));
      FERRY_RETURN_IF_ERROR(up(&Ly.w_uk_t, a.w_uk_t));
      FERRY_RETURN_IF_ERROR(up(&Ly.w_uv, a.w_uv));
      FERRY_RETURN_IF_ERROR(up(&Ly.o_proj, a.o_proj));
    }
    Ly.has_indexer = Ly.key_region >= 0;
    if (Ly.has_indexer) {
      FERRY_ASSIGN_OR_RETURN(DsaIndexerWeights x, LoadDsaIndexer(lw.Sub("self_attn.indexer."), c));
      FERRY_RETURN_IF_ERROR(up(&Ly.wq_b, x.wq_b));
      FERRY_RETURN_IF_ERROR(up(&Ly.wk, x.wk));
      FERRY_RETURN_IF_ERROR(up(&Ly.k_norm_w, x.k_norm_w));
      FERRY_RETURN_IF_ERROR(up(&Ly.k_norm_b, x.k_norm_b));
      FERRY_RETURN_IF_ERROR(up(&Ly.weights_proj, x.weights_proj));
    }
    FERRY_ASSIGN_OR_RETURN(Ly.ffn, LoadFfnCuda(lw.Sub("mlp."), c, i, opts, &bytes));
  }
  m->set_weight_bytes(bytes);
  return m;
}

absl::Status GlmMoeDsaCuda::SizeArenas(int64_t pages, int64_t latent_pages) {
  FERRY_RETURN_IF_ERROR(keys_arena_->SetCapacity(pages));
  return latent_arena_->SetCapacity(latent_pages);
}

std::unique_ptr<SequenceState> GlmMoeDsaCuda::NewSequence() const {
  return std::make_unique<Conversation>(SplitRows(keys_arena_, latent_arena_, 0), 0, DeviceStateMemory());
}

}  // namespace ferry::model::cuda
