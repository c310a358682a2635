#include "runtime/layer_spec.h"

#include <algorithm>

#include "runtime/random.h"

namespace pipeplan {

namespace {

std::int64_t kv_heads_of(const ModelConfig& model) {
  return model.kv_heads > 0 ? model.kv_heads : model.heads;
}

std::int64_t qkv_width_of(const ModelConfig& model) {
  return (model.heads + 2 * kv_heads_of(model)) * (model.hidden / model.heads);
}

TensorSpec activation(std::string name, Shape shape) {
  return {std::move(name), std::move(shape), TensorRole::activation, ""};
}

TensorSpec statistic(std::string name, Shape shape) {
  return {std::move(name), std::move(shape), TensorRole::statistic, ""};
}

TensorSpec handed_on(std::string name, Shape shape, std::string from_stash) {
  return {std::move(name), std::move(shape), TensorRole::activation, std::move(from_stash)};
}

}  // namespace

void check_model_supported(const ModelConfig& model, std::string_view backend) {
  const auto fail = [&](const std::string& why) {
    throw Error("model '" + model.name + "': " + std::string(backend) + " needs " + why);
  };
  if (model.hidden <= 0 || model.heads <= 0 || model.ffn_hidden <= 0 || model.vocab <= 0) {
    fail("positive hidden, heads, ffn_hidden and vocab");
  }
  if (model.hidden % model.heads != 0) fail("hidden divisible by heads");
  if (model.query_width() != model.hidden) fail("head_dim = hidden / heads");
  if (model.qkv_bias) fail("attention without Q, K and V biases (qkv_bias is planned only)");
  if (model.qk_norm) fail("attention without per-head Q/K norms (qk_norm is planned only)");
  if (model.moe()) fail("a dense MLP (mixture-of-experts blocks are planned only)");
  if (model.heads % kv_heads_of(model) != 0) fail("heads divisible by kv_heads");
  if (model.head_dim() % 2 != 0) fail("an even head dim (RoPE rotates pairs)");
  if (model.mlp != MlpKind::swiglu) fail("mlp = swiglu");
  if (model.norm != NormKind::rmsnorm) fail("norm = rmsnorm");
  if (model.tied_embeddings) fail("untied embeddings (embedding and head may sit on two stages)");
  if (model.learned_positions > 0)
    fail("rotary positions (a learned position table, learned_positions, is planned only)");
}

void check_sequence_supported(const ModelConfig& model, std::int64_t seq) {
  if (model.sliding_window > 0 && seq > model.sliding_window) {
    throw Error("model '" + model.name + "': sequence " + std::to_string(seq) +
                " is longer than its sliding_window " + std::to_string(model.sliding_window) +
                ", and the runtime's attention sees every earlier token (planned only)");
  }
}

AttentionDims block_dims(const ModelConfig& model, const Tensor& x) {
  if (x.shape().size() != 3 || x.shape()[2] != model.hidden) {
    throw Error("block input is " + shape_string(x.shape()) + ", expected (B, T, " +
                std::to_string(model.hidden) + ")");
  }
  check_sequence_supported(model, x.shape()[1]);
  return {x.shape()[0], x.shape()[1], model.hidden, model.heads, kv_heads_of(model)};
}

std::vector<ParamSpec> param_specs(const ModelConfig& model, LayerKind kind) {
  const std::int64_t c = model.hidden, v = model.vocab, f = model.ffn_hidden;
  const std::int64_t qkv_width = qkv_width_of(model);
  switch (kind) {
    case LayerKind::embedding:
      return {{"wte", {v, c}, false}};
    case LayerKind::block:
      return {{"attn_norm", {c}, true},      {"attn.wqkv", {qkv_width, c}, false},
              {"attn.wo", {c, c}, false},    {"mlp_norm", {c}, true},
              {"mlp.w_gate", {f, c}, false}, {"mlp.w_up", {f, c}, false},
              {"mlp.w_down", {c, f}, false}};
    case LayerKind::head:
      return {{"final_norm", {c}, true}, {"lm_head", {v, c}, false}};
  }
  throw Error("unknown layer kind");
}

std::vector<double> initial_values(const ParamSpec& spec, std::uint64_t seed, int layer_index,
                                   std::uint64_t position) {
  std::vector<double> values(static_cast<std::size_t>(shape_numel(spec.shape)), 1.0);
  if (!spec.is_gain) {
    fill_normal(values, kInitStddev,
                mix_seed(seed, static_cast<std::uint64_t>(layer_index), position));
  }
  return values;
}

std::vector<TensorSpec> stash_specs(const ModelConfig& model, LayerKind kind, std::int64_t batch,
                                    std::int64_t seq, Attention attention) {
  const std::int64_t b = batch, s = seq, c = model.hidden, f = model.ffn_hidden, v = model.vocab;
  switch (kind) {
    case LayerKind::embedding:
      return {};
    case LayerKind::block: {
      std::vector<TensorSpec> specs;
      for (const char* name : {"attn_norm.xhat", "attn.x", "mlp_norm.xhat", "mlp.x", "attn.out"})
        specs.push_back(activation(name, {b, s, c}));
      for (const char* name : {"attn_norm.rstd", "mlp_norm.rstd"})
        specs.push_back(statistic(name, {b, s}));
      specs.push_back(activation("attn.qkv", {b, s, qkv_width_of(model)}));
      if (attention == Attention::materialized)
        specs.push_back(activation("attn.probs", {b, model.heads, s, s}));
      if (attention == Attention::flash)
        specs.push_back(statistic("attn.lse", {b, model.heads, s}));
      for (const char* name : {"mlp.gate", "mlp.up", "mlp.h"})
        specs.push_back(activation(name, {b, s, f}));
      return specs;
    }
    case LayerKind::head:
      return {activation("norm.xhat", {b, s, c}), statistic("norm.rstd", {b, s}),
              activation("lm_head.x", {b, s, c}), activation("lm_head.probs", {b, s, v})};
  }
  throw Error("unknown layer kind");
}

std::vector<TensorSpec> retained_specs(const ModelConfig& model, LayerKind kind, std::int64_t batch,
                                       std::int64_t seq) {
  const std::int64_t b = batch, s = seq, c = model.hidden, f = model.ffn_hidden, v = model.vocab;
  switch (kind) {
    case LayerKind::embedding:
      return {{"tokens", {b, s}, TensorRole::tokens, "tokens"}, activation("dy", {b, s, c})};
    case LayerKind::block: {
      std::vector<TensorSpec> specs;
      // X of every weight, handed on from the stash...
      for (const char* name : {"attn_norm.xhat", "attn.x", "attn.out", "mlp_norm.xhat", "mlp.x"})
        specs.push_back(handed_on(name, {b, s, c}, name));
      specs.push_back(handed_on("mlp.h", {b, s, f}, "mlp.h"));
      // ...and dY of every weight, made by p1 (mlp.dy is the caller's dY itself).
      specs.push_back(activation("attn_norm.dy", {b, s, c}));
      specs.push_back(activation("attn.dqkv", {b, s, qkv_width_of(model)}));
      for (const char* name : {"attn.dy", "mlp_norm.dy"})
        specs.push_back(activation(name, {b, s, c}));
      for (const char* name : {"mlp.dgate", "mlp.dup"})
        specs.push_back(activation(name, {b, s, f}));
      specs.push_back(activation("mlp.dy", {b, s, c}));
      return specs;
    }
    case LayerKind::head:
      // dlogits overwrite the probabilities in place, so lm_head.dy is the stash's probs.
      return {handed_on("norm.xhat", {b, s, c}, "norm.xhat"), activation("norm.dy", {b, s, c}),
              handed_on("lm_head.x", {b, s, c}, "lm_head.x"),
              handed_on("lm_head.dy", {b, s, v}, "lm_head.probs")};
  }
  throw Error("unknown layer kind");
}

void fill_retained(const std::vector<TensorSpec>& specs, Stash& stash,
                   std::initializer_list<std::pair<std::string_view, Tensor>> made,
                   Retained& retained) {
  std::size_t used = 0;
  for (const TensorSpec& spec : specs) {
    Tensor tensor;
    if (!spec.from_stash.empty()) {
      tensor = stash.take(spec.from_stash);
    } else {
      const auto it = std::find_if(made.begin(), made.end(),
                                   [&](const auto& entry) { return entry.first == spec.name; });
      if (it == made.end()) throw Error("p1 made no retained tensor '" + spec.name + "'");
      tensor = it->second;
      ++used;
    }
    if (tensor.shape() != spec.shape) {
      throw Error("retained '" + spec.name + "' is " + shape_string(tensor.shape()) +
                  ", the layer spec says " + shape_string(spec.shape));
    }
    retained.put(spec.name, std::move(tensor));
  }
  if (used != made.size()) {
    throw Error("p1 made " + std::to_string(made.size()) + " retained tensors, the layer spec " +
                "takes " + std::to_string(used));
  }
}

void fill_block_retained(const ModelConfig& model, std::int64_t batch, std::int64_t seq,
                         Stash& stash, const BlockGradients& made, Retained& retained) {
  fill_retained(retained_specs(model, LayerKind::block, batch, seq), stash,
                {{"attn_norm.dy", made.attn_norm_dy},
                 {"attn.dqkv", made.attn_dqkv},
                 {"attn.dy", made.attn_dy},
                 {"mlp_norm.dy", made.mlp_norm_dy},
                 {"mlp.dgate", made.mlp_dgate},
                 {"mlp.dup", made.mlp_dup},
                 {"mlp.dy", made.mlp_dy}},
                retained);
}

}  // namespace pipeplan
