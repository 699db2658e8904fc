#include "coordinator/prompt_cache.h"

#include <vector>

#include "tests/catch.h"

namespace ferry::coordinator {
namespace {

std::vector<int32_t> Seq(std::initializer_list<int32_t> v) { return std::vector<int32_t>(v); }

TEST_CASE("prompt cache: any prefix of a kept path (per-token caches)", "[prompt_cache]") {
  PromptCache c(1000, /*any_prefix=*/true);
  CHECK(c.Insert(Seq({1, 2, 3, 4, 5}), 10).empty());
  CHECK(c.Insert(Seq({1, 2, 7, 8}), 11).empty());
  auto m = c.Lookup(Seq({1, 2, 3, 4, 5, 6}));
  CHECK(m.seq_id == 10);
  CHECK(m.length == 5);
  m = c.Lookup(Seq({1, 2, 3, 9}));  // inside the first path's edge
  CHECK(m.seq_id == 10);
  CHECK(m.length == 3);
  m = c.Lookup(Seq({1, 2, 7, 8}));  // the whole prompt is kept: one token is left to compute
  CHECK(m.seq_id == 11);
  CHECK(m.length == 3);
  m = c.Lookup(Seq({1, 2, 9}));  // the shared part of both
  CHECK((m.seq_id == 10 || m.seq_id == 11));
  CHECK(m.length == 2);
  CHECK(c.Lookup(Seq({5, 5})).seq_id == 0);
  CHECK(c.Lookup(Seq({1})).seq_id == 0);
}

TEST_CASE("prompt cache: only whole kept paths (recurrent state)", "[prompt_cache]") {
  PromptCache c(1000, /*any_prefix=*/false);
  c.Insert(Seq({1, 2, 3}), 10);
  c.Insert(Seq({1, 2, 3, 4, 5}), 11);
  auto m = c.Lookup(Seq({1, 2, 3, 4, 5, 6}));
  CHECK(m.seq_id == 11);
  CHECK(m.length == 5);
  m = c.Lookup(Seq({1, 2, 3, 4, 9}));  // past 10's path, inside 11's
  CHECK(m.seq_id == 10);
  CHECK(m.length == 3);
  CHECK(c.Lookup(Seq({1, 2, 9})).seq_id == 0);  // no whole path matches
  CHECK(c.Lookup(Seq({1, 2, 3})).seq_id == 0);  // a whole path, but nothing left to compute
}

TEST_CASE("prompt cache: least recently used states go first - duplicates are dropped", "[prompt_cache]") {
  PromptCache c(10, true);
  CHECK(c.Insert(Seq({1, 2, 3, 4}), 1).empty());
  CHECK(c.Insert(Seq({5, 6, 7, 8}), 2).empty());
  c.Lookup(Seq({1, 2, 3, 4, 9}));  // 1 is used again: 2 is now the oldest
  CHECK(c.Insert(Seq({9, 9, 9}), 3) == std::vector<uint64_t>{2});
  CHECK(c.kept_tokens() == 7);
  CHECK(c.Insert(Seq({1, 2, 3, 4}), 4) == std::vector<uint64_t>{4});  // the path is kept already
  CHECK(c.Insert(std::vector<int32_t>(11, 1), 5) == std::vector<uint64_t>{5});  // alone past the budget
  CHECK(c.kept_states() == 2);
  std::vector<uint64_t> all = c.Clear();
  CHECK(all.size() == 2);
  CHECK(c.kept_tokens() == 0);
  CHECK(c.Lookup(Seq({1, 2, 3, 4, 9})).seq_id == 0);
}

}  // namespace
}  // namespace ferry::coordinator
