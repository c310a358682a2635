#include "runtime/cpu/edge_layers.h"

#include <string>
#include <vector>

#include "runtime/cpu/embedding.h"
#include "runtime/cpu/head.h"
#include "runtime/host_tensor.h"
#include "runtime/layer_spec.h"

namespace pipeplan::cpu {

namespace {

template <typename T>
T* data_of(const Tensor& tensor) {
  return tensor.data_as<T>();
}

// (B, T) of a token tensor; throws Error naming `what` otherwise.
Shape token_shape(const Tensor& tokens, std::string_view what) {
  if (!tokens.defined() || tokens.shape().size() != 2) {
    throw Error(std::string(what) + " must be (B, T) i32 tokens");
  }
  check_tensor(tokens, tokens.shape(), DType::i32, what);
  return tokens.shape();
}

template <typename T>
HeadStash<T> head_stash(const TensorSet& set) {
  return {data_of<T>(set.at("norm.xhat")), data_of<T>(set.at("norm.rstd")),
          data_of<T>(set.at("lm_head.x")), data_of<T>(set.at("lm_head.probs"))};
}

template <typename T>
HeadWeights<T> head_weights(const LayerParams& layer) {
  return {layer.at("final_norm").weight.data_as<T>(), layer.at("lm_head").weight.data_as<T>()};
}

}  // namespace

template <typename T>
Tensor embedding_layer_forward(const LayerParams& layer, const Tensor& tokens, Stash& stash) {
  const Shape shape = token_shape(tokens, "embedding input");
  const std::int64_t c = layer.model.hidden;
  Tensor y = host_zeros({shape[0], shape[1], c}, dtype_of<T>());
  embedding_forward(data_of<T>(y), data_of<std::int32_t>(tokens),
                    layer.at("wte").weight.data_as<T>(), tokens.numel(), c,
                    std::int64_t{layer.model.vocab});
  stash.put("tokens", tokens);
  return y;
}

template <typename T>
Tensor embedding_layer_backward_p1(const LayerParams& layer, Stash& stash, const Tensor& dy,
                                   Retained& retained) {
  const Shape shape = stash.at("tokens").shape();
  check_tensor(dy, {shape[0], shape[1], layer.model.hidden}, dtype_of<T>(),
               "embedding output gradient");
  fill_retained(retained_specs(layer.model, LayerKind::embedding, shape[0], shape[1]), stash,
                {{"dy", dy}}, retained);
  return Tensor{};
}

template <typename T>
void embedding_layer_backward_p2(LayerParams& layer, std::span<const Retained* const> retained) {
  std::vector<EmbeddingRows<T>> rows;
  for (const Retained* set : retained) {
    const Tensor& tokens = set->at("tokens");
    rows.push_back({data_of<std::int32_t>(tokens), data_of<T>(set->at("dy")), tokens.numel()});
  }
  embedding_backward_p2<T>(layer.at("wte").grad.data_as<T>(), rows, layer.model.hidden);
}

template <typename T>
Tensor head_layer_forward(const LayerParams& layer, const Tensor& x, const Tensor& targets,
                          Stash& stash) {
  const Shape shape = token_shape(targets, "head targets");
  const std::int64_t b = shape[0], s = shape[1], c = layer.model.hidden, v = layer.model.vocab;
  check_tensor(x, {b, s, c}, dtype_of<T>(), "head input");
  const DType dtype = dtype_of<T>();
  for (const TensorSpec& spec : stash_specs(layer.model, LayerKind::head, b, s))
    stash.put(spec.name, host_zeros(spec.shape, dtype));
  stash.put("targets", targets);
  Tensor loss = host_zeros({1}, dtype);
  head_forward(data_of<T>(loss), head_stash<T>(stash), data_of<T>(x),
               data_of<std::int32_t>(targets), head_weights<T>(layer), b * s, c, v);
  return loss;
}

template <typename T>
Tensor head_layer_backward_p1(const LayerParams& layer, Stash& stash, const Tensor& dloss,
                              Retained& retained) {
  check_tensor(dloss, {1}, dtype_of<T>(), "head loss gradient");
  const Shape shape = stash.at("norm.xhat").shape();
  const std::int64_t n = shape[0] * shape[1], c = layer.model.hidden, v = layer.model.vocab;
  Tensor dx = host_zeros(shape, dtype_of<T>());
  const Tensor dxn = host_zeros(shape, dtype_of<T>());
  // dlogits overwrite the probabilities in place: same size, and probs are dead after p1.
  const Tensor dlogits = stash.at("lm_head.probs");
  head_backward_p1(data_of<T>(dx), data_of<T>(dlogits), data_of<T>(dxn), data_of<T>(dloss)[0],
                   head_stash<T>(stash), data_of<std::int32_t>(stash.at("targets")),
                   head_weights<T>(layer), n, c, v);
  fill_retained(retained_specs(layer.model, LayerKind::head, shape[0], shape[1]), stash,
                {{"norm.dy", dxn}}, retained);
  return dx;
}

template <typename T>
void head_layer_backward_p2(LayerParams& layer, std::span<const Retained* const> retained) {
  std::vector<HeadRows<T>> rows;
  for (const Retained* set : retained) {
    const Tensor& xhat = set->at("norm.xhat");
    rows.push_back({data_of<T>(xhat), data_of<T>(set->at("norm.dy")),
                    data_of<T>(set->at("lm_head.x")), data_of<T>(set->at("lm_head.dy")),
                    xhat.shape()[0] * xhat.shape()[1]});
  }
  head_backward_p2<T>(
      {layer.at("final_norm").grad.data_as<T>(), layer.at("lm_head").grad.data_as<T>()}, rows,
      layer.model.hidden, layer.model.vocab);
}

#define PIPEPLAN_INSTANTIATE(T)                                                                    \
  template Tensor embedding_layer_forward<T>(const LayerParams&, const Tensor&, Stash&);           \
  template Tensor embedding_layer_backward_p1<T>(const LayerParams&, Stash&, const Tensor&,        \
                                                 Retained&);                                       \
  template void embedding_layer_backward_p2<T>(LayerParams&, std::span<const Retained* const>);    \
  template Tensor head_layer_forward<T>(const LayerParams&, const Tensor&, const Tensor&, Stash&); \
  template Tensor head_layer_backward_p1<T>(const LayerParams&, Stash&, const Tensor&, Retained&); \
  template void head_layer_backward_p2<T>(LayerParams&, std::span<const Retained* const>);
PIPEPLAN_INSTANTIATE(float)
PIPEPLAN_INSTANTIATE(double)
#undef PIPEPLAN_INSTANTIATE

}  // namespace pipeplan::cpu
