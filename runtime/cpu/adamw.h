// AdamW (Loshchilov & Hutter 2019): Adam with bias correction and decoupled weight decay.
#pragma once

#include <cstdint>

#include "runtime/backend.h"

namespace pipeplan::cpu {

// m ← β1·m + (1 − β1)·g;  v ← β2·v + (1 − β2)·g²;  m̂ = m / (1 − β1^step);  v̂ = v / (1 − β2^step)
// w ← w − lr · (m̂ / (√v̂ + eps) + wd·w), wd = config.weight_decay if `decay`, else 0.
// Arithmetic in double per element. Throws Error unless step >= 1.
template <typename T>
void adamw_update(T* w,        // (n) updated
                  T* m,        // (n) updated
                  T* v,        // (n) updated
                  const T* g,  // (n)
                  std::int64_t n, const AdamWConfig& config, int step, bool decay);

}  // namespace pipeplan::cpu
