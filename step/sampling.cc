#include "step/sampling.h"

namespace ferry::step {

uint64_t SamplingStreamSeed(uint64_t seed, int64_t position) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ull * (static_cast<uint64_t>(position) + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

double SamplingUniform(uint64_t seed, int64_t position) {
  return static_cast<double>(SamplingStreamSeed(seed, position) >> 11) * 0x1.0p-53;
}

}  // namespace ferry::step
