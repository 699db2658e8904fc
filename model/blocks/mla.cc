#include "model/blocks/mla.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <map>

#include "common/status.h"
#include "kernels/cpu/ops.h"

namespace ferry::model {

namespace cpu = ferry::kernels::cpu;

absl::StatusOr<MlaWeights> LoadMla(const WeightLoader& w, const ModelConfig& c, float norm_eps,
                                   const TensorParallel& tp) {
  FERRY_RETURN_IF_ERROR(CheckDivisible("num_attention_heads", c.num_heads, tp.world));
  const int64_t H = tp.Local(c.num_heads), h0 = tp.Begin(c.num_heads), L = c.kv_lora_rank, N = c.qk_nope_head_dim, P = c.qk_rope_head_dim,
                V = c.v_head_dim;
  MlaWeights m;
  m.heads = H;
  m.norm_eps = norm_eps;
  FERRY_ASSIGN_OR_RETURN(m.q_a, w.Matrix("q_a_proj.weight", c.q_lora_rank, c.hidden_size));
  FERRY_ASSIGN_OR_RETURN(m.q_a_norm, w.Vector("q_a_layernorm.weight", c.q_lora_rank));
  const int64_t HG = c.num_heads;  // the checkpoint's (global) head count
  FERRY_ASSIGN_OR_RETURN(m.q_b, w.Matrix("q_b_proj.weight", HG * (N + P), c.q_lora_rank,
                                         Slice{h0 * (N + P), (h0 + H) * (N + P), 0, -1}));
  FERRY_ASSIGN_OR_RETURN(m.kv_a, w.Matrix("kv_a_proj_with_mqa.weight", L + P, c.hidden_size));
  FERRY_ASSIGN_OR_RETURN(m.kv_a_norm, w.Vector("kv_a_layernorm.weight", L));
  FERRY_ASSIGN_OR_RETURN(Weight kv_b, w.Matrix("kv_b_proj.weight", HG * (N + V), L,
                                                Slice{h0 * (N + V), (h0 + H) * (N + V), 0, -1}));
  FERRY_ASSIGN_OR_RETURN(m.o_proj, w.Matrix("o_proj.weight", c.hidden_size, HG * V,
                                            Slice{0, -1, h0 * V, (h0 + H) * V}));
  // Split kv_b per head into W_UK (transposed, so q_abs is a Linear over q_nope) and W_UV.
  m.w_uk_t = Weight{std::vector<float>(static_cast<size_t>(H * L * N)), H * L, N};
  m.w_uv = Weight{std::vector<float>(static_cast<size_t>(H * V * L)), H * V, L};
  for (int64_t h = 0; h < H; ++h) {
    const float* head = kv_b.ptr() + h * (N + V) * L;
    for (int64_t i = 0; i < N; ++i) {
      for (int64_t l = 0; l < L; ++l) m.w_uk_t.data[(h * L + l) * N + i] = head[i * L + l];
    }
    std::copy_n(head + N * L, V * L, m.w_uv.data.data() + h * V * L);
  }
  return m;
}

void MlaAttendLatent(const ModelConfig& c, int64_t heads, const float* q_abs, const float* q_pe,
                     std::span<const int64_t> rows_idx, const RowOf& latent_of,
                     const std::vector<std::vector<int32_t>>& sel, float* o_lat) {
  const int64_t H = heads, L = c.kv_lora_rank, N = c.qk_nope_head_dim, P = c.qk_rope_head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(N + P));
  std::vector<float> scratch, gathered;
  std::vector<int32_t> order;
  for (size_t i = 0; i < rows_idx.size(); ++i) {
    const int64_t r = rows_idx[i];
    // Gather the selected rows (from whatever pages hold them) in selection order; the op then
    // sees exactly the values and order of a contiguous cache.
    const int64_t n = static_cast<int64_t>(sel[r].size());
    gathered.resize(static_cast<size_t>(n * (L + P)));
    order.resize(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) {
      std::copy_n(latent_of(r, sel[r][j]), L + P, gathered.data() + j * (L + P));
      order[j] = static_cast<int32_t>(j);
    }
    scratch.resize(static_cast<size_t>(n));
    const int64_t k = static_cast<int64_t>(i);
    cpu::MlaAttendRow(q_abs + k * H * L, q_pe + k * H * P, H, L, P, gathered.data(), L + P, order.data(), n, scale,
                      o_lat + k * H * L, scratch.data());
  }
}

namespace {
std::atomic<int64_t> g_fetch_piece_floats{kFetchPieceFloats};
}  // namespace

void SetFetchPieceFloats(int64_t floats) { g_fetch_piece_floats = std::max<int64_t>(floats, 1); }
int64_t FetchPieceFloats() { return g_fetch_piece_floats.load(); }

SplitPlan PlanSplit(std::span<const int> row_owner, std::span<const uint8_t> row_held,
                    std::span<const uint8_t> row_fetch, std::span<const int64_t> row_group,
                    const std::vector<std::vector<int32_t>>& sel, int world, int me) {
  const int64_t R = static_cast<int64_t>(row_owner.size());
  SplitPlan p;
  p.ask.resize(static_cast<size_t>(world));
  p.owner_rows.assign(static_cast<size_t>(world), 0);
  for (int64_t r = 0; r < R; ++r) {
    if (row_held[r]) {
      p.mine.push_back(r);
    } else if (row_fetch[r]) {
      p.fetched.push_back(r);
    }
    if (row_owner[r] >= 0 && !row_fetch[r]) {
      if (row_owner[r] == me) {
        p.serve.push_back(r);
      } else {
        p.ask[static_cast<size_t>(row_owner[r])].push_back(r);
      }
    }
  }
  for (int64_t r = 0; r < R; ++r) {
    if (!row_fetch[r]) continue;
    std::vector<int32_t>& u = p.unions[row_group[r]];
    u.insert(u.end(), sel[r].begin(), sel[r].end());
    p.group_owner[row_group[r]] = row_owner[r];
    p.group_row.emplace(row_group[r], static_cast<int>(r));
  }
  for (auto& [g, u] : p.unions) {
    std::sort(u.begin(), u.end());
    u.erase(std::unique(u.begin(), u.end()), u.end());
    const int o = p.group_owner.at(g);
    p.offset[g] = p.owner_rows[static_cast<size_t>(o)];
    p.owner_rows[static_cast<size_t>(o)] += static_cast<int64_t>(u.size());
  }
  return p;
}

int64_t SplitPlan::FetchedIndex(int64_t group, int32_t token) const {
  const std::vector<int32_t>& u = unions.at(group);
  return offset.at(group) + (std::lower_bound(u.begin(), u.end(), token) - u.begin());
}

absl::Status MlaAttendSplit(const ModelConfig& c, int64_t heads, const MlaProjections& proj,
                            std::span<const int> row_owner, std::span<const uint8_t> row_held,
                            std::span<const uint8_t> row_fetch, std::span<const int64_t> row_group,
                            const TensorParallel& tp, const RowOf& latent_of,
                            const std::vector<std::vector<int32_t>>& sel, float* o_lat, OwnerSplitStats* stats) {
  const int64_t H = heads, Lr = c.kv_lora_rank, P = c.qk_rope_head_dim;
  const int64_t W = Lr + P;
  const int world = tp.world, me = tp.rank;
  SplitPlan plan = PlanSplit(row_owner, row_held, row_fetch, row_group, sel, world, me);
  const std::vector<int64_t>&mine = plan.mine, &fetched = plan.fetched, &serve = plan.serve;
  const std::vector<std::vector<int64_t>>& ask = plan.ask;
  const std::map<int64_t, std::vector<int32_t>>& unions = plan.unions;
  const std::map<int64_t, int64_t>& offset = plan.offset;
  const std::map<int64_t, int>&group_owner = plan.group_owner, &group_row = plan.group_row;
  const std::vector<int64_t>& owner_rows = plan.owner_rows;
  std::vector<std::vector<float>> history(static_cast<size_t>(world));
  if (!unions.empty()) {
    std::vector<float>& out = history[static_cast<size_t>(me)];
    out.resize(static_cast<size_t>(owner_rows[static_cast<size_t>(me)] * W));
    for (const auto& [g, u] : unions) {
      if (group_owner.at(g) != me) continue;
      const int64_t r0 = group_row.at(g);
      for (size_t i = 0; i < u.size(); ++i) {
        std::copy_n(latent_of(r0, u[i]), W, out.data() + (offset.at(g) + static_cast<int64_t>(i)) * W);
      }
    }
    for (int q = 0; q < world; ++q) {
      if (q != me) history[static_cast<size_t>(q)].resize(static_cast<size_t>(owner_rows[static_cast<size_t>(q)] * W));
    }
    // In pieces of at most FetchPieceFloats() a message: every rank computes the same count.
    std::vector<std::span<const float>> send(static_cast<size_t>(world), history[static_cast<size_t>(me)]);
    std::vector<std::span<float>> recv(history.begin(), history.end());
    const int64_t most = *std::max_element(owner_rows.begin(), owner_rows.end()) * W;
    FERRY_RETURN_IF_ERROR(ExchangeInPieces(tp, send, recv, most, FetchPieceFloats(), stats, &stats->fetch_pieces));
    for (int q = 0; q < world; ++q) {
      if (q != me) stats->rows_fetched += owner_rows[static_cast<size_t>(q)];
    }
  }
  if (!fetched.empty()) {
    // Renumbered: token t of conversation g is row offset[g] + (its index in unions[g]).
    const RowOf fetched_of = [&](int64_t r, int64_t t) -> const float* {
      return history[static_cast<size_t>(row_owner[r])].data() +
             plan.FetchedIndex(row_group[r], static_cast<int32_t>(t)) * W;
    };
    const int64_t orow = H * Lr;
    std::vector<float> qa(fetched.size() * static_cast<size_t>(H * Lr)), qp(fetched.size() * static_cast<size_t>(H * P));
    std::vector<float> out(fetched.size() * static_cast<size_t>(orow));
    for (size_t i = 0; i < fetched.size(); ++i) {
      std::copy_n(proj.q_abs.data() + fetched[i] * H * Lr, H * Lr, qa.data() + i * H * Lr);
      std::copy_n(proj.q_pe.data() + fetched[i] * H * P, H * P, qp.data() + i * H * P);
    }
    MlaAttendLatent(c, H, qa.data(), qp.data(), fetched, fetched_of, sel, out.data());
    for (size_t i = 0; i < fetched.size(); ++i) std::copy_n(out.data() + i * orow, orow, o_lat + fetched[i] * orow);
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
    stats->rows_shipped += n;
    stats->floats_sent += n * qrow;
  }
  {
    const auto t0 = std::chrono::steady_clock::now();
    FERRY_RETURN_IF_ERROR(tp.comm->Exchange(send, recv));
    stats->exchange_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
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
    stats->rows_served += ns;
    stats->floats_sent += ns * orow;
  }
  {
    const auto t0 = std::chrono::steady_clock::now();
    FERRY_RETURN_IF_ERROR(tp.comm->Exchange(send, recv));
    stats->exchange_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
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
