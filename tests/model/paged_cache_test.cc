// Paged caches: results do not depend on the page size, pages are shared and copied as the
// contract says, nothing leaks, and a full arena refuses a step without changing any state.
#include "model/cache/paged_cache.h"

#include <string>

#include "model/families/causal_lm.h"
#include "model/golden/golden.h"
#include "tests/catch.h"

namespace ferry::model {
namespace {

const std::string kDsa = std::string(FERRY_TEST_DATA_DIR) + "/glm-dsa-tiny";
const std::string kNext = std::string(FERRY_TEST_DATA_DIR) + "/glm5next-tiny";

std::unique_ptr<CausalLM> Load(const std::string& dir, int64_t page_size, int64_t capacity = -1) {
  auto m = LoadCausalLM(dir, TensorParallel{}, CacheOptions{page_size, capacity});
  REQUIRE(m.ok());
  return std::move(*m);
}

std::vector<int32_t> Prompt(const std::string& dir) {
  auto g = ReadGolden(dir + "/golden.safetensors");
  REQUIRE(g.ok());
  return (*g)[2].ids;  // 90 tokens
}

// Logits of prefill (in pieces of 13) and then 5 greedy decode steps.
std::vector<float> Run(CausalLM& m, const std::vector<int32_t>& ids) {
  auto seq = m.NewSequence();
  std::vector<float> all;
  for (size_t i = 0; i < ids.size(); i += 13) {
    ForwardSegment seg{seq.get(), std::span<const int32_t>(ids.data() + i, std::min<size_t>(13, ids.size() - i)), true};
    auto out = m.Forward(std::span<const ForwardSegment>(&seg, 1));
    REQUIRE(out.ok());
    all.insert(all.end(), out->logits.begin(), out->logits.end());
  }
  for (int k = 0; k < 5; ++k) {
    const int32_t t = static_cast<int32_t>(std::max_element(all.end() - m.config().vocab_size, all.end()) -
                                           (all.end() - m.config().vocab_size));
    ForwardSegment seg{seq.get(), std::span<const int32_t>(&t, 1), false};
    auto out = m.Forward(std::span<const ForwardSegment>(&seg, 1));
    REQUIRE(out.ok());
    all.insert(all.end(), out->logits.begin(), out->logits.end());
  }
  return all;
}

TEST_CASE("paged cache: an arena is sized once - before any page is used", "[paged]") {
  PageArena arena({4, 0, 8}, 16);  // grows until sized
  REQUIRE(arena.SetCapacity(3).ok());
  CHECK(arena.capacity() == 3);
  CHECK(arena.page_bytes() == 12 * 16 * 4);
  for (int i = 0; i < 3; ++i) CHECK(arena.Allocate().ok());
  auto full = arena.Allocate();
  CHECK(full.status().code() == absl::StatusCode::kResourceExhausted);
  const absl::Status again = arena.SetCapacity(5);
  CHECK(again.code() == absl::StatusCode::kFailedPrecondition);
  CHECK(std::string(again.message()).find("sized once") != std::string::npos);
  PageArena used(std::vector<int64_t>{4}, 16);
  REQUIRE(used.Allocate().ok());  // a growing arena that has handed out a page
  CHECK(used.SetCapacity(4).code() == absl::StatusCode::kFailedPrecondition);
  PageArena fresh(std::vector<int64_t>{4}, 16);
  CHECK(fresh.SetCapacity(0).code() == absl::StatusCode::kInvalidArgument);
  CHECK(fresh.SetCapacity(int64_t{1} << 40).code() == absl::StatusCode::kInvalidArgument);
  // The coordinator's books choose the ids: Take accepts only ids inside the sized arena.
  REQUIRE(fresh.SetCapacity(2).ok());
  const int32_t outside = 2;
  CHECK(fresh.Take(std::span<const int32_t>(&outside, 1)).code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("paged cache: logits are bit-identical at every page size", "[paged]") {
  for (const std::string& dir : {kDsa, kNext}) {
    const auto ids = Prompt(dir);
    auto ref_model = Load(dir, 1024);
    const std::vector<float> ref = Run(*ref_model, ids);
    for (int64_t p : {16, 32, 64, 512}) {
      INFO(dir << " page size " << p);
      auto m = Load(dir, p);
      CHECK(Run(*m, ids) == ref);
      CHECK(m->arena().used_pages() == 0);  // the sequence released every page
    }
  }
}

TEST_CASE("paged cache: a conversation holds ceil(tokens / page) pages", "[paged]") {
  auto m = Load(kDsa, 16);
  auto seq = m->NewSequence();
  const std::vector<int32_t> ids(40, 7);
  ForwardSegment seg{seq.get(), ids, false};
  REQUIRE(m->Forward(std::span<const ForwardSegment>(&seg, 1)).ok());
  CHECK(m->arena().used_pages() == 3);
  REQUIRE(seq->RewindTo(16).ok());
  CHECK(m->arena().used_pages() == 1);
  seq.reset();
  CHECK(m->arena().used_pages() == 0);
}

TEST_CASE("paged cache: a full arena refuses the step and changes nothing", "[paged]") {
  for (const std::string& dir : {kDsa, kNext}) {
    auto m = Load(dir, 16, 3);
    auto a = m->NewSequence();
    const std::vector<int32_t> ids = Prompt(dir);
    ForwardSegment big{a.get(), std::span<const int32_t>(ids.data(), 50), false};
    auto r = m->Forward(std::span<const ForwardSegment>(&big, 1));
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == absl::StatusCode::kResourceExhausted);
    CHECK(std::string(r.status().message()).find("cannot hold 50 tokens") != std::string::npos);
    CHECK(a->length() == 0);
    CHECK(m->arena().used_pages() == 0);
    // Two segments: the first fits, the second does not; the first's new pages go back too.
    auto b = m->NewSequence();
    std::vector<ForwardSegment> two = {ForwardSegment{b.get(), std::span<const int32_t>(ids.data(), 20), false},
                                       ForwardSegment{a.get(), std::span<const int32_t>(ids.data(), 40), false}};
    CHECK(m->Forward(two).status().code() == absl::StatusCode::kResourceExhausted);
    CHECK(m->arena().used_pages() == 0);
    CHECK(b->length() == 0);
    ForwardSegment fits{a.get(), std::span<const int32_t>(ids.data(), 48), false};
    CHECK(m->Forward(std::span<const ForwardSegment>(&fits, 1)).ok());
    CHECK(m->arena().used_pages() == 3);
  }
}

TEST_CASE("paged cache: a clone shares whole pages - copies the partial one - and stays apart", "[paged]") {
  auto m = Load(kDsa, 16);
  const std::vector<int32_t> ids = Prompt(kDsa);
  auto fresh_model = Load(kDsa, 16);
  const std::vector<float> ref = Run(*fresh_model, ids);

  auto seq = m->NewSequence();
  ForwardSegment first{seq.get(), std::span<const int32_t>(ids.data(), 40), false};
  REQUIRE(m->Forward(std::span<const ForwardSegment>(&first, 1)).ok());
  CHECK(m->arena().used_pages() == 3);
  auto cloned = seq->Clone();
  REQUIRE(cloned.ok());
  auto& clone = *cloned;
  CHECK(m->arena().used_pages() == 4);  // pages 0, 1 shared; page 2 copied
  // The clone rewinds into a shared page (it is copied first) and writes other tokens there.
  REQUIRE(clone->RewindTo(20).ok());
  const std::vector<int32_t> other(30, 3);
  ForwardSegment diverge{clone.get(), other, false};
  REQUIRE(m->Forward(std::span<const ForwardSegment>(&diverge, 1)).ok());
  // The original goes on as if nothing happened: its logits equal a fresh run's.
  ForwardSegment rest{seq.get(), std::span<const int32_t>(ids.data() + 40, ids.size() - 40), true};
  auto out = m->Forward(std::span<const ForwardSegment>(&rest, 1));
  REQUIRE(out.ok());
  const int64_t V = m->config().vocab_size;
  CHECK(std::vector<float>(ref.begin() + 40 * V, ref.begin() + ids.size() * V) == out->logits);
  clone.reset();
  seq.reset();
  CHECK(m->arena().used_pages() == 0);
}

// glm5_next's pooled keys are rows of their own (one a pool of 4 tokens). Two forks of one kept
// conversation at 40 tokens share its pages 0-1 (tokens 0-31); each completes pool 10 (tokens
// 40-43) with tokens of its own. A pool row kept at slot p of the table (pool 10 in page 0, as
// the CUDA pages once did) would let the second fork overwrite the first's in the shared page;
// kept in the page of its own tokens (page 2, copied by each fork), every fork reads its own.
TEST_CASE("paged cache: forks of one kept conversation complete their pools apart", "[paged]") {
  const std::vector<int32_t> ids = Prompt(kNext);
  const std::span<const int32_t> head(ids.data(), 40), mine(ids.data() + 40, 30), theirs(ids.data() + 50, 30),
      next(ids.data() + 80, 1);
  auto run = [](CausalLM& m, SequenceState* s, std::span<const int32_t> t) {
    ForwardSegment seg{s, t, true};
    auto out = m.Forward(std::span<const ForwardSegment>(&seg, 1));
    REQUIRE(out.ok());
    return out->logits;
  };
  // What the first fork must see: the same pieces, on a model of its own.
  auto cold_model = Load(kNext, 16);
  auto cold = cold_model->NewSequence();
  run(*cold_model, cold.get(), head);
  run(*cold_model, cold.get(), mine);
  const std::vector<float> want = run(*cold_model, cold.get(), next);

  auto m = Load(kNext, 16);
  auto kept = m->NewSequence();
  run(*m, kept.get(), head);
  auto a = kept->ForkAt(40);
  auto b = kept->ForkAt(40);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  // a completes its pools 10-17, then b its own 10-19; a's next token selects among pools 0-17
  // (index_topk 16 keeps the best 4 of them), so a pool of b's in a's table would change it.
  run(*m, a->get(), mine);
  run(*m, b->get(), theirs);
  CHECK(run(*m, a->get(), next) == want);
}

TEST_CASE("paged cache: page sizes outside 16..1024 or not powers of two are refused", "[paged]") {
  for (int64_t p : {8, 48, 2048}) {
    auto m = LoadCausalLM(kDsa, TensorParallel{}, CacheOptions{p, -1});
    REQUIRE_FALSE(m.ok());
    CHECK(std::string(m.status().message()).find("is not a power of two from 16 to 1024") != std::string::npos);
  }
}

}  // namespace
}  // namespace ferry::model
