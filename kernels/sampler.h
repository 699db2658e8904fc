// What a row's sampler is told and what it gives back, the same plain bytes for both backends'
// samplers (kernels/cpu/sampling.h SampleRow, kernels/cuda/ops.h SampleRows): the CUDA one reads
// RowSampler from device memory and writes SampledToken there.
#pragma once

#include <cstdint>

namespace ferry::kernels {

// Most log-probabilities of likely tokens a row may ask for (OpenAI's top_logprobs limit).
inline constexpr int32_t kMaxTopLogprobs = 20;

struct RowSampler {
  float temperature = 0.0f;    // <= 0: greedy (the argmax, ties to the lower id)
  int32_t top_k = 0;           // 0: no limit
  float top_p = 1.0f;          // in (0, 1]; 1: no limit
  int32_t top_logprobs = -1;   // -1: no log-probabilities; n in [0, kMaxTopLogprobs]: the token's
                               // and the n most likely tokens'
  double uniform = 0.0;        // the draw in [0, 1) that picks among the kept tokens
};

struct SampledToken {
  // The picked id; -1 when the row's logits hold a NaN or +infinity, or no finite value (nothing
  // is picked from such a row).
  int32_t token = -1;
  // log_softmax of the raw logits (temperature 1, before top-k and top-p) at `token`, and at the
  // n_top most likely tokens (descending, ties to the lower id), with top_logprobs >= 0.
  float logprob = 0.0f;
  int32_t n_top = 0;
  int32_t top_ids[kMaxTopLogprobs] = {};
  float top_logprobs[kMaxTopLogprobs] = {};
};

}  // namespace ferry::kernels
