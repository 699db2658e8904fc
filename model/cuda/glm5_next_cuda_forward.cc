// Glm5NextCuda::Forward: one step over several conversations on the device, written once over
// the activation type T (act_ops.h). The math is model/glm5_next.cc's, op by op.
#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/cuda/ops.h"
#include "model/cuda/act_ops.h"
#include "model/cuda/glm5_next_cuda.h"
#include "model/step_rows.h"

namespace ferry::model::cuda {

namespace cu = ferry::kernels::cuda;

template <typename T>
struct Glm5NextCuda::Step {
  int64_t R = 0, T_ = 0, S_pools = 1;
  std::span<const ForwardSegment> segments;
  std::vector<Conversation*> seqs;
  std::vector<int64_t> lengths, seg_begin;
  const int64_t* pos = nullptr;   // [R]
  const int32_t* key_table = nullptr;     // [R, T_] the key arena's pages of each row
  const int32_t* latent_table = nullptr;  // [R, T_] the latent arena's
  const int32_t* n_pools = nullptr;  // [R] complete pools visible to the row
  const int32_t* sel_offsets = nullptr;  // [R + 1] the pooled selection's CSR offsets (host-computed)
  float *h, *m, *pre, *post, *comb, *u, *yf;  // mHC (float32)
  T *a, *y;
  // KDA
  T *kq, *kk, *kv, *low, *low_g, *f, *gate, *ky;
  float *qc, *kc, *vc, *g, *beta, *o;
  // MLA and the pooled indexer
  T *cq, *q, *kvc, *q_abs, *o_lat, *o_v, *qi, *ki, *gk;
  void* mla_ws = nullptr;  // MlaDecode's workspace (act::MlaWorkspaceBytes)
  int64_t mla_ws_bytes = 0;
  float *iw, *scores;
  int32_t *top_ids, *top_counts, *sel;
  bool have_selection = false;
  RowOwners owners;  // which rank holds each row's latent rows (the latent split)
  FfnScratch<T> ffn;
  DecisionTap tap;  // the current layer's decision tap (off when tap.log is null)

  act::Cache<T> Keys(const PageArena& a, int64_t region) const { return act::CacheView<T>(a, region, key_table, T_); }
  act::Cache<T> Latent(const PageArena& a, int64_t region) const {
    return act::CacheView<T>(a, region, latent_table, T_);
  }
};

absl::StatusOr<ForwardOutput> Glm5NextCuda::Forward(std::span<const ForwardSegment> segments) {
  return ForwardWithHidden(segments, nullptr);
}

absl::StatusOr<ForwardOutput> Glm5NextCuda::ForwardWithHidden(std::span<const ForwardSegment> segments,
                                                              std::vector<std::vector<float>>* hidden) {
  if (precision_ == Precision::kF32) return ForwardT<float>(segments, hidden);
  return ForwardT<uint16_t>(segments, hidden);
}

template <typename T>
absl::StatusOr<ForwardOutput> Glm5NextCuda::ForwardT(std::span<const ForwardSegment> segments,
                                                     std::vector<std::vector<float>>* hidden) {
  const ModelConfig& c = config_;
  FERRY_RETURN_IF_ERROR(ValidateSegments(segments, c.vocab_size));
  Step<T> b;
  b.segments = segments;
  FERRY_ASSIGN_OR_RETURN(b.seqs, ConversationsOf(segments, *keys_arena_, "glm5_next (CUDA)"));
  for (size_t s = 0; s < segments.size(); ++s) {
    if (!b.seqs[s]->has_state()) {
      return absl::ResourceExhaustedError(absl::StrCat("segment ", s, ": its conversation has no device state "
                                                       "(the allocation failed when it was created)"));
    }
    b.lengths.push_back(b.seqs[s]->length());
  }
  const StepRows rows = PlanStepRows(segments, b.lengths);
  b.seg_begin = rows.seg_begin;
  const int64_t R = rows.count();
  b.R = R;
  // H and HK: this rank's MLA and KDA heads.
  const int64_t D = c.hidden_size, S = c.hc_mult, M = (2 + S) * S, H = tp_.Local(c.num_heads), L = c.kv_lora_rank,
                N = c.qk_nope_head_dim, V = c.v_head_dim, QL = c.q_lora_rank, Hi = c.index_n_heads,
                Di = c.index_head_dim, kp = c.index_kpool, keep = c.index_topk / c.index_kpool,
                HK = tp_.Local(c.linear_num_heads), C = HK * c.linear_head_dim;
  int64_t low_rank = 1;
  for (const Layer& Ly : layers_) low_rank = std::max(low_rank, Ly.low_rank);

  // Pages for the new tokens, all or nothing; which rank holds each row's latent rows.
  FERRY_RETURN_IF_ERROR(ReserveConversations(segments, b.seqs, b.lengths, rows, tp_.world, &b.owners));

  // Host-side rows: tokens, positions, page tables, visible pools and the selection's offsets.
  b.T_ = TableWidth(b.seqs);
  std::vector<int32_t> tokens, key_table, latent_table, n_pools(static_cast<size_t>(R)),
      offsets(static_cast<size_t>(R) + 1, 0);
  RowTables(b.seqs, rows, b.T_, &key_table, &latent_table);
  for (const ForwardSegment& seg : segments) tokens.insert(tokens.end(), seg.tokens.begin(), seg.tokens.end());
  for (int64_t r = 0; r < R; ++r) {
    const int64_t t = rows.pos[r], n = (t + 1) / kp;
    n_pools[r] = static_cast<int32_t>(n);
    b.S_pools = std::max(b.S_pools, n);
    offsets[r + 1] = offsets[r] + static_cast<int32_t>(n <= keep ? t + 1 : keep * kp + (t + 1 - n * kp));
  }
  LogitRows picked = PickLogitRows(segments, rows);
  // The head's rows: those whose logits come back, then those whose greedy token does.
  std::vector<int32_t> head_rows = picked.rows;
  head_rows.insert(head_rows.end(), picked.argmax_rows.begin(), picked.argmax_rows.end());
  const int64_t n_out = static_cast<int64_t>(picked.rows.size()), n_head = static_cast<int64_t>(head_rows.size());
  // The head's unweighted mean of the streams: mixing weights 1 / S.
  const std::vector<float> mean_w(static_cast<size_t>(R * S), 1.0f / static_cast<float>(S));
  FERRY_RETURN_IF_ERROR(ws_.Reset());
  auto take = [&](int64_t n) { return ws_.Take<T>(n); };
  auto take32 = [&](int64_t n) { return ws_.Take<float>(n); };
  FERRY_ASSIGN_OR_RETURN(std::vector<void*> sent,
                         upload_.Send(ws_, {{rows.pos.data(), rows.pos.size() * sizeof(int64_t)},
                                            {tokens.data(), tokens.size() * sizeof(int32_t)},
                                            {key_table.data(), key_table.size() * sizeof(int32_t)},
                                            {n_pools.data(), n_pools.size() * sizeof(int32_t)},
                                            {offsets.data(), offsets.size() * sizeof(int32_t)},
                                            {head_rows.data(), head_rows.size() * sizeof(int32_t)},
                                            {mean_w.data(), mean_w.size() * sizeof(float)},
                                            {latent_table.data(), latent_table.size() * sizeof(int32_t)}}));
  const int64_t* d_pos = static_cast<const int64_t*>(sent[0]);
  const int32_t* d_tokens = static_cast<const int32_t*>(sent[1]);

  const int32_t* d_npools = static_cast<const int32_t*>(sent[3]);
  const int32_t* d_offsets = static_cast<const int32_t*>(sent[4]);
  const int32_t* d_picked = static_cast<const int32_t*>(sent[5]);
  const float* d_mean_w = static_cast<const float*>(sent[6]);
  b.pos = d_pos;
  b.key_table = static_cast<const int32_t*>(sent[2]);
  b.latent_table = static_cast<const int32_t*>(sent[7]);
  b.n_pools = d_npools;
  b.sel_offsets = d_offsets;
  FERRY_ASSIGN_OR_RETURN(b.h, take32(R * S * D));
  FERRY_ASSIGN_OR_RETURN(b.m, take32(R * M));
  FERRY_ASSIGN_OR_RETURN(b.pre, take32(R * S));
  FERRY_ASSIGN_OR_RETURN(b.post, take32(R * S));
  FERRY_ASSIGN_OR_RETURN(b.comb, take32(R * S * S));
  FERRY_ASSIGN_OR_RETURN(b.u, take32(R * D));
  FERRY_ASSIGN_OR_RETURN(b.yf, take32(R * D));
  FERRY_ASSIGN_OR_RETURN(b.a, take(R * D));
  FERRY_ASSIGN_OR_RETURN(b.y, take(R * D));
  FERRY_ASSIGN_OR_RETURN(b.kq, take(R * C));
  FERRY_ASSIGN_OR_RETURN(b.kk, take(R * C));
  FERRY_ASSIGN_OR_RETURN(b.kv, take(R * C));
  FERRY_ASSIGN_OR_RETURN(b.low, take(R * low_rank));
  FERRY_ASSIGN_OR_RETURN(b.low_g, take(R * low_rank));
  FERRY_ASSIGN_OR_RETURN(b.f, take(R * C));
  FERRY_ASSIGN_OR_RETURN(b.gate, take(R * C));
  FERRY_ASSIGN_OR_RETURN(b.ky, take(R * C));
  FERRY_ASSIGN_OR_RETURN(b.qc, take32(R * C));
  FERRY_ASSIGN_OR_RETURN(b.kc, take32(R * C));
  FERRY_ASSIGN_OR_RETURN(b.vc, take32(R * C));
  FERRY_ASSIGN_OR_RETURN(b.g, take32(R * C));
  FERRY_ASSIGN_OR_RETURN(b.beta, take32(R * HK));
  FERRY_ASSIGN_OR_RETURN(b.o, take32(R * C));
  FERRY_ASSIGN_OR_RETURN(b.cq, take(R * QL));
  FERRY_ASSIGN_OR_RETURN(b.q, take(R * H * N));
  FERRY_ASSIGN_OR_RETURN(b.kvc, take(R * L));
  FERRY_ASSIGN_OR_RETURN(b.q_abs, take(R * H * L));
  FERRY_ASSIGN_OR_RETURN(b.o_lat, take(R * H * L));
  b.mla_ws_bytes = act::MlaWorkspaceBytes<T>(R, H);
  FERRY_ASSIGN_OR_RETURN(b.mla_ws, ws_.Take<unsigned char>(b.mla_ws_bytes));
  FERRY_ASSIGN_OR_RETURN(b.o_v, take(R * H * V));
  FERRY_ASSIGN_OR_RETURN(b.qi, take(R * Hi * Di));
  FERRY_ASSIGN_OR_RETURN(b.ki, take(R * Di));
  FERRY_ASSIGN_OR_RETURN(b.gk, take(R * Di));
  FERRY_ASSIGN_OR_RETURN(b.iw, take32(R * Hi));
  FERRY_ASSIGN_OR_RETURN(b.scores, take32(R * b.S_pools));
  FERRY_ASSIGN_OR_RETURN(b.top_ids, ws_.Take<int32_t>(R * std::max<int64_t>(keep, 1)));
  FERRY_ASSIGN_OR_RETURN(b.top_counts, ws_.Take<int32_t>(R));
  FERRY_ASSIGN_OR_RETURN(b.sel, ws_.Take<int32_t>(offsets[R]));
  FERRY_ASSIGN_OR_RETURN(b.ffn, TakeFfnScratch<T>(ws_, c, R));

  auto record = [&](const float* dev, int64_t n) -> absl::Status {
    hidden->emplace_back(static_cast<size_t>(n));
    return cu::CopyToHost(hidden->back().data(), dev, static_cast<size_t>(n) * sizeof(float));
  };
  if (decisions_ != nullptr) FERRY_RETURN_IF_ERROR(decisions_->BeginStep(R));
  if (hidden) hidden->clear();
  // Every stream starts as the embedding.
  FERRY_RETURN_IF_ERROR(act::Embed(embed_.as<T>(), c.vocab_size, D, d_tokens, R, b.u));
  FERRY_RETURN_IF_ERROR(cu::MhcStreamsF32(b.u, R, S, D, b.h));
  if (hidden) FERRY_RETURN_IF_ERROR(record(b.h, R * S * D));

  for (size_t l = 0; l < layers_.size(); ++l) {
    const Layer& Ly = layers_[l];
    b.tap = {decisions_, static_cast<int64_t>(l)};
    FERRY_RETURN_IF_ERROR(MhcIn(Ly.hc_attn, Ly.input_norm.as<T>(), b));
    if (Ly.kda) {
      FERRY_RETURN_IF_ERROR(Kda(l, b));
    } else {
      FERRY_RETURN_IF_ERROR(Mla(Ly, b));
    }
    FERRY_RETURN_IF_ERROR(MixOut(b.y, b));

    FERRY_RETURN_IF_ERROR(MhcIn(Ly.hc_ffn, Ly.post_norm.as<T>(), b));
    FERRY_RETURN_IF_ERROR(FfnAdd(Ly.ffn, c, b.a, R, b.ffn, b.y, b.yf, b.tap, /*assign=*/true));
    FERRY_RETURN_IF_ERROR(ReduceThroughHost(tp_, b.yf, R * D, &reduce_));
    FERRY_RETURN_IF_ERROR(cu::MhcMixOutF32(b.h, b.post, b.comb, b.yf, R, S, D));
    if (hidden && l + 1 < layers_.size()) FERRY_RETURN_IF_ERROR(record(b.h, R * S * D));
  }

  // Head: the unweighted mean of the streams (d_mean_w), the final norm, lm_head.
  FERRY_RETURN_IF_ERROR(act::MixInNorm(b.h, d_mean_w, R, S, D, norm_.as<T>(), c.rms_norm_eps, b.u, b.a));
  if (hidden) {
    FERRY_RETURN_IF_ERROR(act::ToF32(b.a, R * D, b.u));
    FERRY_RETURN_IF_ERROR(record(b.u, R * D));
  }
  ForwardOutput out;
  out.vocab = c.vocab_size;
  out.first_row = picked.first_row;
  FERRY_ASSIGN_OR_RETURN(T* hsel, take(n_head * D));
  FERRY_ASSIGN_OR_RETURN(float* logits, take32(n_head * c.vocab_size));
  FERRY_ASSIGN_OR_RETURN(int32_t* ids, ws_.Take<int32_t>(n_head - n_out));
  FERRY_RETURN_IF_ERROR(act::CopyRows(b.a, D, d_picked, hsel, D, nullptr, n_head, D));
  FERRY_RETURN_IF_ERROR(act::LinearToF32(hsel, n_head, D, lm_head_.as<T>(), c.vocab_size, 1.0f, logits));
  if (n_head > n_out) {
    FERRY_RETURN_IF_ERROR(cu::SampleGreedy(logits + n_out * c.vocab_size, n_head - n_out, c.vocab_size, ids));
  }
  out.logits.resize(static_cast<size_t>(n_out * c.vocab_size));
  std::vector<int32_t> picked_ids(static_cast<size_t>(n_head - n_out));
  int32_t moe_error = 0;
  FERRY_RETURN_IF_ERROR(download_.Receive({{out.logits.data(), logits, out.logits.size() * sizeof(float)},
                                           {picked_ids.data(), ids, picked_ids.size() * sizeof(int32_t)},
                                           {&moe_error, b.ffn.error, b.ffn.error != nullptr ? sizeof(int32_t) : 0}}));
  out.argmax = picked.ArgmaxOf(picked_ids);
  FERRY_RETURN_IF_ERROR(FfnErrorStatus(moe_error, c.n_routed_experts));
  for (size_t s = 0; s < segments.size(); ++s) b.seqs[s]->Advance(static_cast<int64_t>(segments[s].tokens.size()));
  return out;
}

template <typename T>
absl::Status Glm5NextCuda::MixOut(const T* y, Step<T>& b) {
  const int64_t R = b.R, S = config_.hc_mult, D = config_.hidden_size;
  if (tp_.world == 1) return act::MhcMixOut(b.h, b.post, b.comb, y, R, S, D);
  FERRY_RETURN_IF_ERROR(act::ToF32(y, R * D, b.yf));
  FERRY_RETURN_IF_ERROR(ReduceThroughHost(tp_, b.yf, R * D, &reduce_));
  return cu::MhcMixOutF32(b.h, b.post, b.comb, b.yf, R, S, D);
}

// An mHC site's mixing weights (b.pre, b.post, b.comb), its input b.u (float32) and that input
// normed by `norm` into b.a: two launches (normed mixing logits; Sinkhorn, mix and norm).
template <typename T>
absl::Status Glm5NextCuda::MhcIn(const Mhc& m, const T* norm, Step<T>& b) {
  const ModelConfig& c = config_;
  const int64_t R = b.R, S = c.hc_mult, D = c.hidden_size, M = (2 + S) * S;
  // Row-invariant (not cuBLAS): the mixing weights of a token must not depend on the batch, or a
  // last-bit change can flip a bf16 rounding downstream (decode vs prefill).
  FERRY_RETURN_IF_ERROR(cu::RmsNormLinearF32RowInvariant(b.h, R, S * D, c.rms_norm_eps, m.fn.as<float>(), M, b.m));
  return act::SinkhornMixInNorm(b.m, m.scale.as<const float>(), m.base.as<const float>(), c.hc_eps,
                                c.hc_sinkhorn_iters, b.pre, b.post, b.comb, b.h, R, S, D, norm, c.rms_norm_eps, b.u,
                                b.a);
}

// KDA of b.a into b.y. Naive: the recurrence runs one token a launch, also in prefill.
template <typename T>
absl::Status Glm5NextCuda::Kda(size_t l, Step<T>& b) {
  const ModelConfig& c = config_;
  const Layer& Ly = layers_[l];
  const int64_t R = b.R, D = c.hidden_size, H = Ly.heads, d = c.linear_head_dim, C = H * d,
                K = c.linear_conv_kernel_dim, r = Ly.low_rank;
  // The projections of b.a in one launch at decode sizes, then the two low-rank second halves.
  FERRY_RETURN_IF_ERROR(act::LinearMany({{b.a, D, Ly.q_proj.as<T>(), C, b.kq},
                                         {b.a, D, Ly.k_proj.as<T>(), C, b.kk},
                                         {b.a, D, Ly.v_proj.as<T>(), C, b.kv},
                                         {b.a, D, Ly.f_a.as<T>(), r, b.low},
                                         {b.a, D, Ly.g_a.as<T>(), r, b.low_g}},
                                        R));
  FERRY_RETURN_IF_ERROR(
      act::LinearMany({{b.low, r, Ly.f_b.as<T>(), C, b.f}, {b.low_g, r, Ly.g_b.as<T>(), C, b.gate}}, R));
  FERRY_RETURN_IF_ERROR(act::KdaDecay(b.f, R, H, d, Ly.a_log.as<const float>(), Ly.dt_bias.as<const float>(),
                                      c.linear_lower_bound, b.g));
  FERRY_RETURN_IF_ERROR(act::LinearToF32(b.a, R, D, Ly.b_proj.as<T>(), H, 1.0f, b.beta));
  FERRY_RETURN_IF_ERROR(cu::SigmoidF32(b.beta, R * H));
  for (size_t s = 0; s < b.segments.size(); ++s) {
    const int64_t begin = b.seg_begin[s], n = static_cast<int64_t>(b.segments[s].tokens.size());
    float* tails = static_cast<float*>(b.seqs[s]->state()) + kda_layout_.conv[l];
    const T* const x[3] = {b.kq + begin * C, b.kk + begin * C, b.kv + begin * C};
    const float* const weight[3] = {Ly.q_conv.as<const float>(), Ly.k_conv.as<const float>(),
                                    Ly.v_conv.as<const float>()};
    float* const y[3] = {b.qc + begin * C, b.kc + begin * C, b.vc + begin * C};
    FERRY_RETURN_IF_ERROR(act::KdaConvSiluQkv(x, n, C, K, weight, tails, y));
  }
  FERRY_RETURN_IF_ERROR(cu::KdaL2NormQk(b.qc, 1.0f / std::sqrt(static_cast<float>(d)), b.kc, R, H, d));
  for (size_t s = 0; s < b.segments.size(); ++s) {
    const int64_t begin = b.seg_begin[s], n = static_cast<int64_t>(b.segments[s].tokens.size());
    float* state = static_cast<float*>(b.seqs[s]->state()) + kda_layout_.s[l];
    for (int64_t i = 0; i < n; ++i) {
      const int64_t row = begin + i;
      FERRY_RETURN_IF_ERROR(cu::KdaRecurrentStep(state, nullptr, 1, 1, H, d, b.qc + row * C, b.kc + row * C,
                                                 b.vc + row * C, b.g + row * C, b.beta + row * H, b.o + row * C));
    }
  }
  FERRY_RETURN_IF_ERROR(act::KdaOutput(b.o, b.gate, R, H, d, Ly.o_norm.as<const float>(), c.rms_norm_eps, b.ky));
  return act::Linear(b.ky, R, C, Ly.o_proj_kda.as<T>(), D, b.y);
}

// NoPE MLA with the pooled indexer, b.a into b.y.
template <typename T>
absl::Status Glm5NextCuda::Mla(const Layer& Ly, Step<T>& b) {
  const ModelConfig& c = config_;
  const int64_t R = b.R, D = c.hidden_size, H = Ly.heads, L = c.kv_lora_rank, N = c.qk_nope_head_dim,
                V = c.v_head_dim, QL = c.q_lora_rank, Hi = c.index_n_heads, Di = c.index_head_dim,
                kp = c.index_kpool, keep = c.index_topk / c.index_kpool;
  // The products of b.a in one launch at decode sizes (the indexer's too), then those of cq.
  if (Ly.has_indexer) {
    FERRY_RETURN_IF_ERROR(act::LinearMany({{b.a, D, Ly.q_a.as<T>(), QL, b.cq},
                                           {b.a, D, Ly.kv_a.as<T>(), L, b.kvc},
                                           {b.a, D, Ly.wk.as<T>(), Di, b.ki},
                                           {b.a, D, Ly.pool_gate.as<T>(), Di, b.gk}},
                                          R));
    FERRY_RETURN_IF_ERROR(act::RmsNorm(b.cq, R, QL, Ly.q_a_norm.as<T>(), c.rms_norm_eps, b.cq));
    FERRY_RETURN_IF_ERROR(act::LinearMany(
        {{b.cq, QL, Ly.q_b.as<T>(), H * N, b.q}, {b.cq, QL, Ly.wq_b.as<T>(), Hi * Di, b.qi}}, R));
  } else {
    FERRY_RETURN_IF_ERROR(
        act::LinearMany({{b.a, D, Ly.q_a.as<T>(), QL, b.cq}, {b.a, D, Ly.kv_a.as<T>(), L, b.kvc}}, R));
    FERRY_RETURN_IF_ERROR(act::RmsNorm(b.cq, R, QL, Ly.q_a_norm.as<T>(), c.rms_norm_eps, b.cq));
    FERRY_RETURN_IF_ERROR(act::Linear(b.cq, R, QL, Ly.q_b.as<T>(), H * N, b.q));
  }
  const act::Cache<T> latent = b.Latent(*latent_arena_, Ly.latent_region);
  FERRY_RETURN_IF_ERROR(act::RmsNorm(b.kvc, R, L, Ly.kv_a_norm.as<T>(), c.rms_norm_eps, b.kvc));
  FERRY_RETURN_IF_ERROR(act::WritePaged(b.kvc, R, L, L, 0, b.pos, latent));
  FERRY_RETURN_IF_ERROR(act::BatchedLinear(b.q, N, H * N, R, N, Ly.w_uk_t.as<T>(), L * N, L, b.q_abs, L, H * L, H));
  if (Ly.has_indexer) {
    const act::Cache<T> keys = b.Keys(*keys_arena_, Ly.key_region), gates = b.Keys(*keys_arena_, Ly.gate_region),
                        pools = b.Keys(*keys_arena_, Ly.pool_region);
    FERRY_RETURN_IF_ERROR(act::LayerNorm(b.ki, R, Di, Ly.k_norm_w.as<T>(), Ly.k_norm_b.as<T>(), 1e-6f, b.ki));
    FERRY_RETURN_IF_ERROR(act::WritePaged(b.ki, R, Di, Di, 0, b.pos, keys));
    FERRY_RETURN_IF_ERROR(act::WritePaged(b.gk, R, Di, Di, 0, b.pos, gates));
    // The pools each conversation completes in this step (earlier ones are cached).
    for (size_t s = 0; s < b.segments.size(); ++s) {
      const int64_t p0 = b.lengths[s] / kp;
      const int64_t p1 = (b.lengths[s] + static_cast<int64_t>(b.segments[s].tokens.size())) / kp;
      FERRY_RETURN_IF_ERROR(act::PooledKeys(keys, gates, pools, b.seg_begin[s], p0, p1, kp, Ly.ape.as<const float>()));
    }
    FERRY_RETURN_IF_ERROR(act::LinearToF32(b.a, R, D, Ly.weights_proj.as<T>(), Hi,
                                           1.0f / std::sqrt(static_cast<float>(Hi)), b.iw));
    FERRY_RETURN_IF_ERROR(act::IndexerScores(b.qi, b.iw, R, Hi, Di, pools, b.n_pools,
                                             1.0f / std::sqrt(static_cast<float>(Di)), b.scores, b.S_pools));
    FERRY_RETURN_IF_ERROR(cu::TopK(b.scores, R, b.S_pools, b.n_pools, keep, b.top_ids, b.top_counts));
    FERRY_RETURN_IF_ERROR(TapTopK(b.tap, R, keep, b.top_ids, b.top_counts));
    FERRY_RETURN_IF_ERROR(cu::ExpandPoolSelection(b.top_ids, keep, b.pos, R, kp, b.sel_offsets, b.sel));
    b.have_selection = true;
  } else if (!b.have_selection) {
    return absl::FailedPreconditionError("a shared indexer layer comes before any full one");
  }
  // Every row, prompt rows included, attends over its own selection; under the latent split the
  // rows whose latent rows live on another rank go through their owner.
  if (b.owners.split) {
    FERRY_RETURN_IF_ERROR(AttendSplitCuda<T>(split_, c, H, b.q_abs, nullptr, R, b.owners, tp_, latent, b.sel,
                                             b.sel_offsets, b.o_lat, &split_stats_));
  } else {
    FERRY_RETURN_IF_ERROR(act::MlaDecode(b.q_abs, static_cast<const T*>(nullptr), R, H, L, 0, latent, b.sel,
                                         b.sel_offsets, 1.0f / std::sqrt(static_cast<float>(N)), b.o_lat, b.mla_ws,
                                         b.mla_ws_bytes));
  }
  FERRY_RETURN_IF_ERROR(act::BatchedLinear(b.o_lat, L, H * L, R, L, Ly.w_uv.as<T>(), V * L, V, b.o_v, V, H * V, H));
  return act::Linear(b.o_v, R, H * V, Ly.o_proj.as<T>(), D, b.y);
}

}  // namespace ferry::model::cuda
