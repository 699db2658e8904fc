// GlmMoeDsaCuda::Forward: one step over several conversations on the device, written once over
// the activation type T (act_ops.h: uint16_t bf16 bits, or float). The layer math is
// model/glm_moe_dsa.cc's, op by op; the comments name what differs (precision, naive parts).
#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/cuda/ops.h"
#include "model/cuda/act_ops.h"
#include "model/cuda/glm_moe_dsa_cuda.h"
#include "model/step_rows.h"

namespace ferry::model::cuda {

namespace cu = ferry::kernels::cuda;

template <typename T>
struct GlmMoeDsaCuda::Step {
  int64_t R = 0;  // rows
  int64_t T_ = 0;  // page-table entries a row
  int64_t S = 0;  // score columns (longest visible length)
  const int64_t* pos = nullptr;     // [R]
  const int32_t* n_keys = nullptr;  // [R] pos + 1
  const int32_t* key_table = nullptr;     // [R, T_] the key arena's pages of each row
  const int32_t* latent_table = nullptr;  // [R, T_] the latent arena's
  float* x = nullptr;  // [R, D] residual stream (float32 in both precisions)
  T* a = nullptr;      // [R, D] normed input of a block
  T* y = nullptr;      // [R, D] a block's output
  // MLA
  T *cq, *q, *kvc, *kpe, *q_abs, *q_pe, *o_lat, *o_v;
  void* mla_ws = nullptr;  // MlaDecode's workspace (act::MlaWorkspaceBytes)
  int64_t mla_ws_bytes = 0;
  // indexer
  T *qi, *ki;
  float *iw, *scores;
  int32_t *top_ids, *top_counts, *sel, *sel_offsets;
  bool have_selection = false;
  FfnScratch<T> ffn;
  DecisionTap tap;  // the current layer's decision tap (off when tap.log is null)

  act::Cache<T> Keys(const PageArena& a, int64_t region) const { return act::CacheView<T>(a, region, key_table, T_); }
  act::Cache<T> Latent(const PageArena& a, int64_t region) const {
    return act::CacheView<T>(a, region, latent_table, T_);
  }
};

absl::StatusOr<ForwardOutput> GlmMoeDsaCuda::Forward(std::span<const ForwardSegment> segments) {
  return ForwardWithHidden(segments, nullptr);
}

absl::StatusOr<ForwardOutput> GlmMoeDsaCuda::ForwardWithHidden(std::span<const ForwardSegment> segments,
                                                               std::vector<std::vector<float>>* hidden,
                                                               const std::vector<std::vector<float>>* layer_inputs) {
  if (precision_ == Precision::kF32) return ForwardT<float>(segments, hidden, layer_inputs);
  return ForwardT<uint16_t>(segments, hidden, layer_inputs);
}

template <typename T>
absl::StatusOr<ForwardOutput> GlmMoeDsaCuda::ForwardT(std::span<const ForwardSegment> segments,
                                                      std::vector<std::vector<float>>* hidden,
                                                      const std::vector<std::vector<float>>* layer_inputs) {
  const ModelConfig& c = config_;
  FERRY_RETURN_IF_ERROR(ValidateSegments(segments, c.vocab_size));
  FERRY_ASSIGN_OR_RETURN(std::vector<Conversation*> seqs, ConversationsOf(segments, *keys_arena_, "glm_moe_dsa (CUDA)"));
  std::vector<int64_t> lengths;
  for (const Conversation* s : seqs) lengths.push_back(s->length());
  const StepRows rows = PlanStepRows(segments, lengths);
  const int64_t R = rows.count();
  const int64_t D = c.hidden_size, H = c.num_heads, L = c.kv_lora_rank, N = c.qk_nope_head_dim,
                P = c.qk_rope_head_dim, V = c.v_head_dim, QL = c.q_lora_rank, Hi = c.index_n_heads,
                Di = c.index_head_dim, K = c.index_topk;
  if (layer_inputs != nullptr && layer_inputs->size() < layers_.size()) {
    return absl::InvalidArgumentError(absl::StrCat(layer_inputs->size(), " layer inputs for ", layers_.size(), " layers"));
  }

  // Pages for the new tokens, all or nothing (one rank: every row's latent rows are here).
  RowOwners owners;
  FERRY_RETURN_IF_ERROR(ReserveConversations(segments, seqs, lengths, rows, 1, &owners));

  // Host-side rows: tokens, positions, visible lengths, each row's copy of its page tables.
  Step<T> b;
  b.R = R;
  b.T_ = TableWidth(seqs);
  std::vector<int32_t> tokens, n_keys(static_cast<size_t>(R)), key_table, latent_table;
  for (const ForwardSegment& seg : segments) tokens.insert(tokens.end(), seg.tokens.begin(), seg.tokens.end());
  for (int64_t r = 0; r < R; ++r) {
    n_keys[r] = static_cast<int32_t>(rows.pos[r] + 1);
    b.S = std::max<int64_t>(b.S, rows.pos[r] + 1);
  }
  RowTables(seqs, rows, b.T_, &key_table, &latent_table);

  LogitRows picked = PickLogitRows(segments, rows);
  const int64_t n_out = static_cast<int64_t>(picked.rows.size());

  FERRY_RETURN_IF_ERROR(ws_.Reset());
  auto take = [&](int64_t n) { return ws_.Take<T>(n); };
  FERRY_ASSIGN_OR_RETURN(std::vector<void*> sent,
                         upload_.Send(ws_, {{rows.pos.data(), rows.pos.size() * sizeof(int64_t)},
                                            {tokens.data(), tokens.size() * sizeof(int32_t)},
                                            {n_keys.data(), n_keys.size() * sizeof(int32_t)},
                                            {key_table.data(), key_table.size() * sizeof(int32_t)},
                                            {picked.rows.data(), picked.rows.size() * sizeof(int32_t)},
                                            {latent_table.data(), latent_table.size() * sizeof(int32_t)}}));
  const int64_t* d_pos = static_cast<const int64_t*>(sent[0]);
  const int32_t* d_tokens = static_cast<const int32_t*>(sent[1]);
  const int32_t* d_nkeys = static_cast<const int32_t*>(sent[2]);
  const int32_t* d_picked = static_cast<const int32_t*>(sent[4]);
  b.pos = d_pos;
  b.n_keys = d_nkeys;
  b.key_table = static_cast<const int32_t*>(sent[3]);
  b.latent_table = static_cast<const int32_t*>(sent[5]);
  FERRY_ASSIGN_OR_RETURN(b.x, ws_.Take<float>(R * D));
  FERRY_ASSIGN_OR_RETURN(b.a, take(R * D));
  FERRY_ASSIGN_OR_RETURN(b.y, take(R * D));
  FERRY_ASSIGN_OR_RETURN(b.cq, take(R * QL));
  FERRY_ASSIGN_OR_RETURN(b.q, take(R * H * (N + P)));
  FERRY_ASSIGN_OR_RETURN(b.kvc, take(R * L));
  FERRY_ASSIGN_OR_RETURN(b.kpe, take(R * P));
  FERRY_ASSIGN_OR_RETURN(b.q_abs, take(R * H * L));
  FERRY_ASSIGN_OR_RETURN(b.q_pe, take(R * H * P));
  FERRY_ASSIGN_OR_RETURN(b.o_lat, take(R * H * L));
  b.mla_ws_bytes = act::MlaWorkspaceBytes<T>(R, H);
  FERRY_ASSIGN_OR_RETURN(b.mla_ws, ws_.Take<unsigned char>(b.mla_ws_bytes));
  FERRY_ASSIGN_OR_RETURN(b.o_v, take(R * H * V));
  FERRY_ASSIGN_OR_RETURN(b.qi, take(R * Hi * Di));
  FERRY_ASSIGN_OR_RETURN(b.ki, take(R * Di));
  FERRY_ASSIGN_OR_RETURN(b.iw, ws_.Take<float>(R * Hi));
  FERRY_ASSIGN_OR_RETURN(b.scores, ws_.Take<float>(R * b.S));
  FERRY_ASSIGN_OR_RETURN(b.top_ids, ws_.Take<int32_t>(R * K));
  FERRY_ASSIGN_OR_RETURN(b.top_counts, ws_.Take<int32_t>(R));
  FERRY_ASSIGN_OR_RETURN(b.sel, ws_.Take<int32_t>(R * K));
  FERRY_ASSIGN_OR_RETURN(b.sel_offsets, ws_.Take<int32_t>(R + 1));
  FERRY_ASSIGN_OR_RETURN(b.ffn, TakeFfnScratch<T>(ws_, c, R));

  auto record = [&](const float* x_dev) -> absl::Status {
    hidden->emplace_back(static_cast<size_t>(R * D));
    return cu::CopyToHost(hidden->back().data(), x_dev, static_cast<size_t>(R * D) * sizeof(float));
  };
  if (decisions_ != nullptr) FERRY_RETURN_IF_ERROR(decisions_->BeginStep(R));
  if (hidden) hidden->clear();
  FERRY_RETURN_IF_ERROR(act::Embed(embed_.as<T>(), c.vocab_size, D, d_tokens, R, b.x));
  if (hidden) FERRY_RETURN_IF_ERROR(record(b.x));
  for (size_t l = 0; l < layers_.size(); ++l) {
    const Layer& Ly = layers_[l];
    b.tap = {decisions_, static_cast<int64_t>(l)};
    if (layer_inputs != nullptr) {
      const std::vector<float>& in = (*layer_inputs)[l];
      if (static_cast<int64_t>(in.size()) != R * D) {
        return absl::InvalidArgumentError(absl::StrCat("layer ", l, " input holds ", in.size(), " values, not ", R * D));
      }
      FERRY_RETURN_IF_ERROR(cu::CopyToDevice(b.x, in.data(), in.size() * sizeof(float)));
    }
    FERRY_RETURN_IF_ERROR(act::NormResidual(b.x, R, D, Ly.input_norm.as<T>(), c.rms_norm_eps, b.a));
    FERRY_RETURN_IF_ERROR(Attention(Ly, b));
    FERRY_RETURN_IF_ERROR(act::AddResidual(b.x, b.y, R * D));
    FERRY_RETURN_IF_ERROR(act::NormResidual(b.x, R, D, Ly.post_norm.as<T>(), c.rms_norm_eps, b.a));
    FERRY_RETURN_IF_ERROR(FfnAdd(Ly.ffn, c, b.a, R, b.ffn, b.y, b.x, b.tap));
    if (hidden && l + 1 < layers_.size()) FERRY_RETURN_IF_ERROR(record(b.x));
  }

  // Final norm, then lm_head (float32 logits) on the rows whose logits were asked for.
  FERRY_RETURN_IF_ERROR(act::NormResidual(b.x, R, D, norm_.as<T>(), c.rms_norm_eps, b.a));
  if (hidden) {
    FERRY_ASSIGN_OR_RETURN(float* normed, ws_.Take<float>(R * D));
    FERRY_RETURN_IF_ERROR(act::ToF32(b.a, R * D, normed));
    FERRY_RETURN_IF_ERROR(record(normed));
  }
  ForwardOutput out;
  out.vocab = c.vocab_size;
  out.first_row = std::move(picked.first_row);
  FERRY_ASSIGN_OR_RETURN(T* h, take(n_out * D));
  FERRY_ASSIGN_OR_RETURN(float* logits, ws_.Take<float>(n_out * c.vocab_size));
  FERRY_RETURN_IF_ERROR(act::CopyRows(b.a, D, d_picked, h, D, nullptr, n_out, D));
  FERRY_RETURN_IF_ERROR(act::LinearToF32(h, n_out, D, lm_head_.as<T>(), c.vocab_size, 1.0f, logits));
  out.logits.resize(static_cast<size_t>(n_out * c.vocab_size));
  int32_t moe_error = 0;
  FERRY_RETURN_IF_ERROR(download_.Receive({{out.logits.data(), logits, out.logits.size() * sizeof(float)},
                                           {&moe_error, b.ffn.error, b.ffn.error != nullptr ? sizeof(int32_t) : 0}}));
  FERRY_RETURN_IF_ERROR(FfnErrorStatus(moe_error, c.n_routed_experts));
  for (size_t s = 0; s < segments.size(); ++s) seqs[s]->Advance(static_cast<int64_t>(segments[s].tokens.size()));
  return out;
}

// MLA with the lightning indexer; b.a is the normed input, the o_proj output lands in b.y.
template <typename T>
absl::Status GlmMoeDsaCuda::Attention(const Layer& Ly, Step<T>& b) {
  const ModelConfig& c = config_;
  const int64_t R = b.R, D = c.hidden_size, H = c.num_heads, L = c.kv_lora_rank, N = c.qk_nope_head_dim,
                P = c.qk_rope_head_dim, V = c.v_head_dim, QL = c.q_lora_rank, Hi = c.index_n_heads,
                Di = c.index_head_dim, K = c.index_topk;
  const float* inv_freq = inv_freq_.as<const float>();
  // The products of a in one launch at decode sizes: c_q, c_kv, k_pe and the indexer's key.
  act::LinearProblem<T> from_a[4] = {{b.a, D, Ly.q_a.as<T>(), QL, b.cq}, {b.a, D, Ly.kv_a_c.as<T>(), L, b.kvc}};
  size_t n_from_a = 2;
  if (P > 0) from_a[n_from_a++] = {b.a, D, Ly.kv_a_pe.as<T>(), P, b.kpe};
  if (Ly.has_indexer) from_a[n_from_a++] = {b.a, D, Ly.wk.as<T>(), Di, b.ki};
  FERRY_RETURN_IF_ERROR(act::LinearMany(std::span<const act::LinearProblem<T>>(from_a, n_from_a), R));
  // cq = RMSNorm(a q_a^T) (eps 1e-6); q = cq q_b^T [R, H, N + P] (and the indexer's queries cq wq_b^T).
  FERRY_RETURN_IF_ERROR(act::RmsNorm(b.cq, R, QL, Ly.q_a_norm.as<T>(), 1e-6f, b.cq));
  if (Ly.has_indexer) {
    FERRY_RETURN_IF_ERROR(act::LinearMany(
        {{b.cq, QL, Ly.q_b.as<T>(), H * (N + P), b.q}, {b.cq, QL, Ly.wq_b.as<T>(), Hi * Di, b.qi}}, R));
  } else {
    FERRY_RETURN_IF_ERROR(act::Linear(b.cq, R, QL, Ly.q_b.as<T>(), H * (N + P), b.q));
  }
  // The new cache rows [RMSNorm(c) | RoPE(k_pe)], written at each row's position.
  const act::Cache<T> latent = b.Latent(*latent_arena_, Ly.latent_region);
  FERRY_RETURN_IF_ERROR(act::RmsNorm(b.kvc, R, L, Ly.kv_a_norm.as<T>(), 1e-6f, b.kvc));
  FERRY_RETURN_IF_ERROR(act::WritePaged(b.kvc, R, L, L, 0, b.pos, latent));
  if (P > 0) {
    FERRY_RETURN_IF_ERROR(act::Rope(b.kpe, R, 1, P, P, 0, P, b.pos, inv_freq));
    FERRY_RETURN_IF_ERROR(act::WritePaged(b.kpe, R, P, P, L, b.pos, latent));
    // q_pe [R, H, P], dense, RoPE'd.
    FERRY_RETURN_IF_ERROR(act::CopyRows(b.q + N, N + P, nullptr, b.q_pe, P, nullptr, R * H, P));
    FERRY_RETURN_IF_ERROR(act::Rope(b.q_pe, R, H, H * P, P, 0, P, b.pos, inv_freq));
  }
  // q_abs = W_UK^T q_nope per head [R, H, L].
  FERRY_RETURN_IF_ERROR(
      act::BatchedLinear(b.q, N + P, H * (N + P), R, N, Ly.w_uk_t.as<T>(), L * N, L, b.q_abs, L, H * L, H));

  if (Ly.has_indexer) {
    // Keys: LayerNorm(a wk^T) (eps 1e-6), RoPE on the first P dims; cached per token.
    const act::Cache<T> keys = b.Keys(*keys_arena_, Ly.key_region);
    FERRY_RETURN_IF_ERROR(act::LayerNorm(b.ki, R, Di, Ly.k_norm_w.as<T>(), Ly.k_norm_b.as<T>(), 1e-6f, b.ki));
    if (P > 0) FERRY_RETURN_IF_ERROR(act::Rope(b.ki, R, 1, Di, Di, 0, P, b.pos, inv_freq));
    FERRY_RETURN_IF_ERROR(act::WritePaged(b.ki, R, Di, Di, 0, b.pos, keys));
    // Queries qi = RoPE(cq wq_b^T) [R, Hi, Di]; head weights (float32) = a weights_proj^T * Hi^-0.5.
    if (P > 0) FERRY_RETURN_IF_ERROR(act::Rope(b.qi, R, Hi, Hi * Di, Di, 0, P, b.pos, inv_freq));
    FERRY_RETURN_IF_ERROR(act::LinearToF32(b.a, R, D, Ly.weights_proj.as<T>(), Hi,
                                           1.0f / std::sqrt(static_cast<float>(Hi)), b.iw));
    // Naive: scores over every visible key of every row, then the top index_topk (all of them
    // when fewer are visible: the dense causal case), as the CSR selection the attention reads.
    FERRY_RETURN_IF_ERROR(act::IndexerScores(b.qi, b.iw, R, Hi, Di, keys, b.n_keys,
                                             1.0f / std::sqrt(static_cast<float>(Di)), b.scores, b.S));
    FERRY_RETURN_IF_ERROR(cu::TopK(b.scores, R, b.S, b.n_keys, K, b.top_ids, b.top_counts));
    FERRY_RETURN_IF_ERROR(TapTopK(b.tap, R, K, b.top_ids, b.top_counts));
    FERRY_RETURN_IF_ERROR(cu::CompactSelection(b.top_ids, b.top_counts, R, K, b.sel, b.sel_offsets));
    b.have_selection = true;
  } else if (!b.have_selection) {
    return absl::FailedPreconditionError("a shared indexer layer comes before any full one");
  }
  // A shared layer reuses the latest full layer's selection. Naive prefill: every row, prompt
  // rows included, runs the decode attention kernel over its own selection.
  FERRY_RETURN_IF_ERROR(act::MlaDecode(b.q_abs, P > 0 ? b.q_pe : nullptr, R, H, L, P, latent, b.sel, b.sel_offsets,
                                       1.0f / std::sqrt(static_cast<float>(N + P)), b.o_lat, b.mla_ws,
                                       b.mla_ws_bytes));
  // o_h = W_UV o_lat_h, then o_proj.
  FERRY_RETURN_IF_ERROR(act::BatchedLinear(b.o_lat, L, H * L, R, L, Ly.w_uv.as<T>(), V * L, V, b.o_v, V, H * V, H));
  FERRY_RETURN_IF_ERROR(act::Linear(b.o_v, R, H * V, Ly.o_proj.as<T>(), D, b.y));
  return absl::OkStatus();
}

}  // namespace ferry::model::cuda
