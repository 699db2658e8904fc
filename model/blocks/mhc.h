// Manifold-constrained hyper-connections (mHC) of glm5_next: the residual stream is S parallel
// streams (hc_mult, 4 at real size), and each layer site (attention, FFN) mixes them in and out
// with weights computed per token from the streams themselves, all in float32.
//
// Per token, with h [S, D] the streams and f = flatten(h) [S * D]:
//   r    = f * rsqrt(mean(f^2) + rms_norm_eps)            (no weight)
//   m    = r · fn^T                                        [(2 + S) * S]
//   pre  = sigmoid(m[0:S] * scale[0] + base[0:S]) + hc_eps
//   post = 2 * sigmoid(m[S:2S] * scale[1] + base[S:2S])
//   comb = softmax_rows(m[2S:].view(S, S) * scale[2] + base[2S:].view(S, S)) + hc_eps,
//          then comb /= colsum + hc_eps, then (iters - 1) times: /= rowsum + eps, /= colsum + eps
//   in:  u = sum_j pre_j h_j                               [D], the site's input
//   out: h_k <- post_k * y + sum_j comb[j, k] h_j          (y [D] the site's output)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/checkpoint/config.h"
#include "model/checkpoint/weights.h"

namespace ferry::model {

struct MhcWeights {
  Weight fn;     // [(2 + S) * S, S * D]
  Weight base;   // [(2 + S) * S]
  Weight scale;  // [3]
};

// Loads `<site>_fn`, `<site>_base`, `<site>_scale` (site "hc_attn" or "hc_ffn") under the prefix.
absl::StatusOr<MhcWeights> LoadMhc(const WeightLoader& w, const std::string& site, const ModelConfig& c);

// The per-token mixing weights of one site.
struct MhcMix {
  std::vector<float> pre;   // [R, S]
  std::vector<float> post;  // [R, S]
  std::vector<float> comb;  // [R, S, S], comb[r][j][k]
};

// Computes the mix for R tokens from streams h [R, S, D] and writes each token's site input
// u [R, D].
void MhcPre(const MhcWeights& w, const ModelConfig& c, const float* h, int64_t rows, MhcMix* mix, float* u);

// h [R, S, D] <- post_k * y + sum_j comb[j, k] h_j, per token; y [R, D].
void MhcPost(const MhcMix& mix, const ModelConfig& c, const float* y, int64_t rows, float* h);

}  // namespace ferry::model
