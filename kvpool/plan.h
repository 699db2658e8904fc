// The memory plan: how a rank's room is split between the streams' KV rows, their fixed state
// and the prompt cache, before anything is allocated. Seed 000 step 1, plain arithmetic, no
// device code. The coordinator runs it at start with the smallest room any worker reports; a
// configuration that cannot be served is refused there, with the numbers and the remedies.
//
// Units: bytes are per rank; tokens are rows of one stream's window; GiB = 2^30 bytes.
//
// Room. The bytes a rank has left for KV after its weights, its workspace and the engine's own
// stream's fixed state (the engine's own sequence exists in every layout, so its state is
// allocated with the workspace and never planned here). Every other stream's fixed state is.
//
// Windows layout (--kv-pages off): every stream holds a whole window of rows, context x bytes a
// token, and every stream past the engine's own also its fixed state. A configuration whose
// streams do not all fit is refused, in the seed's words:
//   "--parallel 8 needs 90.48 GiB for its streams at a 1048576-token window, and the CUDA memory
//    budget leaves 2.33 GiB: serve --parallel 1, or lower --context"
// where "needs" counts the streams past the engine's own (lanes - 1 windows and fixed states),
// "leaves" is the room after the engine's own window, and the suggested --parallel is the most
// lanes that fit. What the streams leave goes to the prompt cache, up to its budget.
//
// Pages layout (--kv-pages on): the pool is pages of page_size tokens that all streams share. In
// order (the page plan):
//   1. the engine's own stream: one window of pages, ceil(context / page_size) + 1 pages;
//   2. before the prompt cache, as many whole windows more as the room holds, a window of pages
//      and a fixed state each: n = min(lanes, 1 + (room - window) / (window + fixed)), at least 1,
//      and no more than leave step 3 its pages and states;
//   3. a page and a fixed state for each of the lanes - n other streams;
//   4. (the floor) more pages, until the pool holds the rows the windows layout would hold in the
//      same room, or the room holds no more pages;
//   5. the prompt cache: what is left, up to its budget;
//   6. the shared pool: the whole pages left after the cache.
// A configuration whose steps 1 and 3 do not fit is refused like windows are.
//
// Invariants (pages; tests/kvpool/plan_test.cc checks them over many rooms, lanes and windows):
//   - stream_bytes + cache_bytes + unused_bytes == room_bytes, unused_bytes < page_bytes;
//   - the pool never holds fewer rows than windows would in the same room:
//     tokens >= windows_would_hold x context, unless the room, after the fixed states of all
//     lanes - 1 other streams, holds fewer pages than that; then the pool holds all those pages.
//     (Step 4 makes this exact. Steps 1-3 alone can fall short in a tight room: a window of pages
//     is up to two pages longer than a window of rows, and step 2 stops where the other lanes'
//     pages and states would not fit. Seed 000's cases have room to spare; the property test
//     finds tight rooms that do not.)
//   - where the windows layout serves every lane with two pages a lane to spare, pages serve
//     every lane too, with at least lanes x context rows. Without that margin a room can hold a
//     window of rows and not the ceil(context / page_size) + 1 pages of one: pages refuse there.
//
// Thread safety: every function here is a pure function of its arguments.
//
// The latent split (PlanInput::split_ranks, Plan::latent_pages): see the Plan fields. At W = 2
// the pool holds (replicated + latent) / (replicated + latent / 2) times the pages of the
// unsplit plan in the same room, less what a window's latent pages on one owner take past the
// average share.
//
// Mode (--kv-pages auto): pages from two ranks with a bf16 cache; windows at one rank (no GLM
// serve on one GPU has been qualified on pages) and with an fp8 cache (FP8 rows on pages, the
// seed's optional step 3, are not built). --kv-pages on with an fp8 cache is refused for the
// same reason.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kvpool/bytes_per_token.h"

namespace ferry::kvpool {

inline constexpr int64_t kMiB = int64_t{1} << 20;
inline constexpr int64_t kGiB = int64_t{1} << 30;

// Bounds on the inputs. They keep every product the plan forms inside int64 (a window of the
// longest context at the largest row is below 2^47 bytes; 4096 of them below 2^59).
inline constexpr int64_t kMinPageSize = 16;
inline constexpr int64_t kMaxPageSize = 1024;
inline constexpr int64_t kDefaultPageSize = 512;
inline constexpr int64_t kMaxLanes = 4096;
inline constexpr int64_t kMaxContext = int64_t{1} << 26;      // 64 Mi tokens
inline constexpr int64_t kMaxBytesPerToken = int64_t{1} << 20;
inline constexpr int64_t kMaxRoomBytes = int64_t{1} << 50;     // 1 PiB, also the cache budget's
inline constexpr int64_t kMaxFixedBytes = int64_t{1} << 44;
inline constexpr int64_t kDefaultCacheBudget = 16 * kGiB;

enum class KvPages { kAuto, kOn, kOff };  // --kv-pages
enum class Layout { kWindows, kPages };

const char* KvPagesName(KvPages k);  // "auto" / "on" / "off"
const char* LayoutName(Layout l);    // "windows" / "pages"
// Errors: INVALID_ARGUMENT naming the accepted spellings.
absl::StatusOr<KvPages> ParseKvPages(absl::string_view s);

// auto: pages when ranks >= 2 and the cache is bf16, windows otherwise.
// Errors: INVALID_ARGUMENT for --kv-pages on with an fp8 cache, or ranks < 1.
absl::StatusOr<Layout> ResolveLayout(KvPages mode, int64_t ranks, CacheDtype dtype);

// --owner-split: the latent split (docs/owner-split.md). auto: on from two
// ranks with the pages layout when the model has latent rows to split; on: from two ranks;
// off: never. Errors: INVALID_ARGUMENT naming the accepted spellings.
enum class OwnerSplit { kAuto, kOn, kOff };
absl::StatusOr<OwnerSplit> ParseOwnerSplit(absl::string_view s);
bool ResolveOwnerSplit(OwnerSplit mode, int64_t ranks, Layout layout, bool model_splits);

struct PlanInput {
  int64_t room_bytes = 0;       // smallest rank's room (see above); 0..kMaxRoomBytes
  BytesPerToken bytes_per_token;  // total() in 1..kMaxBytesPerToken
  int64_t page_size = kDefaultPageSize;  // tokens a page: a power of two, 16..1024
  int64_t fixed_bytes = 0;      // each stream's fixed state a rank; 0..kMaxFixedBytes
  int64_t lanes = 1;            // --parallel: streams at once, the engine's own included; 1..4096
  int64_t context = 0;          // --context: tokens a window; 1..kMaxContext
  int64_t cache_budget_bytes = kDefaultCacheBudget;  // prompt cache's most; 0..kMaxRoomBytes
  Layout layout = Layout::kPages;
  // The latent split (docs/owner-split.md) over this many ranks; 1: none.
  // Pages layout only; 1..kMaxLanes.
  int64_t split_ranks = 1;
};

struct Plan {
  Layout layout = Layout::kPages;
  int64_t lanes = 0;
  int64_t context = 0;
  int64_t page_size = 0;
  int64_t page_bytes = 0;    // page_size x bytes a token
  int64_t window_pages = 0;  // ceil(context / page_size) + 1 (pages); 0 for windows

  // Streams that hold a whole window: the lanes (windows) or n of step 2 (pages).
  int64_t window_streams = 0;
  // How many lanes the windows layout would serve in the same room (0 when not one window fits).
  int64_t windows_would_hold = 0;

  // Pages layout only (all 0 for windows): pages = windows + lanes + floor + shared.
  int64_t pages_windows = 0;  // window_streams x window_pages (steps 1, 2)
  int64_t pages_lanes = 0;    // one a stream past the windows (step 3)
  int64_t pages_floor = 0;    // step 4
  int64_t pages_shared = 0;   // step 6
  int64_t pages = 0;

  // Rows the streams can hold: pages x page_size (pages), lanes x context (windows).
  int64_t tokens = 0;
  // Rows and fixed states of the streams (the engine's own fixed state is not in the room).
  int64_t stream_bytes = 0;
  int64_t fixed_bytes_total = 0;  // (lanes - 1) x fixed, included in stream_bytes
  int64_t cache_bytes = 0;        // the prompt cache's share, <= its budget
  int64_t unused_bytes = 0;       // less than a page (pages), 0 unless the cache is full (windows)
  int64_t room_bytes = 0;

  // The latent split (split_ranks W > 1). A page's replicated part (indexer keys) sits on every
  // rank and its latent part on its conversation's owner only, so a token costs a rank
  // replicated + ceil(latent / W) bytes on average: the plan above runs at that cost, then the
  // arenas are cut from it. Every rank holds key_pages key pages (= pages) and latent_pages
  // latent pages, latent_pages = max(ceil(pages / W), window_pages) so that any rank can own a
  // whole window; when a window's latent pages are more than the average share, pages shrink
  // until both arenas fit the streams' bytes (pages_split_cut says by how many).
  int64_t key_page_bytes = 0;     // page_size x replicated
  int64_t latent_page_bytes = 0;  // page_size x latent
  int64_t latent_pages = 0;       // each rank's latent arena (0 without the split)
  int64_t pages_split_cut = 0;
};

// The plan for `in`.
// Errors: INVALID_ARGUMENT naming the input that is out of its bounds (above); RESOURCE_EXHAUSTED
// when the streams do not fit, with the bytes needed and left and the remedy (the most lanes
// that fit, or the longest context that does).
absl::StatusOr<Plan> ComputePlan(const PlanInput& in);

// How many lanes the windows layout serves in `room_bytes` (what windows_would_hold reports).
// REQUIRES: the input is in bounds (ComputePlan checks; this does not).
int64_t WindowsThatFit(const PlanInput& in);

// What a plan means for its lanes when all of them run at once. Pages layout: a stream of t
// tokens takes ceil(t / page_size) + 1 pages (as a window does); with the latent split its key
// pages are on every rank and its latent pages on its owner, the lanes spread evenly over the
// split_ranks owners. Windows layout: every lane holds a whole window (or the plan was refused).
struct StreamFit {
  int64_t whole_windows = 0;  // lanes that can each hold a whole window of `context` tokens at once
  int64_t even_tokens = 0;    // the longest window all the lanes can hold at once, each the same (<= context)
};
StreamFit FitStreams(const PlanInput& in, const Plan& p);

// The longest window (tokens, up to in.context) whose plan the room holds for in.lanes lanes; 0
// when not even a one-token window fits. For the remedy of a refused plan.
int64_t LongestContext(const PlanInput& in);

// A rank's room from its memory: memory - reserve (what the OS, the runtime and the engine's
// workspace keep) - weights. Errors: INVALID_ARGUMENT for a negative input; RESOURCE_EXHAUSTED
// naming the three figures in GiB when the memory does not hold the reserve and the weights.
absl::StatusOr<int64_t> RoomFromMemory(int64_t memory_bytes, int64_t reserve_bytes, int64_t weight_bytes);

// Bytes as GiB with two decimals, as the seed prints them ("90.48").
std::string FormatGiB(int64_t bytes);
// The plan as `ferry plan` prints it past its header lines (room, window, lanes, pages, tokens,
// streams, prompt cache, unused), one fact a line.
std::string FormatPlan(const PlanInput& in, const Plan& p);
// Bytes as MiB with two decimals ("180.00").
std::string FormatMiB(int64_t bytes);

}  // namespace ferry::kvpool
