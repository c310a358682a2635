// The embedding and head pipeline layers on the GPU.
#include <string>
#include <vector>

#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/layers.h"
#include "runtime/cuda/matmul.h"

namespace pipeplan::cuda {

namespace {

template <typename T>
T* typed(const Tensor& tensor, DType dtype) {
  if (!tensor.defined() || tensor.device() != Device::cuda || tensor.dtype() != dtype) {
    throw Error("expected a CUDA " + std::string(to_string(dtype)) + " tensor, got " +
                (tensor.defined()
                     ? std::string(to_string(tensor.dtype())) + " " + shape_string(tensor.shape())
                     : std::string("an undefined tensor")));
  }
  return static_cast<T*>(tensor.data());
}

Shape token_shape(const Tensor& tokens, std::string_view what) {
  if (!tokens.defined() || tokens.shape().size() != 2 || tokens.dtype() != DType::i32) {
    throw Error(std::string(what) + " must be (B, T) i32 tokens");
  }
  return tokens.shape();
}

}  // namespace

bf16* bf16_ptr(const Tensor& tensor) {
  return typed<bf16>(tensor, DType::bf16);
}
float* f32_ptr(const Tensor& tensor) {
  return typed<float>(tensor, DType::f32);
}
std::int32_t* i32_ptr(const Tensor& tensor) {
  return typed<std::int32_t>(tensor, DType::i32);
}

DType stash_dtype(TensorRole role) {
  switch (role) {
    case TensorRole::activation:
      return DType::bf16;
    case TensorRole::statistic:
      return DType::f32;
    case TensorRole::tokens:
      return DType::i32;
  }
  return DType::bf16;
}

Tensor embedding_layer_forward(DeviceContext& ctx, const LayerParams& layer, const Tensor& tokens,
                               Stash& stash) {
  const Shape shape = token_shape(tokens, "embedding input");
  const std::int64_t c = layer.model.hidden;
  Tensor y = ctx.empty({shape[0], shape[1], c}, DType::bf16);
  embedding_forward(bf16_ptr(y), i32_ptr(tokens), bf16_ptr(layer.at("wte").weight), tokens.numel(),
                    c, layer.model.vocab, ctx.stream());
  stash.put("tokens", tokens);
  return y;
}

Tensor embedding_layer_backward_p1(const LayerParams& layer, Stash& stash, const Tensor& dy,
                                   Retained& retained) {
  const Shape shape = stash.at("tokens").shape();
  if (dy.shape() != Shape{shape[0], shape[1], layer.model.hidden}) {
    throw Error("embedding output gradient is " + shape_string(dy.shape()));
  }
  bf16_ptr(dy);  // checks dtype and device
  fill_retained(retained_specs(layer.model, LayerKind::embedding, shape[0], shape[1]), stash,
                {{"dy", dy}}, retained);
  return Tensor{};
}

void embedding_layer_backward_p2(DeviceContext& ctx, LayerParams& layer,
                                 std::span<const Retained* const> retained) {
  for (const Retained* set : retained) {
    const Tensor& tokens = set->at("tokens");
    embedding_backward_p2(f32_ptr(layer.at("wte").grad), i32_ptr(tokens), bf16_ptr(set->at("dy")),
                          tokens.numel(), layer.model.hidden, layer.model.vocab, ctx.stream());
  }
}

Tensor head_layer_forward(DeviceContext& ctx, const LayerParams& layer, const Tensor& x,
                          const Tensor& targets, Stash& stash) {
  const Shape shape = token_shape(targets, "head targets");
  const std::int64_t b = shape[0], s = shape[1], c = layer.model.hidden, v = layer.model.vocab;
  const std::int64_t n = b * s;
  if (x.shape() != Shape{b, s, c}) throw Error("head input is " + shape_string(x.shape()));
  for (const TensorSpec& spec : stash_specs(layer.model, LayerKind::head, b, s))
    stash.put(spec.name, ctx.empty(spec.shape, stash_dtype(spec.role)));
  stash.put("targets", targets);
  bf16* probs = bf16_ptr(stash.at("lm_head.probs"));
  rmsnorm_forward(bf16_ptr(stash.at("lm_head.x")), bf16_ptr(stash.at("norm.xhat")),
                  f32_ptr(stash.at("norm.rstd")), bf16_ptr(x),
                  bf16_ptr(layer.at("final_norm").weight), n, c, kRmsNormEps, ctx.stream());
  matmul_forward(ctx, probs, bf16_ptr(stash.at("lm_head.x")), bf16_ptr(layer.at("lm_head").weight),
                 nullptr, n, c, v);
  Tensor loss = ctx.empty({1}, DType::f32);
  {
    const Tensor losses = ctx.empty({n}, DType::f32);
    cross_entropy_forward(probs, f32_ptr(losses), i32_ptr(targets), n, v, ctx.stream());
    mean_f32(f32_ptr(loss), f32_ptr(losses), n, ctx.stream());
  }
  return loss;
}

Tensor head_layer_backward_p1(DeviceContext& ctx, const LayerParams& layer, Stash& stash,
                              const Tensor& dloss, Retained& retained) {
  // The kernel reads it on the GPU: a host tensor's address would be dereferenced there.
  if (!dloss.defined() || dloss.numel() != 1 ||
      (dloss.dtype() != DType::bf16 && dloss.dtype() != DType::f32) ||
      dloss.device() != Device::cuda) {
    throw Error("head loss gradient must be one bf16 or f32 element on the GPU");
  }
  const Shape shape = stash.at("norm.xhat").shape();
  const std::int64_t n = shape[0] * shape[1], c = layer.model.hidden, v = layer.model.vocab;
  // dlogits overwrite the forward's p − onehot in place: same size, and it is dead after p1.
  bf16* dlogits = bf16_ptr(stash.at("lm_head.probs"));
  cross_entropy_backward_p1(dlogits, dloss.data(), dloss.dtype() == DType::bf16, n, v,
                            ctx.stream());
  const Tensor dxn = ctx.empty(shape, DType::bf16);
  matmul_backward_p1(ctx, bf16_ptr(dxn), dlogits, bf16_ptr(layer.at("lm_head").weight), n, c, v,
                     false);
  Tensor dx = ctx.empty(shape, DType::bf16);
  rmsnorm_backward_p1(bf16_ptr(dx), nullptr, bf16_ptr(dxn), bf16_ptr(stash.at("norm.xhat")),
                      f32_ptr(stash.at("norm.rstd")), bf16_ptr(layer.at("final_norm").weight), n, c,
                      ctx.stream());
  fill_retained(retained_specs(layer.model, LayerKind::head, shape[0], shape[1]), stash,
                {{"norm.dy", dxn}}, retained);
  return dx;
}

void head_layer_backward_p2(DeviceContext& ctx, LayerParams& layer,
                            std::span<const Retained* const> retained) {
  const std::int64_t c = layer.model.hidden, v = layer.model.vocab;
  std::vector<MatmulRows> lm_rows;
  for (const Retained* set : retained) {
    const Tensor& xhat = set->at("norm.xhat");
    const std::int64_t rows = xhat.shape()[0] * xhat.shape()[1];
    lm_rows.push_back({bf16_ptr(set->at("lm_head.x")), bf16_ptr(set->at("lm_head.dy")), rows});
    rmsnorm_backward_p2(f32_ptr(layer.at("final_norm").grad), bf16_ptr(xhat),
                        bf16_ptr(set->at("norm.dy")), rows, c, ctx.stream());
  }
  matmul_backward_p2(ctx, f32_ptr(layer.at("lm_head").grad), lm_rows, c, v);
}

}  // namespace pipeplan::cuda
