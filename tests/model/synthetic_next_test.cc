// glm5_next on synthetic checkpoints of other shapes than the golden one (pool widths, stream
// counts, KDA widths and conv kernels, a clamp that bites, a shared indexer layer, tied head):
// every one loads and keeps the engine's invariants: one-token-at-a-time (recurrent KDA) equals
// the chunked prefill within float32 rounding, the page size changes no bit, tensor
// parallelism gives the same tokens, and a snapshot restores exactly.
#include <cmath>
#include <random>
#include <string>
#include <thread>

#include "model/families/causal_lm.h"
#include "model/families/generate.h"
#include "tests/catch.h"
#include "tests/testing/files.h"
#include "tests/testing/synthetic.h"
#include "tests/testing/thread_collective.h"

namespace ferry::model {
namespace {

std::vector<float> PrefillLogits(CausalLM& m, const std::vector<int32_t>& ids, size_t piece) {
  auto seq = m.NewSequence();
  std::vector<float> all;
  for (size_t i = 0; i < ids.size(); i += piece) {
    ForwardSegment seg{seq.get(), std::span<const int32_t>(ids.data() + i, std::min(piece, ids.size() - i)), true};
    auto out = m.Forward(std::span<const ForwardSegment>(&seg, 1));
    REQUIRE(out.ok());
    all.insert(all.end(), out->logits.begin(), out->logits.end());
  }
  return all;
}

void CheckConfig(const nlohmann::json& config, uint32_t seed) {
  ferry::testing::TempDir dir;
  ferry::testing::WriteSyntheticNext(dir.path(), config, seed);
  auto m = LoadCausalLM(dir.path());
  REQUIRE(m.ok());
  const int64_t V = (*m)->config().vocab_size;
  std::mt19937 rng(seed);
  std::vector<int32_t> prompt(45);
  for (int32_t& t : prompt) t = static_cast<int32_t>(2 + rng() % (V - 2));

  // Chunked prefill against the token-by-token recurrence.
  const std::vector<float> whole = PrefillLogits(**m, prompt, prompt.size());
  const std::vector<float> single = PrefillLogits(**m, prompt, 1);
  double err = 0, scale = 0;
  for (size_t i = 0; i < whole.size(); ++i) {
    err = std::max(err, double(std::fabs(whole[i] - single[i])));
    scale = std::max(scale, double(std::fabs(whole[i])));
  }
  INFO("chunked vs recurrent: max diff " << err << " over logits up to " << scale);
  CHECK(err <= 1e-4 * std::max(1.0, scale));

  // The page size changes nothing.
  auto small_pages = LoadCausalLM(dir.path(), TensorParallel{}, CacheOptions{16, -1});
  REQUIRE(small_pages.ok());
  CHECK(PrefillLogits(**small_pages, prompt, 7) == PrefillLogits(**m, prompt, 7));

  // Greedy generation, then the same through two tensor-parallel ranks.
  GenerateOptions opt;
  opt.max_tokens = 8;
  opt.ignore_eos = true;
  auto one = Generate(**m, prompt, opt, /*keep_logits=*/true);
  REQUIRE(one.ok());
  ferry::testing::ThreadGroup group(2);
  std::vector<absl::StatusOr<GenerateResult>> ranks(2, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      auto shard = LoadCausalLM(dir.path(), TensorParallel{r, 2, group.rank(r)});
      if (!shard.ok()) {
        ranks[r] = shard.status();
        return;
      }
      ranks[r] = Generate(**shard, prompt, opt, true);
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    REQUIRE(ranks[r].ok());
    CHECK(ranks[r]->tokens == one->tokens);
  }
  double tp_err = 0;
  for (size_t i = 0; i < one->logits.size(); ++i) {
    tp_err = std::max(tp_err, double(std::fabs(one->logits[i] - ranks[0]->logits[i])));
  }
  CHECK(tp_err < 1e-3);

  // A snapshot after the prompt restores the same continuation.
  auto seq = (*m)->NewSequence();
  ForwardSegment p{seq.get(), prompt, false};
  auto first = (*m)->Forward(std::span<const ForwardSegment>(&p, 1));
  REQUIRE(first.ok());
  seq->KeepSnapshot();
  const int32_t tok = one->tokens[0];
  ForwardSegment d{seq.get(), std::span<const int32_t>(&tok, 1), false};
  auto a = (*m)->Forward(std::span<const ForwardSegment>(&d, 1));
  REQUIRE(a.ok());
  REQUIRE(seq->RewindTo(static_cast<int64_t>(prompt.size())).ok());
  auto b = (*m)->Forward(std::span<const ForwardSegment>(&d, 1));
  REQUIRE(b.ok());
  CHECK(a->logits == b->logits);
}

TEST_CASE("synthetic glm5_next: the small base config", "[glm5_next][synthetic]") {
  CheckConfig(ferry::testing::SmallNextConfig(), 41);
}

TEST_CASE("synthetic glm5_next: kpool 2 - two streams - wider KDA - conv 3 - a clamp that bites", "[glm5_next][synthetic]") {
  nlohmann::json c = ferry::testing::SmallNextConfig();
  auto& t = c["text_config"];
  t["index_kpool"] = 2;
  t["hc_mult"] = 2;
  t["hc_sinkhorn_iters"] = 5;
  t["linear_num_heads"] = 4;
  t["linear_head_dim"] = 8;
  t["linear_conv_kernel_dim"] = 3;
  t["swiglu_limit"] = 0.5;
  t["n_shared_experts"] = 0;
  t["layer_types"] = {"deepseek_sparse_attention", "deepseek_sparse_attention", "linear_attention",
                      "linear_attention", "deepseek_sparse_attention"};
  t["indexer_types"] = {"full", "shared", "full", "full", "full"};
  t["mlp_layer_types"] = {"sparse", "sparse", "dense", "sparse", "sparse"};
  t["num_hidden_layers"] = 5;
  CheckConfig(c, 42);
}

TEST_CASE("synthetic glm5_next: kpool 8 - top-k 16 - grouped routing - tied head", "[glm5_next][synthetic]") {
  nlohmann::json c = ferry::testing::SmallNextConfig();
  auto& t = c["text_config"];
  t["index_kpool"] = 8;
  t["index_topk"] = 16;
  t["n_group"] = 2;
  t["topk_group"] = 1;
  t["tie_word_embeddings"] = true;
  c["tie_word_embeddings"] = true;
  CheckConfig(c, 43);
}

}  // namespace
}  // namespace ferry::model
