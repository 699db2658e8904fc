// glm_moe_dsa's layer sequence (GLM-5 / 5.1 / 5.2 / 5.3; docs/models.md), written once over a
// backend's ops: model/blocks/cpu_ops.h (float32 on the host, the reference) and model/cuda/cuda_ops.h
// (bf16 or float32 on one GPU). A backend supplies buffers (Take, Send, Receive), views of its
// page arenas, and the ops of model/cuda/act_ops.h under the same names; the sequence, the cache
// writes, the indexer's selection, tensor parallelism's reductions and the latent split's
// attention are here once.
//
// Per layer: x (float32 residual stream) -> RMSNorm -> MLA with the lightning indexer (full
// layers select index_topk keys, shared layers reuse the latest full layer's selection) ->
// o_proj -> x += (summed over the ranks); RMSNorm -> FFN (dense or MoE) -> x += (summed).
// What is naive on the device is named in model/cuda/glm_moe_dsa_cuda.h.
#pragma once

#include <algorithm>
#include <cmath>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/cpu/ops.h"
#include "model/families/causal_lm.h"
#include "model/checkpoint/checkpoint.h"
#include "model/checkpoint/config.h"
#include "model/cache/conversation.h"
#include "model/golden/decision_log.h"
#include "model/blocks/dsa_indexer.h"
#include "model/blocks/mla.h"
#include "model/cache/paged_cache.h"
#include "model/cache/split_rows.h"
#include "model/families/step_head.h"
#include "model/families/step_rows.h"
#include "model/parallel/tensor_parallel.h"
#include "model/checkpoint/weights.h"

namespace ferry::model {

// One layer's weights as a backend holds them (W its weight type, F its FFN weights). Under
// tensor parallelism a rank holds its heads' rows of q_b, w_uk_t, w_uv and columns of o_proj
// (model/blocks/mla.h), and its slice of every FFN (model/blocks/ffn.h); the rest is replicated.
template <class W, class F>
struct DsaLayer {
  W input_norm, post_norm;
  // MLA: kv_a split into its c rows and its k_pe rows (model/blocks/mla.h's names otherwise).
  W q_a, q_a_norm, q_b, kv_a_c, kv_a_pe, kv_a_norm, w_uk_t, w_uv, o_proj;
  int64_t heads = 0;  // this rank's
  // Lightning indexer (full layers).
  bool has_indexer = false;
  W wq_b, wk, k_norm_w, k_norm_b, weights_proj;
  F ffn;
};

template <class Ops>
struct DsaWeights {
  typename Ops::WeightT embed, norm, lm_head;
  typename Ops::Floats inv_freq;  // float32 [rope / 2]
  std::vector<DsaLayer<typename Ops::WeightT, typename Ops::Ffn>> layers;
};

// Loads this rank's shard of every glm_moe_dsa weight through the CPU loaders' shape checks
// (model/blocks/mla.h, model/blocks/dsa_indexer.h), handing each to the backend: upload(Weight) -> its weight,
// upload_floats(std::vector<float>) -> its float32 vector, vocab(loader, name) -> the [vocab,
// hidden] matrix `name` (a backend may copy a stored bf16 matrix as it is), load_ffn(loader,
// layer) -> the layer's FFN.
template <class Ops, class Upload, class UploadFloats, class Vocab, class LoadFfnFn>
absl::Status LoadDsaWeights(const Checkpoint& ck, const ModelConfig& c, const TensorParallel& tp, Upload upload,
                            UploadFloats upload_floats, Vocab vocab, LoadFfnFn load_ffn, DsaWeights<Ops>* w) {
  const int64_t D = c.hidden_size, L = c.kv_lora_rank, P = c.qk_rope_head_dim;
  if (P > c.index_head_dim || P % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("qk_rope_head_dim ", P, " must be even and at most index_head_dim ",
                                                   c.index_head_dim, " (the indexer ropes its first dims)"));
  }
  WeightLoader top(ck, "");
  WeightLoader model(ck, c.weight_prefix);
  auto up = [&](typename Ops::WeightT* dst, absl::StatusOr<Weight> src) -> absl::Status {
    if (!src.ok()) return src.status();
    FERRY_ASSIGN_OR_RETURN(*dst, upload(std::move(*src)));
    return absl::OkStatus();
  };
  // Rows [begin, end) of a matrix as a matrix of their own.
  auto rows_of = [](const Weight& m, int64_t begin, int64_t end) {
    return Weight{std::vector<float>(m.data.begin() + begin * m.cols, m.data.begin() + end * m.cols), end - begin,
                  m.cols};
  };
  FERRY_ASSIGN_OR_RETURN(w->embed, vocab(model, "embed_tokens.weight"));
  FERRY_RETURN_IF_ERROR(up(&w->norm, model.Vector("norm.weight", D)));
  if (c.tie_word_embeddings) {
    FERRY_ASSIGN_OR_RETURN(w->lm_head, vocab(model, "embed_tokens.weight"));
  } else {
    FERRY_ASSIGN_OR_RETURN(w->lm_head, vocab(top, "lm_head.weight"));
  }
  FERRY_ASSIGN_OR_RETURN(w->inv_freq, upload_floats(P > 0 ? kernels::cpu::RopeInvFreq(P, c.rope_theta)
                                                           : std::vector<float>{0.0f}));
  w->layers.resize(static_cast<size_t>(c.num_layers));
  for (int64_t i = 0; i < c.num_layers; ++i) {
    auto& Ly = w->layers[static_cast<size_t>(i)];
    WeightLoader lw(ck, c.LayerPrefix(i));
    FERRY_RETURN_IF_ERROR(up(&Ly.input_norm, lw.Vector("input_layernorm.weight", D)));
    FERRY_RETURN_IF_ERROR(up(&Ly.post_norm, lw.Vector("post_attention_layernorm.weight", D)));
    // The low-rank norms use the class default epsilon 1e-6, not rms_norm_eps.
    FERRY_ASSIGN_OR_RETURN(MlaWeights m, LoadMla(lw.Sub("self_attn."), c, 1e-6f, tp));
    Ly.heads = m.heads;
    FERRY_RETURN_IF_ERROR(up(&Ly.q_a, std::move(m.q_a)));
    FERRY_RETURN_IF_ERROR(up(&Ly.q_a_norm, std::move(m.q_a_norm)));
    FERRY_RETURN_IF_ERROR(up(&Ly.q_b, std::move(m.q_b)));
    FERRY_RETURN_IF_ERROR(up(&Ly.kv_a_c, rows_of(m.kv_a, 0, L)));
    if (P > 0) FERRY_RETURN_IF_ERROR(up(&Ly.kv_a_pe, rows_of(m.kv_a, L, L + P)));
    FERRY_RETURN_IF_ERROR(up(&Ly.kv_a_norm, std::move(m.kv_a_norm)));
    FERRY_RETURN_IF_ERROR(up(&Ly.w_uk_t, std::move(m.w_uk_t)));
    FERRY_RETURN_IF_ERROR(up(&Ly.w_uv, std::move(m.w_uv)));
    FERRY_RETURN_IF_ERROR(up(&Ly.o_proj, std::move(m.o_proj)));
    Ly.has_indexer = c.indexer_types[static_cast<size_t>(i)] == IndexerType::kFull;
    if (Ly.has_indexer) {
      FERRY_ASSIGN_OR_RETURN(DsaIndexerWeights x, LoadDsaIndexer(lw.Sub("self_attn.indexer."), c));
      FERRY_RETURN_IF_ERROR(up(&Ly.wq_b, std::move(x.wq_b)));
      FERRY_RETURN_IF_ERROR(up(&Ly.wk, std::move(x.wk)));
      FERRY_RETURN_IF_ERROR(up(&Ly.k_norm_w, std::move(x.k_norm_w)));
      FERRY_RETURN_IF_ERROR(up(&Ly.k_norm_b, std::move(x.k_norm_b)));
      FERRY_RETURN_IF_ERROR(up(&Ly.weights_proj, std::move(x.weights_proj)));
    }
    FERRY_ASSIGN_OR_RETURN(Ly.ffn, load_ffn(lw.Sub("mlp."), i));
  }
  return absl::OkStatus();
}

// The key and latent arenas' regions of glm_moe_dsa: region l of each is layer l's (its latent
// rows [c | k_pe]; its indexer keys on full layers, 0 wide on shared ones).
inline std::vector<PageRegion> DsaLatentRegions(const ModelConfig& c) {
  return std::vector<PageRegion>(static_cast<size_t>(c.num_layers), PageRegion(c.latent_row_width()));
}
inline std::vector<PageRegion> DsaKeyRegions(const ModelConfig& c) {
  std::vector<PageRegion> out;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    out.emplace_back(c.indexer_types[static_cast<size_t>(l)] == IndexerType::kFull ? c.index_head_dim : 0);
  }
  return out;
}

// What a step needs of its model besides the weights. Region l of each arena is layer l's.
struct DsaStepContext {
  const ModelConfig* config = nullptr;
  PageArena* keys = nullptr;
  PageArena* latent = nullptr;
  TensorParallel tp;
  OwnerSplitStats* split_stats = nullptr;
  DecisionLog* decisions = nullptr;  // null: off
  FfnObserver* ffn_inputs = nullptr;  // null: off (CausalLM::set_ffn_observer)
};

// CausalLM::Forward's contract, with ForwardWithHidden's hidden states when `hidden` is non-null
// (hidden[0] the embeddings, hidden[i] layer i - 1's output, hidden[num_layers] the final-normed
// rows) and, when `layer_inputs` is non-null, layer l starting from layer_inputs[l] [rows, hidden]
// (for diagnosis: one layer's own error).
template <class Ops>
absl::StatusOr<ForwardOutput> DsaStep(Ops& ops, const DsaStepContext& ctx, const DsaWeights<Ops>& w,
                                      std::span<const ForwardSegment> segments,
                                      std::vector<std::vector<float>>* hidden,
                                      const std::vector<std::vector<float>>* layer_inputs) {
  using T = typename Ops::Act;
  const ModelConfig& c = *ctx.config;
  FERRY_RETURN_IF_ERROR(ValidateSegments(segments, c.vocab_size));
  FERRY_ASSIGN_OR_RETURN(std::vector<Conversation*> seqs, ConversationsOf(segments, *ctx.keys, "glm_moe_dsa"));
  std::vector<int64_t> lengths;
  for (const Conversation* s : seqs) lengths.push_back(s->length());
  const StepRows rows = PlanStepRows(segments, lengths);
  const int64_t R = rows.count();
  const int64_t D = c.hidden_size, L = c.kv_lora_rank, N = c.qk_nope_head_dim, P = c.qk_rope_head_dim,
                V = c.v_head_dim, QL = c.q_lora_rank, Hi = c.index_n_heads, Di = c.index_head_dim, K = c.index_topk;
  const int64_t H = w.layers.empty() ? c.num_heads : w.layers[0].heads;
  if (layer_inputs != nullptr && layer_inputs->size() < w.layers.size()) {
    return absl::InvalidArgumentError(absl::StrCat(layer_inputs->size(), " layer inputs for ", w.layers.size(), " layers"));
  }

  // Pages for the new tokens, all or nothing; which rank holds each row's latent rows.
  RowOwners owners;
  FERRY_RETURN_IF_ERROR(ReserveConversations(segments, seqs, lengths, rows, ctx.tp.world, &owners));

  // Host-side rows: tokens, positions, visible lengths, each row's copy of its page tables.
  const int64_t T_ = TableWidth(seqs);
  int64_t S = 0;  // score columns: the longest visible length
  std::vector<int32_t> tokens, n_keys(static_cast<size_t>(R)), key_table, latent_table;
  for (const ForwardSegment& seg : segments) tokens.insert(tokens.end(), seg.tokens.begin(), seg.tokens.end());
  for (int64_t r = 0; r < R; ++r) {
    n_keys[r] = static_cast<int32_t>(rows.pos[r] + 1);
    S = std::max<int64_t>(S, rows.pos[r] + 1);
  }
  RowTables(seqs, rows, T_, &key_table, &latent_table);
  const HeadRows head = PlanHeadRows(segments, rows);

  FERRY_RETURN_IF_ERROR(ops.Reset());
  FERRY_ASSIGN_OR_RETURN(std::vector<void*> sent,
                         ops.Send({{rows.pos.data(), rows.pos.size() * sizeof(int64_t)},
                                   {tokens.data(), tokens.size() * sizeof(int32_t)},
                                   {n_keys.data(), n_keys.size() * sizeof(int32_t)},
                                   {key_table.data(), key_table.size() * sizeof(int32_t)},
                                   {head.rows.data(), head.rows.size() * sizeof(int32_t)},
                                   {latent_table.data(), latent_table.size() * sizeof(int32_t)},
                                   {head.picked.samplers.data(),
                                    head.picked.samplers.size() * sizeof(kernels::RowSampler)}}));
  const int64_t* pos = static_cast<const int64_t*>(sent[0]);
  const int32_t* d_tokens = static_cast<const int32_t*>(sent[1]);
  const int32_t* d_nkeys = static_cast<const int32_t*>(sent[2]);
  const int32_t* d_key_table = static_cast<const int32_t*>(sent[3]);
  const int32_t* d_picked = static_cast<const int32_t*>(sent[4]);
  const int32_t* d_latent_table = static_cast<const int32_t*>(sent[5]);
  const auto* d_samplers = static_cast<const kernels::RowSampler*>(sent[6]);
  auto take = [&](int64_t n) { return ops.template Take<T>(n); };
  auto take32 = [&](int64_t n) { return ops.template Take<float>(n); };
  auto take_ids = [&](int64_t n) { return ops.template Take<int32_t>(n); };
  FERRY_ASSIGN_OR_RETURN(float* x, take32(R * D));  // the residual stream, float32 in every precision
  FERRY_ASSIGN_OR_RETURN(T* a, take(R * D));
  FERRY_ASSIGN_OR_RETURN(T* y, take(R * D));
  FERRY_ASSIGN_OR_RETURN(float* yf, take32(ctx.tp.world > 1 ? R * D : 0));  // a block's partial sum (TP)
  FERRY_ASSIGN_OR_RETURN(T* cq, take(R * QL));
  FERRY_ASSIGN_OR_RETURN(T* q, take(R * H * (N + P)));
  FERRY_ASSIGN_OR_RETURN(T* kvc, take(R * L));
  FERRY_ASSIGN_OR_RETURN(T* kpe, take(R * P));
  FERRY_ASSIGN_OR_RETURN(T* q_abs, take(R * H * L));
  FERRY_ASSIGN_OR_RETURN(T* q_pe, take(R * H * P));
  FERRY_ASSIGN_OR_RETURN(T* o_lat, take(R * H * L));
  const int64_t mla_ws_bytes = ops.MlaWorkspaceBytes(R, H);
  FERRY_ASSIGN_OR_RETURN(unsigned char* mla_ws, ops.template Take<unsigned char>(mla_ws_bytes));
  FERRY_ASSIGN_OR_RETURN(T* o_v, take(R * H * V));
  FERRY_ASSIGN_OR_RETURN(T* qi, take(R * Hi * Di));
  FERRY_ASSIGN_OR_RETURN(T* ki, take(R * Di));
  FERRY_ASSIGN_OR_RETURN(float* iw, take32(R * Hi));
  FERRY_ASSIGN_OR_RETURN(float* scores, take32(R * S));
  FERRY_ASSIGN_OR_RETURN(int32_t* top_ids, take_ids(R * K));
  FERRY_ASSIGN_OR_RETURN(int32_t* top_counts, take_ids(R));
  FERRY_ASSIGN_OR_RETURN(int32_t* sel, take_ids(R * K));
  FERRY_ASSIGN_OR_RETURN(int32_t* sel_offsets, take_ids(R + 1));
  FERRY_ASSIGN_OR_RETURN(auto ffn_scratch, ops.TakeFfnScratch(c, R));
  const float* inv_freq = w.inv_freq.template as<float>();

  auto record = [&](const float* x_dev) -> absl::Status {
    hidden->emplace_back(static_cast<size_t>(R * D));
    return ops.ToHost(hidden->back().data(), x_dev, static_cast<size_t>(R * D) * sizeof(float));
  };
  // A row-split block's output y (this rank's partial sum) into the residual stream: summed over
  // the ranks in float32 first under tensor parallelism.
  auto add_block = [&](const T* out) -> absl::Status {
    if (ctx.tp.world == 1) return ops.AddResidual(x, out, R * D);
    FERRY_RETURN_IF_ERROR(ops.ToF32(out, R * D, yf));
    FERRY_RETURN_IF_ERROR(ops.AllReduce(ctx.tp, yf, R * D));
    return ops.AddResidual(x, yf, R * D);
  };
  if (ctx.decisions != nullptr) FERRY_RETURN_IF_ERROR(ctx.decisions->BeginStep(R));
  if (hidden) hidden->clear();
  FERRY_RETURN_IF_ERROR(ops.Embed(w.embed.template as<T>(), c.vocab_size, D, d_tokens, R, x));
  if (hidden) FERRY_RETURN_IF_ERROR(record(x));
  bool have_selection = false;
  for (size_t l = 0; l < w.layers.size(); ++l) {
    const auto& Ly = w.layers[l];
    const DecisionTap tap{ctx.decisions, static_cast<int64_t>(l), ctx.ffn_inputs};
    if (layer_inputs != nullptr) {
      const std::vector<float>& in = (*layer_inputs)[l];
      if (static_cast<int64_t>(in.size()) != R * D) {
        return absl::InvalidArgumentError(absl::StrCat("layer ", l, " input holds ", in.size(), " values, not ", R * D));
      }
      FERRY_RETURN_IF_ERROR(ops.ToDevice(x, in.data(), in.size() * sizeof(float)));
    }
    FERRY_RETURN_IF_ERROR(ops.NormResidual(x, R, D, Ly.input_norm.template as<T>(), c.rms_norm_eps, a));

    // MLA. The products of a in one launch at decode sizes: c_q, c_kv, k_pe and the indexer's key.
    typename Ops::LinearProblem from_a[4] = {{a, D, Ly.q_a.template as<T>(), QL, cq},
                                             {a, D, Ly.kv_a_c.template as<T>(), L, kvc}};
    size_t n_from_a = 2;
    if (P > 0) from_a[n_from_a++] = {a, D, Ly.kv_a_pe.template as<T>(), P, kpe};
    if (Ly.has_indexer) from_a[n_from_a++] = {a, D, Ly.wk.template as<T>(), Di, ki};
    FERRY_RETURN_IF_ERROR(ops.LinearMany(std::span<const typename Ops::LinearProblem>(from_a, n_from_a), R));
    // cq = RMSNorm(a q_a^T) (eps 1e-6); q = cq q_b^T [R, H, N + P] (and the indexer's queries cq wq_b^T).
    FERRY_RETURN_IF_ERROR(ops.RmsNorm(cq, R, QL, Ly.q_a_norm.template as<T>(), 1e-6f, cq));
    if (Ly.has_indexer) {
      const typename Ops::LinearProblem from_cq[2] = {{cq, QL, Ly.q_b.template as<T>(), H * (N + P), q},
                                                      {cq, QL, Ly.wq_b.template as<T>(), Hi * Di, qi}};
      FERRY_RETURN_IF_ERROR(ops.LinearMany(std::span<const typename Ops::LinearProblem>(from_cq, 2), R));
    } else {
      FERRY_RETURN_IF_ERROR(ops.Linear(cq, R, QL, Ly.q_b.template as<T>(), H * (N + P), q));
    }
    // The new cache rows [RMSNorm(c) | RoPE(k_pe)], written at each row's position (where this
    // rank holds the row's latent rows: a row whose table here is empty is skipped).
    const auto latent = ops.View(*ctx.latent, static_cast<int64_t>(l), d_latent_table, T_);
    FERRY_RETURN_IF_ERROR(ops.RmsNorm(kvc, R, L, Ly.kv_a_norm.template as<T>(), 1e-6f, kvc));
    FERRY_RETURN_IF_ERROR(ops.WritePaged(kvc, R, L, L, 0, pos, latent));
    if (P > 0) {
      FERRY_RETURN_IF_ERROR(ops.Rope(kpe, R, 1, P, P, 0, P, pos, inv_freq));
      FERRY_RETURN_IF_ERROR(ops.WritePaged(kpe, R, P, P, L, pos, latent));
      // q_pe [R, H, P], dense, RoPE'd.
      FERRY_RETURN_IF_ERROR(ops.CopyRows(q + N, N + P, nullptr, q_pe, P, nullptr, R * H, P));
      FERRY_RETURN_IF_ERROR(ops.Rope(q_pe, R, H, H * P, P, 0, P, pos, inv_freq));
    }
    // q_abs = W_UK^T q_nope per head [R, H, L].
    FERRY_RETURN_IF_ERROR(
        ops.BatchedLinear(q, N + P, H * (N + P), R, N, Ly.w_uk_t.template as<T>(), L * N, L, q_abs, L, H * L, H));

    if (Ly.has_indexer) {
      // Keys: LayerNorm(a wk^T) (eps 1e-6), RoPE on the first P dims; cached per token.
      const auto keys = ops.View(*ctx.keys, static_cast<int64_t>(l), d_key_table, T_);
      FERRY_RETURN_IF_ERROR(
          ops.LayerNorm(ki, R, Di, Ly.k_norm_w.template as<T>(), Ly.k_norm_b.template as<T>(), 1e-6f, ki));
      if (P > 0) FERRY_RETURN_IF_ERROR(ops.Rope(ki, R, 1, Di, Di, 0, P, pos, inv_freq));
      FERRY_RETURN_IF_ERROR(ops.WritePaged(ki, R, Di, Di, 0, pos, keys));
      // Queries qi = RoPE(cq wq_b^T) [R, Hi, Di]; head weights (float32) = a weights_proj^T * Hi^-0.5.
      if (P > 0) FERRY_RETURN_IF_ERROR(ops.Rope(qi, R, Hi, Hi * Di, Di, 0, P, pos, inv_freq));
      FERRY_RETURN_IF_ERROR(ops.LinearToF32(a, R, D, Ly.weights_proj.template as<T>(), Hi,
                                            1.0f / std::sqrt(static_cast<float>(Hi)), iw));
      // Scores over every visible key of every row, then the top index_topk (all of them when
      // fewer are visible: the dense causal case), as the CSR selection the attention reads.
      FERRY_RETURN_IF_ERROR(ops.IndexerScores(qi, iw, R, Hi, Di, keys, d_nkeys,
                                              1.0f / std::sqrt(static_cast<float>(Di)), scores, S));
      FERRY_RETURN_IF_ERROR(ops.TopK(scores, R, S, d_nkeys, K, top_ids, top_counts));
      FERRY_RETURN_IF_ERROR(ops.TapTopK(tap, R, K, top_ids, top_counts));
      FERRY_RETURN_IF_ERROR(ops.CompactSelection(top_ids, top_counts, R, K, sel, sel_offsets));
      have_selection = true;
    } else if (!have_selection) {
      return absl::FailedPreconditionError("a shared indexer layer comes before any full one");
    }
    // A shared layer reuses the latest full layer's selection. Every row, prompt rows included,
    // runs the decode attention over its own selection; under the latent split the rows whose
    // latent rows live on another rank go through their owner (model/blocks/mla.h).
    const float scale = 1.0f / std::sqrt(static_cast<float>(N + P));
    if (owners.split) {
      FERRY_RETURN_IF_ERROR(ops.AttendSplit(c, H, q_abs, P > 0 ? q_pe : nullptr, R, owners, ctx.tp, latent, sel,
                                            sel_offsets, o_lat, ctx.split_stats));
    } else {
      FERRY_RETURN_IF_ERROR(ops.MlaDecode(q_abs, P > 0 ? q_pe : nullptr, R, H, L, P, latent, sel, sel_offsets, scale,
                                          o_lat, mla_ws, mla_ws_bytes));
    }
    // o_h = W_UV o_lat_h, then o_proj.
    FERRY_RETURN_IF_ERROR(ops.BatchedLinear(o_lat, L, H * L, R, L, Ly.w_uv.template as<T>(), V * L, V, o_v, V, H * V, H));
    FERRY_RETURN_IF_ERROR(ops.Linear(o_v, R, H * V, Ly.o_proj.template as<T>(), D, y));
    FERRY_RETURN_IF_ERROR(add_block(y));

    FERRY_RETURN_IF_ERROR(ops.NormResidual(x, R, D, Ly.post_norm.template as<T>(), c.rms_norm_eps, a));
    if (ctx.tp.world == 1) {
      FERRY_RETURN_IF_ERROR(ops.FfnAdd(Ly.ffn, c, a, R, ffn_scratch, y, x, tap));
    } else {
      FERRY_RETURN_IF_ERROR(ops.FfnAdd(Ly.ffn, c, a, R, ffn_scratch, y, yf, tap, /*assign=*/true));
      FERRY_RETURN_IF_ERROR(ops.AllReduce(ctx.tp, yf, R * D));
      FERRY_RETURN_IF_ERROR(ops.AddResidual(x, yf, R * D));
    }
    if (hidden && l + 1 < w.layers.size()) FERRY_RETURN_IF_ERROR(record(x));
  }

  // Final norm, then lm_head (float32 logits) on the head's rows; the greedy tokens picked where
  // the logits are.
  FERRY_RETURN_IF_ERROR(ops.NormResidual(x, R, D, w.norm.template as<T>(), c.rms_norm_eps, a));
  if (hidden) {
    FERRY_ASSIGN_OR_RETURN(float* normed, take32(R * D));
    FERRY_RETURN_IF_ERROR(ops.ToF32(a, R * D, normed));
    FERRY_RETURN_IF_ERROR(record(normed));
  }
  FERRY_ASSIGN_OR_RETURN(ForwardOutput out,
                         RunHead(ops, c, head, a, d_picked, d_samplers, w.lm_head, ffn_scratch.error));
  for (size_t s = 0; s < segments.size(); ++s) seqs[s]->Advance(static_cast<int64_t>(segments[s].tokens.size()));
  return out;
}

}  // namespace ferry::model
