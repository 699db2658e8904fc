#include "step/sampling.h"

#include <set>

#include "tests/catch.h"

namespace ferry::step {
namespace {

TEST_CASE("sampling: a position's draw depends on the seed and the position alone", "[sampling]") {
  std::set<double> seen;
  for (int64_t pos = 0; pos < 1000; ++pos) {
    const double u = SamplingUniform(42, pos);
    REQUIRE(u >= 0.0);
    REQUIRE(u < 1.0);
    CHECK(u == SamplingUniform(42, pos));
    seen.insert(u);
  }
  CHECK(seen.size() == 1000);
  CHECK(SamplingUniform(42, 7) != SamplingUniform(43, 7));
  // Uniform enough: the mean of 1000 draws is within 4 standard errors of 1/2.
  double sum = 0.0;
  for (double u : seen) sum += u;
  CHECK(std::abs(sum / 1000.0 - 0.5) < 4 * 0.2887 / std::sqrt(1000.0));
}

}  // namespace
}  // namespace ferry::step
