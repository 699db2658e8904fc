#include "model/blocks/cpu_ops.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/sampling.h"
#include "model/blocks/mla.h"
#include "model/blocks/pooled_indexer.h"
#include "model/cache/split_rows.h"

namespace ferry::model {

namespace cpu = ferry::kernels::cpu;

absl::Status CpuOps::Reset() {
  blocks_.clear();
  return absl::OkStatus();
}

absl::StatusOr<std::vector<void*>> CpuOps::Send(std::initializer_list<Part> parts) {
  std::vector<void*> out;
  for (const Part& p : parts) out.push_back(const_cast<void*>(p.data));
  return out;
}

absl::Status CpuOps::Receive(std::initializer_list<Download> parts) {
  for (const Download& p : parts) {
    if (p.bytes > 0) std::memcpy(p.host, p.device, p.bytes);
  }
  return absl::OkStatus();
}

absl::Status CpuOps::ToHost(void* host, const void* src, size_t bytes) {
  std::memcpy(host, src, bytes);
  return absl::OkStatus();
}

absl::Status CpuOps::ToDevice(void* dst, const void* host, size_t bytes) {
  std::memcpy(dst, host, bytes);
  return absl::OkStatus();
}

absl::Status CpuOps::Embed(const float* table, int64_t vocab, int64_t dim, const int32_t* ids, int64_t rows, float* x) {
  for (int64_t r = 0; r < rows; ++r) {
    if (ids[r] < 0 || ids[r] >= vocab) {
      return absl::InvalidArgumentError(absl::StrCat("token ", ids[r], " outside the vocabulary [0, ", vocab, ")"));
    }
    std::copy_n(table + int64_t{ids[r]} * dim, dim, x + r * dim);
  }
  return absl::OkStatus();
}

absl::Status CpuOps::Linear(const float* x, int64_t rows, int64_t in, const float* w, int64_t out, float* y) {
  cpu::Linear(x, rows, in, w, out, y);
  return absl::OkStatus();
}

absl::Status CpuOps::LinearMany(std::span<const LinearProblem> p, int64_t rows) {
  for (const LinearProblem& q : p) cpu::Linear(q.x, rows, q.in, q.w, q.out, q.y);
  return absl::OkStatus();
}

absl::Status CpuOps::LinearToF32(const float* x, int64_t rows, int64_t in, const float* w, int64_t out, float alpha,
                                 float* y) {
  cpu::Linear(x, rows, in, w, out, y);
  if (alpha != 1.0f) {
    for (int64_t i = 0; i < rows * out; ++i) y[i] *= alpha;
  }
  return absl::OkStatus();
}

absl::Status CpuOps::BatchedLinear(const float* x, int64_t x_batch, int64_t x_row, int64_t rows, int64_t in,
                                   const float* w, int64_t w_batch, int64_t out, float* y, int64_t y_batch,
                                   int64_t y_row, int64_t batch) {
  // Each output is cpu::Dot of its row and weight row, as cpu::Linear computes it.
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t r = 0; r < rows; ++r) {
      const float* xr = x + b * x_batch + r * x_row;
      float* yr = y + b * y_batch + r * y_row;
      for (int64_t o = 0; o < out; ++o) yr[o] = cpu::Dot(xr, w + b * w_batch + o * in, in);
    }
  }
  return absl::OkStatus();
}

absl::Status CpuOps::RmsNorm(const float* x, int64_t rows, int64_t dim, const float* w, float eps, float* y) {
  cpu::RmsNorm(x, rows, dim, w, eps, y);
  return absl::OkStatus();
}

absl::Status CpuOps::LayerNorm(const float* x, int64_t rows, int64_t dim, const float* w, const float* b, float eps,
                               float* y) {
  cpu::LayerNorm(x, rows, dim, w, b, eps, y);
  return absl::OkStatus();
}

absl::Status CpuOps::Rope(float* x, int64_t rows, int64_t heads, int64_t row_stride, int64_t head_stride,
                          int64_t offset, int64_t dim, const int64_t* pos, const float* inv_freq) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t h = 0; h < heads; ++h) cpu::RopeInterleaved(x + r * row_stride + h * head_stride + offset, dim, pos[r], inv_freq);
  }
  return absl::OkStatus();
}

absl::Status CpuOps::CopyRows(const float* src, int64_t src_stride, const int32_t* src_idx, float* dst,
                              int64_t dst_stride, const int32_t* dst_idx, int64_t rows, int64_t cols) {
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t s = src_idx ? src_idx[i] : i, d = dst_idx ? dst_idx[i] : i;
    std::copy_n(src + s * src_stride, cols, dst + d * dst_stride);
  }
  return absl::OkStatus();
}

absl::Status CpuOps::WritePaged(const float* src, int64_t rows, int64_t src_stride, int64_t cols, int64_t col_offset,
                                const int64_t* pos, Cache cache) {
  for (int64_t r = 0; r < rows; ++r) {
    if (cache.Held(r, pos[r])) std::copy_n(src + r * src_stride, cols, cache.Row(r, pos[r]) + col_offset);
  }
  return absl::OkStatus();
}

absl::Status CpuOps::AddResidual(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
  return absl::OkStatus();
}

absl::Status CpuOps::ToF32(const float* x, int64_t n, float* y) {
  std::copy_n(x, n, y);
  return absl::OkStatus();
}

absl::Status CpuOps::IndexerScores(const float* qi, const float* w, int64_t rows, int64_t heads, int64_t dim,
                                   const Cache& keys, const int32_t* n_keys, float scale, float* scores,
                                   int64_t stride) {
  std::vector<float> k;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t n = n_keys[r];
    k.resize(static_cast<size_t>(n * dim));
    for (int64_t t = 0; t < n; ++t) std::copy_n(keys.Row(r, t), dim, k.data() + t * dim);
    cpu::IndexerScoresRow(qi + r * heads * dim, w + r * heads, heads, dim, k.data(), dim, n, scale, scores + r * stride);
  }
  return absl::OkStatus();
}

absl::Status CpuOps::TopK(const float* scores, int64_t rows, int64_t cols, const int32_t* lengths, int64_t k,
                          int32_t* ids, int32_t* counts) {
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t n = lengths ? lengths[r] : cols;
    const std::vector<int32_t> top = cpu::TopKIndices(scores + r * cols, n, k);
    std::fill_n(ids + r * k, k, -1);
    std::copy(top.begin(), top.end(), ids + r * k);
    if (counts) counts[r] = static_cast<int32_t>(top.size());
  }
  return absl::OkStatus();
}

absl::Status CpuOps::CompactSelection(const int32_t* ids, const int32_t* counts, int64_t rows, int64_t k, int32_t* sel,
                                      int32_t* offsets) {
  offsets[0] = 0;
  for (int64_t r = 0; r < rows; ++r) {
    std::copy_n(ids + r * k, counts[r], sel + offsets[r]);
    offsets[r + 1] = offsets[r] + counts[r];
  }
  return absl::OkStatus();
}

absl::Status CpuOps::MlaDecode(const float* q_abs, const float* q_pe, int64_t rows, int64_t heads, int64_t latent,
                               int64_t rope, const Cache& cache, const int32_t* sel, const int32_t* offsets,
                               float scale, float* out, void*, int64_t) {
  // Gather the selected rows (from whatever pages hold them) in selection order; the op then
  // sees exactly the values and order of a contiguous cache.
  const int64_t W = latent + rope;
  std::vector<float> gathered, scratch;
  std::vector<int32_t> order;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t n = offsets[r + 1] - offsets[r];
    gathered.resize(static_cast<size_t>(n * W));
    order.resize(static_cast<size_t>(n));
    scratch.resize(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) {
      std::copy_n(cache.Row(r, sel[offsets[r] + j]), W, gathered.data() + j * W);
      order[j] = static_cast<int32_t>(j);
    }
    cpu::MlaAttendRow(q_abs + r * heads * latent, rope > 0 ? q_pe + r * heads * rope : nullptr, heads, latent, rope,
                      gathered.data(), W, order.data(), n, scale, out + r * heads * latent, scratch.data());
  }
  return absl::OkStatus();
}

absl::Status CpuOps::FfnAdd(const Ffn& f, const ModelConfig& c, const float* a, int64_t rows, const FfnScratch&,
                            float* y, float* x, const DecisionTap& tap, bool assign) {
  const int64_t D = c.hidden_size;
  RouteDecision decide;
  if (tap.log != nullptr) {
    decide = [&](int64_t n, int64_t k, std::span<int32_t> experts) {
      return tap.log->Decide(DecisionSite::kMoeExperts, tap.layer, n, k, experts);
    };
  }
  MlpInputTap observe;
  if (tap.ffn_inputs != nullptr) {
    observe = [&](int64_t expert, MlpInput input, const float* in, int64_t n, int64_t cols) {
      tap.ffn_inputs->See(tap.layer, expert, input, in, n, cols);
    };
  }
  // W4A4's rounded MLP inputs onto a recording log (the CPU reference is the twin the device
  // replays; it records, never pins).
  Fp4RowsTap fp4;
  absl::Status fp4_status;
  if (tap.log != nullptr && tap.log->mode() == DecisionLog::Mode::kRecord) {
    fp4 = [&](int64_t mlp, int64_t input, std::span<const int64_t> tokens, const float* values, int64_t n,
              int64_t cols) {
      std::vector<float> row(static_cast<size_t>(cols));
      for (int64_t r = 0; r < n && fp4_status.ok(); ++r) {
        std::copy_n(values + r * cols, cols, row.begin());
        const int64_t token = tokens.empty() ? r : tokens[static_cast<size_t>(r)];
        fp4_status.Update(tap.log->Fp4Row(tap.layer, mlp, input, token, row).status());
      }
    };
  }
  FERRY_RETURN_IF_ERROR(FfnForward(f, a, rows, D, c.swiglu_limit, y, decide, observe, fp4));
  FERRY_RETURN_IF_ERROR(fp4_status);
  if (assign) {
    std::copy_n(y, rows * D, x);
  } else {
    for (int64_t i = 0; i < rows * D; ++i) x[i] += y[i];
  }
  return absl::OkStatus();
}

absl::Status CpuOps::MhcStreams(const float* x, int64_t rows, int64_t streams, int64_t dim, float* h) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < streams; ++j) std::copy_n(x + r * dim, dim, h + (r * streams + j) * dim);
  }
  return absl::OkStatus();
}

absl::Status CpuOps::MhcIn(const Mhc& m, const ModelConfig& c, const float* h, int64_t rows, const float* norm,
                           MhcMix& mix, float* u, float* a) {
  MhcPre(m, c, h, rows, &mix, u);
  cpu::RmsNorm(u, rows, c.hidden_size, norm, c.rms_norm_eps, a);
  return absl::OkStatus();
}

absl::Status CpuOps::MhcOut(const MhcMix& mix, const ModelConfig& c, const float* y, int64_t rows, float* h) {
  MhcPost(mix, c, y, rows, h);
  return absl::OkStatus();
}

absl::Status CpuOps::StreamMeanNorm(const float* h, const float*, int64_t rows, int64_t streams, int64_t dim,
                                    const float* norm, float eps, float* u, float* a) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t d = 0; d < dim; ++d) {
      float acc = 0.0f;
      for (int64_t j = 0; j < streams; ++j) acc += h[(r * streams + j) * dim + d];
      u[r * dim + d] = acc / static_cast<float>(streams);
    }
  }
  cpu::RmsNorm(u, rows, dim, norm, eps, a);
  return absl::OkStatus();
}

absl::Status CpuOps::Kda(const KdaLayer& w, int64_t layer, const ModelConfig& c, const float* a, int64_t rows,
                         const KdaSegments& segs, KdaScratch& s, float* y) {
  const int64_t C = w.heads * c.linear_head_dim;
  KdaProject(w, c, a, rows, &s.in);
  s.o.resize(static_cast<size_t>(rows * C));
  for (size_t k = 0; k < segs.begin.size(); ++k) {
    const int64_t n = segs.n[k];
    KdaRun(w, c, s.in, segs.begin[k], n, segs.pos0[k], n > 1 ? segs.chunk : 0, segs.layout->View(segs.state[k], layer),
           s.o.data() + segs.begin[k] * C);
  }
  KdaOutput(w, c, s.in, s.o.data(), rows, y);
  return absl::OkStatus();
}

absl::Status CpuOps::PooledKeys(const Cache& keys, const Cache& gates, const Cache& pools, int64_t row, int64_t p0,
                                int64_t p1, int64_t kpool, const float* ape) {
  Cache out = pools;
  PooledIndexerPools(
      ape, keys.arena->width(keys.region), kpool, p0, p1, [&](int64_t t) -> const float* { return keys.Row(row, t); },
      [&](int64_t t) -> const float* { return gates.Row(row, t); }, [&](int64_t p) -> float* { return out.Row(row, p); });
  return absl::OkStatus();
}

absl::Status CpuOps::ExpandPoolSelection(const int32_t* pool_ids, int64_t k, const int64_t* pos, int64_t rows,
                                         int64_t kpool, const int32_t* offsets, int32_t* sel) {
  for (int64_t r = 0; r < rows; ++r) {
    int32_t* out = sel + offsets[r];
    const int64_t n = (pos[r] + 1) / kpool;
    if (n <= k) {
      for (int64_t t = 0; t <= pos[r]; ++t) *out++ = static_cast<int32_t>(t);
      continue;
    }
    for (int64_t j = 0; j < k; ++j) {
      for (int64_t i = 0; i < kpool; ++i) *out++ = static_cast<int32_t>(pool_ids[r * k + j] * kpool + i);
    }
    for (int64_t t = n * kpool; t <= pos[r]; ++t) *out++ = static_cast<int32_t>(t);
  }
  return absl::OkStatus();
}

absl::Status CpuOps::Sample(const float* logits, int64_t rows, int64_t vocab, const kernels::RowSampler* samplers,
                           kernels::SampledToken* out) {
  for (int64_t r = 0; r < rows; ++r) out[r] = cpu::SampleRow(logits + r * vocab, vocab, samplers[r]);
  return absl::OkStatus();
}

absl::Status CpuOps::TapTopK(const DecisionTap& tap, int64_t rows, int64_t k, int32_t* ids, int32_t* counts) {
  if (tap.log == nullptr || rows == 0) return absl::OkStatus();
  std::span<int32_t> h(ids, static_cast<size_t>(rows * k));
  FERRY_ASSIGN_OR_RETURN(bool pinned, tap.log->Decide(DecisionSite::kIndexerTopK, tap.layer, rows, k, h));
  if (!pinned || counts == nullptr) return absl::OkStatus();
  for (int64_t r = 0; r < rows; ++r) {
    counts[r] = 0;
    for (int64_t j = 0; j < k; ++j) counts[r] += ids[r * k + j] >= 0 ? 1 : 0;
  }
  return absl::OkStatus();
}

absl::Status CpuOps::AttendSplit(const ModelConfig& c, int64_t heads, const float* q_abs, const float* q_pe,
                                 int64_t rows, const RowOwners& owners, const TensorParallel& tp, const Cache& latent,
                                 const int32_t* sel, const int32_t* offsets, float* o_lat, OwnerSplitStats* stats) {
  const int64_t L = c.kv_lora_rank, P = c.qk_rope_head_dim;
  MlaProjections proj;
  proj.q_abs.assign(q_abs, q_abs + rows * heads * L);
  proj.q_pe.assign(q_pe ? q_pe : q_abs, q_pe ? q_pe + rows * heads * P : q_abs);
  std::vector<std::vector<int32_t>> rows_sel(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) rows_sel[r].assign(sel + offsets[r], sel + offsets[r + 1]);
  const RowOf latent_of = [&latent](int64_t r, int64_t t) -> const float* { return latent.Row(r, t); };
  return MlaAttendSplit(c, heads, proj, owners.owner, owners.held, owners.fetch, owners.group, tp, latent_of, rows_sel,
                        o_lat, stats);
}

}  // namespace ferry::model
