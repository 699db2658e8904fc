#include "worker/step_executor.h"

#include <vector>

#include "dataplane/dataplane.h"
#include "tests/catch.h"

namespace ferry::worker {
namespace {

TEST_CASE("A step failing after it changed state: never a clean refusal - and a peer timeout keeps its peer",
          "[worker]") {
  // A data-plane timeout during a carry: DEADLINE_EXCEEDED and the peer stay (the worker exits
  // kExitPeerTimeout naming it), with the step in the message.
  const absl::Status timeout = dataplane::WithWaitedFor(absl::DeadlineExceededError("rank 1 did not send"), {1});
  const absl::Status carry = FailedAfterChanges("step 9: carrying latent rows", timeout);
  CHECK(absl::IsDeadlineExceeded(carry));
  CHECK(carry.message() == "step 9: carrying latent rows: rank 1 did not send");
  CHECK(dataplane::WaitedFor(carry) == std::vector<int>{1});
  // INVALID_ARGUMENT would read as a refusal every rank made alike: INTERNAL instead.
  const absl::Status bad = FailedAfterChanges("", absl::InvalidArgumentError("segment 0: token 1 is 999"));
  CHECK(absl::IsInternal(bad));
  CHECK(bad.message() == "segment 0: token 1 is 999");
  CHECK(absl::IsUnavailable(FailedAfterChanges("", absl::UnavailableError("x"))));
}

}  // namespace
}  // namespace ferry::worker
