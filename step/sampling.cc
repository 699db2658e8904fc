#include "step/sampling.h"

#include "kernels/cpu/sampling.h"

namespace ferry::step {

uint64_t SamplingStreamSeed(uint64_t seed, int64_t position) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ull * (static_cast<uint64_t>(position) + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

int32_t SampleToken(const float* logits, int64_t vocab, const SamplingParams& p, std::mt19937_64& rng) {
  return kernels::cpu::SampleToken(logits, vocab, p.temperature, p.top_k, p.top_p, rng);
}

}  // namespace ferry::step
