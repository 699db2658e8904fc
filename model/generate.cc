#include "model/generate.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace ferry::model {

absl::StatusOr<GenerateResult> Generate(CausalLM& model, const std::vector<int32_t>& prompt,
                                        const GenerateOptions& opt, bool keep_logits) {
  if (prompt.empty()) return absl::InvalidArgumentError("the prompt is empty");
  if (opt.max_tokens < 0) {
    return absl::InvalidArgumentError(absl::StrCat("max_tokens is ", opt.max_tokens, "; it must be >= 0"));
  }
  const int64_t vocab = model.config().vocab_size;
  std::vector<int32_t> stops = opt.stop_token_ids;
  if (!opt.ignore_eos) {
    stops.insert(stops.end(), model.config().eos_token_ids.begin(), model.config().eos_token_ids.end());
  }
  std::unique_ptr<SequenceState> seq = model.NewSequence();
  if (opt.latent_owner >= 0) FERRY_RETURN_IF_ERROR(seq->SetLatentOwner(opt.latent_owner, /*borrowed=*/false));
  std::mt19937_64 rng(opt.seed);
  GenerateResult res;
  res.finish_reason = "length";

  const int64_t n = static_cast<int64_t>(prompt.size());
  const int64_t chunk = opt.prefill_chunk > 0 ? opt.prefill_chunk : n;
  // Greedy without the logits kept: the model picks each token where its logits are.
  const bool argmax_only = !keep_logits && opt.sampling.temperature <= 0.0f;
  std::vector<float> last;
  int32_t picked = -1;
  auto take = [&](const ForwardOutput& out) {
    if (keep_logits) res.logits.insert(res.logits.end(), out.logits.begin(), out.logits.end());
    if (argmax_only) {
      picked = out.argmax[0];
    } else {
      last.assign(out.logits.end() - vocab, out.logits.end());
    }
  };
  for (int64_t start = 0; start < n; start += chunk) {
    const int64_t len = std::min(chunk, n - start);
    ForwardSegment seg{seq.get(), std::span<const int32_t>(prompt.data() + start, static_cast<size_t>(len)),
                       keep_logits, argmax_only};
    FERRY_ASSIGN_OR_RETURN(ForwardOutput out, model.Forward(std::span<const ForwardSegment>(&seg, 1)));
    take(out);
  }
  for (int64_t i = 0; i < opt.max_tokens; ++i) {
    const int32_t tok = argmax_only ? picked : step::SampleToken(last.data(), vocab, opt.sampling, rng);
    res.tokens.push_back(tok);
    if (std::find(stops.begin(), stops.end(), tok) != stops.end()) {
      res.finish_reason = "stop";
      break;
    }
    if (i + 1 == opt.max_tokens && !keep_logits) break;  // the last token needs no forward
    ForwardSegment seg{seq.get(), std::span<const int32_t>(&res.tokens.back(), 1), false, argmax_only};
    FERRY_ASSIGN_OR_RETURN(ForwardOutput out, model.Forward(std::span<const ForwardSegment>(&seg, 1)));
    take(out);
  }
  return res;
}

}  // namespace ferry::model
