// The KV pool the coordinator serves with, chosen once every worker has reported its room: seed
// 000 step 1 (kvpool::ComputePlan) applied to the smallest room, in the element type the
// workers' arenas really store (each reports the bytes of a page and of a fixed state).
//
// The pool's books hold, for every rank alike:
//   pages layout:   the plan's pages (windows, lanes, floor, shared) + the prompt cache's share;
//   windows layout: a window of pages (ceil(context / page_size)) for every lane + the cache's;
// where the cache's share is its bytes in whole pages. Each lane's fixed state is planned
// outside the pool; a state the prompt cache keeps past its request holds
// ceil(fixed / page_bytes) pool pages for its fixed state (SchedulerOptions::kept_fixed_pages).
//
// With the latent split (req.owner_split resolved for these ranks, the layout and the workers'
// latent page bytes; the choice is opts.owner_split) the plan runs at the split's cost
// (kvpool::PlanInput::split_ranks): every rank's key arena holds the pool's pages and its latent
// arena latent_pages (the plan's, plus the cache's share over the ranks).
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/scheduler.h"
#include "kvpool/plan.h"

namespace ferry::coordinator {

// What one rank reported when it became ready.
struct RankRoom {
  int64_t room_bytes = 0;   // memory left for caches after its weights
  int64_t page_bytes = 0;   // one page of its arena (every layer's rows of page_size tokens)
  int64_t fixed_bytes = 0;  // one conversation's fixed state
  int64_t latent_page_bytes = 0;  // the part of page_bytes the latent split keeps on owners only
};

struct PoolRequest {
  kvpool::KvPages mode = kvpool::KvPages::kAuto;              // --kv-pages
  kvpool::OwnerSplit owner_split = kvpool::OwnerSplit::kOff;  // --owner-split (resolved here)
  int64_t cache_budget_bytes = kvpool::kDefaultCacheBudget;  // --prompt-cache-gib
  int64_t explicit_pages = 0;         // --kv-pool-pages (> 0: exactly this many, no plan)
  int64_t explicit_cache_tokens = -1;  // --prompt-cache-tokens (>= 0: exactly this budget)
};

struct PoolChoice {
  SchedulerOptions opts;   // the base options with kv_pages, prompt_cache_tokens, kept_fixed_pages set
  kvpool::PlanInput input;
  kvpool::Plan plan;       // meaningful when from_plan
  bool from_plan = false;
  int smallest_rank = 0;   // whose room decided
  std::string summary;     // what the coordinator logs
};

// The pool for these ranks. `base` carries lanes (max_running), context and page_size.
// Errors: INVALID_ARGUMENT for no ranks or a rank that reported no page bytes; the plan's
// refusal (RESOURCE_EXHAUSTED with the numbers and the remedy) when the streams do not fit;
// INVALID_ARGUMENT when explicit pages cannot hold one --context, or for --owner-split on when
// the workers report no latent part of their pages (a model or backend without the split).
absl::StatusOr<PoolChoice> ChoosePool(const std::vector<RankRoom>& ranks, const SchedulerOptions& base,
                                      const PoolRequest& req);

}  // namespace ferry::coordinator
