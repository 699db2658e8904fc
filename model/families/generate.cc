#include "model/families/generate.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "model/families/step_rows.h"

namespace ferry::model {

absl::StatusOr<GenerateResult> Generate(CausalLM& model, const std::vector<int32_t>& prompt,
                                        const GenerateOptions& opt, bool keep_logits) {
  if (prompt.empty()) return absl::InvalidArgumentError("the prompt is empty");
  if (opt.max_tokens < 0) {
    return absl::InvalidArgumentError(absl::StrCat("max_tokens is ", opt.max_tokens, "; it must be >= 0"));
  }
  std::vector<int32_t> stops = opt.stop_token_ids;
  if (!opt.ignore_eos) {
    stops.insert(stops.end(), model.config().eos_token_ids.begin(), model.config().eos_token_ids.end());
  }
  std::unique_ptr<SequenceState> seq = model.NewSequence();
  if (opt.latent_owner >= 0) FERRY_RETURN_IF_ERROR(seq->SetLatentOwner(opt.latent_owner, /*borrowed=*/false));
  GenerateResult res;
  res.finish_reason = "length";

  // Every forward samples its last row where the logits are (the prompt's earlier chunks too:
  // a pick costs less than bringing their logits back); the draw depends on the seed and the
  // position alone, as in serving.
  const int64_t n = static_cast<int64_t>(prompt.size());
  const int64_t chunk = opt.prefill_chunk > 0 ? opt.prefill_chunk : n;
  auto run = [&](std::span<const int32_t> tokens, int64_t position) -> absl::StatusOr<step::SampledToken> {
    ForwardSegment seg{seq.get(), tokens, keep_logits, SamplerAt(opt.sampling, opt.seed, position)};
    FERRY_ASSIGN_OR_RETURN(ForwardOutput out, model.Forward(std::span<const ForwardSegment>(&seg, 1)));
    if (keep_logits) res.logits.insert(res.logits.end(), out.logits.begin(), out.logits.end());
    if (out.picks[0].token < 0) {
      return absl::InternalError(absl::StrCat("the logits after ", position, " tokens hold a NaN or an infinity"));
    }
    return SampledOf(out.picks[0], opt.sampling.top_logprobs);
  };
  step::SampledToken next;
  for (int64_t start = 0; start < n; start += chunk) {
    const int64_t len = std::min(chunk, n - start);
    FERRY_ASSIGN_OR_RETURN(next, run(std::span<const int32_t>(prompt.data() + start, static_cast<size_t>(len)),
                                     start + len));
  }
  for (int64_t i = 0; i < opt.max_tokens; ++i) {
    const int32_t tok = next.token;
    res.tokens.push_back(tok);
    if (opt.sampling.top_logprobs >= 0) res.logprobs.push_back(next);
    if (std::find(stops.begin(), stops.end(), tok) != stops.end()) {
      res.finish_reason = "stop";
      break;
    }
    if (i + 1 == opt.max_tokens && !keep_logits) break;  // the last token needs no forward
    FERRY_ASSIGN_OR_RETURN(next, run(std::span<const int32_t>(&res.tokens.back(), 1), n + i + 1));
  }
  return res;
}

}  // namespace ferry::model
