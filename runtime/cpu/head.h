// The model's head as one pipeline layer: final RMSNorm, LM head (logits = xn·Wlm^T) and
// cross-entropy averaged over the N = B·T tokens of the micro-batch. p1 gives dX; p2 gives the
// LM head's dW (from xn and dlogits) and the norm gain's gradient (from x̂ and dxn).
#pragma once

#include <cstdint>
#include <span>

namespace pipeplan::cpu {

template <typename T>
struct HeadWeights {
  const T* norm;  // (C)
  const T* lm;    // (V, C)
};

template <typename T>
struct HeadGrads {
  T* norm;  // (C) accumulated
  T* lm;    // (V, C) accumulated
};

// Written by forward, read by p1.
template <typename T>
struct HeadStash {
  T* xhat;   // (N, C) normalised input; retained for p2
  T* rstd;   // (N)
  T* xn;     // (N, C) x̂ ⊙ g, the LM head's input; retained for p2
  T* probs;  // (N, V) softmax of the logits
};

// One micro-batch, as retained from p1 for p2.
template <typename T>
struct HeadRows {
  const T* xhat;     // (rows, C) (for the norm gain)
  const T* dxn;      // (rows, C) (dY of the norm)
  const T* xn;       // (rows, C) (X of the LM head)
  const T* dlogits;  // (rows, V) (dY of the LM head)
  std::int64_t rows;
};

// loss = mean over rows of logsumexp(logits) − logits[target]. Throws Error for a target
// outside [0, V).
template <typename T>
void head_forward(T* loss,  // (1) overwritten
                  const HeadStash<T>& stash,
                  const T* x,                   // (N, C)
                  const std::int32_t* targets,  // (N)
                  const HeadWeights<T>& weights, std::int64_t n, std::int64_t c, std::int64_t v);

// p1 with dlogits = loss_grad / N · (probs − onehot(target)). `dlogits` may alias stash.probs
// (the CPU backend reuses that buffer).
template <typename T>
void head_backward_p1(T* dx,        // (N, C) accumulated
                      T* dlogits,   // (N, V) overwritten; retained for p2
                      T* dxn,       // (N, C) overwritten; retained for p2
                      T loss_grad,  // d(total loss) / d(this loss)
                      const HeadStash<T>& stash,
                      const std::int32_t* targets,  // (N)
                      const HeadWeights<T>& weights, std::int64_t n, std::int64_t c,
                      std::int64_t v);

template <typename T>
void head_backward_p2(const HeadGrads<T>& grads, std::span<const HeadRows<T>> blocks,
                      std::int64_t c, std::int64_t v);

}  // namespace pipeplan::cpu
