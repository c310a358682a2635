// SwiGLU MLP (Shazeer 2020, as in LLaMA): y = (silu(x·Wg^T) ⊙ (x·Wu^T))·Wd^T. The elementwise
// gate finishes in p1; p2 is the three weight GEMMs.
#pragma once

#include <cstdint>
#include <span>

namespace pipeplan::cpu {

template <typename T>
struct SwigluWeights {
  const T* gate;  // (F, C)
  const T* up;    // (F, C)
  const T* down;  // (C, F)
};

template <typename T>
struct SwigluGrads {
  T* gate;  // (F, C) accumulated
  T* up;    // (F, C) accumulated
  T* down;  // (C, F) accumulated
};

// Written by forward, read by p1.
template <typename T>
struct SwigluStash {
  T* gate;  // (N, F) x·Wg^T
  T* up;    // (N, F) x·Wu^T
  T* h;     // (N, F) silu(gate) ⊙ up; retained as X of Wd
};

// One micro-batch, as retained from p1 for p2.
template <typename T>
struct SwigluRows {
  const T* x;      // (rows, C) input (X of Wg and Wu)
  const T* dgate;  // (rows, F) (dY of Wg)
  const T* dup;    // (rows, F) (dY of Wu)
  const T* h;      // (rows, F) (X of Wd)
  const T* dy;     // (rows, C) (dY of Wd)
  std::int64_t rows;
};

template <typename T>
void swiglu_mlp_forward(T* y,  // (N, C) overwritten
                        const SwigluStash<T>& stash,
                        const T* x,  // (N, C)
                        const SwigluWeights<T>& weights, std::int64_t n, std::int64_t c,
                        std::int64_t f);

// p1: dx += dgate·Wg + dup·Wu.
template <typename T>
void swiglu_mlp_backward_p1(T* dx,        // (N, C) accumulated
                            T* dgate,     // (N, F) overwritten; retained for p2
                            T* dup,       // (N, F) overwritten; retained for p2
                            const T* dy,  // (N, C)
                            const SwigluStash<T>& stash, const SwigluWeights<T>& weights,
                            std::int64_t n, std::int64_t c, std::int64_t f);

template <typename T>
void swiglu_mlp_backward_p2(const SwigluGrads<T>& grads, std::span<const SwigluRows<T>> blocks,
                            std::int64_t c, std::int64_t f);

}  // namespace pipeplan::cpu
