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

NextSequence::NextSequence(const ModelConfig& c, int64_t kda_heads, std::shared_ptr<PageArena> keys,
                           std::shared_ptr<PageArena> latent, int rank)
    : SplitRowsSequence(SplitRows(std::move(keys), std::move(latent), rank), 0),
      config_(&c),
      indexer_(static_cast<size_t>(c.num_layers)),
      kda_(static_cast<size_t>(c.num_layers)) {
  for (int64_t l = 0; l < c.num_layers; ++l) {
    if (c.layer_types[l] == AttentionType::kKda) kda_[l] = KdaState::Zero(c, kda_heads);
  }
}

int64_t NextSequence::fixed_bytes() const {
  int64_t n = 0;
  for (const KdaState& s : kda_) n += s.bytes();
  return n;
}

int64_t NextSequence::bytes() const {
  int64_t n = fixed_bytes();
  n += rows_.bytes();
  for (const auto& ix : indexer_) n += ix.bytes();
  for (const auto& [pos, snap] : snapshots_) {
    for (const KdaState& s : snap) n += s.bytes();
  }
  return n;
}

void NextSequence::KeepSnapshot() { snapshots_[length_] = kda_; }

std::vector<int64_t> NextSequence::SnapshotPositions() const {
  std::vector<int64_t> out;
  for (const auto& [pos, snap] : snapshots_) out.push_back(pos);
  return out;
}

absl::Status NextSequence::RewindTo(int64_t position) {
  if (position < 0 || position > length_) {
    return absl::OutOfRangeError(absl::StrCat("cannot rewind to position ", position, ": the sequence holds ",
                                              length_, " tokens"));
  }
  if (position == length_) return absl::OkStatus();
  auto it = snapshots_.find(position);
  if (it == snapshots_.end()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot rewind to position ", position, ": the KDA recurrent state cannot be rewound and has "
        "snapshots only at [", absl::StrJoin(SnapshotPositions(), ", "), "]"));
  }
  const ModelConfig& c = *config_;
  FERRY_RETURN_IF_ERROR(rows_.Truncate(position));
  kda_ = it->second;
  for (int64_t l = 0; l < c.num_layers; ++l) indexer_[l].Truncate(position, c);
  snapshots_.erase(std::next(it), snapshots_.end());
  length_ = position;
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<SequenceState>> NextSequence::ForkWith(
    int64_t length, const std::function<absl::StatusOr<SplitRows>()>& fork_rows) const {
  const std::vector<KdaState>* kda = &kda_;
  if (length != length_) {
    auto it = snapshots_.find(length);
    if (it == snapshots_.end()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot fork at ", length, ": the KDA recurrent state exists only at ", length_, " and at the snapshots [",
          absl::StrJoin(SnapshotPositions(), ", "), "]"));
    }
    kda = &it->second;
  }
  FERRY_ASSIGN_OR_RETURN(SplitRows rows, fork_rows());
  auto copy = std::unique_ptr<NextSequence>(new NextSequence(*config_, std::move(rows), length));
  copy->indexer_ = indexer_;
  for (PooledIndexerCache& ix : copy->indexer_) ix.Truncate(length, *config_);
  copy->kda_ = *kda;
  for (const auto& [pos, snap] : snapshots_) {
    if (pos <= length) copy->snapshots_[pos] = snap;
  }
  return std::unique_ptr<SequenceState>(std::move(copy));
}

absl::StatusOr<std::unique_ptr<Glm5Next>> Glm5Next::Load(const Checkpoint& ck, const ModelConfig& c,
                                                         const TensorParallel& tp, const CacheOptions& cache) {
  if (!c.index_kpool_always_select_tail) {
    return absl::UnimplementedError(absl::StrCat(ck.config_path(), ": text_config.index_kpool_always_select_tail "
                                                 "is false; only the always-selected tail is implemented"));
  }
  FERRY_RETURN_IF_ERROR(CheckDivisible("linear_num_heads", c.linear_num_heads, tp.world));
  std::unique_ptr<Glm5Next> m(new Glm5Next(c, tp));
  // A token's rows at an MLA layer: the latent row (latent arena) and, on full indexer layers,
  // the indexer key and the pool gate (key arena). KDA layers cache nothing per token.
  std::vector<int64_t> latent_widths, key_widths;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const bool mla = c.layer_types[l] == AttentionType::kMla;
    latent_widths.push_back(mla ? c.latent_row_width() : 0);
    key_widths.push_back(mla && c.indexer_types[l] == IndexerType::kFull ? 2 * c.index_head_dim : 0);
  }
  m->latent_arena_ = std::make_shared<PageArena>(latent_widths, cache.page_size, cache.capacity_pages);
  m->keys_arena_ = std::make_shared<PageArena>(key_widths, cache.page_size, cache.capacity_pages);
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
  return std::make_unique<NextSequence>(config_, tp_.Local(config_.linear_num_heads), keys_arena_, latent_arena_,
                                        tp_.rank);
}

absl::StatusOr<ForwardOutput> Glm5Next::Forward(std::span<const ForwardSegment> segments) {
  return ForwardWithOptions(segments, nullptr, kKdaChunk);
}

absl::StatusOr<ForwardOutput> Glm5Next::ForwardWithOptions(std::span<const ForwardSegment> segments,
                                                           std::vector<std::vector<float>>* hidden,
                                                           int64_t kda_chunk) {
  const ModelConfig& c = config_;
  FERRY_RETURN_IF_ERROR(ValidateSegments(segments, c.vocab_size));
  FERRY_ASSIGN_OR_RETURN(std::vector<NextSequence*> seqs, CastStates<NextSequence>(segments, "glm5_next"));
  std::vector<int64_t> lengths;
  for (const NextSequence* seq : seqs) lengths.push_back(seq->length_);
  const StepRows rows = PlanStepRows(segments, lengths);
  const std::vector<int64_t>& pos = rows.pos;
  const std::vector<int64_t>& seg_of = rows.seg_of;
  const std::vector<int64_t>& seg_begin = rows.seg_begin;
  const int64_t R = rows.count();
  const int64_t D = c.hidden_size, S = c.hc_mult, W = c.latent_row_width(), Di = c.index_head_dim;
  RowOwners owners;
  {
    std::vector<SplitRows*> tables;
    std::vector<int64_t> adds;
    for (size_t s = 0; s < seqs.size(); ++s) {
      tables.push_back(&seqs[s]->rows_);
      adds.push_back(static_cast<int64_t>(segments[s].tokens.size()));
    }
    FERRY_RETURN_IF_ERROR(ReserveSplitRows(tables, lengths, adds, seg_of, tp_.world, &owners));
  }

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
  std::vector<const PooledIndexerCache*> index_of(static_cast<size_t>(R));
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
        KdaRun(L.linear, c, kin, seg_begin[s], n, seqs[s]->length_, n > 1 ? kda_chunk : 0, &seqs[s]->kda_[l],
               o.data() + seg_begin[s] * C);
      }
      KdaOutput(L.linear, c, kin, o.data(), R, y.data());
    } else {
      MlaProject(L.attn, c, a.data(), R, pos.data(), nullptr, &proj);
      for (int64_t r = 0; r < R; ++r) {
        if (owners.held[r]) std::copy_n(proj.cache_rows.data() + r * W, W, seqs[seg_of[r]]->rows_.latent().Row(l, pos[r]));
      }
      if (L.has_indexer) {
        PooledIndexerRows(L.indexer, c, a.data(), R, keys.data(), gates.data());
        for (int64_t r = 0; r < R; ++r) {
          float* row = seqs[seg_of[r]]->rows_.keys().Row(l, pos[r]);
          std::copy_n(keys.data() + r * Di, Di, row);
          std::copy_n(gates.data() + r * Di, Di, row + Di);
          index_of[r] = &seqs[seg_of[r]]->indexer_[l];
        }
        for (size_t s = 0; s < segments.size(); ++s) {
          PagedRows* pr = &seqs[s]->rows_.keys();
          PooledIndexerCompletePools(L.indexer, c, seqs[s]->length_ + static_cast<int64_t>(segments[s].tokens.size()),
                                     [pr, l](int64_t t) -> const float* { return pr->Row(l, t); },
                                     &seqs[s]->indexer_[l]);
        }
        PooledIndexerSelect(L.indexer, c, a.data(), proj.cq.data(), R, pos.data(), index_of.data(), &sel);
      }
      // A shared layer keeps `sel` from the MLA layer just before it (the config guarantees one).
      const RowOf latent_of = [&](int64_t r, int64_t t) -> const float* {
        return seqs[seg_of[r]]->rows_.latent().Row(l, t);
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
    seqs[s]->length_ += static_cast<int64_t>(segments[s].tokens.size());
  }
  return out;
}

}  // namespace ferry::model
