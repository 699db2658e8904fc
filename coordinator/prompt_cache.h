// The prompt cache: a radix tree over token ids onto kept conversation states. A kept state is
// a finished request's state left on the workers under its sequence id; a new request whose
// prompt starts with a kept path forks that state instead of recomputing the prefix.
//
// Reuse rules (the family decides): with per-token caches only (glm_moe_dsa) any prefix of a
// kept path can be reused (the fork rewinds to it); with recurrent state (glm5_next) only a kept
// path's whole length can (its recurrent state exists only there). At least one prompt token is
// always left to compute, since its logits choose the next token.
//
// Eviction: least recently used first, while the kept states' cost exceeds the budget. A kept
// state costs its tokens plus `fixed_cost` (its fixed state, e.g. glm5_next's KDA state, in
// token rows of the same bytes), so the budget bounds the cache's bytes, not only its rows.
//
// Thread safety: not thread-safe; the scheduler thread owns it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <vector>

namespace ferry::coordinator {

class PromptCache {
 public:
  // budget_tokens: what the kept states may cost together, in token rows. any_prefix: whether a
  // prefix of a kept path can be reused (glm_moe_dsa) or only whole paths (glm5_next).
  // fixed_cost: what each kept state costs on top of its tokens (>= 0).
  PromptCache(int64_t budget_tokens, bool any_prefix, int64_t fixed_cost = 0);
  ~PromptCache();

  struct Match {
    uint64_t seq_id = 0;  // the kept state to fork (0: no match)
    int64_t length = 0;   // tokens of it to reuse
  };
  // The longest reusable prefix of `prompt` (strictly shorter than the prompt). Marks the kept
  // state used.
  Match Lookup(std::span<const int32_t> prompt);

  // Keeps the state `seq_id` holding `tokens`. Returns the sequence ids the workers must now
  // release: the evicted states, and `seq_id` itself when the path was kept already or alone
  // exceeds the budget.
  std::vector<uint64_t> Insert(std::vector<int32_t> tokens, uint64_t seq_id);

  // Evicts the least recently used kept state not in `except`; its id, or 0 when none.
  uint64_t EvictLru(std::span<const uint64_t> except = {});

  // Drops everything; returns the ids to release.
  std::vector<uint64_t> Clear();

  int64_t kept_states() const { return static_cast<int64_t>(entries_.size()); }
  int64_t kept_tokens() const { return kept_tokens_; }
  // kept_tokens() + kept_states() x fixed_cost: what the budget bounds.
  int64_t kept_cost() const { return kept_tokens_ + kept_states() * fixed_cost_; }

 private:
  struct Node;
  struct Entry {
    std::vector<int32_t> tokens;
    uint64_t last_used = 0;
    Node* node = nullptr;
  };

  // Walks `tokens` from the root: the deepest node reached with the number of tokens matched
  // (mid-edge matches count), and the deepest node whose whole path matched.
  void Walk(std::span<const int32_t> tokens, Node** deepest, int64_t* matched, Node** last_full) const;
  Node* InsertPath(const std::vector<int32_t>& tokens);
  void RemoveEntry(uint64_t seq_id);
  // Any kept state at or below `n`.
  uint64_t AnyBelow(const Node* n) const;

  const int64_t budget_;
  const bool any_prefix_;
  const int64_t fixed_cost_;
  std::unique_ptr<Node> root_;
  std::map<uint64_t, Entry> entries_;  // by sequence id
  int64_t kept_tokens_ = 0;
  uint64_t clock_ = 0;
};

}  // namespace ferry::coordinator
