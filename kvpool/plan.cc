#include "kvpool/plan.h"

#include <algorithm>
#include <cassert>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status.h"

namespace ferry::kvpool {
namespace {

bool IsPowerOfTwo(int64_t x) { return x > 0 && (x & (x - 1)) == 0; }

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

absl::Status CheckInput(const PlanInput& in) {
  auto out_of = [](absl::string_view what, int64_t v, int64_t lo, int64_t hi) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " is ", v, "; use ", lo, " to ", hi));
  };
  if (in.room_bytes < 0 || in.room_bytes > kMaxRoomBytes) {
    return out_of("the room (bytes a rank)", in.room_bytes, 0, kMaxRoomBytes);
  }
  if (in.bytes_per_token.latent < 0 || in.bytes_per_token.replicated < 0 ||
      in.bytes_per_token.total() < 1 || in.bytes_per_token.total() > kMaxBytesPerToken) {
    return out_of("bytes a token", in.bytes_per_token.total(), 1, kMaxBytesPerToken);
  }
  if (!IsPowerOfTwo(in.page_size) || in.page_size < kMinPageSize || in.page_size > kMaxPageSize) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--page-size is ", in.page_size, "; use a power of two from ", kMinPageSize, " to ",
        kMaxPageSize, " tokens"));
  }
  if (in.fixed_bytes < 0 || in.fixed_bytes > kMaxFixedBytes) {
    return out_of("the fixed bytes a stream", in.fixed_bytes, 0, kMaxFixedBytes);
  }
  if (in.lanes < 1 || in.lanes > kMaxLanes) return out_of("--parallel", in.lanes, 1, kMaxLanes);
  if (in.context < 1 || in.context > kMaxContext) {
    return out_of("--context", in.context, 1, kMaxContext);
  }
  if (in.cache_budget_bytes < 0 || in.cache_budget_bytes > kMaxRoomBytes) {
    return out_of("the prompt cache budget (bytes)", in.cache_budget_bytes, 0, kMaxRoomBytes);
  }
  if (in.split_ranks < 1 || in.split_ranks > kMaxLanes) {
    return out_of("the latent split's ranks", in.split_ranks, 1, kMaxLanes);
  }
  if (in.split_ranks > 1 && in.layout != Layout::kPages) {
    return absl::InvalidArgumentError("the latent split needs the pages layout (--kv-pages on, or auto from 2 ranks)");
  }
  return absl::OkStatus();
}

// "--context N needs X GiB for the engine's own window ...": not even one stream fits.
absl::Status RefuseContext(const PlanInput& in, int64_t window_bytes, absl::string_view what,
                           int64_t longest) {
  std::string remedy = longest > 0 ? absl::StrCat("lower --context to ", longest, " or less")
                                   : std::string("the budget holds no window; free memory");
  return absl::ResourceExhaustedError(absl::StrCat(
      "--context ", in.context, " needs ", FormatGiB(window_bytes), " GiB for the engine's own ",
      what, ", and the memory budget leaves ", FormatGiB(in.room_bytes), " GiB: ", remedy));
}

absl::StatusOr<Plan> PlanWindows(const PlanInput& in, Plan p) {
  const int64_t bpt = in.bytes_per_token.total();
  const int64_t window = in.context * bpt;
  if (window > in.room_bytes) {
    return RefuseContext(in, window, "window", in.room_bytes / bpt);
  }
  const int64_t stream = window + in.fixed_bytes;  // every stream past the engine's own
  const int64_t left = in.room_bytes - window;
  const int64_t need = (in.lanes - 1) * stream;
  if (need > left) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "--parallel ", in.lanes, " needs ", FormatGiB(need), " GiB for its streams at a ",
        in.context, "-token window, and the memory budget leaves ", FormatGiB(left),
        " GiB: serve --parallel ", p.windows_would_hold, ", or lower --context"));
  }
  p.window_streams = in.lanes;
  p.tokens = in.lanes * in.context;
  p.fixed_bytes_total = (in.lanes - 1) * in.fixed_bytes;
  p.stream_bytes = window + need;
  const int64_t rest = left - need;
  p.cache_bytes = std::min(rest, in.cache_budget_bytes);
  p.unused_bytes = rest - p.cache_bytes;
  return p;
}

absl::StatusOr<Plan> PlanPages(const PlanInput& in, Plan p) {
  const int64_t P = in.page_size;
  const int64_t pb = p.page_bytes;
  const int64_t f = in.fixed_bytes;
  const int64_t L = in.lanes;
  const int64_t wp = p.window_pages;
  const int64_t window = wp * pb;
  const int64_t R = in.room_bytes;
  if (window > R) {
    // The longest context whose ceil(context / P) + 1 pages fit.
    const int64_t pages = R / pb;
    return RefuseContext(in, window, absl::StrCat("window of ", wp, " pages"),
                         pages >= 2 ? (pages - 1) * P : 0);
  }
  // Steps 1 and 3 are what every plan needs: the engine's window, a page and a state a lane.
  const int64_t lane = pb + f;
  const int64_t least = window + (L - 1) * lane;
  if (least > R) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "--parallel ", L, " needs ", FormatGiB(least), " GiB for its streams on ", P,
        "-token pages at a ", in.context, "-token window (", wp,
        " pages for the engine's own window, then ", FormatMiB(f), " MiB of state and a page for "
        "each of the ", L - 1, " others), and the memory budget leaves ", FormatGiB(R),
        " GiB: serve --parallel ", 1 + (R - window) / lane, ", or lower --context"));
  }
  // Step 2, the seed's n; then no more windows than leave step 3 its pages and states (each
  // window in place of a lane's page costs wp - 1 more pages).
  const int64_t n_seed = 1 + (R - window) / (window + f);
  const int64_t n_fit = 1 + (R - least) / ((wp - 1) * pb);
  const int64_t n = std::min({L, n_seed, n_fit});
  p.window_streams = n;
  p.pages_windows = n * wp;
  p.pages_lanes = L - n;
  p.fixed_bytes_total = (L - 1) * f;
  int64_t rest = R - (p.pages_windows + p.pages_lanes) * pb - p.fixed_bytes_total;
  assert(rest >= 0);

  // Step 4, the floor: the rows the windows layout would hold in this room.
  const int64_t floor_pages = CeilDiv(p.windows_would_hold * in.context, P);
  const int64_t have = p.pages_windows + p.pages_lanes;
  if (have < floor_pages) {
    p.pages_floor = std::min(floor_pages - have, rest / pb);
    rest -= p.pages_floor * pb;
  }
  // Steps 5 and 6.
  p.cache_bytes = std::min(rest, in.cache_budget_bytes);
  rest -= p.cache_bytes;
  p.pages_shared = rest / pb;
  p.unused_bytes = rest - p.pages_shared * pb;
  p.pages = have + p.pages_floor + p.pages_shared;
  p.tokens = p.pages * P;
  p.stream_bytes = p.pages * pb + p.fixed_bytes_total;
  assert(p.stream_bytes + p.cache_bytes + p.unused_bytes == R);
  return p;
}

}  // namespace

const char* KvPagesName(KvPages k) {
  switch (k) {
    case KvPages::kAuto: return "auto";
    case KvPages::kOn: return "on";
    case KvPages::kOff: return "off";
  }
  return "?";
}

const char* LayoutName(Layout l) { return l == Layout::kWindows ? "windows" : "pages"; }

absl::StatusOr<KvPages> ParseKvPages(absl::string_view s) {
  if (s == "auto") return KvPages::kAuto;
  if (s == "on") return KvPages::kOn;
  if (s == "off") return KvPages::kOff;
  return absl::InvalidArgumentError(absl::StrCat("--kv-pages is '", s, "'; use auto, on or off"));
}

absl::StatusOr<OwnerSplit> ParseOwnerSplit(absl::string_view s) {
  if (s == "auto") return OwnerSplit::kAuto;
  if (s == "on") return OwnerSplit::kOn;
  if (s == "off") return OwnerSplit::kOff;
  return absl::InvalidArgumentError(absl::StrCat("--owner-split is '", s, "'; use auto, on or off"));
}

bool ResolveOwnerSplit(OwnerSplit mode, int64_t ranks, Layout layout, bool model_splits) {
  if (ranks < 2 || mode == OwnerSplit::kOff) return false;
  return mode == OwnerSplit::kOn || (layout == Layout::kPages && model_splits);
}

absl::StatusOr<Layout> ResolveLayout(KvPages mode, int64_t ranks, CacheDtype dtype) {
  if (ranks < 1) return absl::InvalidArgumentError(absl::StrCat("--ranks is ", ranks, "; use 1 or more"));
  switch (mode) {
    case KvPages::kOff: return Layout::kWindows;
    case KvPages::kOn:
      if (dtype == CacheDtype::kFp8) {
        return absl::InvalidArgumentError(
            "--kv-pages on needs a bf16 cache: FP8 rows on pages are not built; use --kv-cache "
            "bf16, or --kv-pages off");
      }
      return Layout::kPages;
    case KvPages::kAuto:
      return ranks >= 2 && dtype == CacheDtype::kBf16 ? Layout::kPages : Layout::kWindows;
  }
  return absl::InvalidArgumentError("unknown --kv-pages mode");
}

int64_t WindowsThatFit(const PlanInput& in) {
  const int64_t window = in.context * in.bytes_per_token.total();
  if (window > in.room_bytes) return 0;
  return std::min(in.lanes, 1 + (in.room_bytes - window) / (window + in.fixed_bytes));
}

// The latent split: the plan at the average cost of a token, then the arenas cut from it.
static absl::StatusOr<Plan> PlanSplit(const PlanInput& in) {
  const int64_t W = in.split_ranks;
  PlanInput avg = in;
  avg.split_ranks = 1;
  avg.bytes_per_token.latent = CeilDiv(in.bytes_per_token.latent, W);
  FERRY_ASSIGN_OR_RETURN(Plan p, ComputePlan(avg));
  const int64_t P = in.page_size;
  p.key_page_bytes = P * in.bytes_per_token.replicated;
  p.latent_page_bytes = P * in.bytes_per_token.latent;
  const int64_t kb = p.key_page_bytes, lb = p.latent_page_bytes;
  // Bytes the pages may take: what the plan gave them (the fixed states and cache stay).
  const int64_t budget = p.pages * p.page_bytes + p.unused_bytes;
  int64_t K = p.pages;
  int64_t L = std::max(CeilDiv(K, W), p.window_pages);
  while (K > 0 && K * kb + L * lb > budget) {
    // A window's latent pages on one owner take more than the average share: fewer pages.
    K = L > CeilDiv(K, W) ? (kb > 0 ? std::min(K - 1, (budget - L * lb) / kb) : K - 1) : K - 1;
    L = std::max(CeilDiv(K, W), p.window_pages);
  }
  const int64_t least = p.window_pages + (in.lanes - p.window_streams);
  if (K < least || K * kb + L * lb > budget) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the latent split over ", W, " ranks needs ", FormatGiB(least * kb + p.window_pages * lb),
        " GiB for a window of ", p.window_pages, " pages on its owner and a page for each other lane, and the "
        "streams' budget is ", FormatGiB(budget), " GiB (of the ", FormatGiB(in.room_bytes), " GiB room, ",
        FormatGiB(p.cache_bytes), " GiB went to the prompt cache and ", FormatGiB(p.fixed_bytes_total),
        " GiB to the other lanes' fixed state): lower --context (the replicated layout needs more: every rank holds "
        "every latent row)"));
  }
  p.pages_split_cut = p.pages - K;
  p.pages = K;
  p.tokens = K * P;
  p.latent_pages = L;
  p.stream_bytes = K * kb + L * lb + p.fixed_bytes_total;
  p.unused_bytes = in.room_bytes - p.stream_bytes - p.cache_bytes;
  return p;
}

absl::StatusOr<Plan> ComputePlan(const PlanInput& in) {
  if (absl::Status s = CheckInput(in); !s.ok()) return s;
  if (in.split_ranks > 1) return PlanSplit(in);
  Plan p;
  p.layout = in.layout;
  p.lanes = in.lanes;
  p.context = in.context;
  p.page_size = in.page_size;
  p.page_bytes = in.page_size * in.bytes_per_token.total();
  p.room_bytes = in.room_bytes;
  p.windows_would_hold = WindowsThatFit(in);
  if (in.layout == Layout::kWindows) return PlanWindows(in, p);
  p.window_pages = CeilDiv(in.context, in.page_size) + 1;
  return PlanPages(in, p);
}

StreamFit FitStreams(const PlanInput& in, const Plan& p) {
  StreamFit f;
  if (p.layout == Layout::kWindows) {
    f.whole_windows = p.lanes;
    f.even_tokens = p.context;
    return f;
  }
  const int64_t P = p.page_size, wp = p.window_pages, lanes = std::max<int64_t>(p.lanes, 1);
  // Pages every lane can have alike, and whole windows at once: bounded by the key pages every
  // rank holds and, with the split, by each owner's latent arena.
  int64_t each = p.pages / lanes;
  int64_t windows = p.pages / wp;
  if (in.split_ranks > 1) {
    const int64_t W = in.split_ranks;
    each = std::min(each, p.latent_pages / CeilDiv(lanes, W));
    windows = std::min(windows, W * (p.latent_pages / wp));
  }
  f.whole_windows = std::min(lanes, windows);
  f.even_tokens = std::clamp<int64_t>((each - 1) * P, 0, p.context);
  return f;
}

int64_t LongestContext(const PlanInput& in) {
  // Halving: a longer window needs more pages, so what fits is a prefix of 1..context (lo always fits).
  int64_t lo = 0, hi = std::min(in.context, kMaxContext);
  PlanInput probe = in;
  while (lo < hi) {
    probe.context = lo + (hi - lo + 1) / 2;
    if (ComputePlan(probe).ok()) {
      lo = probe.context;
    } else {
      hi = probe.context - 1;
    }
  }
  return lo;
}

absl::StatusOr<int64_t> RoomFromMemory(int64_t memory_bytes, int64_t reserve_bytes, int64_t weight_bytes) {
  if (memory_bytes < 0 || reserve_bytes < 0 || weight_bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat("memory ", memory_bytes, ", reserve ", reserve_bytes,
                                                   " and weights ", weight_bytes, " bytes must not be negative"));
  }
  if (reserve_bytes + weight_bytes > memory_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "a rank's ", FormatGiB(memory_bytes), " GiB of memory do not hold its ", FormatGiB(weight_bytes),
        " GiB of weights and the ", FormatGiB(reserve_bytes), " GiB reserve (", FormatGiB(weight_bytes + reserve_bytes),
        " GiB): add ranks, or memory"));
  }
  return memory_bytes - reserve_bytes - weight_bytes;
}

std::string FormatGiB(int64_t bytes) {
  return absl::StrFormat("%.2f", static_cast<double>(bytes) / static_cast<double>(kGiB));
}

std::string FormatMiB(int64_t bytes) {
  return absl::StrFormat("%.2f", static_cast<double>(bytes) / static_cast<double>(kMiB));
}

std::string FormatPlan(const PlanInput& in, const Plan& p) {
  std::string out = absl::StrCat("room a rank: ", FormatGiB(p.room_bytes), " GiB\n");
  if (p.layout == Layout::kPages) {
    absl::StrAppend(&out, "window: ", p.context, " tokens = ", p.window_pages, " pages of ", p.page_size, " tokens (",
                    FormatMiB(p.page_bytes), " MiB a page)\n");
    absl::StrAppend(&out, "lanes: ", p.lanes, ", ", p.window_streams, " of them a whole window of pages (windows would serve ",
                    p.windows_would_hold, ")\n");
    absl::StrAppend(&out, "pages: ", p.pages, " = ", p.pages_windows, " for windows + ", p.pages_lanes, " for lanes + ",
                    p.pages_floor, " floor + ", p.pages_shared, " shared\n");
    absl::StrAppend(&out, "tokens: ", p.tokens, ", shared by the ", p.lanes, " streams\n");
    if (in.split_ranks > 1) {
      absl::StrAppend(&out, "latent split over ", in.split_ranks, " ranks: ", in.bytes_per_token.replicated, " + ",
                      in.bytes_per_token.latent, " / ", in.split_ranks, " bytes a token a rank; each rank holds ",
                      p.pages, " key pages and ", p.latent_pages, " latent pages (", p.pages_split_cut,
                      " pages fewer for a window's latent on one owner)\n");
    }
  } else {
    absl::StrAppend(&out, "window: ", p.context, " tokens = ", FormatGiB(p.context * in.bytes_per_token.total()),
                    " GiB of rows a stream\n");
    absl::StrAppend(&out, "lanes: ", p.lanes, ", each a whole window\n");
    absl::StrAppend(&out, "tokens: ", p.tokens, "\n");
  }
  absl::StrAppend(&out, "streams: ", FormatGiB(p.stream_bytes), " GiB (rows, and the fixed state of the ", p.lanes - 1,
                  " past the engine's own)\n");
  absl::StrAppend(&out, "prompt cache: ", FormatGiB(p.cache_bytes), " GiB (budget ", FormatGiB(in.cache_budget_bytes),
                  " GiB)\n");
  absl::StrAppend(&out, "unused: ", FormatGiB(p.unused_bytes), " GiB\n");
  return out;
}

}  // namespace ferry::kvpool
