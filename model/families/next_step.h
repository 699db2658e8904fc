// glm5_next's layer sequence (GLM-5.3-Flash's text model; docs/models.md), written once over
// a backend's ops as glm_moe_dsa's is (model/families/dsa_step.h): model/blocks/cpu_ops.h (float32 on the host,
// the reference) and model/cuda/cuda_ops.h (bf16 or float32 on one GPU). Four hyper-connected
// residual streams (mHC) around every block; KDA linear attention on most layers, NoPE MLA with
// the pooled indexer on the rest; SwiGLU with a clamp on every FFN, sigmoid-routed MoE. The
// backend supplies mHC's mixing, KDA's projections-to-output (so the CPU keeps its chunked
// prefill and the GPU its per-token recurrence) and the pooled keys; the sequence, the caches,
// the pooled selection, tensor parallelism's reductions and the latent split are here once.
#pragma once

#include <algorithm>
#include <cmath>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "model/families/causal_lm.h"
#include "model/checkpoint/checkpoint.h"
#include "model/checkpoint/config.h"
#include "model/cache/conversation.h"
#include "model/golden/decision_log.h"
#include "model/blocks/kda.h"
#include "model/blocks/mhc.h"
#include "model/blocks/mla.h"
#include "model/cache/paged_cache.h"
#include "model/blocks/pooled_indexer.h"
#include "model/cache/split_rows.h"
#include "model/families/step_head.h"
#include "model/families/step_rows.h"
#include "model/parallel/tensor_parallel.h"
#include "model/checkpoint/weights.h"

namespace ferry::model {

// One layer's weights as a backend holds them. Under tensor parallelism a rank holds its MLA or
// KDA heads and its slice of every FFN (model/blocks/mla.h, model/blocks/kda.h, model/blocks/ffn.h); mHC, norms and
// the indexer are replicated.
template <class Ops>
struct NextLayer {
  using W = typename Ops::WeightT;
  bool kda = false;
  int64_t heads = 0;  // this rank's KDA or MLA heads
  W input_norm, post_norm;
  typename Ops::Mhc hc_attn, hc_ffn;
  typename Ops::KdaLayer linear;  // KDA layers
  // NoPE MLA (model/blocks/mla.h's names) and, on full indexer layers, the pooled indexer.
  W q_a, q_a_norm, q_b, kv_a, kv_a_norm, w_uk_t, w_uv, o_proj;
  bool has_indexer = false;
  W wq_b, wk, k_norm_w, k_norm_b, weights_proj, pool_gate;
  typename Ops::Floats ape;  // float32 [kpool, Di]
  typename Ops::Ffn ffn;
};

template <class Ops>
struct NextWeights {
  typename Ops::WeightT embed, norm, lm_head;
  std::vector<NextLayer<Ops>> layers;
};

// The key arena's region of `kind` on layer l of glm5_next (the per-token key and pool gate, the
// pooled key one row a pool), and both arenas' regions.
enum class NextKeyRow { kKey = 0, kGate = 1, kPool = 2 };
inline int64_t NextKeyRegion(int64_t layer, NextKeyRow kind) { return 3 * layer + static_cast<int64_t>(kind); }
std::vector<PageRegion> NextKeyRegions(const ModelConfig& c);
std::vector<PageRegion> NextLatentRegions(const ModelConfig& c);

// Checks what the step supports of config c (the always-selected tail, NoPE, 1..8 streams,
// pools that share a page) for pages of `page_size` tokens. INVALID_ARGUMENT or UNIMPLEMENTED
// naming the config.
absl::Status CheckNextConfig(const ModelConfig& c, const std::string& where, int64_t page_size);

// Loads this rank's shard of every glm5_next weight through the CPU loaders' shape checks,
// handing each to the backend: upload(Weight) -> its weight, upload_floats(std::vector<float>)
// -> its float32 vector, vocab(loader, name) -> the [vocab, hidden] matrix `name`, mhc(MhcWeights)
// -> its mHC site, kda(KdaWeights) -> its KDA layer, load_ffn(loader, layer) -> the layer's FFN.
template <class Ops, class Upload, class UploadFloats, class Vocab, class MhcFn, class KdaFn, class LoadFfnFn>
absl::Status LoadNextWeights(const Checkpoint& ck, const ModelConfig& c, const TensorParallel& tp, Upload upload,
                             UploadFloats upload_floats, Vocab vocab, MhcFn mhc, KdaFn kda, LoadFfnFn load_ffn,
                             NextWeights<Ops>* w) {
  const int64_t D = c.hidden_size;
  FERRY_RETURN_IF_ERROR(CheckDivisible("linear_num_heads", c.linear_num_heads, tp.world));
  WeightLoader model(ck, c.weight_prefix);
  auto up = [&](typename Ops::WeightT* dst, absl::StatusOr<Weight> src) -> absl::Status {
    if (!src.ok()) return src.status();
    FERRY_ASSIGN_OR_RETURN(*dst, upload(std::move(*src)));
    return absl::OkStatus();
  };
  FERRY_ASSIGN_OR_RETURN(w->embed, vocab(model, "embed_tokens.weight"));
  FERRY_RETURN_IF_ERROR(up(&w->norm, model.Vector("norm.weight", D)));
  if (c.tie_word_embeddings) {
    FERRY_ASSIGN_OR_RETURN(w->lm_head, vocab(model, "embed_tokens.weight"));
  } else {
    FERRY_ASSIGN_OR_RETURN(w->lm_head, vocab(WeightLoader(ck, ""), "lm_head.weight"));
  }
  w->layers.resize(static_cast<size_t>(c.num_layers));
  for (int64_t i = 0; i < c.num_layers; ++i) {
    NextLayer<Ops>& Ly = w->layers[static_cast<size_t>(i)];
    WeightLoader lw(ck, c.LayerPrefix(i));
    FERRY_RETURN_IF_ERROR(up(&Ly.input_norm, lw.Vector("input_layernorm.weight", D)));
    FERRY_RETURN_IF_ERROR(up(&Ly.post_norm, lw.Vector("post_attention_layernorm.weight", D)));
    for (auto [dst, site] : {std::pair{&Ly.hc_attn, "hc_attn"}, std::pair{&Ly.hc_ffn, "hc_ffn"}}) {
      FERRY_ASSIGN_OR_RETURN(MhcWeights m, LoadMhc(lw, site, c));
      FERRY_ASSIGN_OR_RETURN(*dst, mhc(std::move(m)));
    }
    Ly.kda = c.layer_types[static_cast<size_t>(i)] == AttentionType::kKda;
    if (Ly.kda) {
      FERRY_ASSIGN_OR_RETURN(KdaWeights k, LoadKda(lw.Sub("self_attn."), c, tp));
      Ly.heads = k.heads;
      FERRY_ASSIGN_OR_RETURN(Ly.linear, kda(std::move(k)));
    } else {
      FERRY_ASSIGN_OR_RETURN(MlaWeights a, LoadMla(lw.Sub("self_attn."), c, c.rms_norm_eps, tp));
      Ly.heads = a.heads;
      FERRY_RETURN_IF_ERROR(up(&Ly.q_a, std::move(a.q_a)));
      FERRY_RETURN_IF_ERROR(up(&Ly.q_a_norm, std::move(a.q_a_norm)));
      FERRY_RETURN_IF_ERROR(up(&Ly.q_b, std::move(a.q_b)));
      FERRY_RETURN_IF_ERROR(up(&Ly.kv_a, std::move(a.kv_a)));
      FERRY_RETURN_IF_ERROR(up(&Ly.kv_a_norm, std::move(a.kv_a_norm)));
      FERRY_RETURN_IF_ERROR(up(&Ly.w_uk_t, std::move(a.w_uk_t)));
      FERRY_RETURN_IF_ERROR(up(&Ly.w_uv, std::move(a.w_uv)));
      FERRY_RETURN_IF_ERROR(up(&Ly.o_proj, std::move(a.o_proj)));
      Ly.has_indexer = c.indexer_types[static_cast<size_t>(i)] == IndexerType::kFull;
      if (Ly.has_indexer) {
        FERRY_ASSIGN_OR_RETURN(PooledIndexerWeights x, LoadPooledIndexer(lw.Sub("self_attn.indexer."), c));
        FERRY_RETURN_IF_ERROR(up(&Ly.wq_b, std::move(x.wq_b)));
        FERRY_RETURN_IF_ERROR(up(&Ly.wk, std::move(x.wk)));
        FERRY_RETURN_IF_ERROR(up(&Ly.k_norm_w, std::move(x.k_norm_w)));
        FERRY_RETURN_IF_ERROR(up(&Ly.k_norm_b, std::move(x.k_norm_b)));
        FERRY_RETURN_IF_ERROR(up(&Ly.weights_proj, std::move(x.weights_proj)));
        FERRY_RETURN_IF_ERROR(up(&Ly.pool_gate, std::move(x.gate)));
        FERRY_ASSIGN_OR_RETURN(Ly.ape, upload_floats(std::move(x.ape.data)));
      }
    }
    FERRY_ASSIGN_OR_RETURN(Ly.ffn, load_ffn(lw.Sub("mlp."), i));
  }
  return absl::OkStatus();
}

// What a step needs of its model besides the weights.
struct NextStepContext {
  const ModelConfig* config = nullptr;
  PageArena* keys = nullptr;
  PageArena* latent = nullptr;
  TensorParallel tp;
  OwnerSplitStats* split_stats = nullptr;
  DecisionLog* decisions = nullptr;  // null: off
  const KdaStateLayout* kda_layout = nullptr;
  int64_t kda_chunk = 64;  // the KDA chunk length of multi-token segments (0: token by token)
  FfnObserver* ffn_inputs = nullptr;  // null: off (CausalLM::set_ffn_observer)
};

// CausalLM::Forward's contract, with the hidden states when `hidden` is non-null: [0] the
// embeddings in every stream [rows, S, D], [i] the streams after layer i - 1, [num_layers] the
// final-normed stream mean [rows, D].
template <class Ops>
absl::StatusOr<ForwardOutput> NextStep(Ops& ops, const NextStepContext& ctx, const NextWeights<Ops>& w,
                                       std::span<const ForwardSegment> segments,
                                       std::vector<std::vector<float>>* hidden) {
  using T = typename Ops::Act;
  using LP = typename Ops::LinearProblem;
  const ModelConfig& c = *ctx.config;
  const TensorParallel& tp = ctx.tp;
  FERRY_RETURN_IF_ERROR(ValidateSegments(segments, c.vocab_size));
  FERRY_ASSIGN_OR_RETURN(std::vector<Conversation*> seqs, ConversationsOf(segments, *ctx.keys, "glm5_next"));
  std::vector<int64_t> lengths;
  for (size_t s = 0; s < seqs.size(); ++s) {
    if (!seqs[s]->has_state()) {
      return absl::ResourceExhaustedError(absl::StrCat("segment ", s, ": its conversation has no KDA state (the "
                                                       "allocation failed when it was created)"));
    }
    lengths.push_back(seqs[s]->length());
  }
  const StepRows rows = PlanStepRows(segments, lengths);
  const int64_t R = rows.count();
  // H and HK: this rank's MLA and KDA heads.
  const int64_t D = c.hidden_size, S = c.hc_mult, L = c.kv_lora_rank, N = c.qk_nope_head_dim, V = c.v_head_dim,
                QL = c.q_lora_rank, Hi = c.index_n_heads, Di = c.index_head_dim, kp = c.index_kpool,
                keep = c.index_topk / c.index_kpool, H = tp.Local(c.num_heads), HK = tp.Local(c.linear_num_heads);
  int64_t low_rank = 1;
  for (const auto& Ly : w.layers) {
    if (Ly.kda) low_rank = std::max(low_rank, Ops::KdaLowRank(Ly.linear));
  }

  // Pages for the new tokens, all or nothing; which rank holds each row's latent rows.
  RowOwners owners;
  FERRY_RETURN_IF_ERROR(ReserveConversations(segments, seqs, lengths, rows, tp.world, &owners));

  // Host-side rows: tokens, positions, page tables, visible pools and the selection's offsets.
  const int64_t T_ = TableWidth(seqs);
  int64_t S_pools = 1;
  std::vector<int32_t> tokens, key_table, latent_table, n_pools(static_cast<size_t>(R)),
      offsets(static_cast<size_t>(R) + 1, 0);
  RowTables(seqs, rows, T_, &key_table, &latent_table);
  for (const ForwardSegment& seg : segments) tokens.insert(tokens.end(), seg.tokens.begin(), seg.tokens.end());
  for (int64_t r = 0; r < R; ++r) {
    const int64_t t = rows.pos[r], n = (t + 1) / kp;
    n_pools[r] = static_cast<int32_t>(n);
    S_pools = std::max(S_pools, n);
    offsets[r + 1] = offsets[r] + static_cast<int32_t>(n <= keep ? t + 1 : keep * kp + (t + 1 - n * kp));
  }
  const HeadRows head = PlanHeadRows(segments, rows);
  // The head's unweighted mean of the streams: mixing weights 1 / S.
  const std::vector<float> mean_w(static_cast<size_t>(R * S), 1.0f / static_cast<float>(S));
  FERRY_RETURN_IF_ERROR(ops.Reset());
  FERRY_ASSIGN_OR_RETURN(std::vector<void*> sent,
                         ops.Send({{rows.pos.data(), rows.pos.size() * sizeof(int64_t)},
                                   {tokens.data(), tokens.size() * sizeof(int32_t)},
                                   {key_table.data(), key_table.size() * sizeof(int32_t)},
                                   {n_pools.data(), n_pools.size() * sizeof(int32_t)},
                                   {offsets.data(), offsets.size() * sizeof(int32_t)},
                                   {head.rows.data(), head.rows.size() * sizeof(int32_t)},
                                   {mean_w.data(), mean_w.size() * sizeof(float)},
                                   {latent_table.data(), latent_table.size() * sizeof(int32_t)},
                                   {head.picked.samplers.data(),
                                    head.picked.samplers.size() * sizeof(kernels::RowSampler)}}));
  const int64_t* pos = static_cast<const int64_t*>(sent[0]);
  const int32_t* d_tokens = static_cast<const int32_t*>(sent[1]);
  const int32_t* d_key_table = static_cast<const int32_t*>(sent[2]);
  const int32_t* d_npools = static_cast<const int32_t*>(sent[3]);
  const int32_t* d_offsets = static_cast<const int32_t*>(sent[4]);
  const int32_t* d_picked = static_cast<const int32_t*>(sent[5]);
  const float* d_mean_w = static_cast<const float*>(sent[6]);
  const int32_t* d_latent_table = static_cast<const int32_t*>(sent[7]);
  const auto* d_samplers = static_cast<const kernels::RowSampler*>(sent[8]);
  auto take = [&](int64_t n) { return ops.template Take<T>(n); };
  auto take32 = [&](int64_t n) { return ops.template Take<float>(n); };
  auto take_ids = [&](int64_t n) { return ops.template Take<int32_t>(n); };
  FERRY_ASSIGN_OR_RETURN(float* h, take32(R * S * D));  // the streams, float32 in every precision
  FERRY_ASSIGN_OR_RETURN(float* u, take32(R * D));
  FERRY_ASSIGN_OR_RETURN(float* yf, take32(R * D));
  FERRY_ASSIGN_OR_RETURN(T* a, take(R * D));
  FERRY_ASSIGN_OR_RETURN(T* y, take(R * D));
  FERRY_ASSIGN_OR_RETURN(auto mix, ops.TakeMhcMix(c, R));
  FERRY_ASSIGN_OR_RETURN(auto kda_scratch, ops.TakeKdaScratch(c, R, HK, low_rank));
  FERRY_ASSIGN_OR_RETURN(T* cq, take(R * QL));
  FERRY_ASSIGN_OR_RETURN(T* q, take(R * H * N));
  FERRY_ASSIGN_OR_RETURN(T* kvc, take(R * L));
  FERRY_ASSIGN_OR_RETURN(T* q_abs, take(R * H * L));
  FERRY_ASSIGN_OR_RETURN(T* o_lat, take(R * H * L));
  const int64_t mla_ws_bytes = ops.MlaWorkspaceBytes(R, H);
  FERRY_ASSIGN_OR_RETURN(unsigned char* mla_ws, ops.template Take<unsigned char>(mla_ws_bytes));
  FERRY_ASSIGN_OR_RETURN(T* o_v, take(R * H * V));
  FERRY_ASSIGN_OR_RETURN(T* qi, take(R * Hi * Di));
  FERRY_ASSIGN_OR_RETURN(T* ki, take(R * Di));
  FERRY_ASSIGN_OR_RETURN(T* gk, take(R * Di));
  FERRY_ASSIGN_OR_RETURN(float* iw, take32(R * Hi));
  FERRY_ASSIGN_OR_RETURN(float* scores, take32(R * S_pools));
  FERRY_ASSIGN_OR_RETURN(int32_t* top_ids, take_ids(R * std::max<int64_t>(keep, 1)));
  FERRY_ASSIGN_OR_RETURN(int32_t* top_counts, take_ids(R));
  FERRY_ASSIGN_OR_RETURN(int32_t* sel, take_ids(offsets[R]));
  FERRY_ASSIGN_OR_RETURN(auto ffn_scratch, ops.TakeFfnScratch(c, R));
  // Each conversation's rows in the step and its KDA state.
  KdaSegments kda_rows;
  kda_rows.layout = ctx.kda_layout;
  kda_rows.chunk = ctx.kda_chunk;
  for (size_t s = 0; s < segments.size(); ++s) {
    kda_rows.begin.push_back(rows.seg_begin[s]);
    kda_rows.n.push_back(static_cast<int64_t>(segments[s].tokens.size()));
    kda_rows.pos0.push_back(lengths[s]);
    kda_rows.state.push_back(static_cast<float*>(seqs[s]->state()));
  }

  auto record = [&](const float* x, int64_t n) -> absl::Status {
    hidden->emplace_back(static_cast<size_t>(n));
    return ops.ToHost(hidden->back().data(), x, static_cast<size_t>(n) * sizeof(float));
  };
  // A block's output y (this rank's partial sum) into the streams: summed over the ranks in
  // float32 first under tensor parallelism, then mHC's post-mixing.
  auto mix_out = [&](const T* out) -> absl::Status {
    if (tp.world == 1) return ops.MhcOut(mix, c, out, R, h);
    FERRY_RETURN_IF_ERROR(ops.ToF32(out, R * D, yf));
    FERRY_RETURN_IF_ERROR(ops.AllReduce(tp, yf, R * D));
    return ops.MhcOut(mix, c, yf, R, h);
  };
  if (ctx.decisions != nullptr) FERRY_RETURN_IF_ERROR(ctx.decisions->BeginStep(R));
  if (hidden) hidden->clear();
  // Every stream starts as the embedding.
  FERRY_RETURN_IF_ERROR(ops.Embed(w.embed.template as<T>(), c.vocab_size, D, d_tokens, R, u));
  FERRY_RETURN_IF_ERROR(ops.MhcStreams(u, R, S, D, h));
  if (hidden) FERRY_RETURN_IF_ERROR(record(h, R * S * D));

  bool have_selection = false;
  for (size_t l = 0; l < w.layers.size(); ++l) {
    const NextLayer<Ops>& Ly = w.layers[l];
    const DecisionTap tap{ctx.decisions, static_cast<int64_t>(l), ctx.ffn_inputs};
    FERRY_RETURN_IF_ERROR(ops.MhcIn(Ly.hc_attn, c, h, R, Ly.input_norm.template as<T>(), mix, u, a));
    if (Ly.kda) {
      FERRY_RETURN_IF_ERROR(ops.Kda(Ly.linear, static_cast<int64_t>(l), c, a, R, kda_rows, kda_scratch, y));
    } else {
      // NoPE MLA with the pooled indexer: the products of a in one launch at decode sizes (the
      // indexer's too), then those of cq.
      const int64_t Hl = Ly.heads;
      if (Ly.has_indexer) {
        const LP from_a[4] = {{a, D, Ly.q_a.template as<T>(), QL, cq},
                              {a, D, Ly.kv_a.template as<T>(), L, kvc},
                              {a, D, Ly.wk.template as<T>(), Di, ki},
                              {a, D, Ly.pool_gate.template as<T>(), Di, gk}};
        FERRY_RETURN_IF_ERROR(ops.LinearMany(std::span<const LP>(from_a, 4), R));
        FERRY_RETURN_IF_ERROR(ops.RmsNorm(cq, R, QL, Ly.q_a_norm.template as<T>(), c.rms_norm_eps, cq));
        const LP from_cq[2] = {{cq, QL, Ly.q_b.template as<T>(), Hl * N, q},
                               {cq, QL, Ly.wq_b.template as<T>(), Hi * Di, qi}};
        FERRY_RETURN_IF_ERROR(ops.LinearMany(std::span<const LP>(from_cq, 2), R));
      } else {
        const LP from_a[2] = {{a, D, Ly.q_a.template as<T>(), QL, cq}, {a, D, Ly.kv_a.template as<T>(), L, kvc}};
        FERRY_RETURN_IF_ERROR(ops.LinearMany(std::span<const LP>(from_a, 2), R));
        FERRY_RETURN_IF_ERROR(ops.RmsNorm(cq, R, QL, Ly.q_a_norm.template as<T>(), c.rms_norm_eps, cq));
        FERRY_RETURN_IF_ERROR(ops.Linear(cq, R, QL, Ly.q_b.template as<T>(), Hl * N, q));
      }
      // The new latent rows RMSNorm(c), written where this rank holds the row's latent rows.
      const auto latent = ops.View(*ctx.latent, static_cast<int64_t>(l), d_latent_table, T_);
      FERRY_RETURN_IF_ERROR(ops.RmsNorm(kvc, R, L, Ly.kv_a_norm.template as<T>(), c.rms_norm_eps, kvc));
      FERRY_RETURN_IF_ERROR(ops.WritePaged(kvc, R, L, L, 0, pos, latent));
      // q_abs = W_UK^T q_nope per head [R, H, L].
      FERRY_RETURN_IF_ERROR(
          ops.BatchedLinear(q, N, Hl * N, R, N, Ly.w_uk_t.template as<T>(), L * N, L, q_abs, L, Hl * L, Hl));
      if (Ly.has_indexer) {
        const int64_t li = static_cast<int64_t>(l);
        const auto keys = ops.View(*ctx.keys, NextKeyRegion(li, NextKeyRow::kKey), d_key_table, T_);
        const auto gates = ops.View(*ctx.keys, NextKeyRegion(li, NextKeyRow::kGate), d_key_table, T_);
        const auto pools = ops.View(*ctx.keys, NextKeyRegion(li, NextKeyRow::kPool), d_key_table, T_);
        FERRY_RETURN_IF_ERROR(
            ops.LayerNorm(ki, R, Di, Ly.k_norm_w.template as<T>(), Ly.k_norm_b.template as<T>(), 1e-6f, ki));
        FERRY_RETURN_IF_ERROR(ops.WritePaged(ki, R, Di, Di, 0, pos, keys));
        FERRY_RETURN_IF_ERROR(ops.WritePaged(gk, R, Di, Di, 0, pos, gates));
        // The pools each conversation completes in this step (earlier ones are cached).
        for (size_t s = 0; s < segments.size(); ++s) {
          const int64_t p0 = lengths[s] / kp;
          const int64_t p1 = (lengths[s] + static_cast<int64_t>(segments[s].tokens.size())) / kp;
          FERRY_RETURN_IF_ERROR(
              ops.PooledKeys(keys, gates, pools, rows.seg_begin[s], p0, p1, kp, Ly.ape.template as<float>()));
        }
        // Scores over every complete pool of every row, the best index_topk / kpool pools,
        // expanded to their tokens with the unscored tail (every token when few pools exist).
        FERRY_RETURN_IF_ERROR(ops.LinearToF32(a, R, D, Ly.weights_proj.template as<T>(), Hi,
                                              1.0f / std::sqrt(static_cast<float>(Hi)), iw));
        FERRY_RETURN_IF_ERROR(ops.IndexerScores(qi, iw, R, Hi, Di, pools, d_npools,
                                                1.0f / std::sqrt(static_cast<float>(Di)), scores, S_pools));
        FERRY_RETURN_IF_ERROR(ops.TopK(scores, R, S_pools, d_npools, keep, top_ids, top_counts));
        FERRY_RETURN_IF_ERROR(ops.TapTopK(tap, R, keep, top_ids, top_counts));
        FERRY_RETURN_IF_ERROR(ops.ExpandPoolSelection(top_ids, keep, pos, R, kp, d_offsets, sel));
        have_selection = true;
      } else if (!have_selection) {
        return absl::FailedPreconditionError("a shared indexer layer comes before any full one");
      }
      // Every row, prompt rows included, attends over its own selection; under the latent split
      // the rows whose latent rows live on another rank go through their owner.
      if (owners.split) {
        FERRY_RETURN_IF_ERROR(ops.AttendSplit(c, Hl, q_abs, nullptr, R, owners, tp, latent, sel, d_offsets, o_lat,
                                              ctx.split_stats));
      } else {
        FERRY_RETURN_IF_ERROR(ops.MlaDecode(q_abs, nullptr, R, Hl, L, 0, latent, sel, d_offsets,
                                            1.0f / std::sqrt(static_cast<float>(N)), o_lat, mla_ws, mla_ws_bytes));
      }
      FERRY_RETURN_IF_ERROR(
          ops.BatchedLinear(o_lat, L, Hl * L, R, L, Ly.w_uv.template as<T>(), V * L, V, o_v, V, Hl * V, Hl));
      FERRY_RETURN_IF_ERROR(ops.Linear(o_v, R, Hl * V, Ly.o_proj.template as<T>(), D, y));
    }
    FERRY_RETURN_IF_ERROR(mix_out(y));

    FERRY_RETURN_IF_ERROR(ops.MhcIn(Ly.hc_ffn, c, h, R, Ly.post_norm.template as<T>(), mix, u, a));
    FERRY_RETURN_IF_ERROR(ops.FfnAdd(Ly.ffn, c, a, R, ffn_scratch, y, yf, tap, /*assign=*/true));
    FERRY_RETURN_IF_ERROR(ops.AllReduce(tp, yf, R * D));
    FERRY_RETURN_IF_ERROR(ops.MhcOut(mix, c, static_cast<const float*>(yf), R, h));
    if (hidden && l + 1 < w.layers.size()) FERRY_RETURN_IF_ERROR(record(h, R * S * D));
  }

  // Head: the unweighted mean of the streams, the final norm, lm_head (float32 logits) on the
  // head's rows; the greedy tokens picked where the logits are.
  FERRY_RETURN_IF_ERROR(ops.StreamMeanNorm(h, d_mean_w, R, S, D, w.norm.template as<T>(), c.rms_norm_eps, u, a));
  if (hidden) {
    FERRY_RETURN_IF_ERROR(ops.ToF32(a, R * D, u));
    FERRY_RETURN_IF_ERROR(record(u, R * D));
  }
  FERRY_ASSIGN_OR_RETURN(ForwardOutput out,
                         RunHead(ops, c, head, a, d_picked, d_samplers, w.lm_head, ffn_scratch.error));
  for (size_t s = 0; s < segments.size(); ++s) seqs[s]->Advance(static_cast<int64_t>(segments[s].tokens.size()));
  return out;
}

}  // namespace ferry::model
