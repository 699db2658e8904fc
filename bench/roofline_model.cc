// Sections 2 (prefill MoE) and 3 (whole decode steps and prefills) through the real CUDA model
// code (model/cuda) at a real config's widths, with a few layers and random weights in memory
// (bench/random_checkpoint.h).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "bench/random_checkpoint.h"
#include "bench/roofline.h"
#include "bench/roofline_cuda.h"
#include "common/status.h"
#include "kernels/cuda/linear_fp8.h"
#include "kernels/cuda/ops.h"
#include "model/cuda/ffn_cuda.h"
#include "model/cuda/glm5_next_cuda.h"
#include "model/cuda/glm_moe_dsa_cuda.h"
#include "model/checkpoint/weights.h"

namespace ferry::bench {

namespace cu = ferry::kernels::cuda;
using model::AttentionType;
using model::IndexerType;
using model::MlpType;
using model::ModelConfig;

namespace {

// What a step reads and computes, from the config (docs/models.md's tensors; bf16 weights
// unless named float32, as the CUDA model holds them).
struct Counts {
  double always_bytes = 0;  // weights every step reads whatever its rows: attention, indexer,
                            // norms, dense MLPs, routers, shared experts, mHC (lm_head apart)
  double always_elems = 0;  // of those, the matrix elements each token multiplies (FLOPs / 2)
  double expert_elems = 0;  // one routed expert: 3 x hidden x moe_inter
  double expert_weight_bytes = 2;  // bytes a routed expert's weight (NVFP4 experts: 0.5625)
  double dense_mlp_elems = 0;      // of always_elems, the dense layers' MLPs'
  // Counts of a model whose routed experts (and, NVFP4, dense MLPs) take `bytes` a weight.
  void SetQuantizedBytes(double bytes, bool dense_mlps) {
    if (dense_mlps) always_bytes -= (2 - bytes) * dense_mlp_elems;
    expert_weight_bytes = bytes;
  }
  int64_t moe_layers = 0;
  double lm_head_elems = 0;  // vocab x hidden
  // Per-token state and cache widths.
  int64_t mla_layers = 0, full_index_layers = 0, kda_layers = 0;
  double cache_row_bytes = 0;  // bytes one token adds to the paged cache over all layers
};

Counts Count(const ModelConfig& c) {
  Counts n;
  const double D = c.hidden_size, H = c.num_heads, L = c.kv_lora_rank, N = c.qk_nope_head_dim, P = c.qk_rope_head_dim,
               V = c.v_head_dim, QL = c.q_lora_rank, Hi = c.index_n_heads, Di = c.index_head_dim, S = c.hc_mult,
               M = (2 + S) * S;
  const bool next = c.family == model::Family::kGlm5Next;
  for (int64_t i = 0; i < c.num_layers; ++i) {
    double mats = 0, f32 = 0, other = 2 * D;   // other: bf16 vectors (norms)
    if (next) f32 += 2 * (M * S * D + M + 3);  // mHC fn, base, scale (float32 in both precisions)
    if (c.layer_types[i] == AttentionType::kKda) {
      const double Hl = c.linear_num_heads, d = c.linear_head_dim, C = Hl * d, r = d;
      mats += 3 * C * D + 2 * (r * D + C * r) + Hl * D + D * C;
      f32 += 3 * C * c.linear_conv_kernel_dim + Hl + C + d;
      ++n.kda_layers;
    } else {
      mats += QL * D + H * (N + P) * QL + (L + P) * D + H * L * N + H * V * L + D * H * V;
      other += QL + L;
      n.cache_row_bytes += 2 * (L + P);
      ++n.mla_layers;
      if (c.indexer_types[i] == IndexerType::kFull) {
        mats += Hi * Di * QL + Di * D + Hi * D;
        other += 2 * Di;
        n.cache_row_bytes += 2 * Di;
        if (next) {
          mats += Di * D;                   // pool gate
          f32 += c.index_kpool * Di;        // ape
          n.cache_row_bytes += 2 * 2 * Di;  // gates, and pooled keys (one per kpool tokens, counted per token)
        }
        ++n.full_index_layers;
      }
    }
    if (c.mlp_types[i] == MlpType::kDense) {
      mats += 3 * D * c.intermediate_size;
      n.dense_mlp_elems += 3 * D * c.intermediate_size;
    } else {
      mats += c.n_routed_experts * D + 3 * D * c.moe_intermediate_size * c.n_shared_experts;
      f32 += c.n_routed_experts;
      ++n.moe_layers;
    }
    n.always_elems += mats + (next ? 2 * M * S * D : 0);
    n.always_bytes += 2 * (mats + other) + 4 * f32;
  }
  n.always_bytes += 2 * D;  // final norm
  n.expert_elems = 3 * D * c.moe_intermediate_size;
  n.lm_head_elems = static_cast<double>(c.vocab_size) * D;
  return n;
}

// Expected distinct experts a layer runs for `rows` rows of uniform top-k routing.
double DistinctExperts(const ModelConfig& c, int64_t rows) {
  const double E = c.n_routed_experts, K = c.num_experts_per_tok;
  if (rows == 1) return K;
  return E * (1 - std::pow(1 - K / E, static_cast<double>(rows)));
}

// Attention-side FLOPs and cache bytes of one row at position `pos` (sees pos + 1 tokens).
struct RowCost {
  double flops = 0, bytes = 0;
};
RowCost AttentionRow(const ModelConfig& c, const Counts& n, int64_t pos) {
  RowCost r;
  const double H = c.num_heads, L = c.kv_lora_rank, P = c.qk_rope_head_dim, W = L + P, Hi = c.index_n_heads,
               Di = c.index_head_dim;
  const int64_t seen = pos + 1, kp = std::max<int64_t>(c.index_kpool, 1);
  const double sel = static_cast<double>(std::min<int64_t>(seen, c.index_topk));
  const double keys = c.family == model::Family::kGlm5Next ? static_cast<double>(seen / kp) : static_cast<double>(seen);
  r.flops += n.mla_layers * H * sel * (2 * W + 2 * L) + n.full_index_layers * keys * Hi * (2 * Di + 2);
  r.bytes += n.mla_layers * sel * 2 * W + n.full_index_layers * keys * 2 * Di;
  if (n.kda_layers > 0) {
    const double Hl = c.linear_num_heads, d = c.linear_head_dim;
    r.flops += n.kda_layers * 7 * Hl * d * d;      // decay, S^T k, the rank-1 update, S^T q
    r.bytes += n.kda_layers * 2 * Hl * d * d * 4;  // the float32 state read and written
  }
  return r;
}

std::string Ctx(int64_t v) { return v % 1024 == 0 ? absl::StrCat(v / 1024, "k") : absl::StrCat(v); }

absl::StatusOr<std::unique_ptr<model::CausalLM>> LoadModel(const RandomCheckpoint& rc, int64_t page_size) {
  model::CacheOptions cache;
  cache.page_size = page_size;
  const ModelConfig& c = rc.config();
  if (c.family == model::Family::kGlmMoeDsa) {
    FERRY_ASSIGN_OR_RETURN(auto m, model::cuda::GlmMoeDsaCuda::Load(rc.checkpoint(), c, cache));
    return std::unique_ptr<model::CausalLM>(std::move(m));
  }
  FERRY_ASSIGN_OR_RETURN(auto m, model::cuda::Glm5NextCuda::Load(rc.checkpoint(), c, cache));
  return std::unique_ptr<model::CausalLM>(std::move(m));
}

// Wall-clock milliseconds of each of `reps` calls after `warmup` (fn synchronizes itself).
absl::StatusOr<std::vector<double>> TimeWall(const std::function<absl::Status()>& fn, int warmup, int reps) {
  for (int i = 0; i < warmup; ++i) FERRY_RETURN_IF_ERROR(fn());
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    FERRY_RETURN_IF_ERROR(cu::Synchronize());
    const auto t0 = std::chrono::steady_clock::now();
    FERRY_RETURN_IF_ERROR(fn());
    FERRY_RETURN_IF_ERROR(cu::Synchronize());
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return ms;
}

std::vector<int32_t> RandomTokens(std::mt19937_64& rng, int64_t n, int64_t vocab) {
  std::uniform_int_distribution<int32_t> d(0, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int32_t& x : t) x = d(rng);
  return t;
}

// The prefill MoE of the first sparse layer: model::cuda::FfnAdd on `tokens` rows. `rc` with FP8
// experts (RandomCheckpoint's ExpertFormat::kFp8): FfnAdd's W8A8 dispatch, rows named so.
void MoeRows(const std::string& name, const RandomCheckpoint& rc, const Options& o, Table* moe) {
  const ModelConfig& c = rc.config();
  int64_t layer = -1;
  for (int64_t i = 0; i < c.num_layers && layer < 0; ++i) {
    if (c.mlp_types[i] == MlpType::kSparse) layer = i;
  }
  auto fail = [&](const std::string& what, const absl::Status& st) {
    moe->rows.push_back(Row::Failed(absl::StrCat(name, " ", what), std::string(st.message())));
  };
  if (layer < 0) return;
  int64_t bytes = 0;
  absl::StatusOr<model::cuda::CudaFfn> f =
      model::cuda::LoadFfnCuda(model::WeightLoader(rc.checkpoint(), c.LayerPrefix(layer)).Sub("mlp."), c, layer,
                               model::cuda::Precision::kBf16, model::TensorParallel{}, &bytes);
  if (!f.ok()) return fail("load", f.status());
  const bool fp8 = rc.experts() == ExpertFormat::kFp8;
  if (fp8 && !f->fp8_experts) {
    return fail("MoE, FP8 experts", absl::FailedPreconditionError("the experts were not kept in FP8 (the device "
                                                                  "lacks the FP8 kernels)"));
  }
  const double D = c.hidden_size, E = c.n_routed_experts, K = c.num_experts_per_tok, MI = c.moe_intermediate_size,
               SH = c.n_shared_experts;
  // Two routings of the same tokens: the random checkpoint's own (its correction bias, +-0.087,
  // outweighs the spread of the top scores: about a sixth of the experts get no row and a sixth
  // more than 128) and a balanced one (the bias zeroed, as a trained router's correction bias
  // aims for: the rows an expert about binomial). Bytes count the experts the routing chose.
  for (const bool balanced : {false, true}) {
    if (balanced) {
      absl::Status st = cu::DeviceFill(f->bias.get(), 0, static_cast<size_t>(E) * sizeof(float));
      if (!st.ok()) return fail("zeroing the router bias", st);
    }
    for (int64_t T : o.prefill_tokens) {
      const std::string case_name = absl::StrCat(name, " MoE ", T, " tokens", fp8 ? ", FP8 experts (W8A8)" : "",
                                                 balanced ? ", balanced routing" : "");
      model::cuda::Workspace ws;
      absl::StatusOr<model::cuda::FfnScratch<uint16_t>> s = model::cuda::TakeFfnScratch<uint16_t>(ws, c, T);
      absl::StatusOr<uint16_t*> a = ws.Take<uint16_t>(T * c.hidden_size);
      absl::StatusOr<uint16_t*> y = ws.Take<uint16_t>(T * c.hidden_size);
      absl::StatusOr<float*> x = ws.Take<float>(T * c.hidden_size);
      absl::Status st = !s.ok() ? s.status() : !a.ok() ? a.status() : !y.ok() ? y.status() : x.status();
      if (st.ok()) st = FillRandomBf16(*a, T * c.hidden_size, o.seed + 30, 1.0f);
      if (st.ok()) st = FillRandomF32(*x, T * c.hidden_size, o.seed + 31, 1.0f);
      if (!st.ok()) {
        fail(case_name, st);
        continue;
      }
      absl::StatusOr<std::vector<double>> ms = TimeEvents(
          [&] { return model::cuda::FfnAdd<uint16_t>(*f, c, *a, T, *s, *y, *x); }, std::min(o.warmup, 2), o.reps);
      // The routing the timed calls ran (every call routes the same input).
      std::vector<int32_t> chosen(static_cast<size_t>(T * K));
      const absl::Status got =
          ms.ok() ? cu::CopyToHost(chosen.data(), s->experts, chosen.size() * sizeof(int32_t)) : ms.status();
      if (!got.ok()) {
        fail(case_name, got);
        continue;
      }
      std::vector<int64_t> rows(static_cast<size_t>(E), 0);
      for (int32_t e : chosen) rows[static_cast<size_t>(e)] += 1;
      const int64_t touched = std::count_if(rows.begin(), rows.end(), [](int64_t n) { return n > 0; });
      const int64_t most = *std::max_element(rows.begin(), rows.end());
      Row r(case_name);
      r.flops = 2.0 * T * D * (3 * MI * (K + SH) + E);
      // The chosen experts' and the shared expert's weights once (FP8: one byte a weight and a
      // float32 scale a 128 x 128 block), the router, the input read, the float32 residual read
      // and written.
      const double weight_bytes = fp8 ? 1.0 + 4.0 / (128 * 128) : 2.0;
      r.bytes = weight_bytes * (static_cast<double>(touched) + SH) * 3 * D * MI + 2.0 * E * D + 2.0 * T * D +
                8.0 * T * D;
      r.SetTimes(*ms);
      r.target = {TargetKind::kMatrix, 0.40};
      r.note = absl::StrFormat("%lld of %.0f experts with rows, at most %lld (%.0f on average)",
                               static_cast<long long>(touched), E, static_cast<long long>(most), T * K / E);
      moe->rows.push_back(r);
    }
  }
}

void PrefillRows(const std::string& name, model::CausalLM& m, const Counts& n, const Options& o, Table* prefill) {
  const ModelConfig& c = m.config();
  std::mt19937_64 rng(o.seed + 40);
  for (int64_t T : o.prefill_tokens) {
    const std::string case_name = absl::StrCat(name, " prefill ", T);
    const std::vector<int32_t> tokens = RandomTokens(rng, T, c.vocab_size);
    absl::StatusOr<std::vector<double>> ms = TimeWall(
        [&]() -> absl::Status {
          std::unique_ptr<model::SequenceState> seq = m.NewSequence();
          model::ForwardSegment seg{seq.get(), tokens, false};
          return m.Forward({&seg, 1}).status();
        },
        1, o.reps);
    if (!ms.ok()) {
      prefill->rows.push_back(Row::Failed(case_name, std::string(ms.status().message())));
      continue;
    }
    Row r(case_name);
    double att_flops = 0;
    for (int64_t t = 0; t < T; ++t) att_flops += AttentionRow(c, n, t).flops;
    r.flops = T * 2.0 * (n.always_elems + n.moe_layers * c.num_experts_per_tok * n.expert_elems) + att_flops +
              2.0 * n.lm_head_elems;
    // Fewest bytes: every weight once (every expert runs at these lengths), the new cache rows.
    r.bytes = n.always_bytes + n.moe_layers * DistinctExperts(c, T) * n.expert_weight_bytes * n.expert_elems + 2 * n.lm_head_elems +
              T * n.cache_row_bytes;
    r.SetTimes(*ms);
    r.note = absl::StrFormat("%.0f tokens/s; attention + indexer %.0f%% of the FLOPs", T / (r.ms * 1e-3),
                             100 * att_flops / r.flops);
    prefill->rows.push_back(r);
  }
}

void DecodeRows(const std::string& name, model::CausalLM& m, const Counts& n, const Options& o, Table* decode) {
  const ModelConfig& c = m.config();
  std::mt19937_64 rng(o.seed + 50);
  for (int64_t ctx : o.decode_contexts) {
    auto fail = [&](const std::string& what, const absl::Status& st) {
      decode->rows.push_back(Row::Failed(absl::StrCat(name, " ", what), std::string(st.message())));
    };
    // The context: one conversation filled by chunked prefill; batch rows are forks of it (whole
    // pages shared: their cache reads may hit L2, which the weights, the bulk, cannot).
    std::unique_ptr<model::SequenceState> base = m.NewSequence();
    const auto t0 = std::chrono::steady_clock::now();
    absl::Status st;
    for (int64_t done = 0; done < ctx && st.ok();) {
      const int64_t len = std::min(o.prefill_chunk, ctx - done);
      const std::vector<int32_t> tokens = RandomTokens(rng, len, c.vocab_size);
      model::ForwardSegment seg{base.get(), tokens, false};
      st = m.Forward({&seg, 1}).status();
      done += len;
    }
    if (!st.ok()) {
      fail(absl::StrCat("fill ctx ", Ctx(ctx)), st);
      continue;
    }
    const double fill_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (int64_t B : o.batches) {
      const std::string case_name = absl::StrCat(name, " decode b", B, " ctx", Ctx(ctx));
      std::vector<std::unique_ptr<model::SequenceState>> rows;
      for (int64_t i = 0; i < B && st.ok(); ++i) {
        absl::StatusOr<std::unique_ptr<model::SequenceState>> f = base->ForkAt(base->length());
        if (!f.ok())
          st = f.status();
        else
          rows.push_back(std::move(*f));
      }
      if (!st.ok()) {
        fail(case_name, st);
        st = absl::OkStatus();
        continue;
      }
      std::vector<int32_t> tokens = RandomTokens(rng, B, c.vocab_size);
      // The logits of every row back to the host; at the first context also the serving path's
      // picks on the device (greedy, and a sampled pick with log-probabilities), ids back alone.
      kernels::RowSampler warm;
      warm.temperature = 0.7f;
      warm.top_p = 0.9f;
      warm.top_logprobs = 5;
      warm.uniform = 0.5;
      std::vector<std::pair<std::string, std::optional<kernels::RowSampler>>> variants = {{"", std::nullopt}};
      if (ctx == o.decode_contexts.front()) {
        variants.push_back({" greedy on device", kernels::RowSampler{}});
        variants.push_back({" T0.7 top-p 0.9 5 logprobs on device", warm});
      }
      for (const auto& [suffix, sampler] : variants) {
        absl::StatusOr<std::vector<double>> ms = TimeWall(
            [&]() -> absl::Status {
              std::vector<model::ForwardSegment> segs;
              for (int64_t i = 0; i < B; ++i) segs.push_back({rows[i].get(), {&tokens[i], 1}, false, sampler});
              return m.Forward(segs).status();
            },
            std::min(o.warmup, 2), o.reps);
        if (!ms.ok()) {
          fail(case_name + suffix, ms.status());
          continue;
        }
        Row r(case_name + suffix);
        const RowCost row = AttentionRow(c, n, ctx);
        const double experts = n.moe_layers * DistinctExperts(c, B) * n.expert_weight_bytes * n.expert_elems;
        const double weights = n.always_bytes + experts + 2 * n.lm_head_elems;
        r.bytes = weights + B * (row.bytes + n.cache_row_bytes + 4.0 * c.vocab_size + 2.0 * c.hidden_size);
        r.flops = B * (2.0 * (n.always_elems + n.moe_layers * c.num_experts_per_tok * n.expert_elems +
                              n.lm_head_elems) +
                       row.flops);
        r.SetTimes(*ms);
        if (B == 1 && !sampler) r.target = {TargetKind::kRoofline, 0.60};
        r.note = absl::StrFormat(
            "weights %s (%.1f routed experts a layer, lm_head %s), cache and state %s; ctx filled "
            "in %.1f s",
            FormatBytes(weights), DistinctExperts(c, B), FormatBytes(2 * n.lm_head_elems), FormatBytes(B * row.bytes),
            fill_s);
        decode->rows.push_back(r);
      }
    }
  }
}

}  // namespace

void ModelSections(const std::string& name, const std::string& config_path, const std::vector<int>& layers,
                   const Options& o, const Ceilings& c, Table* moe, Table* prefill, Table* decode) {
  auto fail_all = [&](const absl::Status& st) {
    for (Table* t : {moe, prefill, decode}) {
      t->rows.push_back(Row::Failed(absl::StrCat(name, " setup"), std::string(st.message())));
    }
  };
  absl::StatusOr<nlohmann::json> json = model::ReadJsonFile(config_path);
  if (json.ok()) json = KeepLayers(*json, layers);
  if (!json.ok()) return fail_all(json.status());
  const auto t0 = std::chrono::steady_clock::now();
  absl::StatusOr<std::unique_ptr<RandomCheckpoint>> rc = RandomCheckpoint::Create(
      *json, o.seed, absl::StrCat("random ", name, " (layers ", absl::StrJoin(layers, ","), ")"));
  if (!rc.ok()) return fail_all(rc.status());
  double make_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (o.components) {
    MoeRows(name, **rc, o, moe);
    if (cu::GroupedLinearFp8Available()) {
      // The same layers with the experts in FP8, as the FP8 releases ship them.
      absl::StatusOr<std::unique_ptr<RandomCheckpoint>> rc8 = RandomCheckpoint::Create(
          *json, o.seed, absl::StrCat("random ", name, " (layers ", absl::StrJoin(layers, ","), ", FP8 experts)"),
          ExpertFormat::kFp8);
      if (rc8.ok()) {
        MoeRows(name, **rc8, o, moe);
      } else {
        moe->rows.push_back(Row::Failed(absl::StrCat(name, " MoE, FP8 experts"), std::string(rc8.status().message())));
      }
    }
  }
  if (!o.models) return;

  std::unique_ptr<RandomCheckpoint> bf16 = std::move(*rc);
  for (const ExpertFormat f : o.model_experts) {
    const std::string label = f == ExpertFormat::kBf16 ? name : absl::StrCat(name, ", ", ExpertFormatName(f), " experts");
    std::unique_ptr<RandomCheckpoint> ck = std::move(bf16);  // null when bf16 is listed twice
    if (f != ExpertFormat::kBf16) {
      const auto t2 = std::chrono::steady_clock::now();
      absl::StatusOr<std::unique_ptr<RandomCheckpoint>> made = RandomCheckpoint::Create(
          *json, o.seed, absl::StrCat("random ", label, " (layers ", absl::StrJoin(layers, ","), ")"), f);
      if (!made.ok()) {
        for (Table* t : {prefill, decode}) {
          t->rows.push_back(Row::Failed(absl::StrCat(label, " setup"), std::string(made.status().message())));
        }
        continue;
      }
      bf16 = std::move(ck);
      ck = std::move(*made);
      make_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t2).count();
    }
    if (ck == nullptr) continue;
    const auto t1 = std::chrono::steady_clock::now();
    absl::StatusOr<std::unique_ptr<model::CausalLM>> m = LoadModel(*ck, o.page_size);
    if (!m.ok()) {
      for (Table* t : {prefill, decode}) {
        t->rows.push_back(Row::Failed(absl::StrCat(label, " load"), std::string(m.status().message())));
      }
      continue;
    }
    const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
    Counts n = Count((*m)->config());
    // NVFP4 as kernels::cuda packs it: 0.5625 bytes a weight (and a float a 16-row tile); FP8 a
    // byte (its block scales and the FP8 shared experts are counted as bf16 weights, a bound).
    if (f == ExpertFormat::kNvfp4) n.SetQuantizedBytes(0.5625, /*dense_mlps=*/true);
    if (f == ExpertFormat::kFp8) n.SetQuantizedBytes(1.0, /*dense_mlps=*/false);
    std::printf(
        "%s: layers %s of the config (%s), %s of weights on the device; random checkpoint made in %.1f s "
        "(pool %s), loaded in %.1f s\n",
        label.c_str(), absl::StrJoin(layers, ",").c_str(), config_path.c_str(),
        FormatBytes(static_cast<double>((*m)->weight_bytes())).c_str(), make_s,
        FormatBytes(static_cast<double>(ck->pool_bytes())).c_str(), load_s);
    std::fflush(stdout);
    ck.reset();  // the host pool is no longer needed
    PrefillRows(label, **m, n, o, prefill);
    DecodeRows(label, **m, n, o, decode);
  }
}

}  // namespace ferry::bench
