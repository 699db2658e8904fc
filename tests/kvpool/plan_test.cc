#include "kvpool/plan.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "kvpool/bytes_per_token.h"
#include "model/checkpoint/checkpoint.h"
#include "model/checkpoint/config.h"
#include "model/cache/kv_bytes.h"
#include "tests/catch.h"

namespace ferry::kvpool {
namespace {

using model::BytesPerTokenPerRank;
using model::FixedBytesPerStreamPerRank;

bool Contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

model::ModelConfig LoadConfig(const std::string& name) {
  auto j = model::ReadJsonFile(std::string(FERRY_TEST_DATA_DIR) + "/configs/" + name);
  REQUIRE(j.ok());
  auto c = model::ParseModelConfig(*j, name);
  REQUIRE(c.ok());
  return *c;
}

// Seed 000's GLM-5.3-Flash inputs: 13,056 bytes a token a rank (12,288 latent), 512-token pages,
// 180 MiB of fixed state a stream, a 1M window, --parallel 8.
constexpr int64_t kSeedBytesPerToken = 13056;
constexpr int64_t kSeedFixed = 180 * kMiB;
constexpr int64_t kMillion = 1048576;

PlanInput SeedInput(Layout layout, int64_t room) {
  PlanInput in;
  in.room_bytes = room;
  in.bytes_per_token = {12288, 768};
  in.page_size = 512;
  in.fixed_bytes = kSeedFixed;
  in.lanes = 8;
  in.context = kMillion;
  in.layout = layout;
  return in;
}

// The TP=2 room: the refusal's 2.33 GiB left after the engine's own 1M window of rows
// (12.75 GiB), i.e. "the 2.33 GiB above plus the engine's own window".
constexpr int64_t kSeedWindowRows = kMillion * kSeedBytesPerToken;
const int64_t kSeedRoomTp2 = kSeedWindowRows + static_cast<int64_t>(2.33 * kGiB + 0.5);

TEST_CASE("plan: GLM-5.3-Flash costs the design's 13 -056 bytes a token a rank with one MTP layer", "[plan]") {
  const model::ModelConfig c = LoadConfig("glm-5.3-flash.config.json");
  auto b = BytesPerTokenPerRank(c, CacheDtype::kBf16, 1);
  REQUIRE(b.ok());
  CHECK(b->latent == 12288);  // 12 rows (11 MLA layers + 1 MTP) x 512 x 2
  CHECK(b->replicated == 768);  // 12 x 128 x 2 / 4 pooled keys
  CHECK(b->total() == kSeedBytesPerToken);

  auto no_mtp = BytesPerTokenPerRank(c, CacheDtype::kBf16, 0);
  REQUIRE(no_mtp.ok());
  CHECK(no_mtp->latent == 11 * 1024);
  CHECK(no_mtp->replicated == 11 * 64);

  // fp8: 512 values of a byte and a float32 scale a row; the pooled keys stay bf16.
  auto fp8 = BytesPerTokenPerRank(c, CacheDtype::kFp8, 1);
  REQUIRE(fp8.ok());
  CHECK(fp8->latent == 12 * 516);
  CHECK(fp8->replicated == 768);

  auto bad = BytesPerTokenPerRank(c, CacheDtype::kBf16, -1);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("plan: GLM-5.2 caches a 576-value row on every layer and keys on full indexer layers", "[plan]") {
  const model::ModelConfig c = LoadConfig("glm-5.2.config.json");
  int64_t full = 0;
  for (model::IndexerType t : c.indexer_types) full += t == model::IndexerType::kFull;
  REQUIRE(c.num_layers == 78);
  REQUIRE(full > 0);
  REQUIRE(full < 78);  // the checkpoint shares the top-k on some layers: those cache no keys
  auto b = BytesPerTokenPerRank(c, CacheDtype::kBf16, 1);
  REQUIRE(b.ok());
  CHECK(b->latent == 79 * (512 + 64) * 2);
  CHECK(b->replicated == (full + 1) * 128 * 2);
  auto f = FixedBytesPerStreamPerRank(c, 2);
  REQUIRE(f.ok());
  CHECK(*f == 0);  // no linear-attention state
}

TEST_CASE("plan: GLM-5.3-Flash's KDA state a stream - its heads split over the ranks", "[plan]") {
  const model::ModelConfig c = LoadConfig("glm-5.3-flash.config.json");
  // 34 linear_attention layers; a layer at h heads: S h x 128 x 128 and conv tails 3 x 3 x h x 128,
  // float32.
  auto per_layer = [](int64_t h) { return h * 128 * 128 * 4 + 3 * 3 * h * 128 * 4; };
  auto one = FixedBytesPerStreamPerRank(c, 1);
  auto two = FixedBytesPerStreamPerRank(c, 2);
  auto three = FixedBytesPerStreamPerRank(c, 3);
  REQUIRE(one.ok());
  REQUIRE(two.ok());
  REQUIRE(three.ok());
  CHECK(*one == 34 * per_layer(64));
  CHECK(*one == 152633344);
  CHECK(*two == 34 * per_layer(32));
  CHECK(*three == 34 * per_layer(22));  // 64 heads over 3 ranks: the fullest holds 22
  CHECK_FALSE(FixedBytesPerStreamPerRank(c, 0).ok());
}

TEST_CASE("plan: the design's windows refusal at TP=2 - a 1M window - --parallel 8", "[plan]") {
  // A 1M window is 12.75 GiB of rows; with 180 MiB of state, 12.93 GiB a stream.
  CHECK(FormatGiB(kSeedWindowRows) == "12.75");
  CHECK(FormatGiB(kSeedWindowRows + kSeedFixed) == "12.93");
  auto p = ComputePlan(SeedInput(Layout::kWindows, kSeedRoomTp2));
  REQUIRE_FALSE(p.ok());
  CHECK(p.status().code() == absl::StatusCode::kResourceExhausted);
  CHECK(std::string(p.status().message()) ==
        "--parallel 8 needs 90.48 GiB for its streams at a 1048576-token window, and the "
        "memory budget leaves 2.33 GiB: serve --parallel 1, or lower --context");

  SECTION("the same room at a 256k window holds four windows, not eight") {
    PlanInput in = SeedInput(Layout::kWindows, kSeedRoomTp2);
    in.context = 262144;
    auto q = ComputePlan(in);
    REQUIRE_FALSE(q.ok());
    INFO(q.status().message());
    CHECK(Contains(std::string(q.status().message()), "at a 262144-token window"));
    CHECK(Contains(std::string(q.status().message()), ": serve --parallel 4, or lower --context"));
    in.lanes = 4;
    auto four = ComputePlan(in);
    REQUIRE(four.ok());
    CHECK(four->tokens == 4 * 262144);
    CHECK(four->window_streams == 4);
  }
  SECTION("--parallel 1 is served") {
    PlanInput in = SeedInput(Layout::kWindows, kSeedRoomTp2);
    in.lanes = 1;
    auto one = ComputePlan(in);
    REQUIRE(one.ok());
    CHECK(one->tokens == kMillion);
    CHECK(FormatGiB(one->cache_bytes) == "2.33");
  }
}

TEST_CASE("plan: the design's pages at TP=2: 2 -056 pages - 1 -052 -672 tokens for eight streams", "[plan]") {
  auto p = ComputePlan(SeedInput(Layout::kPages, kSeedRoomTp2));
  REQUIRE(p.ok());
  CHECK(p->window_pages == 2049);  // ceil(1048576 / 512) + 1
  CHECK(p->window_streams == 1);   // n = 1 + (room - window) / (window + fixed) = 1
  CHECK(p->pages_windows == 2049);
  CHECK(p->pages_lanes == 7);
  CHECK(p->pages_floor == 0);
  CHECK(p->pages_shared == 0);  // the cache is under its 16 GiB budget and takes the rest
  CHECK(p->pages == 2056);
  CHECK(p->tokens == 1052672);
  CHECK(p->fixed_bytes_total == 7 * kSeedFixed);
  // The room less the window of pages and seven states and pages.
  CHECK(p->cache_bytes == kSeedRoomTp2 - 2056 * 512 * kSeedBytesPerToken - 7 * kSeedFixed);
  // The seed says "about 15.2 GiB of room" and "the last ~1.2 GiB" for the cache: it counts the
  // engine's own 180 MiB state inside the paged room as well (15.26 GiB, 1.23 GiB). Here that
  // state is outside the room in both layouts (kvpool/plan.h), so the same room leaves 1.05 GiB;
  // the pages and tokens are the same either way.
  CHECK(FormatGiB(p->cache_bytes) == "1.05");
  CHECK(p->unused_bytes == 0);
  CHECK(p->windows_would_hold == 1);
}

TEST_CASE("plan: the design's case at TP=3: two windows of pages (4 -098) before an 11.4 GiB cache", "[plan]") {
  // The TP=3 room, from #1211's order (window, then a page and a state a stream, then the 16 GiB
  // cache, then the pool) predicting 3,357 pages: the room where that order leaves 1,301 whole
  // pages after the cache, half a page into that range.
  const int64_t pb = 512 * kSeedBytesPerToken;
  const int64_t window = 2049 * pb;
  const int64_t room = window + 7 * (pb + kSeedFixed) + 16 * kGiB + 1301 * pb + pb / 2;
  const int64_t old_pages = 2049 + 7 + (room - window - 7 * (pb + kSeedFixed) - 16 * kGiB) / pb;
  REQUIRE(old_pages == 3357);

  auto p = ComputePlan(SeedInput(Layout::kPages, room));
  REQUIRE(p.ok());
  CHECK(p->window_streams == 2);
  CHECK(p->pages_windows == 4098);  // "the bound of two windows"
  CHECK(p->pages_lanes == 6);
  CHECK(p->pages == 4104);
  CHECK(absl::StrFormat("%.1f", static_cast<double>(p->cache_bytes) / kGiB) == "11.4");
  CHECK(p->windows_would_hold == 2);  // "Windows there serve only two streams"
}

TEST_CASE("plan: pages hold at least the rows of the windows the room holds (the design's cases)", "[plan]") {
  SECTION("TP=2, a 256k window, --parallel 8: four windows of pages, where #1211's order had 520 pages") {
    PlanInput in = SeedInput(Layout::kPages, kSeedRoomTp2);
    in.context = 262144;
    auto p = ComputePlan(in);
    REQUIRE(p.ok());
    CHECK(p->windows_would_hold == 4);
    CHECK(p->window_streams == 4);
    CHECK(p->pages_windows == 4 * 513);
    CHECK(p->pages == 4 * 513 + 4);
    CHECK(p->tokens >= 4 * 262144);
  }
  SECTION("TP=2, 128k, --parallel 4 at 9.5 GiB: four whole windows before the cache") {
    PlanInput in = SeedInput(Layout::kPages, 9 * kGiB + kGiB / 2);
    in.context = 131072;
    in.lanes = 4;
    auto p = ComputePlan(in);
    REQUIRE(p.ok());
    CHECK(p->window_streams == 4);
    CHECK(p->pages_windows == 4 * 257);
    CHECK(p->pages_lanes == 0);
    CHECK(p->tokens >= 4 * 131072);
    CHECK(p->cache_bytes == in.room_bytes - 4 * 257 * 512 * kSeedBytesPerToken - 3 * kSeedFixed);
  }
  SECTION("no fixed state (glm_moe_dsa): the floor makes up what the window's extra pages cost") {
    // Two windows of rows fit exactly; two windows of pages (each two pages longer) do not, so
    // step 2 sets aside one, and step 4 brings the pool back to two windows' rows.
    PlanInput in = SeedInput(Layout::kPages, 2 * kSeedWindowRows);
    in.fixed_bytes = 0;
    in.lanes = 2;
    auto p = ComputePlan(in);
    REQUIRE(p.ok());
    CHECK(p->windows_would_hold == 2);
    CHECK(p->window_streams == 1);
    CHECK(p->pages_floor == 4096 - 2049 - 1);  // up to 2 x 2048 pages of rows
    CHECK(p->tokens == 2 * kMillion);
    CHECK(p->cache_bytes == 0);
  }
}

TEST_CASE("plan: --kv-pages auto pages from two ranks with a bf16 cache", "[plan]") {
  auto layout = [](KvPages m, int64_t ranks, CacheDtype d) {
    auto l = ResolveLayout(m, ranks, d);
    REQUIRE(l.ok());
    return *l;
  };
  CHECK(layout(KvPages::kAuto, 1, CacheDtype::kBf16) == Layout::kWindows);
  CHECK(layout(KvPages::kAuto, 2, CacheDtype::kBf16) == Layout::kPages);
  CHECK(layout(KvPages::kAuto, 3, CacheDtype::kBf16) == Layout::kPages);
  CHECK(layout(KvPages::kAuto, 2, CacheDtype::kFp8) == Layout::kWindows);
  CHECK(layout(KvPages::kOn, 1, CacheDtype::kBf16) == Layout::kPages);
  CHECK(layout(KvPages::kOff, 4, CacheDtype::kBf16) == Layout::kWindows);
  auto fp8_on = ResolveLayout(KvPages::kOn, 2, CacheDtype::kFp8);
  REQUIRE_FALSE(fp8_on.ok());
  CHECK(fp8_on.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(ParseKvPages("on").ok());
  CHECK_FALSE(ParseKvPages("yes").ok());
  CHECK(ParseCacheDtype("fp8").ok());
  CHECK_FALSE(ParseCacheDtype("fp16").ok());
}

TEST_CASE("plan: refusals name the numbers and the remedy", "[plan]") {
  SECTION("not even the engine's own window fits: windows") {
    PlanInput in = SeedInput(Layout::kWindows, 5 * kGiB);
    auto p = ComputePlan(in);
    REQUIRE_FALSE(p.ok());
    CHECK(p.status().code() == absl::StatusCode::kResourceExhausted);
    // 5 GiB / 13,056 bytes a token = 411,206 tokens.
    CHECK(std::string(p.status().message()) ==
          "--context 1048576 needs 12.75 GiB for the engine's own window, and the memory "
          "budget leaves 5.00 GiB: lower --context to 411206 or less");
  }
  SECTION("not even the engine's own window fits: pages") {
    auto p = ComputePlan(SeedInput(Layout::kPages, 5 * kGiB));
    REQUIRE_FALSE(p.ok());
    INFO(p.status().message());
    // 5 GiB holds 803 pages of 6.375 MiB: a window of 803 pages is 802 x 512 tokens.
    CHECK(Contains(std::string(p.status().message()), "window of 2049 pages"));
    CHECK(Contains(std::string(p.status().message()), "lower --context to 410624 or less"));
  }
  SECTION("pages: the lanes' states and pages do not fit after the window") {
    PlanInput in = SeedInput(Layout::kPages, kSeedWindowRows + kGiB);
    in.lanes = 64;
    auto p = ComputePlan(in);
    REQUIRE_FALSE(p.ok());
    CHECK(p.status().code() == absl::StatusCode::kResourceExhausted);
    INFO(p.status().message());
    // 1 GiB less the window's extra page, over 186.375 MiB a lane: 5 more lanes.
    CHECK(Contains(std::string(p.status().message()), "--parallel 64 needs "));
    CHECK(Contains(std::string(p.status().message()), "180.00 MiB of state and a page for each of the 63 others"));
    CHECK(Contains(std::string(p.status().message()), "serve --parallel 6, or lower --context"));
  }
  SECTION("inputs out of bounds are INVALID_ARGUMENT, not a crash") {
    for (int64_t page : {0, 8, 500, 2048}) {
      PlanInput in = SeedInput(Layout::kPages, kSeedRoomTp2);
      in.page_size = page;
      auto p = ComputePlan(in);
      REQUIRE_FALSE(p.ok());
      CHECK(p.status().code() == absl::StatusCode::kInvalidArgument);
      CHECK(Contains(std::string(p.status().message()), "--page-size"));
    }
    PlanInput in = SeedInput(Layout::kPages, kSeedRoomTp2);
    in.lanes = 0;
    CHECK(ComputePlan(in).status().code() == absl::StatusCode::kInvalidArgument);
    in = SeedInput(Layout::kPages, kSeedRoomTp2);
    in.context = 0;
    CHECK(ComputePlan(in).status().code() == absl::StatusCode::kInvalidArgument);
    in = SeedInput(Layout::kPages, -1);
    CHECK(ComputePlan(in).status().code() == absl::StatusCode::kInvalidArgument);
    in = SeedInput(Layout::kPages, kSeedRoomTp2);
    in.bytes_per_token = {0, 0};
    CHECK(ComputePlan(in).status().code() == absl::StatusCode::kInvalidArgument);
    in = SeedInput(Layout::kPages, kSeedRoomTp2);
    in.fixed_bytes = -1;
    CHECK(ComputePlan(in).status().code() == absl::StatusCode::kInvalidArgument);
  }
}

// The windows layout's lanes in `room`, counted one stream at a time (independent of the code).
int64_t CountWindows(int64_t room, int64_t window, int64_t fixed, int64_t lanes) {
  if (window > room) return 0;
  int64_t n = 1, used = window;
  while (n < lanes && used + window + fixed <= room) {
    used += window + fixed;
    ++n;
  }
  return n;
}

TEST_CASE("plan: the pool never holds fewer rows than windows would in the same room", "[plan]") {
  std::mt19937_64 rng(20240531);
  auto uniform = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  int64_t checked = 0, floors = 0, refused = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    PlanInput in;
    in.page_size = int64_t{16} << uniform(0, 6);
    in.bytes_per_token = {uniform(0, 16384), uniform(0, 1024)};
    if (in.bytes_per_token.total() == 0) in.bytes_per_token.latent = 1;
    const int64_t bpt = in.bytes_per_token.total();
    in.context = uniform(0, 3) == 0 ? in.page_size * uniform(1, 4096) : uniform(1, 2 * kMillion);
    in.lanes = uniform(1, 3) == 1 ? 1 : uniform(1, 64);
    in.fixed_bytes = uniform(0, 2) == 0 ? 0 : uniform(0, 512 * kMiB);
    in.cache_budget_bytes = uniform(0, 2) == 0 ? 0 : uniform(0, 32 * kGiB);
    // Rooms around a few windows, where the layouts differ.
    const int64_t window_rows = in.context * bpt;
    in.room_bytes = uniform(0, std::min<int64_t>(kMaxRoomBytes, (in.lanes + 2) * (window_rows + in.fixed_bytes)));
    INFO("room " << in.room_bytes << " bpt " << bpt << " page " << in.page_size << " fixed "
                 << in.fixed_bytes << " lanes " << in.lanes << " context " << in.context
                 << " budget " << in.cache_budget_bytes);

    const int64_t n_w = CountWindows(in.room_bytes, window_rows, in.fixed_bytes, in.lanes);
    in.layout = Layout::kWindows;
    auto w = ComputePlan(in);
    REQUIRE(w.ok() == (n_w == in.lanes));
    if (w.ok()) {
      CHECK(w->tokens == in.lanes * in.context);
      CHECK(w->stream_bytes + w->cache_bytes + w->unused_bytes == in.room_bytes);
      CHECK(w->cache_bytes <= in.cache_budget_bytes);
    } else {
      CHECK(w.status().code() == absl::StatusCode::kResourceExhausted);
    }

    in.layout = Layout::kPages;
    auto p = ComputePlan(in);
    const int64_t pb = in.page_size * bpt;
    const int64_t wp = (in.context + in.page_size - 1) / in.page_size + 1;
    const int64_t least = wp * pb + (in.lanes - 1) * (pb + in.fixed_bytes);
    // Where windows serve every lane with two pages a lane to spare (the rounding of a window of
    // pages), pages serve them too, with at least the same rows.
    const bool windows_with_margin =
        n_w == in.lanes &&
        in.room_bytes >= in.lanes * window_rows + (in.lanes - 1) * in.fixed_bytes + 2 * in.lanes * pb;
    REQUIRE(p.ok() == (least <= in.room_bytes));
    if (!p.ok()) {
      CHECK_FALSE(windows_with_margin);
      CHECK(p.status().code() == absl::StatusCode::kResourceExhausted);
      ++refused;
      continue;
    }
    ++checked;
    CHECK(p->windows_would_hold == n_w);
    CHECK(p->window_pages == wp);
    CHECK(p->window_streams >= 1);
    CHECK(p->window_streams <= in.lanes);
    CHECK(p->pages_windows == p->window_streams * wp);
    CHECK(p->pages_lanes == in.lanes - p->window_streams);
    CHECK(p->pages == p->pages_windows + p->pages_lanes + p->pages_floor + p->pages_shared);
    CHECK(p->tokens == p->pages * in.page_size);
    CHECK(p->stream_bytes == p->pages * pb + (in.lanes - 1) * in.fixed_bytes);
    CHECK(p->stream_bytes + p->cache_bytes + p->unused_bytes == in.room_bytes);
    CHECK(p->unused_bytes >= 0);
    CHECK(p->unused_bytes < pb);
    CHECK(p->cache_bytes >= 0);
    CHECK(p->cache_bytes <= in.cache_budget_bytes);
    if (p->cache_bytes < in.cache_budget_bytes) CHECK(p->pages_shared == 0);
    // The seed's n whenever the other lanes' pages and states fit beside it.
    const int64_t window = wp * pb;
    const int64_t n_seed =
        std::min(in.lanes, 1 + (in.room_bytes - window) / (window + in.fixed_bytes));
    CHECK(p->window_streams <= n_seed);
    if (n_seed * window + (n_seed - 1) * in.fixed_bytes +
            (in.lanes - n_seed) * (pb + in.fixed_bytes) <= in.room_bytes) {
      CHECK(p->window_streams == n_seed);
    }
    // The invariant: the windows' rows, or every page the room holds after the lanes' states.
    const int64_t want = n_w * in.context;
    const int64_t room_pages = (in.room_bytes - (in.lanes - 1) * in.fixed_bytes) / pb;
    if ((want + in.page_size - 1) / in.page_size <= room_pages) {
      CHECK(p->tokens >= want);
    } else {
      CHECK(p->pages == room_pages);
    }
    if (windows_with_margin) CHECK(p->tokens >= in.lanes * in.context);
    floors += p->pages_floor > 0;
  }
  // The generator reaches every branch.
  CHECK(checked > 5000);
  CHECK(refused > 100);
  CHECK(floors > 10);
}

}  // namespace
}  // namespace ferry::kvpool

namespace ferry::kvpool {
namespace {

PlanInput SplitInput(int64_t room, int64_t lanes, int64_t context, int64_t split) {
  PlanInput in;
  in.layout = Layout::kPages;
  in.bytes_per_token = BytesPerToken{12288, 768};  // the design's GLM-5.3-Flash with one MTP layer
  in.page_size = 512;
  in.fixed_bytes = 180 * kMiB;
  in.lanes = lanes;
  in.context = context;
  in.cache_budget_bytes = 0;
  in.room_bytes = room;
  in.split_ranks = split;
  return in;
}

TEST_CASE("plan: the latent split at W=2 holds (768 + 12 -288) / (768 + 6 -144) times the tokens", "[plan][owner_split]") {
  auto one = ComputePlan(SplitInput(60 * kGiB, 8, 1048576, 1));
  auto two = ComputePlan(SplitInput(60 * kGiB, 8, 1048576, 2));
  REQUIRE(one.ok());
  REQUIRE(two.ok());
  const double ratio = static_cast<double>(two->tokens) / static_cast<double>(one->tokens);
  CHECK(ratio > 1.888);
  CHECK(ratio < 1.8892);
  CHECK(two->latent_pages == (two->pages + 1) / 2);
  CHECK(two->pages * two->key_page_bytes + two->latent_pages * two->latent_page_bytes + two->fixed_bytes_total +
            two->cache_bytes + two->unused_bytes ==
        60 * kGiB);
  CHECK(FormatPlan(SplitInput(60 * kGiB, 8, 1048576, 2), *two).find("latent split over 2 ranks: 768 + 12288 / 2") !=
        std::string::npos);
}

TEST_CASE("plan: the split keeps a whole window's latent on any owner - and serves what the unsplit refuses",
          "[plan][owner_split]") {
  // A room for 1.03 unsplit windows: the split's average share would hold 1.95 windows of key
  // pages, but one owner must hold a whole window's latent pages: the pages shrink to fit that
  // (to about 1.5 windows, still more than the unsplit plan's 1.03).
  const int64_t window = int64_t{2049} * 512 * 13056;
  auto cut = ComputePlan(SplitInput(window * 103 / 100 + 180 * kMiB, 2, 1048576, 2));
  REQUIRE(cut.ok());
  CHECK(cut->latent_pages == cut->window_pages);
  CHECK(cut->pages_split_cut > 0);
  CHECK(cut->pages * cut->key_page_bytes + cut->latent_pages * cut->latent_page_bytes + cut->fixed_bytes_total <=
        window * 103 / 100 + 180 * kMiB);
  CHECK(cut->pages > 2049 * 14 / 10);
  // --parallel 4 on a room of one window and a little: the unsplit plan needs a page (13,056 x
  // 512 bytes) and a state for each of 3 other lanes past the window and refuses; the split
  // needs only their key pages.
  const int64_t room = window + 3 * 180 * kMiB + 3 * 512 * 768 + 512 * 12288;
  CHECK(ComputePlan(SplitInput(room, 4, 1048576, 1)).status().code() == absl::StatusCode::kResourceExhausted);
  auto split = ComputePlan(SplitInput(room, 4, 1048576, 2));
  REQUIRE(split.ok());
  CHECK(split->pages >= split->window_pages + 3);
  // Not even a window's latent on one owner: refused with the remedy.
  auto refused = ComputePlan(SplitInput(window / 2, 1, 1048576, 2));
  CHECK(refused.status().code() == absl::StatusCode::kResourceExhausted);
  // The split needs pages.
  PlanInput windows = SplitInput(60 * kGiB, 1, 1048576, 2);
  windows.layout = Layout::kWindows;
  CHECK(ComputePlan(windows).status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("plan: split invariants over many rooms - lanes - windows and widths", "[plan][owner_split]") {
  std::mt19937_64 rng(61);
  int served = 0;
  for (int i = 0; i < 4000; ++i) {
    const int64_t split = 2 + static_cast<int64_t>(rng() % 3);
    const int64_t context = 1 + static_cast<int64_t>(rng() % 300000);
    PlanInput in = SplitInput(static_cast<int64_t>(rng() % (64 * kGiB)), 1 + static_cast<int64_t>(rng() % 16), context,
                              split);
    in.page_size = int64_t{16} << (rng() % 7);
    in.cache_budget_bytes = static_cast<int64_t>(rng() % (4 * kGiB));
    auto p = ComputePlan(in);
    if (!p.ok()) {
      CHECK(p.status().code() == absl::StatusCode::kResourceExhausted);
      continue;
    }
    ++served;
    INFO("room " << in.room_bytes << " lanes " << in.lanes << " context " << context << " W " << split);
    CHECK(p->latent_pages >= p->window_pages);
    CHECK(split * p->latent_pages >= p->pages);
    CHECK(p->pages >= p->window_pages + in.lanes - p->window_streams);
    CHECK(p->unused_bytes >= 0);
    CHECK(p->pages * p->key_page_bytes + p->latent_pages * p->latent_page_bytes + p->fixed_bytes_total +
              p->cache_bytes + p->unused_bytes ==
          in.room_bytes);
  }
  CHECK(served > 1000);
}

}  // namespace
}  // namespace ferry::kvpool
