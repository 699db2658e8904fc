#include "coordinator/pool.h"

#include <algorithm>
#include <climits>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace ferry::coordinator {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

absl::StatusOr<PoolChoice> ChoosePool(const std::vector<RankRoom>& ranks, const SchedulerOptions& base,
                                      const PoolRequest& req) {
  if (ranks.empty()) return absl::InvalidArgumentError("no rank reported its room");
  PoolChoice c;
  c.opts = base;
  const int64_t P = base.page_size;
  int64_t room = ranks[0].room_bytes, page_bytes = 0, fixed = 0, latent_bytes = 0;
  for (size_t k = 0; k < ranks.size(); ++k) {
    if (ranks[k].page_bytes <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("rank ", k, " reported ", ranks[k].page_bytes, " bytes a KV page"));
    }
    if (ranks[k].room_bytes < room) {
      room = ranks[k].room_bytes;
      c.smallest_rank = static_cast<int>(k);
    }
    page_bytes = std::max(page_bytes, ranks[k].page_bytes);
    fixed = std::max(fixed, ranks[k].fixed_bytes);
    latent_bytes = std::max(latent_bytes, ranks[k].latent_page_bytes);
  }
  const bool model_splits = latent_bytes > 0 && latent_bytes < page_bytes;
  if (req.owner_split == kvpool::OwnerSplit::kOn && ranks.size() > 1 && !model_splits) {
    return absl::InvalidArgumentError(absl::StrCat("the latent split needs the workers' latent page bytes: they report ",
                                                   latent_bytes, " of ", page_bytes, " (a model without the split?)"));
  }
  const kvpool::Layout layout_if_planned =
      req.explicit_pages > 0 ? kvpool::Layout::kPages
                             : kvpool::ResolveLayout(req.mode, static_cast<int64_t>(ranks.size()), kvpool::CacheDtype::kBf16)
                                   .value_or(kvpool::Layout::kWindows);
  const bool split = kvpool::ResolveOwnerSplit(req.owner_split, static_cast<int64_t>(ranks.size()), layout_if_planned,
                                               model_splits);
  c.opts.owner_split = split;
  c.opts.kept_fixed_pages = CeilDiv(fixed, page_bytes);
  const int64_t window = CeilDiv(base.max_context, P);  // pages one request may reach

  if (req.explicit_pages > 0) {
    if (req.explicit_pages < window || req.explicit_pages > INT32_MAX) {
      return absl::InvalidArgumentError(absl::StrCat("--kv-pool-pages ", req.explicit_pages, " holds ",
                                                     req.explicit_pages * P, " tokens: need one --context of ",
                                                     base.max_context, " (", window, " pages) and at most ", INT32_MAX));
    }
    c.opts.kv_pages = req.explicit_pages;
    c.opts.latent_pages = req.explicit_pages;
    c.opts.prompt_cache_tokens = std::max<int64_t>(req.explicit_cache_tokens, 0);
    c.opts.kv_layout = "pages";
    c.summary = absl::StrCat("KV pool: --kv-pool-pages ", c.opts.kv_pages, " of ", P, " tokens (", page_bytes,
                             " bytes a page a rank), prompt cache ", c.opts.prompt_cache_tokens, " tokens",
                             split ? "; latent split: as many latent pages a rank" : "");
    return c;
  }

  FERRY_ASSIGN_OR_RETURN(kvpool::Layout layout,
                         kvpool::ResolveLayout(req.mode, static_cast<int64_t>(ranks.size()), kvpool::CacheDtype::kBf16));
  kvpool::PlanInput& in = c.input;
  in.layout = layout;
  // The arenas' rows, whatever their type; with the split, the part on owners only apart.
  in.bytes_per_token.latent = CeilDiv(split ? latent_bytes : page_bytes, P);
  in.bytes_per_token.replicated = split ? CeilDiv(page_bytes - latent_bytes, P) : 0;
  in.split_ranks = split ? static_cast<int64_t>(ranks.size()) : 1;
  in.page_size = P;
  in.fixed_bytes = fixed;
  in.lanes = std::min<int64_t>(base.max_running, kvpool::kMaxLanes);
  in.context = std::min<int64_t>(base.max_context, kvpool::kMaxContext);
  in.cache_budget_bytes = std::clamp<int64_t>(req.cache_budget_bytes, 0, kvpool::kMaxRoomBytes);
  in.room_bytes = std::clamp<int64_t>(room, 0, kvpool::kMaxRoomBytes);
  FERRY_ASSIGN_OR_RETURN(c.plan, kvpool::ComputePlan(in));
  c.from_plan = true;
  const int64_t plan_page_bytes = c.plan.page_bytes;
  const int64_t cache_pages = c.plan.cache_bytes / plan_page_bytes;
  const int64_t stream_pages = layout == kvpool::Layout::kPages ? c.plan.pages : c.plan.window_streams * window;
  c.opts.kv_pages = std::min<int64_t>(stream_pages + cache_pages, INT32_MAX);
  c.opts.latent_pages =
      split ? std::min<int64_t>(c.plan.latent_pages + CeilDiv(cache_pages, in.split_ranks), INT32_MAX) : c.opts.kv_pages;
  c.opts.kv_layout = kvpool::LayoutName(layout);
  c.opts.prompt_cache_tokens = req.explicit_cache_tokens >= 0 ? req.explicit_cache_tokens : cache_pages * P;
  c.summary = absl::StrCat("KV plan (", kvpool::LayoutName(layout), ", ", in.bytes_per_token.total(),
                           " bytes a token a rank as the arenas store it, smallest room: rank ", c.smallest_rank, "):\n",
                           kvpool::FormatPlan(in, c.plan), "pool: ", c.opts.kv_pages, " pages = ", stream_pages,
                           " for the streams + ", cache_pages, " for the prompt cache (", c.opts.prompt_cache_tokens,
                           " tokens); a kept fixed state holds ", c.opts.kept_fixed_pages, " pages",
                           split ? absl::StrCat("; latent split: ", c.opts.latent_pages, " latent pages a rank") : "");
  return c;
}

}  // namespace ferry::coordinator
