// Deterministic host-side random numbers for parameter init and synthetic batches. Any backend
// draws its initial weights here and uploads them, so two backends start from the same values.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace pipeplan {

// splitmix64 (Steele, Lea, Flood, OOPSLA 2014): each output is a strong hash of a counter, so
// streams from well-mixed seeds do not overlap in practice and cost nothing to create.
class SplitMix64 {
 public:
  explicit SplitMix64(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next();
  double uniform();  // [0, 1), 53 random bits
  double normal();   // N(0, 1), Box–Muller (the cosine branch only, for a simple stream)

 private:
  std::uint64_t state_;
};

// A seed for stream (a, b) of `seed`: layer index and parameter position, say.
std::uint64_t mix_seed(std::uint64_t seed, std::uint64_t a, std::uint64_t b);
void fill_normal(std::span<double> out, double stddev, std::uint64_t seed);
// `count` tokens uniform in [0, vocab).
std::vector<std::int32_t> random_tokens(std::int64_t count, int vocab, std::uint64_t seed);

}  // namespace pipeplan
