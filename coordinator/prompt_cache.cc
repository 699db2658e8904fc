#include "coordinator/prompt_cache.h"

#include <algorithm>

namespace ferry::coordinator {

// A radix-tree node: the edge into it is `edge` (tokens after the parent's path); `kept` lists
// the kept states whose path ends exactly here.
struct PromptCache::Node {
  std::vector<int32_t> edge;
  Node* parent = nullptr;
  std::map<int32_t, std::unique_ptr<Node>> children;  // by the first token of their edge
  std::vector<uint64_t> kept;
};

PromptCache::PromptCache(int64_t budget_tokens, bool any_prefix, int64_t fixed_cost)
    : budget_(budget_tokens), any_prefix_(any_prefix), fixed_cost_(fixed_cost), root_(std::make_unique<Node>()) {}

PromptCache::~PromptCache() = default;

void PromptCache::Walk(std::span<const int32_t> tokens, Node** deepest, int64_t* matched, Node** last_full) const {
  Node* n = root_.get();
  int64_t i = 0;
  *last_full = n;
  while (true) {
    *deepest = n;
    *matched = i;
    if (i == static_cast<int64_t>(tokens.size())) return;
    auto it = n->children.find(tokens[static_cast<size_t>(i)]);
    if (it == n->children.end()) return;
    Node* child = it->second.get();
    size_t k = 0;
    while (k < child->edge.size() && i + static_cast<int64_t>(k) < static_cast<int64_t>(tokens.size()) &&
           child->edge[k] == tokens[static_cast<size_t>(i) + k]) {
      ++k;
    }
    if (k < child->edge.size()) {  // stopped inside the edge: the child's subtree shares i + k tokens
      *deepest = child;
      *matched = i + static_cast<int64_t>(k);
      return;
    }
    i += static_cast<int64_t>(k);
    n = child;
    *last_full = n;
  }
}

uint64_t PromptCache::AnyBelow(const Node* n) const {
  if (!n->kept.empty()) return n->kept.front();
  for (const auto& [tok, child] : n->children) {
    if (uint64_t id = AnyBelow(child.get()); id != 0) return id;
  }
  return 0;
}

PromptCache::Match PromptCache::Lookup(std::span<const int32_t> prompt) {
  Node* deepest = nullptr;
  Node* last_full = nullptr;
  int64_t matched = 0;
  // Leave at least one prompt token to compute.
  const std::span<const int32_t> usable = prompt.first(prompt.empty() ? 0 : prompt.size() - 1);
  Walk(usable, &deepest, &matched, &last_full);
  Match m;
  if (any_prefix_) {
    if (matched > 0) {
      m.seq_id = AnyBelow(deepest);
      m.length = matched;
    }
  } else {
    // Only a kept path's whole length: the deepest fully matched node that keeps a state.
    for (Node* n = last_full; n != nullptr && n != root_.get(); n = n->parent) {
      if (!n->kept.empty()) {
        m.seq_id = n->kept.front();
        int64_t depth = 0;
        for (Node* p = n; p != root_.get(); p = p->parent) depth += static_cast<int64_t>(p->edge.size());
        m.length = depth;
        break;
      }
    }
  }
  if (m.seq_id != 0) entries_[m.seq_id].last_used = ++clock_;
  else m.length = 0;
  return m;
}

PromptCache::Node* PromptCache::InsertPath(const std::vector<int32_t>& tokens) {
  Node* n = root_.get();
  size_t i = 0;
  while (i < tokens.size()) {
    auto it = n->children.find(tokens[i]);
    if (it == n->children.end()) {
      auto leaf = std::make_unique<Node>();
      leaf->edge.assign(tokens.begin() + static_cast<long>(i), tokens.end());
      leaf->parent = n;
      Node* raw = leaf.get();
      n->children[tokens[i]] = std::move(leaf);
      return raw;
    }
    Node* child = it->second.get();
    size_t k = 0;
    while (k < child->edge.size() && i + k < tokens.size() && child->edge[k] == tokens[i + k]) ++k;
    if (k < child->edge.size()) {
      // Split the edge at k: a middle node takes the shared part.
      auto mid = std::make_unique<Node>();
      mid->edge.assign(child->edge.begin(), child->edge.begin() + static_cast<long>(k));
      mid->parent = n;
      std::unique_ptr<Node> old = std::move(it->second);
      old->edge.erase(old->edge.begin(), old->edge.begin() + static_cast<long>(k));
      old->parent = mid.get();
      mid->children[old->edge.front()] = std::move(old);
      Node* raw = mid.get();
      it->second = std::move(mid);
      child = raw;
    }
    i += k;
    n = child;
  }
  return n;
}

void PromptCache::RemoveEntry(uint64_t seq_id) {
  auto it = entries_.find(seq_id);
  if (it == entries_.end()) return;
  Node* n = it->second.node;
  n->kept.erase(std::find(n->kept.begin(), n->kept.end(), seq_id));
  kept_tokens_ -= static_cast<int64_t>(it->second.tokens.size());
  entries_.erase(it);
  // Prune leaves that keep nothing (merging chains is not needed for correctness).
  while (n != root_.get() && n->kept.empty() && n->children.empty()) {
    Node* parent = n->parent;
    parent->children.erase(n->edge.front());
    n = parent;
  }
}

std::vector<uint64_t> PromptCache::Insert(std::vector<int32_t> tokens, uint64_t seq_id) {
  std::vector<uint64_t> release;
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n == 0 || n + fixed_cost_ > budget_) return {seq_id};
  Node* node = InsertPath(tokens);
  if (!node->kept.empty()) {
    // The same path is kept already: keep the older state, drop this one.
    entries_[node->kept.front()].last_used = ++clock_;
    return {seq_id};
  }
  node->kept.push_back(seq_id);
  entries_[seq_id] = Entry{std::move(tokens), ++clock_, node};
  kept_tokens_ += n;
  while (kept_cost() > budget_) {
    auto lru = std::min_element(entries_.begin(), entries_.end(),
                                [](const auto& a, const auto& b) { return a.second.last_used < b.second.last_used; });
    const uint64_t victim = lru->first;
    RemoveEntry(victim);
    release.push_back(victim);
  }
  return release;
}

uint64_t PromptCache::EvictLru(std::span<const uint64_t> except) {
  uint64_t victim = 0, oldest = 0;
  for (const auto& [id, e] : entries_) {
    if (std::find(except.begin(), except.end(), id) == except.end() && (victim == 0 || e.last_used < oldest)) {
      victim = id;
      oldest = e.last_used;
    }
  }
  if (victim != 0) RemoveEntry(victim);
  return victim;
}

std::vector<uint64_t> PromptCache::Clear() {
  std::vector<uint64_t> ids;
  for (const auto& [id, e] : entries_) ids.push_back(id);
  for (uint64_t id : ids) RemoveEntry(id);
  return ids;
}

}  // namespace ferry::coordinator
