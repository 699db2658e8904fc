#include "model/glm5_next.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/log.h"
#include "common/status.h"
#include "kernels/cpu/ops.h"
#include "model/step_rows.h"

namespace ferry::model {

namespace cpu = ferry::kernels::cpu;

std::vector<PageRegion> Glm5Next::KeyRegions(const ModelConfig& c) {
  std::vector<PageRegion> out;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const bool full = c.layer_types[l] == AttentionType::kMla && c.indexer_types[l] == IndexerType::kFull;
    const int64_t Di = full ? c.index_head_dim : 0;
    out.emplace_back(Di);
    out.emplace_back(Di);
    out.emplace_back(Di, full ? c.index_kpool : 1);
  }
  return out;
}

std::vector<PageRegion> Glm5Next::LatentRegions(const ModelConfig& c) {
  std::vector<PageRegion> out;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    out.emplace_back(c.layer_types[l] == AttentionType::kMla ? c.latent_row_width() : 0);
  }
  return out;
}

absl::StatusOr<std::unique_ptr<Glm5Next>> Glm5Next::Load(const Checkpoint& ck, const ModelConfig& c,
                                                         const TensorParallel& tp, const CacheOptions& cache) {
  if (!c.index_kpool_always_select_tail) {
    return absl::UnimplementedError(absl::StrCat(ck.config_path(), ": text_config.index_kpool_always_select_tail "
                                                 "is false; only the always-selected tail is implemented"));
  }
  FERRY_RETURN_IF_ERROR(CheckDivisible("linear_num_heads", c.linear_num_heads, tp.world));
  if (c.index_kpool < 1 || cache.page_size % c.index_kpool != 0) {
    return absl::InvalidArgumentError(absl::StrCat("index_kpool ", c.index_kpool, " does not divide the page size ",
                                                   cache.page_size, " (a pool's tokens share a page)"));
  }
  std::unique_ptr<Glm5Next> m(new Glm5Next(c, tp));
  // A token's rows at an MLA layer: the latent row (latent arena) and, on full indexer layers,
  // the indexer key, the pool gate and (one a pool) the pooled key (key arena). KDA layers cache
  // nothing per token.
  m->latent_arena_ = std::make_shared<PageArena>(LatentRegions(c), cache.page_size, cache.capacity_pages);
  m->keys_arena_ = std::make_shared<PageArena>(KeyRegions(c), cache.page_size, cache.capacity_pages);
  WeightLoader model(ck, c.weight_prefix);
  FERRY_ASSIGN_OR_RETURN(m->embed_, model.Matrix("embed_tokens.weight", c.vocab_size, c.hidden_size));
  FERRY_ASSIGN_OR_RETURN(m->norm_, model.Vector("norm.weight", c.hidden_size));
  if (c.tie_word_embeddings) {
    m->lm_head_ = m->embed_;
  } else {
    FERRY_ASSIGN_OR_RETURN(m->lm_head_, WeightLoader(ck, "").Matrix("lm_head.weight", c.vocab_size, c.hidden_size));
  }
  int64_t visual = 0;
  for (const std::string& name : ck.TensorNames()) visual += name.rfind("model.visual.", 0) == 0;
  if (visual > 0) {
    FERRY_LOG(INFO) << "glm5_next: text serving; the " << visual << " vision-tower tensors (model.visual.*) "
                    << "are not loaded";
  }
  m->layers_.resize(static_cast<size_t>(c.num_layers));
  for (int64_t i = 0; i < c.num_layers; ++i) {
    Layer& L = m->layers_[i];
    WeightLoader lw(ck, c.LayerPrefix(i));
    FERRY_ASSIGN_OR_RETURN(L.input_norm, lw.Vector("input_layernorm.weight", c.hidden_size));
    FERRY_ASSIGN_OR_RETURN(L.post_norm, lw.Vector("post_attention_layernorm.weight", c.hidden_size));
    FERRY_ASSIGN_OR_RETURN(L.hc_attn, LoadMhc(lw, "hc_attn", c));
    FERRY_ASSIGN_OR_RETURN(L.hc_ffn, LoadMhc(lw, "hc_ffn", c));
    L.kda = c.layer_types[i] == AttentionType::kKda;
    if (L.kda) {
      FERRY_ASSIGN_OR_RETURN(L.linear, LoadKda(lw.Sub("self_attn."), c, tp));
    } else {
      FERRY_ASSIGN_OR_RETURN(L.attn, LoadMla(lw.Sub("self_attn."), c, c.rms_norm_eps, tp));
      L.has_indexer = c.indexer_types[i] == IndexerType::kFull;
      if (L.has_indexer) {
        FERRY_ASSIGN_OR_RETURN(L.indexer, LoadPooledIndexer(lw.Sub("self_attn.indexer."), c));
      }
    }
    FERRY_ASSIGN_OR_RETURN(L.ffn, LoadFfn(lw.Sub("mlp."), c, i, tp));
  }
  return m;
}

absl::Status Glm5Next::SizeArenas(int64_t pages, int64_t latent_pages) {
  FERRY_RETURN_IF_ERROR(keys_arena_->SetCapacity(pages));
  return latent_arena_->SetCapacity(latent_pages);
}

std::unique_ptr<SequenceState> Glm5Next::NewSequence() const {
  return std::make_unique<Conversation>(SplitRows(keys_arena_, latent_arena_, tp_.rank),
                                        kda_layout_.floats * static_cast<int64_t>(sizeof(float)), HostStateMemory());
}

absl::StatusOr<ForwardOutput> Glm5Next::Forward(std::span<const ForwardSegment> segments) {
  return ForwardWithOptions(segments, nullptr, kKdaChunk);
}

absl::StatusOr<ForwardOutput> Glm5Next::ForwardWithOptions(std::span<const ForwardSegment> segments,
                                                           std::vector<std::vector<float>>* hidden,
                                                           int64_t kda_chunk) {
  const ModelConfig& c = config_;
  FERRY_RETURN_IF_ERROR(ValidateSegments(segments, c.vocab_size));
  FERRY_ASSIGN_OR_RETURN(std::vector<Conversation*> seqs, ConversationsOf(segments, *keys_arena_, "glm5_next"));
  for (size_t s = 0; s < seqs.size(); ++s) {
    if (!seqs[s]->has_state()) {
      return absl::ResourceExhaustedError(absl::StrCat("segment ", s, ": its conversation has no KDA state (the "
                                                       "allocation failed when it was created)"));
    }
  }
  std::vector<int64_t> lengths;
  for (const Conversation* seq : seqs) lengths.push_back(seq->length());
  const StepRows rows = PlanStepRows(segments, lengths);
  const std::vector<int64_t>& pos = rows.pos;
  const std::vector<int64_t>& seg_of = rows.seg_of;
  const std::vector<int64_t>& seg_begin = rows.seg_begin;
  const int64_t R = rows.count();
  const int64_t D = c.hidden_size, S = c.hc_mult, W = c.latent_row_width(), Di = c.index_head_dim;
  RowOwners owners;
  FERRY_RETURN_IF_ERROR(ReserveConversations(segments, seqs, lengths, rows, tp_.world, &owners));

  // The residual streams h [R, S, D], each starting as the embedding.
  std::vector<float> h(static_cast<size_t>(R * S * D));
  {
    std::vector<float> x(static_cast<size_t>(R * D));
    GatherEmbeddings(segments, embed_, x.data());
    for (int64_t r = 0; r < R; ++r) {
      for (int64_t j = 0; j < S; ++j) std::copy_n(x.data() + r * D, D, h.data() + (r * S + j) * D);
    }
  }
  if (hidden) hidden->assign(1, h);

  std::vector<float> u(static_cast<size_t>(R * D)), a(u.size()), y(u.size());
  std::vector<float> keys(static_cast<size_t>(R * Di)), gates(keys.size());
  std::vector<std::vector<int32_t>> sel;
  MhcMix mix;
  MlaProjections proj;
  KdaInputs kin;
  std::vector<float> o;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const Layer& L = layers_[l];
    MhcPre(L.hc_attn, c, h.data(), R, &mix, u.data());
    cpu::RmsNorm(u.data(), R, D, L.input_norm.ptr(), c.rms_norm_eps, a.data());
    if (L.kda) {
      const int64_t C = L.linear.heads * c.linear_head_dim;
      KdaProject(L.linear, c, a.data(), R, &kin);
      o.resize(static_cast<size_t>(R * C));
      for (size_t s = 0; s < segments.size(); ++s) {
        const int64_t n = static_cast<int64_t>(segments[s].tokens.size());
        KdaRun(L.linear, c, kin, seg_begin[s], n, lengths[s], n > 1 ? kda_chunk : 0,
               kda_layout_.View(static_cast<float*>(seqs[s]->state()), l), o.data() + seg_begin[s] * C);
      }
      KdaOutput(L.linear, c, kin, o.data(), R, y.data());
    } else {
      MlaProject(L.attn, c, a.data(), R, pos.data(), nullptr, &proj);
      for (int64_t r = 0; r < R; ++r) {
        if (owners.held[r]) std::copy_n(proj.cache_rows.data() + r * W, W, seqs[seg_of[r]]->rows().latent().Row(l, pos[r]));
      }
      if (L.has_indexer) {
        const int64_t key_region = KeyRegion(l, KeyRow::kKey), gate_region = KeyRegion(l, KeyRow::kGate),
                      pool_region = KeyRegion(l, KeyRow::kPool);
        PooledIndexerRows(L.indexer, c, a.data(), R, keys.data(), gates.data());
        for (int64_t r = 0; r < R; ++r) {
          PagedRows& kr = seqs[seg_of[r]]->rows().keys();
          std::copy_n(keys.data() + r * Di, Di, kr.Row(key_region, pos[r]));
          std::copy_n(gates.data() + r * Di, Di, kr.Row(gate_region, pos[r]));
        }
        // The pools each conversation completes in this step (earlier ones are cached).
        for (size_t s = 0; s < segments.size(); ++s) {
          PagedRows* pr = &seqs[s]->rows().keys();
          PooledIndexerPools(
              L.indexer, c, lengths[s] / c.index_kpool,
              (lengths[s] + static_cast<int64_t>(segments[s].tokens.size())) / c.index_kpool,
              [pr, key_region](int64_t t) -> const float* { return pr->Row(key_region, t); },
              [pr, gate_region](int64_t t) -> const float* { return pr->Row(gate_region, t); },
              [pr, pool_region](int64_t p) -> float* { return pr->RowAt(pool_region, p); });
        }
        PooledIndexerSelect(L.indexer, c, a.data(), proj.cq.data(), R, pos.data(),
                            [&](int64_t r, int64_t p) -> const float* {
                              return seqs[seg_of[r]]->rows().keys().RowAt(pool_region, p);
                            },
                            &sel);
      }
      // A shared layer keeps `sel` from the MLA layer just before it (the config guarantees one).
      const RowOf latent_of = [&](int64_t r, int64_t t) -> const float* {
        return seqs[seg_of[r]]->rows().latent().Row(l, t);
      };
      if (owners.split) {
        o.resize(static_cast<size_t>(R * L.attn.heads * c.kv_lora_rank));
        FERRY_RETURN_IF_ERROR(MlaAttendSplit(c, L.attn.heads, proj, owners.owner, owners.held, owners.fetch, owners.group, tp_, latent_of, sel,
                                             o.data(), &split_stats_));
        MlaOutput(L.attn, c, o.data(), R, y.data());
      } else {
        MlaAttend(L.attn, c, proj, R, latent_of, sel, y.data());
      }
    }
    FERRY_RETURN_IF_ERROR(tp_.Reduce(y.data(), R * D));
    MhcPost(mix, c, y.data(), R, h.data());

    MhcPre(L.hc_ffn, c, h.data(), R, &mix, u.data());
    cpu::RmsNorm(u.data(), R, D, L.post_norm.ptr(), c.rms_norm_eps, a.data());
    FfnForward(L.ffn, a.data(), R, D, c.swiglu_limit, y.data());
    FERRY_RETURN_IF_ERROR(tp_.Reduce(y.data(), R * D));
    MhcPost(mix, c, y.data(), R, h.data());
    if (hidden && l + 1 < c.num_layers) hidden->push_back(h);
  }

  // Head: the unweighted mean of the streams, the final norm, lm_head.
  std::vector<float> mean(static_cast<size_t>(R * D));
  for (int64_t r = 0; r < R; ++r) {
    for (int64_t d = 0; d < D; ++d) {
      float acc = 0.0f;
      for (int64_t j = 0; j < S; ++j) acc += h[(r * S + j) * D + d];
      mean[r * D + d] = acc / static_cast<float>(S);
    }
  }
  cpu::RmsNorm(mean.data(), R, D, norm_.ptr(), c.rms_norm_eps, mean.data());
  if (hidden) hidden->push_back(mean);

  ForwardOutput out = ProjectLogits(segments, rows, mean.data(), lm_head_);
  for (size_t s = 0; s < segments.size(); ++s) {
    seqs[s]->Advance(static_cast<int64_t>(segments[s].tokens.size()));
  }
  return out;
}

}  // namespace ferry::model
