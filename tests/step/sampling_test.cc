#include "step/sampling.h"

#include <vector>

#include "tests/catch.h"

namespace ferry::step {
namespace {

TEST_CASE("sampling: greedy, top-k 1 and a tiny top-p take the argmax", "[sampling]") {
  const std::vector<float> logits = {0.1f, 2.0f, 1.9f, -3.0f};
  std::mt19937_64 rng(1);
  CHECK(SampleToken(logits.data(), 4, SamplingParams{}, rng) == 1);
  for (int i = 0; i < 20; ++i) {
    CHECK(SampleToken(logits.data(), 4, SamplingParams{5.0f, 1, 1.0f}, rng) == 1);
    CHECK(SampleToken(logits.data(), 4, SamplingParams{1.0f, 0, 0.01f}, rng) == 1);
  }
}

TEST_CASE("sampling: a seed reproduces the draw", "[sampling]") {
  const std::vector<float> logits = {0.0f, 0.5f, 1.0f, 0.2f, 0.9f};
  std::mt19937_64 a(42), b(42);
  for (int i = 0; i < 50; ++i) {
    SamplingParams p{0.8f, 0, 0.95f};
    REQUIRE(SampleToken(logits.data(), 5, p, a) == SampleToken(logits.data(), 5, p, b));
  }
}

TEST_CASE("sampling: frequencies follow softmax(logits / T) within the top-k", "[sampling]") {
  // Two live tokens one logit apart at T = 1: p = sigmoid(1) = 0.731; the third is cut by top_k.
  const std::vector<float> logits = {1.0f, 0.0f, -0.5f};
  std::mt19937_64 rng(7);
  int first = 0, third = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    const int32_t t = SampleToken(logits.data(), 3, SamplingParams{1.0f, 2, 1.0f}, rng);
    first += t == 0;
    third += t == 2;
  }
  CHECK(third == 0);
  CHECK(std::abs(first / double(n) - 0.7311) < 0.015);
}

}  // namespace
}  // namespace ferry::step
