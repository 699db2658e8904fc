// Token sampling on the CPU: greedy, temperature, top-k, top-p, and log-probabilities
// (kernels/sampler.h). This is the reference the device sampler (kernels/cuda SampleRows) follows.
#pragma once

#include <cstdint>

#include "kernels/sampler.h"

namespace ferry::kernels::cpu {

// Picks a token from logits [vocab]. Greedy: the argmax (ties to the lower id). Otherwise:
// softmax(logits / T) (float32 exponentials summed in float64) over the top_k largest (ties to
// the lower id), then the smallest prefix, in descending probability, whose mass reaches top_p;
// the draw `uniform` times the kept mass picks the first token whose running mass exceeds it.
// REQUIRES: vocab >= 1, 0 <= uniform < 1. NaN logits are never picked unless every logit is NaN
// (then id 0).
int32_t SampleToken(const float* logits, int64_t vocab, float temperature, int32_t top_k, float top_p,
                    double uniform);

// SampleToken with `s`'s parameters, plus the log-probabilities it asks for; token -1 (nothing
// picked) when the logits hold a NaN or +infinity or no finite value.
SampledToken SampleRow(const float* logits, int64_t vocab, const RowSampler& s);

}  // namespace ferry::kernels::cpu
