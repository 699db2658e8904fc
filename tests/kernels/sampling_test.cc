#include "kernels/cpu/sampling.h"

#include <cmath>
#include <vector>

#include "tests/catch.h"

namespace ferry::kernels::cpu {
namespace {

TEST_CASE("sampling: greedy - top-k 1 and a tiny top-p take the argmax", "[sampling]") {
  const std::vector<float> logits = {0.1f, 2.0f, 1.9f, -3.0f};
  CHECK(SampleToken(logits.data(), 4, 0.0f, 0, 1.0f, 0.5) == 1);
  for (double u : {0.0, 0.3, 0.999999}) {
    CHECK(SampleToken(logits.data(), 4, 5.0f, 1, 1.0f, u) == 1);
    CHECK(SampleToken(logits.data(), 4, 1.0f, 0, 0.01f, u) == 1);
  }
}

TEST_CASE("sampling: the draw walks the kept tokens in descending order", "[sampling]") {
  // T = 1 over {1, 0} (top-k 2 cuts -0.5): p = 0.7311, 0.2689. Draws below p pick id 0.
  const std::vector<float> logits = {1.0f, 0.0f, -0.5f};
  CHECK(SampleToken(logits.data(), 3, 1.0f, 2, 1.0f, 0.0) == 0);
  CHECK(SampleToken(logits.data(), 3, 1.0f, 2, 1.0f, 0.73) == 0);
  CHECK(SampleToken(logits.data(), 3, 1.0f, 2, 1.0f, 0.74) == 1);
  CHECK(SampleToken(logits.data(), 3, 1.0f, 2, 1.0f, 0.9999) == 1);
  // Without the cut the third token takes the top of the range.
  CHECK(SampleToken(logits.data(), 3, 1.0f, 0, 1.0f, 0.9999) == 2);
  // Equal logits go in id order.
  const std::vector<float> tie = {0.5f, 2.0f, 0.5f, 2.0f};
  CHECK(SampleToken(tie.data(), 4, 1.0f, 0, 1.0f, 0.1) == 1);
  CHECK(SampleToken(tie.data(), 4, 1.0f, 0, 1.0f, 0.6) == 3);
}

TEST_CASE("sampling: top-p keeps the smallest prefix reaching its mass", "[sampling]") {
  // Probabilities (T = 1) of {ln 5, ln 3, ln 2}: 0.5, 0.3, 0.2. top_p 0.79 keeps two, renormalised.
  const std::vector<float> logits = {std::log(5.0f), std::log(3.0f), std::log(2.0f)};
  CHECK(SampleToken(logits.data(), 3, 1.0f, 0, 0.79f, 0.6) == 0);   // 0.6 * 0.8 = 0.48 < 0.5
  CHECK(SampleToken(logits.data(), 3, 1.0f, 0, 0.79f, 0.99) == 1);  // never id 2
  CHECK(SampleToken(logits.data(), 3, 1.0f, 0, 0.81f, 0.99) == 2);  // 0.81 needs all three
}

TEST_CASE("sampling: log-probabilities are log_softmax at temperature 1 - top ones in order", "[sampling]") {
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 3.0f, -INFINITY};
  RowSampler s;
  s.temperature = 2.0f;  // does not change the log-probabilities
  s.uniform = 0.99;
  s.top_logprobs = 3;
  const SampledToken t = SampleRow(logits.data(), 5, s);
  const double lse = std::log(std::exp(1.0) + 2 * std::exp(3.0) + std::exp(2.0));
  REQUIRE(t.token == 0);  // the last of the kept order {1, 3, 2, 0}
  CHECK(t.logprob == Approx(1.0 - lse).margin(1e-6));
  REQUIRE(t.n_top == 3);
  CHECK(t.top_ids[0] == 1);
  CHECK(t.top_ids[1] == 3);
  CHECK(t.top_ids[2] == 2);
  CHECK(t.top_logprobs[0] == Approx(3.0 - lse).margin(1e-6));
  CHECK(t.top_logprobs[2] == Approx(2.0 - lse).margin(1e-6));
  s.top_logprobs = 20;  // more than the vocabulary
  CHECK(SampleRow(logits.data(), 5, s).n_top == 5);
  s.top_logprobs = -1;
  CHECK(SampleRow(logits.data(), 5, s).n_top == 0);
}

TEST_CASE("sampling: a row with a NaN or +infinity - or nothing finite - picks nothing", "[sampling]") {
  RowSampler greedy;
  for (const std::vector<float>& bad : {std::vector<float>{0.0f, NAN, 1.0f}, std::vector<float>{0.0f, INFINITY},
                                        std::vector<float>{-INFINITY, -INFINITY}}) {
    CHECK(SampleRow(bad.data(), static_cast<int64_t>(bad.size()), greedy).token == -1);
  }
  const std::vector<float> ok = {-INFINITY, 0.5f};
  CHECK(SampleRow(ok.data(), 2, greedy).token == 1);
}

TEST_CASE("sampling: frequencies follow softmax(logits / T) within the top-k", "[sampling]") {
  const std::vector<float> logits = {1.0f, 0.0f, -0.5f};
  int first = 0, third = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    const int32_t t = SampleToken(logits.data(), 3, 1.0f, 2, 1.0f, (i + 0.5) / n);
    first += t == 0;
    third += t == 2;
  }
  CHECK(third == 0);
  CHECK(std::abs(first / double(n) - 0.7311) < 0.001);
}

}  // namespace
}  // namespace ferry::kernels::cpu
