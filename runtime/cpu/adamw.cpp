#include "runtime/cpu/adamw.h"

#include <cmath>
#include <string>

namespace pipeplan::cpu {

template <typename T>
void adamw_update(T* w, T* m, T* v, const T* g, std::int64_t n, const AdamWConfig& config, int step,
                  bool decay) {
  if (step < 1) throw Error("AdamW step must count from 1, got " + std::to_string(step));
  const double m_correction = 1.0 - std::pow(config.beta1, step);
  const double v_correction = 1.0 - std::pow(config.beta2, step);
  const double weight_decay = decay ? config.weight_decay : 0.0;
  for (std::int64_t i = 0; i < n; ++i) {
    const double grad = g[i];
    const double m_new = config.beta1 * double(m[i]) + (1.0 - config.beta1) * grad;
    const double v_new = config.beta2 * double(v[i]) + (1.0 - config.beta2) * grad * grad;
    const double m_hat = m_new / m_correction;
    const double v_hat = v_new / v_correction;
    const double update = m_hat / (std::sqrt(v_hat) + config.eps) + weight_decay * double(w[i]);
    m[i] = static_cast<T>(m_new);
    v[i] = static_cast<T>(v_new);
    w[i] = static_cast<T>(double(w[i]) - config.lr * update);
  }
}

template void adamw_update<float>(float*, float*, float*, const float*, std::int64_t,
                                  const AdamWConfig&, int, bool);
template void adamw_update<double>(double*, double*, double*, const double*, std::int64_t,
                                   const AdamWConfig&, int, bool);

}  // namespace pipeplan::cpu
