// Section 2, attention side: sparse MLA decode attention (kernels::cuda::MlaDecodeAttention) and
// the indexer (IndexerScores + TopK) at the models' per-rank shapes, one GPU = TP1 (all heads),
// over paged caches of 64-row pages placed at random in an arena sized for the largest case.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/roofline.h"
#include "bench/roofline_cuda.h"
#include "common/status.h"
#include "kernels/cuda/ops.h"

namespace ferry::bench {

namespace cu = ferry::kernels::cuda;

namespace {

constexpr int64_t kPageRows = 64;

// The L2 flush run between timed calls: reads a buffer twice the L2's size, so that the timed
// call finds none of its data there and only clean lines to evict. (A write of the buffer, the
// flush until session 14, left up to an L2 of dirty lines whose write-back the timed call paid
// for: see bench/results/h200-roofline-attention.md.)
struct Flush {
  const void* buf = nullptr;
  size_t bytes = 0;
  uint32_t* sink = nullptr;
  absl::Status operator()() const { return StreamRead(buf, bytes, sink); }
};

// Device blocks freed on scope exit, and the L2 flush of a measurement.
class DevBlocks : public DeviceBlocks {
 public:
  // A Flush over a new block twice the current device's L2 (filled once, so that it holds no
  // pages the driver could leave unbacked).
  absl::StatusOr<Flush> TakeFlush() {
    FERRY_ASSIGN_OR_RETURN(DeviceShape shape, CurrentDeviceShape());
    const int64_t bytes = 2 * shape.l2_bytes / 16 * 16;
    FERRY_ASSIGN_OR_RETURN(uint8_t * buf, Take<uint8_t>(bytes));
    FERRY_ASSIGN_OR_RETURN(uint32_t * sink, Take<uint32_t>(1));
    FERRY_RETURN_IF_ERROR(cu::DeviceFill(buf, 1, static_cast<size_t>(bytes)));
    return Flush{buf, static_cast<size_t>(bytes), sink};
  }
};

// The first error among a table's set-up steps, or OK.
absl::Status FirstError(std::initializer_list<absl::Status> steps) {
  for (const absl::Status& st : steps) {
    if (!st.ok()) return st;
  }
  return absl::OkStatus();
}

std::string Ctx(int64_t n) { return n % 1024 == 0 ? absl::StrCat(n / 1024, "k") : absl::StrCat(n); }

// Each of `rows` query rows gets pages_per_row distinct pages of [0, n_pages) (one shuffle, rows
// take consecutive pieces): every row's cache scattered over the whole arena.
std::vector<int32_t> RandomTables(std::mt19937_64& rng, int64_t rows, int64_t pages_per_row, int64_t n_pages) {
  std::vector<int32_t> ids(static_cast<size_t>(n_pages));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  ids.resize(static_cast<size_t>(rows * pages_per_row));
  return ids;
}

// How many of `rows` rows of n scores (row-major) miss TopK's sampled path for the top k, by the
// rule of kernels/cuda/topk.cu (session 14): a row longer than 4096 (with 2k <= 4096) takes the
// ((k + 4096) / 2 * 4096 / n)-th largest of its 4096 samples at s * n / 4096 as a threshold (found
// by BufferSelect, which may stop at a bin edge below it) and misses when the scores at or above
// it are fewer than k or more than 4096; such a row then runs the general path in one block.
int64_t SampledPathMisses(const std::vector<float>& scores, int64_t rows, int64_t n, int64_t k) {
  constexpr int64_t kCap = 4096;
  if (n <= kCap || 2 * k > kCap) return 0;
  auto key = [](float x) -> uint32_t {
    if (std::isnan(x)) return 0u;
    if (x == 0.0f) return 0x80000000u;
    uint32_t b;
    std::memcpy(&b, &x, sizeof(b));
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
  };
  const int64_t want = (k + kCap) / 2, rank0 = (want * kCap + n - 1) / n;
  int64_t misses = 0;
  std::vector<uint32_t> samples(kCap);
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = scores.data() + r * n;
    uint32_t any = 0u, all = ~0u;
    for (int64_t s = 0; s < kCap; ++s) {
      samples[s] = key(row[s * n / kCap]);
      any |= samples[s];
      all &= samples[s];
    }
    // BufferSelect's threshold (t, need): every key > t and the first `need` keys == t.
    uint32_t t = all;
    int64_t need = rank0;
    if (any != all) {
      int hi = 31 - __builtin_clz(any ^ all);
      const uint32_t low = hi == 31 ? ~0u : (2u << hi) - 1u;
      uint32_t mask = ~low;
      t = all & ~low;
      while (true) {
        const int width = std::min(11, hi + 1), shift = hi + 1 - width;
        const uint32_t digits = (1u << width) - 1u;
        std::vector<int64_t> hist(size_t{1} << width, 0);
        for (uint32_t x : samples) {
          if ((x & mask) == t) ++hist[(x >> shift) & digits];
        }
        int64_t above = 0, d = static_cast<int64_t>(digits);
        while (above + hist[static_cast<size_t>(d)] < need) above += hist[static_cast<size_t>(d--)];
        const int64_t bin_need = need - above, bin_count = hist[static_cast<size_t>(d)];
        t |= static_cast<uint32_t>(d) << shift;
        mask |= digits << shift;
        need = bin_need;
        if (shift == 0) break;
        if (bin_need == bin_count) {
          need = t == 0u ? bin_need : 0;
          if (t != 0u) t -= 1u;
          break;
        }
        hi = shift - 1;
      }
    }
    const uint32_t lo = need > 0 ? t : t + 1u;
    int64_t m = 0;
    for (int64_t i = 0; i < n; ++i) m += key(row[i]) >= lo ? 1 : 0;
    misses += lo == 0u || m < k || m > kCap ? 1 : 0;
  }
  return misses;
}

}  // namespace

Table MlaDecodeTable(const std::vector<NamedConfig>& models, const Options& o, const Ceilings& c, int layers) {
  Table t;
  const std::string common =
      "the cache is 64-row pages placed at random in an arena; the op gets the workspace the model gives it (the "
      "persistent form: mla_decode_tc.h). bytes = the selected cache rows (latent + rope, bf16) + q_abs, q_pe, "
      "output and the selection ids, each once; FLOPs = rows x heads x selected x (2 (latent + rope) + 2 latent). "
      "The L2 is flushed (a read of twice its size) before each timed call. ";
  if (layers == 1) {
    t.title = "2a. Sparse MLA decode attention (MlaDecodeAttention), one GPU = TP1 (all 64 heads)";
    t.explanation = "Each query row attends min(ctx, index_topk = 2048) tokens drawn at random from its own "
                    "ctx-token cache (ascending, as TopK gives them); " +
                    common + "Target: >= 70% of the measured HBM bandwidth from 32k context and batch 8 up.";
  } else {
    t.title = absl::StrCat("2f. Sparse MLA decode as a decode step runs it: ", layers,
                           " layers' MlaDecodeAttention back to back, per layer");
    t.explanation = absl::StrCat(
        "2a's op called ", layers, " times in one timed sequence (each launch pair queued behind the last, as the "
        "layers of a step are), time and bytes a layer. Layer l's rows attend index_topk tokens drawn from the "
        "tokens t of their cache with t % ", layers, " == l, so no layer reads a row another read (contexts with "
        "fewer than index_topk such tokens are left out); ", common, "No target of its own (2a's is per call).");
  }
  std::mt19937_64 rng(o.seed);
  const int64_t max_b = *std::max_element(o.batches.begin(), o.batches.end());
  const int64_t max_ctx = *std::max_element(o.contexts.begin(), o.contexts.end());
  for (const NamedConfig& m : models) {
    const model::ModelConfig& mc = m.config;
    const int64_t H = mc.num_heads, L = mc.kv_lora_rank, P = mc.qk_rope_head_dim, W = L + P, K = mc.index_topk;
    const float scale = 1.0f / std::sqrt(static_cast<float>(mc.qk_nope_head_dim + P));
    const int64_t max_ppr = (max_ctx + kPageRows - 1) / kPageRows, n_pages = max_b * max_ppr;
    DevBlocks dev;
    auto fail = [&](const std::string& what, const absl::Status& st) {
      t.rows.push_back(Row::Failed(absl::StrCat(m.name, " ", what), std::string(st.message())));
    };
    absl::StatusOr<uint16_t*> arena = dev.Take<uint16_t>(n_pages * kPageRows * W);
    absl::StatusOr<uint16_t*> q_abs = dev.Take<uint16_t>(max_b * H * L);
    absl::StatusOr<uint16_t*> q_pe = dev.Take<uint16_t>(max_b * H * std::max<int64_t>(P, 1));
    absl::StatusOr<uint16_t*> out = dev.Take<uint16_t>(max_b * H * L);
    absl::StatusOr<int32_t*> table = dev.Take<int32_t>(max_b * max_ppr);
    absl::StatusOr<int32_t*> sel = dev.Take<int32_t>(layers * max_b * K);
    absl::StatusOr<int32_t*> offsets = dev.Take<int32_t>(max_b + 1);
    // The workspace the model gives the op at these batch sizes (model/cuda/act_ops.h: steps of up
    // to 64 rows).
    const int64_t ws_bytes = cu::MlaDecodeWorkspaceBytes(std::min<int64_t>(max_b, 64), H);
    absl::StatusOr<uint8_t*> ws = dev.Take<uint8_t>(ws_bytes);
    absl::StatusOr<Flush> flush = dev.TakeFlush();
    if (absl::Status st = FirstError({arena.status(), q_abs.status(), q_pe.status(), out.status(), table.status(),
                                      sel.status(), offsets.status(), ws.status(), flush.status()});
        !st.ok()) {
      fail("setup", st);
      continue;
    }
    absl::Status st = FillRandomBf16(*arena, n_pages * kPageRows * W, o.seed + 10, 1.0f);
    if (st.ok()) st = FillRandomBf16(*q_abs, max_b * H * L, o.seed + 11, 1.0f);
    if (st.ok()) st = FillRandomBf16(*q_pe, max_b * H * std::max<int64_t>(P, 1), o.seed + 12, 1.0f);
    if (!st.ok()) {
      fail("setup", st);
      continue;
    }
    for (int64_t ctx : o.contexts) {
      for (int64_t B : o.batches) {
        const std::string name = absl::StrCat(m.name, " b", B, " ctx", Ctx(ctx));
        const int64_t ppr = (ctx + kPageRows - 1) / kPageRows, S = std::min(ctx, K), span = ctx / layers;
        if (layers > 1 && span < S) continue;
        // Per layer l and row: S distinct tokens j * layers + l (j < span), ascending; layer-major.
        std::vector<int32_t> h_sel, h_off;
        for (int64_t r = 0; r <= B; ++r) h_off.push_back(static_cast<int32_t>(r * S));
        std::vector<int32_t> all(static_cast<size_t>(span));
        for (int64_t l = 0; l < layers; ++l) {
          for (int64_t r = 0; r < B; ++r) {
            std::iota(all.begin(), all.end(), 0);
            for (int64_t i = 0; i < S; ++i) {
              std::uniform_int_distribution<int64_t> pick(i, span - 1);
              std::swap(all[static_cast<size_t>(i)], all[static_cast<size_t>(pick(rng))]);
            }
            std::sort(all.begin(), all.begin() + S);
            for (int64_t i = 0; i < S; ++i) h_sel.push_back(static_cast<int32_t>(all[i] * layers + l));
          }
        }
        const std::vector<int32_t> h_table = RandomTables(rng, B, ppr, n_pages);
        absl::Status s = cu::CopyToDevice(*table, h_table.data(), h_table.size() * sizeof(int32_t));
        if (s.ok()) s = cu::CopyToDevice(*sel, h_sel.data(), h_sel.size() * sizeof(int32_t));
        if (s.ok()) s = cu::CopyToDevice(*offsets, h_off.data(), h_off.size() * sizeof(int32_t));
        if (!s.ok()) {
          fail(name, s);
          continue;
        }
        cu::PagedCacheBf16 cache{*arena, n_pages, kPageRows, kPageRows * W, W, *table, ppr};
        absl::StatusOr<std::vector<double>> ms = TimeEvents(
            [&]() -> absl::Status {
              for (int64_t l = 0; l < layers; ++l) {
                FERRY_RETURN_IF_ERROR(cu::MlaDecodeAttention(*q_abs, P > 0 ? *q_pe : nullptr, B, H, L, P, cache,
                                                             *sel + l * B * S, *offsets, scale, *out, nullptr,
                                                             B <= 64 ? *ws : nullptr, B <= 64 ? ws_bytes : 0));
              }
              return absl::OkStatus();
            },
            o.warmup, o.reps, *flush);
        if (!ms.ok()) {
          fail(name, ms.status());
          continue;
        }
        Row r(name);
        r.bytes = 2.0 * B * S * W + 2.0 * B * H * (L + P) + 2.0 * B * H * L + 4.0 * (B * S + B + 1);
        r.flops = static_cast<double>(B) * H * S * (2.0 * W + 2.0 * L);
        r.SetTimes(*ms, layers);
        if (layers == 1 && ctx >= 32768 && B >= 8) r.target = {TargetKind::kBandwidth, 0.70};
        r.note = absl::StrCat("sel ", S, ", row ", 2 * W, " B");
        if (layers > 1) absl::StrAppend(&r.note, ", ", layers, " layers");
        t.rows.push_back(r);
      }
    }
  }
  return t;
}

Table IndexerTable(const std::vector<NamedConfig>& models, const Options& o, const Ceilings& c) {
  Table t;
  t.title = "2b. Indexer: IndexerScores + TopK over the cached keys, one GPU (all 32 indexer heads)";
  t.explanation =
      "Each query row scores every cached key of its conversation (GLM-5.2: ctx token keys; GLM-5.3-Flash: ctx / 4 "
      "pooled keys, index_kpool 4) and takes the top index_topk / kpool. Keys are 128-wide bf16 rows in 64-row pages "
      "placed at random. bytes = the keys read (as asked: the scores' float32 round trip through memory and TopK's "
      "re-reads of them are not counted); FLOPs = rows x keys x heads x (2 x 128 + 2). The note splits the time "
      "into IndexerScores and TopK measured alone, and how many rows miss TopK's sampled path (the host applies its "
      "rule to the scores: such a row runs the general path in one block). L2 flushed (a read of twice its size) "
      "before each timed call.";
  std::mt19937_64 rng(o.seed + 1);
  const int64_t max_b = *std::max_element(o.batches.begin(), o.batches.end());
  const int64_t max_ctx = *std::max_element(o.contexts.begin(), o.contexts.end());
  for (const NamedConfig& m : models) {
    const model::ModelConfig& mc = m.config;
    const int64_t Hi = mc.index_n_heads, Di = mc.index_head_dim, kp = std::max<int64_t>(mc.index_kpool, 1);
    const int64_t k = mc.index_topk / kp, max_n = max_ctx / kp;
    const int64_t max_ppr = (max_n + kPageRows - 1) / kPageRows, n_pages = max_b * max_ppr;
    DevBlocks dev;
    auto fail = [&](const std::string& what, const absl::Status& st) {
      t.rows.push_back(Row::Failed(absl::StrCat(m.name, " ", what), std::string(st.message())));
    };
    absl::StatusOr<uint16_t*> keys = dev.Take<uint16_t>(n_pages * kPageRows * Di);
    absl::StatusOr<uint16_t*> qi = dev.Take<uint16_t>(max_b * Hi * Di);
    absl::StatusOr<float*> w = dev.Take<float>(max_b * Hi);
    absl::StatusOr<float*> scores = dev.Take<float>(max_b * max_n);
    absl::StatusOr<int32_t*> table = dev.Take<int32_t>(max_b * max_ppr);
    absl::StatusOr<int32_t*> n_keys = dev.Take<int32_t>(max_b);
    absl::StatusOr<int32_t*> ids = dev.Take<int32_t>(max_b * k);
    absl::StatusOr<int32_t*> counts = dev.Take<int32_t>(max_b);
    absl::StatusOr<Flush> flush = dev.TakeFlush();
    if (absl::Status st = FirstError({keys.status(), qi.status(), w.status(), scores.status(), table.status(),
                                      n_keys.status(), ids.status(), counts.status(), flush.status()});
        !st.ok()) {
      fail("setup", st);
      continue;
    }
    absl::Status st = FillRandomBf16(*keys, n_pages * kPageRows * Di, o.seed + 20, 1.0f);
    if (st.ok()) st = FillRandomBf16(*qi, max_b * Hi * Di, o.seed + 21, 1.0f);
    if (st.ok()) st = FillRandomF32(*w, max_b * Hi, o.seed + 22, 1.0f / std::sqrt(static_cast<float>(Hi)));
    if (!st.ok()) {
      fail("setup", st);
      continue;
    }
    const float scale = 1.0f / std::sqrt(static_cast<float>(Di));
    for (int64_t ctx : o.contexts) {
      for (int64_t B : o.batches) {
        const std::string name = absl::StrCat(m.name, " b", B, " ctx", Ctx(ctx));
        const int64_t n = ctx / kp, ppr = (n + kPageRows - 1) / kPageRows;
        const std::vector<int32_t> h_table = RandomTables(rng, B, ppr, n_pages);
        const std::vector<int32_t> h_n(static_cast<size_t>(B), static_cast<int32_t>(n));
        absl::Status s = cu::CopyToDevice(*table, h_table.data(), h_table.size() * sizeof(int32_t));
        if (s.ok()) s = cu::CopyToDevice(*n_keys, h_n.data(), h_n.size() * sizeof(int32_t));
        if (!s.ok()) {
          fail(name, s);
          continue;
        }
        cu::PagedCacheBf16 view{*keys, n_pages, kPageRows, kPageRows * Di, Di, *table, ppr};
        auto scores_fn = [&] { return cu::IndexerScores(*qi, *w, B, Hi, Di, view, *n_keys, scale, *scores, n); };
        auto topk_fn = [&] { return cu::TopK(*scores, B, n, *n_keys, k, *ids, *counts); };
        absl::StatusOr<std::vector<double>> both = TimeEvents(
            [&]() -> absl::Status {
              FERRY_RETURN_IF_ERROR(scores_fn());
              return topk_fn();
            },
            o.warmup, o.reps, *flush);
        absl::StatusOr<std::vector<double>> sc = TimeEvents(scores_fn, 1, o.reps, *flush);
        absl::StatusOr<std::vector<double>> tk = TimeEvents(topk_fn, 1, o.reps, *flush);
        if (!both.ok() || !sc.ok() || !tk.ok()) {
          fail(name, !both.ok() ? both.status() : !sc.ok() ? sc.status() : tk.status());
          continue;
        }
        std::vector<float> h_scores(static_cast<size_t>(B * n));
        if (absl::Status st = cu::CopyToHost(h_scores.data(), *scores, h_scores.size() * sizeof(float)); !st.ok()) {
          fail(name, st);
          continue;
        }
        const int64_t misses = SampledPathMisses(h_scores, B, n, k);
        Row r(name);
        r.bytes = 2.0 * B * n * Di;
        r.flops = static_cast<double>(B) * n * Hi * (2.0 * Di + 2.0);
        r.SetTimes(*both);
        r.note = absl::StrFormat("%lld keys, top %lld; scores %.4g ms + topk %.4g ms", static_cast<long long>(n),
                                 static_cast<long long>(k), Median(*sc), Median(*tk));
        if (misses > 0) absl::StrAppend(&r.note, "; rows off TopK's sampled path: ", misses);
        t.rows.push_back(r);
      }
    }
  }
  return t;
}

Table SparseAttentionTable(const std::vector<NamedConfig>& models, const Options& o, const Ceilings& c) {
  Table t;
  t.title = "2e. The whole sparse attention of a decode step: IndexerScores, TopK, the selection, MlaDecodeAttention";
  t.explanation =
      "2b then 2a as a decode step runs them, one timed sequence: every row scores all its ctx keys (GLM-5.3-Flash: "
      "ctx / 4 pooled keys), takes the top index_topk (Flash: its top index_topk / 4 pools, expanded to their "
      "tokens), and attends those tokens of its own latent cache. Separate paged arenas of 64-row pages for the "
      "indexer keys and the latent rows, placed at random. bytes = the keys read + 2a's bytes; FLOPs = 2b's + 2a's. "
      "L2 flushed (a read of twice its size) before each timed call. No target of its own: the issue's 70% target "
      "is 2a's; this table reads it "
      "as the whole attention, where the context length matters.";
  std::mt19937_64 rng(o.seed + 2);
  const int64_t max_b = *std::max_element(o.batches.begin(), o.batches.end());
  const int64_t max_ctx = *std::max_element(o.contexts.begin(), o.contexts.end());
  for (const NamedConfig& m : models) {
    const model::ModelConfig& mc = m.config;
    const int64_t H = mc.num_heads, L = mc.kv_lora_rank, P = mc.qk_rope_head_dim, W = L + P, K = mc.index_topk;
    const int64_t Hi = mc.index_n_heads, Di = mc.index_head_dim, kp = std::max<int64_t>(mc.index_kpool, 1);
    const int64_t k = K / kp, max_n = max_ctx / kp;
    const float scale = 1.0f / std::sqrt(static_cast<float>(mc.qk_nope_head_dim + P));
    const int64_t ppr_l = (max_ctx + kPageRows - 1) / kPageRows, ppr_k = (max_n + kPageRows - 1) / kPageRows;
    const int64_t pages_l = max_b * ppr_l, pages_k = max_b * ppr_k;
    DevBlocks dev;
    auto fail = [&](const std::string& what, const absl::Status& st) {
      t.rows.push_back(Row::Failed(absl::StrCat(m.name, " ", what), std::string(st.message())));
    };
    absl::StatusOr<uint16_t*> latent = dev.Take<uint16_t>(pages_l * kPageRows * W);
    absl::StatusOr<uint16_t*> keys = dev.Take<uint16_t>(pages_k * kPageRows * Di);
    absl::StatusOr<uint16_t*> q_abs = dev.Take<uint16_t>(max_b * H * L);
    absl::StatusOr<uint16_t*> q_pe = dev.Take<uint16_t>(max_b * H * std::max<int64_t>(P, 1));
    absl::StatusOr<uint16_t*> out = dev.Take<uint16_t>(max_b * H * L);
    absl::StatusOr<uint16_t*> qi = dev.Take<uint16_t>(max_b * Hi * Di);
    absl::StatusOr<float*> w = dev.Take<float>(max_b * Hi);
    absl::StatusOr<float*> scores = dev.Take<float>(max_b * max_n);
    absl::StatusOr<int32_t*> table_l = dev.Take<int32_t>(max_b * ppr_l);
    absl::StatusOr<int32_t*> table_k = dev.Take<int32_t>(max_b * ppr_k);
    absl::StatusOr<int32_t*> n_keys = dev.Take<int32_t>(max_b);
    absl::StatusOr<int64_t*> pos = dev.Take<int64_t>(max_b);
    absl::StatusOr<int32_t*> ids = dev.Take<int32_t>(max_b * k);
    absl::StatusOr<int32_t*> counts = dev.Take<int32_t>(max_b);
    absl::StatusOr<int32_t*> sel = dev.Take<int32_t>(max_b * K);
    absl::StatusOr<int32_t*> offsets = dev.Take<int32_t>(max_b + 1);
    const int64_t ws_bytes = cu::MlaDecodeWorkspaceBytes(std::min<int64_t>(max_b, 64), H);
    absl::StatusOr<uint8_t*> ws = dev.Take<uint8_t>(ws_bytes);
    absl::StatusOr<Flush> flush = dev.TakeFlush();
    if (absl::Status st =
            FirstError({latent.status(), keys.status(), q_abs.status(), q_pe.status(), out.status(), qi.status(),
                        w.status(), scores.status(), table_l.status(), table_k.status(), n_keys.status(), pos.status(),
                        ids.status(), counts.status(), sel.status(), offsets.status(), ws.status(), flush.status()});
        !st.ok()) {
      fail("setup", st);
      continue;
    }
    absl::Status st = FillRandomBf16(*latent, pages_l * kPageRows * W, o.seed + 30, 1.0f);
    if (st.ok()) st = FillRandomBf16(*keys, pages_k * kPageRows * Di, o.seed + 31, 1.0f);
    if (st.ok()) st = FillRandomBf16(*q_abs, max_b * H * L, o.seed + 32, 1.0f);
    if (st.ok()) st = FillRandomBf16(*q_pe, max_b * H * std::max<int64_t>(P, 1), o.seed + 33, 1.0f);
    if (st.ok()) st = FillRandomBf16(*qi, max_b * Hi * Di, o.seed + 34, 1.0f);
    if (st.ok()) st = FillRandomF32(*w, max_b * Hi, o.seed + 35, 1.0f / std::sqrt(static_cast<float>(Hi)));
    if (!st.ok()) {
      fail("setup", st);
      continue;
    }
    const float index_scale = 1.0f / std::sqrt(static_cast<float>(Di));
    for (int64_t ctx : o.contexts) {
      for (int64_t B : o.batches) {
        const std::string name = absl::StrCat(m.name, " b", B, " ctx", Ctx(ctx));
        const int64_t n = ctx / kp, rl = (ctx + kPageRows - 1) / kPageRows, rk = (n + kPageRows - 1) / kPageRows;
        // Every row at position ctx - 1: n keys (pools), min(ctx, K) tokens selected (Flash: k pools of kp
        // tokens, or every token while n <= k; ctx is a multiple of kp here, so no tail).
        const int64_t S = std::min(ctx, K);
        const std::vector<int32_t> h_tl = RandomTables(rng, B, rl, pages_l), h_tk = RandomTables(rng, B, rk, pages_k);
        const std::vector<int32_t> h_n(static_cast<size_t>(B), static_cast<int32_t>(n));
        const std::vector<int64_t> h_pos(static_cast<size_t>(B), ctx - 1);
        std::vector<int32_t> h_off(static_cast<size_t>(B + 1));
        for (int64_t r = 0; r <= B; ++r) h_off[static_cast<size_t>(r)] = static_cast<int32_t>(r * S);
        absl::Status s = cu::CopyToDevice(*table_l, h_tl.data(), h_tl.size() * sizeof(int32_t));
        if (s.ok()) s = cu::CopyToDevice(*table_k, h_tk.data(), h_tk.size() * sizeof(int32_t));
        if (s.ok()) s = cu::CopyToDevice(*n_keys, h_n.data(), h_n.size() * sizeof(int32_t));
        if (s.ok()) s = cu::CopyToDevice(*pos, h_pos.data(), h_pos.size() * sizeof(int64_t));
        if (s.ok() && kp > 1) s = cu::CopyToDevice(*offsets, h_off.data(), h_off.size() * sizeof(int32_t));
        if (!s.ok() || ctx % kp != 0) {
          fail(name, s.ok() ? absl::InvalidArgumentError("ctx is not a multiple of index_kpool") : s);
          continue;
        }
        cu::PagedCacheBf16 kview{*keys, pages_k, kPageRows, kPageRows * Di, Di, *table_k, rk};
        cu::PagedCacheBf16 lview{*latent, pages_l, kPageRows, kPageRows * W, W, *table_l, rl};
        auto step = [&]() -> absl::Status {
          FERRY_RETURN_IF_ERROR(cu::IndexerScores(*qi, *w, B, Hi, Di, kview, *n_keys, index_scale, *scores, n));
          FERRY_RETURN_IF_ERROR(cu::TopK(*scores, B, n, *n_keys, k, *ids, *counts));
          if (kp > 1) {
            FERRY_RETURN_IF_ERROR(cu::ExpandPoolSelection(*ids, k, *pos, B, kp, *offsets, *sel));
          } else {
            FERRY_RETURN_IF_ERROR(cu::CompactSelection(*ids, *counts, B, k, *sel, *offsets));
          }
          return cu::MlaDecodeAttention(*q_abs, P > 0 ? *q_pe : nullptr, B, H, L, P, lview, *sel, *offsets, scale, *out,
                                        nullptr, B <= 64 ? *ws : nullptr, B <= 64 ? ws_bytes : 0);
        };
        absl::StatusOr<std::vector<double>> ms = TimeEvents(step, o.warmup, o.reps, *flush);
        if (!ms.ok()) {
          fail(name, ms.status());
          continue;
        }
        Row r(name);
        r.bytes = 2.0 * B * n * Di + 2.0 * B * S * W + 2.0 * B * H * (L + P) + 2.0 * B * H * L + 4.0 * (B * S + B + 1);
        r.flops =
            static_cast<double>(B) * n * Hi * (2.0 * Di + 2.0) + static_cast<double>(B) * H * S * (2.0 * W + 2.0 * L);
        r.SetTimes(*ms);
        r.note = absl::StrCat(n, kp > 1 ? " pooled keys" : " keys", ", sel ", S);
        t.rows.push_back(r);
      }
    }
  }
  return t;
}

}  // namespace ferry::bench
