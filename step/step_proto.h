// The control plane's encoding of a step (ferry.control.v1.StepCommand, proto/ferry/v1/
// control.proto): the coordinator encodes each step once for every rank; each worker decodes it
// for itself.
//
// Thread safety: pure functions.
#pragma once

#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "ferry/v1/control.pb.h"
#include "step/step.h"

namespace ferry::step {

// Encodes `step`. A segment with an owner (the latent split) carries every rank's latent pages
// and, for a carry, the rank its rows come from.
void StepToProto(const Step& step, control::v1::StepCommand* cmd);

// Decodes `cmd` on rank `rank` of `world`: a split segment keeps only this rank's latent pages
// (latent_pages has `world` entries, the others empty). INVALID_ARGUMENT naming the step and the
// value when a segment's owner or carry source is outside [0, world).
absl::StatusOr<Step> StepFromProto(const control::v1::StepCommand& cmd, int rank, int world);

// Rank 0's sampled tokens (one per segment with `sample`, in order) into its result: the ids, and
// the log-probabilities of those whose segment asked for them.
void SampledToProto(std::span<const SampledToken> sampled, control::v1::StepResult* res);

// Decodes rank 0's result of `step`. INTERNAL naming the rank and the step when it does not hold
// one token per sampled segment (each in [0, vocab), or -1 for non-finite logits) and one set of
// log-probabilities per sampled segment that asked for them (at most as many top tokens as asked).
absl::StatusOr<std::vector<SampledToken>> SampledFromProto(const control::v1::StepResult& res, const Step& step,
                                                           int64_t vocab);

}  // namespace ferry::step
