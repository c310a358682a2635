#include "runtime/random.h"

#include <cmath>
#include <numbers>

namespace pipeplan {

std::uint64_t SplitMix64::next() {
  std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

double SplitMix64::uniform() {
  return static_cast<double>(next() >> 11) * 0x1.0p-53;
}

double SplitMix64::normal() {
  const double u1 = 1.0 - uniform();  // (0, 1]: log stays finite
  const double u2 = uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

std::uint64_t mix_seed(std::uint64_t seed, std::uint64_t a, std::uint64_t b) {
  SplitMix64 rng(seed);
  SplitMix64 rng_a(rng.next() ^ a);
  SplitMix64 rng_b(rng_a.next() ^ b);
  return rng_b.next();
}

void fill_normal(std::span<double> out, double stddev, std::uint64_t seed) {
  SplitMix64 rng(seed);
  for (double& value : out)
    value = stddev * rng.normal();
}

std::vector<std::int32_t> random_tokens(std::int64_t count, int vocab, std::uint64_t seed) {
  SplitMix64 rng(seed);
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(count));
  // Modulo bias is vocab / 2^64: irrelevant.
  for (std::int32_t& token : tokens) {
    token = static_cast<std::int32_t>(rng.next() % static_cast<std::uint64_t>(vocab));
  }
  return tokens;
}

}  // namespace pipeplan
