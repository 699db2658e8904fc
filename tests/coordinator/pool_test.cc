// The pool the coordinator serves with, from the rooms the workers report (coordinator/pool.h).
#include "coordinator/pool.h"

#include "tests/catch.h"

namespace ferry::coordinator {
namespace {

SchedulerOptions Base(int64_t lanes, int64_t context, int64_t page_size) {
  SchedulerOptions o;
  o.max_running = lanes;
  o.max_context = context;
  o.page_size = page_size;
  return o;
}

TEST_CASE("pool: pages at two ranks are the plan's pages plus the prompt cache's share", "[pool][kvpool]") {
  // A page of 16 tokens is 16 KiB (1 KiB a token); the smallest room (rank 1) decides.
  const int64_t page = 16 * 1024;
  std::vector<RankRoom> ranks = {{1000 * page, page, 0}, {400 * page + 100, page, 0}};
  PoolRequest req;
  req.cache_budget_bytes = 50 * page;
  auto c = ChoosePool(ranks, Base(4, 160, 16), req);
  REQUIRE(c.ok());
  CHECK(c->from_plan);
  CHECK(c->smallest_rank == 1);
  CHECK(c->plan.layout == kvpool::Layout::kPages);
  CHECK(c->input.room_bytes == 400 * page + 100);
  CHECK(c->input.bytes_per_token.total() == 1024);
  CHECK(c->plan.cache_bytes == 50 * page);
  CHECK(c->opts.kv_pages == c->plan.pages + 50);
  CHECK(c->opts.kv_pages == 400);  // the whole room, in whole pages
  CHECK(c->opts.prompt_cache_tokens == 50 * 16);
  CHECK(c->opts.kv_layout == "pages");
  CHECK(c->opts.kept_fixed_pages == 0);
}

TEST_CASE("pool: one rank keeps windows: a window of pages a lane - and the cache", "[pool][kvpool]") {
  const int64_t page = 16 * 100;
  PoolRequest req;
  req.cache_budget_bytes = 0;
  auto c = ChoosePool({{10000 * page, page, 0}}, Base(3, 100, 16), req);
  REQUIRE(c.ok());
  CHECK(c->plan.layout == kvpool::Layout::kWindows);
  CHECK(c->opts.kv_pages == 3 * 7);  // ceil(100 / 16) pages for each of 3 lanes
  CHECK(c->opts.prompt_cache_tokens == 0);
  CHECK(c->opts.kv_layout == "windows");
}

TEST_CASE("pool: a fixed state is planned per lane and charged in pages when kept", "[pool][kvpool]") {
  const int64_t page = 4096;
  PoolRequest req;
  req.mode = kvpool::KvPages::kOn;
  req.cache_budget_bytes = 0;
  auto c = ChoosePool({{1000 * page, page, 2 * page + 1}}, Base(4, 64, 16), req);
  REQUIRE(c.ok());
  CHECK(c->opts.kept_fixed_pages == 3);
  CHECK(c->plan.fixed_bytes_total == 3 * (2 * page + 1));
  CHECK(c->opts.kv_pages * page + c->plan.fixed_bytes_total <= 1000 * page);
}

TEST_CASE("pool: refusals and explicit pages", "[pool][kvpool]") {
  const int64_t page = 16 * 1024;
  // Not even the engine's own window of pages fits.
  auto refused = ChoosePool({{3 * page, page, 0}}, Base(2, 160, 16), PoolRequest{kvpool::KvPages::kOn});
  CHECK(refused.status().code() == absl::StatusCode::kResourceExhausted);
  // --kv-pool-pages wins over the plan, but must hold one context.
  PoolRequest req;
  req.explicit_pages = 20;
  req.explicit_cache_tokens = 64;
  auto c = ChoosePool({{3 * page, page, 0}}, Base(2, 160, 16), req);
  REQUIRE(c.ok());
  CHECK_FALSE(c->from_plan);
  CHECK(c->opts.kv_pages == 20);
  CHECK(c->opts.prompt_cache_tokens == 64);
  req.explicit_pages = 9;
  auto small = ChoosePool({{3 * page, page, 0}}, Base(2, 160, 16), req);
  CHECK(small.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(small.status().message()).find("need one --context of 160 (10 pages)") != std::string::npos);
  // A rank that reports no page size is a broken worker.
  CHECK(ChoosePool({{3 * page, 0, 0}}, Base(2, 160, 16), PoolRequest{}).status().code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(ChoosePool({}, Base(2, 160, 16), PoolRequest{}).status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("pool: with the latent split the key arena holds the plan's pages - the latent arena its share",
          "[pool][kvpool][owner_split]") {
  // A page of 16 tokens: 4 KiB of keys and 12 KiB of latent rows a rank.
  const int64_t page = 16 * 1024, latent = 12 * 1024;
  SchedulerOptions base = Base(4, 160, 16);
  PoolRequest req;
  req.cache_budget_bytes = 0;
  req.owner_split = kvpool::OwnerSplit::kOff;
  base.world = 2;
  auto plain = ChoosePool({{400 * page, page, 0, latent}, {400 * page, page, 0, latent}}, base, req);
  req.owner_split = kvpool::OwnerSplit::kAuto;  // on from two ranks with pages
  auto split = ChoosePool({{400 * page, page, 0, latent}, {400 * page, page, 0, latent}}, base, req);
  REQUIRE(plain.ok());
  REQUIRE(split.ok());
  CHECK(!plain->opts.owner_split);
  CHECK(split->opts.owner_split);
  CHECK(plain->opts.kv_pages == 400);
  // (4 + 12) / (4 + 6) = 1.6 times the pages; each rank's latent arena half of them.
  CHECK(split->opts.kv_pages == 640);
  CHECK(split->opts.latent_pages == 320);
  CHECK(split->opts.kv_pages * (page - latent) + split->opts.latent_pages * latent <= 400 * page);
  // A model that reports no latent part: auto serves unsplit, on is refused.
  auto unsplit = ChoosePool({{400 * page, page, 0, 0}, {400 * page, page, 0, 0}}, base, req);
  REQUIRE(unsplit.ok());
  CHECK(!unsplit->opts.owner_split);
  CHECK(unsplit->opts.kv_pages == 400);
  req.owner_split = kvpool::OwnerSplit::kOn;
  CHECK(ChoosePool({{400 * page, page, 0, 0}, {400 * page, page, 0, 0}}, base, req).status().code() ==
        absl::StatusCode::kInvalidArgument);
  // One rank never splits; auto does not split the windows layout (--kv-pages off).
  req.owner_split = kvpool::OwnerSplit::kAuto;
  auto one = ChoosePool({{400 * page, page, 0, latent}}, base, req);
  REQUIRE(one.ok());
  CHECK(!one->opts.owner_split);
  req.mode = kvpool::KvPages::kOff;
  auto windows = ChoosePool({{400 * page, page, 0, latent}, {400 * page, page, 0, latent}}, base, req);
  REQUIRE(windows.ok());
  CHECK(!windows->opts.owner_split);
}

}  // namespace
}  // namespace ferry::coordinator
