#include "runtime/cpu/block.h"

#include <string>
#include <vector>

#include "runtime/cpu/rmsnorm.h"
#include "runtime/cpu/swiglu_mlp.h"
#include "runtime/host_tensor.h"
#include "runtime/layer_spec.h"

namespace pipeplan::cpu {

namespace {

template <typename T>
T* ptr(const Tensor& tensor) {
  return tensor.data_as<T>();
}

template <typename T>
const T* weight(const LayerParams& layer, std::string_view name) {
  return layer.at(name).weight.data_as<T>();
}

template <typename T>
T* grad(LayerParams& layer, std::string_view name) {
  return layer.at(name).grad.data_as<T>();
}

template <typename T>
void add_into(const Tensor& y, const Tensor& x) {  // y += x, same shape
  T* out = ptr<T>(y);
  const T* in = ptr<T>(x);
  for (std::int64_t i = 0; i < y.numel(); ++i)
    out[i] += in[i];
}

template <typename T>
AttentionStash<T> attention_stash(const TensorSet& set) {
  return {ptr<T>(set.at("attn.qkv")), ptr<T>(set.at("attn.probs")), ptr<T>(set.at("attn.out"))};
}

template <typename T>
SwigluStash<T> mlp_stash(const TensorSet& set) {
  return {ptr<T>(set.at("mlp.gate")), ptr<T>(set.at("mlp.up")), ptr<T>(set.at("mlp.h"))};
}

template <typename T>
AttentionWeights<T> attention_weights(const LayerParams& layer) {
  return {weight<T>(layer, "attn.wqkv"), weight<T>(layer, "attn.wo")};
}

template <typename T>
SwigluWeights<T> mlp_weights(const LayerParams& layer) {
  return {weight<T>(layer, "mlp.w_gate"), weight<T>(layer, "mlp.w_up"),
          weight<T>(layer, "mlp.w_down")};
}

}  // namespace

template <typename T>
Tensor block_forward(const LayerParams& layer, const Tensor& x, Stash& stash) {
  const AttentionDims dims = block_dims(layer.model, x);
  check_tensor(x, x.shape(), dtype_of<T>(), "block input");
  const std::int64_t b = dims.batch, s = dims.seq, c = dims.channels, n = dims.tokens();
  const std::int64_t f = layer.model.ffn_hidden;
  const DType dtype = dtype_of<T>();
  for (const TensorSpec& spec : stash_specs(layer.model, LayerKind::block, b, s))
    stash.put(spec.name, host_zeros(spec.shape, dtype));  // rstd too: the reference's dtype

  rmsnorm_forward(ptr<T>(stash.at("attn.x")), ptr<T>(stash.at("attn_norm.xhat")),
                  ptr<T>(stash.at("attn_norm.rstd")), ptr<T>(x), weight<T>(layer, "attn_norm"), n,
                  c);
  const Tensor x1 = host_zeros({b, s, c}, dtype);  // the residual stream after attention
  attention_forward(ptr<T>(x1), attention_stash<T>(stash), ptr<T>(stash.at("attn.x")),
                    attention_weights<T>(layer), dims);
  add_into<T>(x1, x);

  rmsnorm_forward(ptr<T>(stash.at("mlp.x")), ptr<T>(stash.at("mlp_norm.xhat")),
                  ptr<T>(stash.at("mlp_norm.rstd")), ptr<T>(x1), weight<T>(layer, "mlp_norm"), n,
                  c);
  Tensor y = host_zeros({b, s, c}, dtype);
  swiglu_mlp_forward(ptr<T>(y), mlp_stash<T>(stash), ptr<T>(stash.at("mlp.x")),
                     mlp_weights<T>(layer), n, c, f);
  add_into<T>(y, x1);
  return y;
}

template <typename T>
Tensor block_backward_p1(const LayerParams& layer, Stash& stash, const Tensor& dy,
                         Retained& retained) {
  const AttentionDims dims = block_dims(layer.model, dy);
  const Shape shape = stash.at("attn.x").shape();
  check_tensor(dy, shape, dtype_of<T>(), "block output gradient");
  const std::int64_t b = dims.batch, s = dims.seq, c = dims.channels, n = dims.tokens();
  const std::int64_t f = layer.model.ffn_hidden;
  const DType dtype = dtype_of<T>();

  BlockGradients made;  // dY of every weight, retained for p2
  made.mlp_dy = dy;

  // MLP branch: y = x1 + mlp(rmsnorm(x1)), so dx1 = dy + rmsnorm_p1(mlp_p1(dy)).
  made.mlp_norm_dy = host_zeros(shape, dtype);
  made.mlp_dgate = host_zeros({b, s, f}, dtype);
  made.mlp_dup = host_zeros({b, s, f}, dtype);
  swiglu_mlp_backward_p1(ptr<T>(made.mlp_norm_dy), ptr<T>(made.mlp_dgate), ptr<T>(made.mlp_dup),
                         ptr<T>(dy), mlp_stash<T>(stash), mlp_weights<T>(layer), n, c, f);
  made.attn_dy = host_copy(dy);  // dx1, also dY of Wo
  rmsnorm_backward_p1(ptr<T>(made.attn_dy), ptr<T>(made.mlp_norm_dy),
                      ptr<T>(stash.at("mlp_norm.xhat")), ptr<T>(stash.at("mlp_norm.rstd")),
                      weight<T>(layer, "mlp_norm"), n, c);

  // Attention branch: x1 = x + attn(rmsnorm(x)).
  made.attn_norm_dy = host_zeros(shape, dtype);
  made.attn_dqkv = host_zeros({b, s, dims.qkv_width()}, dtype);
  attention_backward_p1(ptr<T>(made.attn_norm_dy), ptr<T>(made.attn_dqkv), ptr<T>(made.attn_dy),
                        attention_stash<T>(stash), attention_weights<T>(layer), dims);
  Tensor dx = host_copy(made.attn_dy);
  rmsnorm_backward_p1(ptr<T>(dx), ptr<T>(made.attn_norm_dy), ptr<T>(stash.at("attn_norm.xhat")),
                      ptr<T>(stash.at("attn_norm.rstd")), weight<T>(layer, "attn_norm"), n, c);

  fill_block_retained(layer.model, b, s, stash, made, retained);
  return dx;
}

template <typename T>
void block_backward_p2(LayerParams& layer, std::span<const Retained* const> retained) {
  std::vector<RmsnormRows<T>> attn_norm_rows, mlp_norm_rows;
  std::vector<AttentionRows<T>> attn_rows;
  std::vector<SwigluRows<T>> mlp_rows;
  AttentionDims dims{};
  for (const Retained* set : retained) {
    dims = block_dims(layer.model, set->at("attn.x"));
    const std::int64_t rows = dims.tokens();
    const auto at = [&](const char* name) { return ptr<T>(set->at(name)); };
    attn_norm_rows.push_back({at("attn_norm.xhat"), at("attn_norm.dy"), rows});
    mlp_norm_rows.push_back({at("mlp_norm.xhat"), at("mlp_norm.dy"), rows});
    attn_rows.push_back({at("attn.x"), at("attn.dqkv"), at("attn.out"), at("attn.dy"), rows});
    mlp_rows.push_back(
        {at("mlp.x"), at("mlp.dgate"), at("mlp.dup"), at("mlp.h"), at("mlp.dy"), rows});
  }
  if (retained.empty()) return;
  const std::int64_t c = dims.channels, f = layer.model.ffn_hidden;
  rmsnorm_backward_p2<T>(grad<T>(layer, "attn_norm"), attn_norm_rows, c);
  attention_backward_p2<T>({grad<T>(layer, "attn.wqkv"), grad<T>(layer, "attn.wo")}, attn_rows,
                           dims);
  rmsnorm_backward_p2<T>(grad<T>(layer, "mlp_norm"), mlp_norm_rows, c);
  swiglu_mlp_backward_p2<T>(
      {grad<T>(layer, "mlp.w_gate"), grad<T>(layer, "mlp.w_up"), grad<T>(layer, "mlp.w_down")},
      mlp_rows, c, f);
}

#define PIPEPLAN_INSTANTIATE(T)                                                               \
  template Tensor block_forward<T>(const LayerParams&, const Tensor&, Stash&);                \
  template Tensor block_backward_p1<T>(const LayerParams&, Stash&, const Tensor&, Retained&); \
  template void block_backward_p2<T>(LayerParams&, std::span<const Retained* const>);
PIPEPLAN_INSTANTIATE(float)
PIPEPLAN_INSTANTIATE(double)
#undef PIPEPLAN_INSTANTIATE

}  // namespace pipeplan::cpu
