// Tensor parallelism on the CPU reference: W = 2 and 4 shards on threads give the greedy tokens
// of W = 1 for every golden prompt of both families, logits within float32 rounding, and every
// rank computes the same logits bit for bit.
#include "model/parallel/tensor_parallel.h"

#include <cmath>
#include <string>
#include <thread>

#include "model/families/causal_lm.h"
#include "model/families/generate.h"
#include "model/golden/golden.h"
#include "tests/catch.h"
#include "tests/testing/thread_collective.h"

namespace ferry::model {
namespace {

struct RankRun {
  absl::Status status;
  std::vector<GenerateResult> results;  // one per golden prompt
};

std::vector<RankRun> RunGroup(const std::string& dir, const std::vector<GoldenPrompt>& prompts, int world) {
  ferry::testing::ThreadGroup group(world);
  std::vector<RankRun> runs(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      auto m = LoadCausalLM(dir, TensorParallel{r, world, group.rank(r)});
      if (!m.ok()) {
        runs[r].status = m.status();
        return;  // the test then fails; other ranks may block, so load errors are checked first
      }
      for (const GoldenPrompt& g : prompts) {
        GenerateOptions opt;
        opt.max_tokens = static_cast<int64_t>(g.greedy.size());
        opt.ignore_eos = true;
        opt.prefill_chunk = 11;
        auto res = Generate(**m, g.ids, opt, /*keep_logits=*/true);
        if (!res.ok()) {
          runs[r].status = res.status();
          return;
        }
        runs[r].results.push_back(*res);
      }
    });
  }
  for (auto& t : threads) t.join();
  return runs;
}

void CheckFamily(const std::string& name) {
  const std::string dir = std::string(FERRY_TEST_DATA_DIR) + "/" + name;
  auto prompts = ReadGolden(dir + "/golden.safetensors");
  REQUIRE(prompts.ok());
  const std::vector<RankRun> one = RunGroup(dir, *prompts, 1);
  REQUIRE(one[0].status.ok());
  for (int world : {2, 4}) {
    const std::vector<RankRun> runs = RunGroup(dir, *prompts, world);
    for (int r = 0; r < world; ++r) {
      INFO(name << " W=" << world << " rank " << r << ": " << runs[r].status.message());
      REQUIRE(runs[r].status.ok());
    }
    for (size_t p = 0; p < prompts->size(); ++p) {
      INFO(name << " W=" << world << " prompt " << p);
      CHECK(runs[0].results[p].tokens == (*prompts)[p].greedy);
      CHECK(runs[0].results[p].tokens == one[0].results[p].tokens);
      double err = 0;
      const auto& a = runs[0].results[p].logits;
      const auto& b = one[0].results[p].logits;
      REQUIRE(a.size() == b.size());
      for (size_t i = 0; i < a.size(); ++i) err = std::max(err, double(std::fabs(a[i] - b[i])));
      CHECK(err < 1e-4);
      for (int r = 1; r < world; ++r) CHECK(runs[r].results[p].logits == a);
    }
  }
}

TEST_CASE("tensor parallel glm_moe_dsa: W = 2 - 4 give the W = 1 tokens", "[tp][glm_moe_dsa]") {
  CheckFamily("glm-dsa-tiny");
}

TEST_CASE("tensor parallel glm5_next: W = 2 - 4 give the W = 1 tokens", "[tp][glm5_next]") {
  CheckFamily("glm5next-tiny");
}

TEST_CASE("tensor parallel: a width that does not divide the heads is refused", "[tp]") {
  ferry::testing::ThreadGroup group(3);
  auto m = LoadCausalLM(std::string(FERRY_TEST_DATA_DIR) + "/glm-dsa-tiny", TensorParallel{0, 3, group.rank(0)});
  REQUIRE_FALSE(m.ok());
  CHECK(std::string(m.status().message()).find("(8) does not split over 3 tensor-parallel ranks") !=
        std::string::npos);
}

}  // namespace
}  // namespace ferry::model
