#include "model/glm_moe_dsa.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/cpu/ops.h"
#include "model/step_rows.h"

namespace ferry::model {

namespace cpu = ferry::kernels::cpu;

absl::StatusOr<std::unique_ptr<GlmMoeDsa>> GlmMoeDsa::Load(const Checkpoint& ck, const ModelConfig& c,
                                                           const TensorParallel& tp, const CacheOptions& cache) {
  std::unique_ptr<GlmMoeDsa> m(new GlmMoeDsa(c, tp));
  // A token's rows at layer l: the latent row (latent arena) and, on full indexer layers, the
  // indexer key (key arena).
  std::vector<int64_t> latent_widths, key_widths;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    latent_widths.push_back(c.latent_row_width());
    key_widths.push_back(c.indexer_types[l] == IndexerType::kFull ? c.index_head_dim : 0);
  }
  m->latent_arena_ = std::make_shared<PageArena>(latent_widths, cache.page_size, cache.capacity_pages);
  m->keys_arena_ = std::make_shared<PageArena>(key_widths, cache.page_size, cache.capacity_pages);
  WeightLoader top(ck, "");
  WeightLoader model(ck, c.weight_prefix);
  FERRY_ASSIGN_OR_RETURN(m->embed_, model.Matrix("embed_tokens.weight", c.vocab_size, c.hidden_size));
  FERRY_ASSIGN_OR_RETURN(m->norm_, model.Vector("norm.weight", c.hidden_size));
  if (c.tie_word_embeddings) {
    m->lm_head_ = m->embed_;
  } else {
    FERRY_ASSIGN_OR_RETURN(m->lm_head_, top.Matrix("lm_head.weight", c.vocab_size, c.hidden_size));
  }
  m->inv_freq_ = cpu::RopeInvFreq(c.qk_rope_head_dim, c.rope_theta);
  m->layers_.resize(static_cast<size_t>(c.num_layers));
  for (int64_t i = 0; i < c.num_layers; ++i) {
    Layer& L = m->layers_[i];
    WeightLoader lw(ck, c.LayerPrefix(i));
    FERRY_ASSIGN_OR_RETURN(L.input_norm, lw.Vector("input_layernorm.weight", c.hidden_size));
    FERRY_ASSIGN_OR_RETURN(L.post_norm, lw.Vector("post_attention_layernorm.weight", c.hidden_size));
    // The low-rank norms use the class default epsilon 1e-6, not rms_norm_eps.
    FERRY_ASSIGN_OR_RETURN(L.attn, LoadMla(lw.Sub("self_attn."), c, 1e-6f, tp));
    L.has_indexer = c.indexer_types[i] == IndexerType::kFull;
    if (L.has_indexer) {
      FERRY_ASSIGN_OR_RETURN(L.indexer, LoadDsaIndexer(lw.Sub("self_attn.indexer."), c));
    }
    FERRY_ASSIGN_OR_RETURN(L.ffn, LoadFfn(lw.Sub("mlp."), c, i, tp));
  }
  return m;
}

absl::Status GlmMoeDsa::SizeArenas(int64_t pages, int64_t latent_pages) {
  FERRY_RETURN_IF_ERROR(keys_arena_->SetCapacity(pages));
  return latent_arena_->SetCapacity(latent_pages);
}

std::unique_ptr<SequenceState> GlmMoeDsa::NewSequence() const {
  return std::make_unique<Conversation>(SplitRows(keys_arena_, latent_arena_, tp_.rank), 0, HostStateMemory());
}

absl::StatusOr<ForwardOutput> GlmMoeDsa::Forward(std::span<const ForwardSegment> segments) {
  return ForwardWithHidden(segments, nullptr);
}

absl::StatusOr<ForwardOutput> GlmMoeDsa::ForwardWithHidden(std::span<const ForwardSegment> segments,
                                                           std::vector<std::vector<float>>* hidden) {
  const ModelConfig& c = config_;
  FERRY_RETURN_IF_ERROR(ValidateSegments(segments, c.vocab_size));
  FERRY_ASSIGN_OR_RETURN(std::vector<Conversation*> seqs, ConversationsOf(segments, *keys_arena_, "glm_moe_dsa"));
  std::vector<int64_t> lengths;
  for (const Conversation* seq : seqs) lengths.push_back(seq->length());
  const StepRows rows = PlanStepRows(segments, lengths);
  const std::vector<int64_t>& pos = rows.pos;
  const std::vector<int64_t>& seg_of = rows.seg_of;
  const int64_t R = rows.count();
  const int64_t D = c.hidden_size, W = c.latent_row_width(), Di = c.index_head_dim;

  RowOwners owners;
  FERRY_RETURN_IF_ERROR(ReserveConversations(segments, seqs, lengths, rows, tp_.world, &owners));

  std::vector<float> x(static_cast<size_t>(R * D));
  GatherEmbeddings(segments, embed_, x.data());
  if (hidden) hidden->assign(1, x);

  std::vector<float> a(x.size()), y(x.size());
  std::vector<float> keys(static_cast<size_t>(R * Di));
  std::vector<float> o_lat;
  std::vector<std::vector<int32_t>> sel;
  MlaProjections proj;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const Layer& L = layers_[l];
    cpu::RmsNorm(x.data(), R, D, L.input_norm.ptr(), c.rms_norm_eps, a.data());
    MlaProject(L.attn, c, a.data(), R, pos.data(), inv_freq_.data(), &proj);
    for (int64_t r = 0; r < R; ++r) {
      if (owners.held[r]) std::copy_n(proj.cache_rows.data() + r * W, W, seqs[seg_of[r]]->rows().latent().Row(l, pos[r]));
    }
    const RowOf latent_of = [&](int64_t r, int64_t t) -> const float* { return seqs[seg_of[r]]->rows().latent().Row(l, t); };
    if (L.has_indexer) {
      DsaIndexerKeys(L.indexer, c, a.data(), R, pos.data(), inv_freq_.data(), keys.data());
      for (int64_t r = 0; r < R; ++r) {
        std::copy_n(keys.data() + r * Di, Di, seqs[seg_of[r]]->rows().keys().Row(l, pos[r]));
      }
      const RowOf key_of = [&](int64_t r, int64_t t) -> const float* { return seqs[seg_of[r]]->rows().keys().Row(l, t); };
      DsaIndexerSelect(L.indexer, c, a.data(), proj.cq.data(), R, pos.data(), inv_freq_.data(), key_of, &sel);
    }
    // A shared layer reuses `sel` from the latest full layer (the config guarantees one).
    if (owners.split) {
      o_lat.resize(static_cast<size_t>(R * L.attn.heads * c.kv_lora_rank));
      FERRY_RETURN_IF_ERROR(MlaAttendSplit(c, L.attn.heads, proj, owners.owner, owners.held, owners.fetch, owners.group, tp_, latent_of, sel, o_lat.data(),
                                           &split_stats_));
      MlaOutput(L.attn, c, o_lat.data(), R, y.data());
    } else {
      MlaAttend(L.attn, c, proj, R, latent_of, sel, y.data());
    }
    FERRY_RETURN_IF_ERROR(tp_.Reduce(y.data(), R * D));
    for (int64_t i = 0; i < R * D; ++i) x[i] += y[i];

    cpu::RmsNorm(x.data(), R, D, L.post_norm.ptr(), c.rms_norm_eps, a.data());
    FfnForward(L.ffn, a.data(), R, D, 0.0f, y.data());
    FERRY_RETURN_IF_ERROR(tp_.Reduce(y.data(), R * D));
    for (int64_t i = 0; i < R * D; ++i) x[i] += y[i];
    if (hidden && l + 1 < c.num_layers) hidden->push_back(x);
  }

  // Final norm, then lm_head on the rows whose logits were asked for.
  cpu::RmsNorm(x.data(), R, D, norm_.ptr(), c.rms_norm_eps, x.data());
  if (hidden) hidden->push_back(x);
  ForwardOutput out = ProjectLogits(segments, rows, x.data(), lm_head_);
  for (size_t s = 0; s < segments.size(); ++s) {
    seqs[s]->Advance(static_cast<int64_t>(segments[s].tokens.size()));
  }
  return out;
}

}  // namespace ferry::model
