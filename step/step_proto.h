// The control plane's encoding of a step (ferry.control.v1.StepCommand, proto/ferry/v1/
// control.proto): the coordinator encodes each step once for every rank; each worker decodes it
// for itself.
//
// Thread safety: pure functions.
#pragma once

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

}  // namespace ferry::step
