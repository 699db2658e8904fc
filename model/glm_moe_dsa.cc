#include "model/glm_moe_dsa.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/cpu/ops.h"
#include "model/step_rows.h"

namespace ferry::model {

namespace cpu = ferry::kernels::cpu;

int64_t DsaSequence::bytes() const {
  return static_cast<int64_t>(keys_->pages().size()) * keys_->arena().page_bytes() +
         static_cast<int64_t>(latent_->pages().size()) * latent_->arena().page_bytes();
}

absl::Status DsaSequence::RewindTo(int64_t position) {
  if (position < 0 || position > length_) {
    return absl::OutOfRangeError(absl::StrCat("cannot rewind to position ", position, ": the sequence holds ",
                                              length_, " tokens"));
  }
  FERRY_RETURN_IF_ERROR(keys_->Truncate(position));
  if (holds_latent()) FERRY_RETURN_IF_ERROR(latent_->Truncate(position));
  length_ = position;
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<SequenceState>> DsaSequence::ForkAt(int64_t length, int32_t copy_page) const {
  return ForkSplitAt(length, copy_page, copy_page);
}

absl::StatusOr<std::unique_ptr<SequenceState>> DsaSequence::ForkSplitAt(int64_t length, int32_t copy_page,
                                                                        int32_t latent_copy_page) const {
  if (length < 0 || length > length_) {
    return absl::OutOfRangeError(absl::StrCat("cannot fork at ", length, ": the sequence holds ", length_, " tokens"));
  }
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<PagedRows> keys, keys_->Fork(length, copy_page));
  auto copy = std::make_unique<DsaSequence>(std::shared_ptr<PageArena>(), std::shared_ptr<PageArena>(), rank_);
  if (holds_latent()) {
    FERRY_ASSIGN_OR_RETURN(copy->latent_, latent_->Fork(length, latent_copy_page));
  } else {
    copy->latent_ = std::make_unique<PagedRows>(latent_->shared_arena());
  }
  copy->keys_ = std::move(keys);
  copy->length_ = length;
  copy->owner_ = owner_;
  copy->borrowed_ = borrowed_;
  return std::unique_ptr<SequenceState>(std::move(copy));
}

absl::Status DsaSequence::AdoptPages(std::span<const int32_t> pages) {
  if (owner_ >= 0) return keys_->Adopt(pages);
  // The replicated layout: one page id for both parts.
  FERRY_RETURN_IF_ERROR(latent_->Adopt(pages));
  absl::Status st = keys_->Adopt(pages);
  if (!st.ok()) (void)latent_->Truncate(length_);  // gives back what the latent table just took
  return st;
}

absl::Status DsaSequence::AdoptLatentPages(std::span<const int32_t> pages) {
  if (owner_ < 0 || !holds_latent()) {
    return absl::FailedPreconditionError(absl::StrCat("rank ", rank_, " does not hold this conversation's latent rows (owner ",
                                                      owner_, borrowed_ ? ", borrowed" : "", "): ", pages.size(),
                                                      " latent pages refused"));
  }
  return latent_->Adopt(pages);
}

absl::Status DsaSequence::SetLatentOwner(int owner, bool borrowed) {
  if (owner == owner_ && borrowed == borrowed_) return absl::OkStatus();
  if (length_ == 0 && keys_->pages().empty() && latent_->pages().empty()) {
    owner_ = owner;
    borrowed_ = owner >= 0 && borrowed;
    return absl::OkStatus();
  }
  if (owner_ >= 0 && owner == owner_ && borrowed_ && !borrowed) {
    // The fill is over: the borrowers give their copies back.
    borrowed_ = false;
    if (owner_ != rank_) FERRY_RETURN_IF_ERROR(latent_->Truncate(0));
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrCat("cannot move a conversation of ", length_, " tokens from owner ",
                                                    owner_, borrowed_ ? " (borrowed)" : "", " to owner ", owner,
                                                    borrowed ? " (borrowed)" : ""));
}

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
  return std::make_unique<DsaSequence>(keys_arena_, latent_arena_, tp_.rank);
}

absl::StatusOr<ForwardOutput> GlmMoeDsa::Forward(std::span<const ForwardSegment> segments) {
  return ForwardWithHidden(segments, nullptr);
}

absl::StatusOr<ForwardOutput> GlmMoeDsa::ForwardWithHidden(std::span<const ForwardSegment> segments,
                                                           std::vector<std::vector<float>>* hidden) {
  const ModelConfig& c = config_;
  FERRY_RETURN_IF_ERROR(ValidateSegments(segments, c.vocab_size));
  FERRY_ASSIGN_OR_RETURN(std::vector<DsaSequence*> seqs, CastStates<DsaSequence>(segments, "glm_moe_dsa"));
  std::vector<int64_t> lengths;
  for (const DsaSequence* seq : seqs) lengths.push_back(seq->length_);
  const StepRows rows = PlanStepRows(segments, lengths);
  const std::vector<int64_t>& pos = rows.pos;
  const std::vector<int64_t>& seg_of = rows.seg_of;
  const int64_t R = rows.count();
  const int64_t D = c.hidden_size, W = c.latent_row_width(), Di = c.index_head_dim;

  {
    // Every conversation's key table; the latent table where this rank holds the rows.
    std::vector<PagedRows*> tables;
    std::vector<int64_t> from, adds;
    for (size_t s = 0; s < seqs.size(); ++s) {
      const int64_t n = static_cast<int64_t>(segments[s].tokens.size());
      tables.push_back(seqs[s]->keys_.get());
      from.push_back(lengths[s]);
      adds.push_back(n);
      if (seqs[s]->holds_latent()) {
        tables.push_back(seqs[s]->latent_.get());
        from.push_back(lengths[s]);
        adds.push_back(n);
      }
    }
    FERRY_RETURN_IF_ERROR(ReserveRows(tables, from, adds));
  }
  // Whether any row's latent rows live on one rank only: then attention goes through the owners.
  bool split = false;
  for (const DsaSequence* seq : seqs) split |= seq->owner_ >= 0 && !seq->borrowed_ && tp_.world > 1;

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
      DsaSequence* seq = seqs[seg_of[r]];
      if (seq->holds_latent()) std::copy_n(proj.cache_rows.data() + r * W, W, seq->latent_->Row(l, pos[r]));
    }
    const RowOf latent_of = [&](int64_t r, int64_t t) -> const float* { return seqs[seg_of[r]]->latent_->Row(l, t); };
    if (L.has_indexer) {
      DsaIndexerKeys(L.indexer, c, a.data(), R, pos.data(), inv_freq_.data(), keys.data());
      for (int64_t r = 0; r < R; ++r) {
        std::copy_n(keys.data() + r * Di, Di, seqs[seg_of[r]]->keys_->Row(l, pos[r]));
      }
      const RowOf key_of = [&](int64_t r, int64_t t) -> const float* { return seqs[seg_of[r]]->keys_->Row(l, t); };
      DsaIndexerSelect(L.indexer, c, a.data(), proj.cq.data(), R, pos.data(), inv_freq_.data(), key_of, &sel);
    }
    // A shared layer reuses `sel` from the latest full layer (the config guarantees one).
    if (split) {
      o_lat.resize(static_cast<size_t>(R * L.attn.heads * c.kv_lora_rank));
      FERRY_RETURN_IF_ERROR(AttendSplit(L, proj, seqs, rows, latent_of, sel, o_lat.data()));
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
    seqs[s]->length_ += static_cast<int64_t>(segments[s].tokens.size());
  }
  return out;
}

absl::Status GlmMoeDsa::AttendSplit(const Layer& L, const MlaProjections& proj, const std::vector<DsaSequence*>& seqs,
                                    const StepRows& rows, const RowOf& latent_of,
                                    const std::vector<std::vector<int32_t>>& sel, float* o_lat) {
  const ModelConfig& c = config_;
  const int64_t R = rows.count(), H = L.attn.heads, Lr = c.kv_lora_rank, P = c.qk_rope_head_dim;
  const int world = tp_.world, me = tp_.rank;
  // Every rank derives the same plan from the step: row r is attended by the ranks holding its
  // conversation's rows. A rank that does not hold them ships its heads' queries to the owner.
  // mine: rows this rank attends for itself; ask[q]: rows whose owner q attends for this rank;
  // serve: rows this rank owns that every other rank asks for (the same rows for every peer).
  std::vector<int64_t> mine, serve;
  std::vector<std::vector<int64_t>> ask(static_cast<size_t>(world));
  for (int64_t r = 0; r < R; ++r) {
    const DsaSequence* seq = seqs[rows.seg_of[r]];
    if (seq->holds_latent()) mine.push_back(r);
    if (seq->owner_ >= 0 && !seq->borrowed_) {
      if (seq->owner_ == me) {
        serve.push_back(r);
      } else {
        ask[static_cast<size_t>(seq->owner_)].push_back(r);
      }
    }
  }
  // Queries out: [n, H, L] of q_abs then [n, H, P] of q_pe, packed per owner in row order.
  const int64_t qrow = H * (Lr + P), orow = H * Lr;
  std::vector<std::vector<float>> q_out(static_cast<size_t>(world)), q_in(static_cast<size_t>(world));
  std::vector<std::span<const float>> send(static_cast<size_t>(world));
  std::vector<std::span<float>> recv(static_cast<size_t>(world));
  for (int q = 0; q < world; ++q) {
    if (q == me) continue;
    const std::vector<int64_t>& rs = ask[static_cast<size_t>(q)];
    const int64_t n = static_cast<int64_t>(rs.size());
    std::vector<float>& out = q_out[static_cast<size_t>(q)];
    out.resize(static_cast<size_t>(n * qrow));
    for (int64_t i = 0; i < n; ++i) {
      std::copy_n(proj.q_abs.data() + rs[i] * H * Lr, H * Lr, out.data() + i * H * Lr);
      std::copy_n(proj.q_pe.data() + rs[i] * H * P, H * P, out.data() + n * H * Lr + i * H * P);
    }
    q_in[static_cast<size_t>(q)].resize(serve.size() * static_cast<size_t>(qrow));
    send[static_cast<size_t>(q)] = out;
    recv[static_cast<size_t>(q)] = q_in[static_cast<size_t>(q)];
    split_stats_.rows_shipped += n;
    split_stats_.floats_sent += n * qrow;
  }
  {
    const auto t0 = std::chrono::steady_clock::now();
    FERRY_RETURN_IF_ERROR(tp_.comm->Exchange(send, recv));
    split_stats_.exchange_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

  // This rank's own rows, then every peer's queries over the rows this rank owns.
  {
    std::vector<float> qa(mine.size() * static_cast<size_t>(H * Lr)), qp(mine.size() * static_cast<size_t>(H * P));
    std::vector<float> out(mine.size() * static_cast<size_t>(orow));
    for (size_t i = 0; i < mine.size(); ++i) {
      std::copy_n(proj.q_abs.data() + mine[i] * H * Lr, H * Lr, qa.data() + i * H * Lr);
      std::copy_n(proj.q_pe.data() + mine[i] * H * P, H * P, qp.data() + i * H * P);
    }
    MlaAttendLatent(c, H, qa.data(), qp.data(), mine, latent_of, sel, out.data());
    for (size_t i = 0; i < mine.size(); ++i) std::copy_n(out.data() + i * orow, orow, o_lat + mine[i] * orow);
  }
  const int64_t ns = static_cast<int64_t>(serve.size());
  std::vector<std::vector<float>> o_out(static_cast<size_t>(world)), o_in(static_cast<size_t>(world));
  for (int q = 0; q < world; ++q) {
    if (q == me) continue;
    const std::vector<float>& qin = q_in[static_cast<size_t>(q)];
    std::vector<float>& out = o_out[static_cast<size_t>(q)];
    out.resize(static_cast<size_t>(ns * orow));
    MlaAttendLatent(c, H, qin.data(), qin.data() + ns * H * Lr, serve, latent_of, sel, out.data());
    o_in[static_cast<size_t>(q)].resize(ask[static_cast<size_t>(q)].size() * static_cast<size_t>(orow));
    send[static_cast<size_t>(q)] = out;
    recv[static_cast<size_t>(q)] = o_in[static_cast<size_t>(q)];
    split_stats_.rows_served += ns;
    split_stats_.floats_sent += ns * orow;
  }
  {
    const auto t0 = std::chrono::steady_clock::now();
    FERRY_RETURN_IF_ERROR(tp_.comm->Exchange(send, recv));
    split_stats_.exchange_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  for (int q = 0; q < world; ++q) {
    if (q == me) continue;
    const std::vector<int64_t>& rs = ask[static_cast<size_t>(q)];
    for (size_t i = 0; i < rs.size(); ++i) {
      std::copy_n(o_in[static_cast<size_t>(q)].data() + i * orow, orow, o_lat + rs[i] * orow);
    }
  }
  return absl::OkStatus();
}

}  // namespace ferry::model
