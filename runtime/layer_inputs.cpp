#include "runtime/layer_inputs.h"

#include <cstdint>
#include <vector>

#include "runtime/random.h"

namespace pipeplan {

LayerInputs make_layer_inputs(Backend& backend, LayerKind kind, const ModelConfig& model, int mbs,
                              int seq) {
  const TokenBatch batch = backend.synthetic_batch(mbs, seq, model.vocab, 7);
  const std::int64_t n = std::int64_t{mbs} * seq * model.hidden;
  std::vector<double> values(static_cast<std::size_t>(n));
  fill_normal(values, 1.0, 11);
  const Tensor activation = backend.upload(values, {mbs, seq, model.hidden});
  switch (kind) {
    case LayerKind::embedding:
      return {batch.inputs, {}, activation};
    case LayerKind::block:
      return {activation, {}, activation};
    case LayerKind::head:
      return {activation, batch.targets, backend.upload_loss_gradient(1.0)};
  }
  throw Error("unknown layer kind");
}

}  // namespace pipeplan
