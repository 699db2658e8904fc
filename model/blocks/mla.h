// Multi-head latent attention (MLA) in its absorbed form, shared by both families
// (glm_moe_dsa with a RoPE part, glm5_next NoPE with rope = 0).
//
// Shapes (H heads, L = kv_lora_rank, N = qk_nope_head_dim, P = qk_rope_head_dim, V = v_head_dim):
//   cache row of a token   [L + P]   = [ RMSNorm(c) | RoPE(k_pe) ]
//   q_abs of a row         [H, L]    = W_UK_h^T q_nope_h
//   q_pe of a row          [H, P]    RoPE'd
//   attention output       [H, V]    = W_UV_h (sum_s p_s c_s), then o_proj over [H * V]
// The score scale is (N + P)^-0.5.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "model/checkpoint/config.h"
#include "model/cache/paged_cache.h"
#include "model/parallel/tensor_parallel.h"
#include "model/checkpoint/weights.h"

namespace ferry::model {

// Under tensor parallelism a rank holds `heads` = H / W of the heads: its rows of q_b and kv_b
// and its columns of o_proj; q_a, kv_a and the norms are replicated, so every rank computes the
// same cache rows.
struct MlaWeights {
  int64_t heads = 0;  // heads held by this rank
  Weight q_a;        // [q_lora, hidden]
  Weight q_a_norm;   // [q_lora]
  Weight q_b;        // [H * (N + P), q_lora]
  Weight kv_a;       // [L + P, hidden]
  Weight kv_a_norm;  // [L]
  Weight w_uk_t;     // [H * L, N]: per head, W_UK^T (kv_b_proj's first N rows of the head, transposed)
  Weight w_uv;       // [H * V, L]: per head, kv_b_proj's last V rows of the head
  Weight o_proj;     // [hidden, H * V]
  float norm_eps = 1e-6f;  // q_a_layernorm / kv_a_layernorm epsilon
};

// Loads `q_a_proj`, `q_a_layernorm`, `q_b_proj`, `kv_a_proj_with_mqa`, `kv_a_layernorm`,
// `kv_b_proj`, `o_proj` under the loader's prefix ("...self_attn."). `norm_eps` is the
// epsilon of the two low-rank norms (1e-6 for glm_moe_dsa, rms_norm_eps for glm5_next).
absl::StatusOr<MlaWeights> LoadMla(const WeightLoader& w, const ModelConfig& c, float norm_eps,
                                   const TensorParallel& tp = {});

// The absorbed queries of a step's R rows at one layer (what the latent split ships to owners).
struct MlaProjections {
  std::vector<float> q_abs;  // [R, heads, L]
  std::vector<float> q_pe;   // [R, heads, P]
};

// MLA attention's latent half, for the latent split (the owner of a conversation's rows attends
// for another rank's heads; docs/owner-split.md):
// The attended latents o_lat [n, heads, L] of the rows `rows_idx` (indices into sel and
// latent_of's row argument), from their queries q_abs [n, heads, L] and q_pe [n, heads, P]
// (packed in the order of rows_idx). The values and summation order are MlaAttend's.
void MlaAttendLatent(const ModelConfig& c, int64_t heads, const float* q_abs, const float* q_pe,
                     std::span<const int64_t> rows_idx, const RowOf& latent_of,
                     const std::vector<std::vector<int32_t>>& sel, float* o_lat);
// The latent split (docs/owner-split.md): o_lat [R, heads, L] of every row of a step, where
// row_owner[r] is the rank that alone holds row r's latent rows (-1: every rank holds them),
// row_held[r] whether this rank does, row_fetch[r] whether r belongs to a prompt chunk whose
// history the other ranks fetch, and row_group[r] its conversation in the step. Rows held here
// are attended here. For a fetch row the owner sends every other rank, once per conversation,
// the union of the rows its chunk's selections name (ascending, in pieces of at most
// kFetchPieceFloats a message) and every rank attends the chunk itself. For the other rows the
// queries go to their owners in one exchange, the owners attend them for this rank's heads and
// send the latents back in a second. Attention always runs MlaAttendLatent over the same values
// in the same order. Every rank calls it with the same arguments but `proj`'s queries.
// Errors: the collective's.
// Who attends which row of a step under the latent split, derived alike on every rank from the
// step (MlaAttendSplit's arguments): mine, the rows this rank attends with its own latent rows;
// fetched, those it attends with rows fetched from their owner; serve, the rows it owns that
// every other rank asks for; ask[q], the rows whose owner q attends for this rank. unions[g]: the
// ascending union of the selections of conversation g's fetch rows, which its owner
// (group_owner[g]; group_row[g] one of its rows) sends every other rank in its history buffer,
// offset[g] rows in; owner_rows[q]: the rows of rank q's history buffer.
struct SplitPlan {
  std::vector<int64_t> mine, fetched, serve;
  std::vector<std::vector<int64_t>> ask;
  std::map<int64_t, std::vector<int32_t>> unions;
  std::map<int64_t, int64_t> offset;
  std::map<int64_t, int> group_owner, group_row;
  std::vector<int64_t> owner_rows;
  // The row of token `token` (in unions[group]) in its owner's history buffer.
  int64_t FetchedIndex(int64_t group, int32_t token) const;
};
SplitPlan PlanSplit(std::span<const int> row_owner, std::span<const uint8_t> row_held,
                    std::span<const uint8_t> row_fetch, std::span<const int64_t> row_group,
                    const std::vector<std::vector<int32_t>>& sel, int world, int me);
inline constexpr int64_t kFetchPieceFloats = int64_t{1} << 20;
// The piece size the history fetch uses, process-wide (default kFetchPieceFloats; tests lower it
// to force many pieces). Every rank of a group must use the same. REQUIRES: floats >= 1.
void SetFetchPieceFloats(int64_t floats);
int64_t FetchPieceFloats();
absl::Status MlaAttendSplit(const ModelConfig& c, int64_t heads, const MlaProjections& proj,
                            std::span<const int> row_owner, std::span<const uint8_t> row_held,
                            std::span<const uint8_t> row_fetch, std::span<const int64_t> row_group,
                            const TensorParallel& tp, const RowOf& latent_of,
                            const std::vector<std::vector<int32_t>>& sel, float* o_lat, OwnerSplitStats* stats);
}  // namespace ferry::model
