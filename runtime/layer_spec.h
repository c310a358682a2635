// The pipeline layers every backend implements, spelled out once (docs/design/runtime-layers.md):
// per layer kind the ordered parameters, the tensors forward stashes and the tensors p1 retains for
// p2, with their shapes; the deterministic initial values; the model family the runtime runs.
// The CPU reference and the CUDA backend build their layers from these lists, so the two cannot
// drift apart: init streams are keyed by parameter position, and tests/runtime/cuda compares
// the backends weight by weight and tensor by tensor.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "profiles/profile.h"
#include "runtime/backend.h"

namespace pipeplan {

inline constexpr double kInitStddev = 0.02;  // GPT-2 / LLaMA reference init for every matrix
inline constexpr double kRopeBase = 10000.0;
inline constexpr double kRmsNormEps = 1e-5;

// Throws Error naming the field unless the runtime's layers can run the model: the LLaMA-like
// family (RMSNorm, SwiGLU, RoPE, untied embeddings). `backend` names who refuses it.
void check_model_supported(const ModelConfig& model, std::string_view backend);
// Throws Error when `seq` tokens pass a sliding window the runtime's attention does not have.
void check_sequence_supported(const ModelConfig& model, std::int64_t seq);

struct AttentionDims {
  std::int64_t batch = 0;     // B
  std::int64_t seq = 0;       // T
  std::int64_t channels = 0;  // C = H · D
  std::int64_t heads = 0;     // H
  std::int64_t kv_heads = 0;  // KV, divides H

  std::int64_t tokens() const { return batch * seq; }
  std::int64_t head_dim() const { return channels / heads; }  // D, even (RoPE pairs)
  // Row width of qkv: [q (H·D) | k (KV·D) | v (KV·D)].
  std::int64_t qkv_width() const { return (heads + 2 * kv_heads) * head_dim(); }
};

// Dims of a block on input x (B, T, C); throws Error unless x matches the model.
AttentionDims block_dims(const ModelConfig& model, const Tensor& x);

struct ParamSpec {
  std::string name;
  Shape shape;
  bool is_gain = false;  // RMSNorm gain: initialised to 1, no weight decay
};

// The layer's parameters in init order (the init stream of each is keyed by its position).
std::vector<ParamSpec> param_specs(const ModelConfig& model, LayerKind kind);

// Initial values of parameter `position` of layer `layer_index`: ones for a gain, else
// N(0, kInitStddev²) from the splitmix64 stream (seed, layer_index, position). Drawn on the host,
// so every backend that uploads them starts from the same weights.
std::vector<double> initial_values(const ParamSpec& spec, std::uint64_t seed, int layer_index,
                                   std::uint64_t position);

// What a stashed or retained tensor holds, which decides its dtype on a backend: an activation
// (the compute dtype), an RMSNorm statistic (rstd: the compute dtype on the CPU, fp32 on the
// GPU), or tokens (i32).
enum class TensorRole : std::uint8_t { activation, statistic, tokens };

struct TensorSpec {
  std::string name;
  Shape shape;
  TensorRole role = TensorRole::activation;
  // Retained sets only: the stash entry handed on (the same memory); empty when p1 makes it.
  std::string from_stash;
};

// The tensors forward allocates into one micro-batch's stash (B = batch, T = seq), in order. The
// inputs a layer also keeps (the embedding's tokens, the head's targets) are not listed.
// `attention` decides what the attention core keeps beyond its input qkv and output out:
//   materialized  `attn.probs` (B, H, T, T), the softmax probabilities (the CPU reference);
//   recompute     nothing (p1 rebuilds the scores);
//   flash         `attn.lse` (B, H, T), a statistic: the rows' logsumexp a fused backward needs
//                 (cuDNN SDPA's softmax stats, fp32 on the GPU).
std::vector<TensorSpec> stash_specs(const ModelConfig& model, LayerKind kind, std::int64_t batch,
                                    std::int64_t seq,
                                    Attention attention = Attention::materialized);

// The tensors p1 hands to p2 (X and dY of every weight), in order.
std::vector<TensorSpec> retained_specs(const ModelConfig& model, LayerKind kind, std::int64_t batch,
                                       std::int64_t seq);

// Fills `retained` in the order of `specs`: the entries handed on are taken from the stash, the
// others from `made` (p1's own tensors, by name). Throws Error naming the tensor when one is
// missing, left over, or not of the spec's shape.
void fill_retained(const std::vector<TensorSpec>& specs, Stash& stash,
                   std::initializer_list<std::pair<std::string_view, Tensor>> made,
                   Retained& retained);

// dY of a block's weights as its p1 makes them, named as the compiler checks; fill_block_retained
// retains them with the X side the stash hands on.
struct BlockGradients {
  Tensor attn_norm_dy;        // (B, T, C)
  Tensor attn_dqkv;           // (B, T, W)
  Tensor attn_dy;             // (B, T, C): dY of Wo, the residual stream's gradient
  Tensor mlp_norm_dy;         // (B, T, C)
  Tensor mlp_dgate, mlp_dup;  // (B, T, F)
  Tensor mlp_dy;              // (B, T, C): the block's dY itself
};
void fill_block_retained(const ModelConfig& model, std::int64_t batch, std::int64_t seq,
                         Stash& stash, const BlockGradients& made, Retained& retained);

}  // namespace pipeplan
