// fill_normal splits large spans over threads; every element must still be the one a single
// SplitMix64 stream gives (the CPU reference, the CUDA backend and the README's losses rely on it).
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "runtime/random.h"

namespace pipeplan {
namespace {

std::vector<double> serial_stream(std::size_t count, double stddev, std::uint64_t seed) {
  SplitMix64 rng(seed);
  std::vector<double> values(count);
  for (double& value : values)
    value = stddev * rng.normal();
  return values;
}

TEST(Random, ThreadedFillNormalIsTheSerialStream) {
  // Above the threaded threshold (2^21 per chunk), with an odd count so chunks end unevenly.
  for (const std::size_t count : {std::size_t{5}, (std::size_t{1} << 22) + 12345}) {
    std::vector<double> values(count);
    fill_normal(values, 0.02, 77);
    EXPECT_EQ(values, serial_stream(count, 0.02, 77)) << count;
  }
}

}  // namespace
}  // namespace pipeplan
