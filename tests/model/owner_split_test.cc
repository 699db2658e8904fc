// The latent split on the CPU reference (docs/owner-split.md): with each
// conversation's latent rows on its owner rank only, and the other ranks shipping their heads'
// queries to the owner, every logit is bit-identical to the replicated engine's at the same
// width, through decode rows (queries shipped), prefill chunks (history fetched, in pieces), a
// borrowed fill, a fork and a carry (a kept conversation's rows moved to a new owner), with
// prompts past index_topk (the indexer is sparse).
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cpu/ops.h"
#include "model/families/causal_lm.h"
#include "model/families/glm5_next.h"
#include "model/families/glm_moe_dsa.h"
#include "model/blocks/mla.h"
#include "tests/catch.h"
#include "tests/testing/thread_collective.h"

namespace ferry::model {
namespace {

const std::string kDsa = std::string(FERRY_TEST_DATA_DIR) + "/glm-dsa-tiny";
const std::string kNext = std::string(FERRY_TEST_DATA_DIR) + "/glm5next-tiny";

std::vector<int32_t> Prompt(int n, int salt) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back(static_cast<int32_t>(3 + (i * 37 + salt * 101) % 370));
  return p;
}

struct RankResult {
  absl::Status status;
  std::vector<std::vector<float>> logits;  // per step
  OwnerSplitStats stats;
  int64_t latent_used = 0, keys_used = 0;  // at the end
  std::vector<int64_t> latent_held;        // latent pages each conversation holds at the end
};

// Runs one script on `world` ranks; split: the conversations get owners (A: rank 1 % W from its
// first token, B: rank 0 with a borrowed fill, D: rank W - 1; C stays replicated).
// glm5_next forks only where its KDA state exists: at the current length (fork_back 0).
std::vector<RankResult> Run(const std::string& dir, int world, bool split, int64_t fork_back) {
  ferry::testing::ThreadGroup group(world);
  std::vector<RankResult> out(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      RankResult& res = out[static_cast<size_t>(r)];
      auto loaded = LoadCausalLM(dir, TensorParallel{r, world, group.rank(r)}, CacheOptions{16, -1});
      if (!loaded.ok()) {
        res.status = loaded.status();
        return;
      }
      CausalLM& m = **loaded;
      std::vector<std::unique_ptr<SequenceState>> seqs;
      for (int i = 0; i < 4; ++i) seqs.push_back(m.NewSequence());
      SequenceState *A = seqs[0].get(), *B = seqs[1].get(), *C = seqs[2].get(), *D = seqs[3].get();
      if (split) {
        res.status.Update(A->SetLatentOwner(1 % world, false));
        res.status.Update(B->SetLatentOwner(0, true));
        res.status.Update(D->SetLatentOwner(world - 1, false));
      }
      std::vector<std::vector<int32_t>> next(4);  // the pending token of each conversation
      auto step = [&](std::vector<std::pair<SequenceState*, std::vector<int32_t>>> pieces) {
        if (!res.status.ok()) return;
        std::vector<ForwardSegment> segs;
        for (auto& [st, toks] : pieces) segs.push_back(ForwardSegment{st, toks, false});
        auto fwd = m.Forward(segs);
        if (!fwd.ok()) {
          res.status = fwd.status();
          return;
        }
        res.logits.push_back(fwd->logits);
        for (size_t s = 0; s < pieces.size(); ++s) {
          const int32_t tok = static_cast<int32_t>(
              kernels::cpu::ArgMax(fwd->logits.data() + fwd->first_row[s] * fwd->vocab, fwd->vocab));
          for (int i = 0; i < 4; ++i) {
            if (pieces[s].first == seqs[static_cast<size_t>(i)].get()) next[static_cast<size_t>(i)] = {tok};
          }
        }
      };
      step({{A, Prompt(37, 1)}, {B, Prompt(45, 2)}});
      if (split) res.status.Update(B->SetLatentOwner(0, false));  // the fill is over
      const std::vector<int32_t> d = Prompt(55, 4);
      step({{A, next[0]}, {B, next[1]}, {C, Prompt(20, 3)}, {D, std::vector<int32_t>(d.begin(), d.begin() + 30)}});
      step({{A, next[0]}, {B, next[1]}, {C, next[2]}, {D, std::vector<int32_t>(d.begin() + 30, d.end())}});
      for (int i = 0; i < 5; ++i) step({{A, next[0]}, {B, next[1]}, {C, next[2]}, {D, next[3]}});
      // A fork of A (the prompt cache resuming it) at a page boundary's middle, with a new suffix.
      std::unique_ptr<SequenceState> E;
      if (res.status.ok()) {
        auto fork = A->ForkSplitAt(A->length() - fork_back, -1, -1);
        if (!fork.ok()) {
          res.status = fork.status();
        } else {
          E = std::move(*fork);
        }
      }
      if (E) {
        step({{E.get(), Prompt(9, 5)}, {A, next[0]}, {D, next[3]}});
        for (int i = 0; i < 3; ++i) step({{E.get(), {next[0][0]}}, {B, next[1]}});
      }
      // A carry: another fork of A whose rows move to rank `to` (A's owner lacks room, say),
      // which then owns it; the replicated run forks as before.
      const int to = (1 % world + 1) % world;
      std::unique_ptr<SequenceState> F;
      if (res.status.ok()) {
        const int64_t at = A->length() - fork_back;
        auto fork = split ? A->ForkCarriedAt(at, -1, to) : A->ForkSplitAt(at, -1, -1);
        if (!fork.ok()) {
          res.status = fork.status();
        } else {
          F = std::move(*fork);
          if (split && r == to) res.status.Update(F->split_rows()->latent().Reserve(at));
          const LatentCarry carry{A, F.get(), 1 % world, to, at};
          if (split) res.status.Update(m.CarryLatent(std::span<const LatentCarry>(&carry, 1)));
        }
      }
      if (F) {
        step({{F.get(), Prompt(7, 6)}, {D, next[3]}});
        step({{F.get(), {next[0][0]}}, {A, next[0]}});
      }
      res.stats = m.owner_split_stats();
      res.keys_used = m.arena().used_pages();
      if (auto* dsa = dynamic_cast<GlmMoeDsa*>(&m)) res.latent_used = dsa->latent_arena().used_pages();
      if (auto* next = dynamic_cast<Glm5Next*>(&m)) res.latent_used = next->latent_arena().used_pages();
      for (auto* s : {A, B, C, D, E.get(), F.get()}) {
        res.latent_held.push_back(s ? static_cast<int64_t>(s->LatentPages().size()) : 0);
      }
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

void CheckSplit(const std::string& dir, int64_t fork_back, int64_t min_pieces = 1) {
  for (int world : {2, 4}) {
    const std::vector<RankResult> rep = Run(dir, world, false, fork_back);
    const std::vector<RankResult> split = Run(dir, world, true, fork_back);
    for (int r = 0; r < world; ++r) {
      INFO("W=" << world << " rank " << r << ": " << rep[r].status.message() << " / " << split[r].status.message());
      REQUIRE(rep[r].status.ok());
      REQUIRE(split[r].status.ok());
      REQUIRE(split[r].logits.size() == rep[r].logits.size());
      CHECK(split[r].logits.size() == 14);
      for (size_t s = 0; s < rep[r].logits.size(); ++s) {
        INFO("step " << s);
        CHECK(split[r].logits[s] == rep[r].logits[s]);
      }
      // The replicated run moves nothing; the split one ships queries from every rank (each owns
      // nothing of some conversation) and serves them on the owners.
      CHECK(rep[r].stats.rows_shipped == 0);
      CHECK(rep[r].stats.rows_fetched == 0);
      CHECK(split[r].stats.rows_shipped > 0);  // decode rows ship their queries
      // Prompt chunks fetch their history on the ranks that lack it: every rank lacks A's, D's or
      // F's (owned by 1 % W, W - 1 and `to`).
      CHECK(split[r].stats.rows_fetched > 0);
      CHECK(split[r].stats.fetch_pieces >= min_pieces);
      const int to = (1 % world + 1) % world;
      const bool owns = r == 0 || r == 1 % world || r == world - 1 || r == to;
      CHECK((split[r].stats.rows_served > 0) == owns);
      // Latent pages are held only where the rows live: A (and its fork E) on 1 % W, B on 0
      // after its borrowed fill, C everywhere, D on W - 1. The key tables are on every rank.
      CHECK((split[r].latent_held[0] > 0) == (r == 1 % world));
      CHECK((split[r].latent_held[1] > 0) == (r == 0));
      CHECK(split[r].latent_held[2] > 0);
      CHECK((split[r].latent_held[3] > 0) == (r == world - 1));
      CHECK((split[r].latent_held[4] > 0) == (r == 1 % world));
      // The carried fork F holds its rows on its new owner only, which received them all.
      CHECK((split[r].latent_held[5] > 0) == (r == to));
      CHECK((split[r].stats.rows_carried > 0) == (r == to));
      CHECK(rep[r].stats.rows_carried == 0);
      CHECK(split[r].keys_used == rep[r].keys_used);
      CHECK(split[r].latent_used < rep[r].latent_used);
    }
  }
}

TEST_CASE("owner split glm_moe_dsa: every logit equals the replicated engine's - bit for bit", "[owner_split][tp]") {
  CheckSplit(kDsa, 5);
}

TEST_CASE("owner split glm5_next: every logit equals the replicated engine's - bit for bit", "[owner_split][tp]") {
  CheckSplit(kNext, 0);
}

TEST_CASE("owner split: a history fetch in pieces of 100 floats gives the same bits", "[owner_split][tp]") {
  SetFetchPieceFloats(100);
  // glm-dsa-tiny's rows are 80 floats: a chunk's union of 16+ rows takes 13+ pieces a layer.
  CheckSplit(kDsa, 5, /*min_pieces=*/50);
  SetFetchPieceFloats(kFetchPieceFloats);
}

TEST_CASE("owner split: owners change only on an empty conversation or at the end of a borrow", "[owner_split]") {
  auto m = LoadCausalLM(kDsa, TensorParallel{}, CacheOptions{16, -1});
  REQUIRE(m.ok());
  auto s = (*m)->NewSequence();
  REQUIRE(s->SetLatentOwner(0, true).ok());
  std::vector<int32_t> p = Prompt(20, 1);
  ForwardSegment seg{s.get(), p, false};
  REQUIRE((*m)->Forward(std::span<const ForwardSegment>(&seg, 1)).ok());
  CHECK(s->SetLatentOwner(1, false).code() == absl::StatusCode::kFailedPrecondition);
  CHECK(s->SetLatentOwner(0, true).ok());  // no change
  CHECK(s->SetLatentOwner(0, false).ok());  // the borrow ends; rank 0 owns and keeps its rows
  CHECK(s->LatentPages().size() == 2);
  CHECK(s->SetLatentOwner(0, true).code() == absl::StatusCode::kFailedPrecondition);
  // Latent pages go only to a conversation with an owner, on a rank that holds its rows.
  const int32_t page = 7;
  auto replicated = (*m)->NewSequence();
  CHECK(replicated->AdoptLatentPages(std::span<const int32_t>(&page, 1)).code() ==
        absl::StatusCode::kFailedPrecondition);
  auto elsewhere = (*m)->NewSequence();
  REQUIRE(elsewhere->SetLatentOwner(1, false).ok());  // this process is rank 0
  const absl::Status refused = elsewhere->AdoptLatentPages(std::span<const int32_t>(&page, 1));
  CHECK(refused.code() == absl::StatusCode::kFailedPrecondition);
  CHECK(std::string(refused.message()).find("rank 0 does not hold") != std::string::npos);
}

}  // namespace
}  // namespace ferry::model
