// An int count or position (stages, devices, micro-batches: ints in the plan) as an index into a
// std::vector; every caller has checked it is not negative.
#pragma once

#include <cstddef>

namespace pipeplan {

inline std::size_t idx(int i) {
  return static_cast<std::size_t>(i);
}

}  // namespace pipeplan
