// Transformer model description: presets, Hugging Face config.json import, parameter and
// PaLM model-FLOP counts. A model is a list of layers: embedding, L blocks, head (final norm +
// LM head + loss).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace pipeplan {

enum class LayerKind { embedding, block, head };
enum class MlpKind { swiglu, gelu };
enum class NormKind { rmsnorm, layernorm };

std::string_view to_string(LayerKind kind);
LayerKind layer_kind_from_string(std::string_view text);  // throws Error

struct ModelConfig {
  std::string name;
  std::string family;  // "llama", "gpt", "bert" or "uniform" (synthetic identical stages)
  int layers = 0;      // transformer blocks
  int hidden = 0;
  int heads = 0;
  int kv_heads = 0;  // == heads unless grouped-query attention
  int ffn_hidden = 0;
  int vocab = 0;
  int seq = 0;  // default sequence length
  MlpKind mlp = MlpKind::swiglu;
  NormKind norm = NormKind::rmsnorm;
  bool tied_embeddings = false;
  // Rows of a learned position-embedding table (GPT-2/GPT-3/BERT); 0 for rotary (LLaMA, NeoX).
  int learned_positions = 0;
  // A head width other than hidden / heads (Qwen3, Mistral-Nemo: config.json's head_dim); 0 when
  // it is hidden / heads. Queries then span heads · head_dim() columns, not hidden.
  int explicit_head_dim = 0;
  // Biases on the Q, K and V projections only (Qwen2); the LayerNorm recipes' biases on every
  // linear op are implied by norm = layernorm.
  bool qkv_bias = false;
  // RMSNorm over each query and key head before RoPE (Qwen3), a gain of head_dim() each.
  bool qk_norm = false;
  // Keys each query attends to at most, in every layer (Mistral-7B-v0.1: 4096, Phi-3-mini-4k:
  // 2047); 0 = all before it.
  int sliding_window = 0;
  // A LayerNorm model trained without dropout (GPT-NeoX/Pythia; a GPT-2 config whose dropout
  // probabilities are all 0). The LayerNorm recipes (GPT-2/GPT-3, BERT) train with dropout,
  // RMSNorm models without: this marks the exception.
  bool without_dropout = false;
  bool dropout() const { return norm == NormKind::layernorm && !without_dropout; }
  // Mixture of experts (Mixtral, Qwen2-MoE, Qwen3-MoE): every block's MLP is `experts` routed
  // SwiGLU experts of ffn_hidden each, of which a linear router (hidden -> experts) picks
  // `experts_per_token` per token; 0 = a dense MLP of ffn_hidden. Expert parallelism is not
  // modelled: a block's experts all sit on its stage.
  int experts = 0;
  int experts_per_token = 0;
  // An expert every token passes through beside the routed ones, shared_ffn_hidden wide, scaled
  // by a sigmoid gate (hidden -> 1) (Qwen2-MoE); 0 = none.
  int shared_ffn_hidden = 0;
  // The model_type of the Hugging Face config.json it was read from (llama, mistral, mixtral,
  // qwen2, qwen2_moe, qwen3, qwen3_moe, phi3, gpt2, gpt_neox); empty for a preset. It names the
  // modules in the torchtitan lists (layout.h).
  std::string hf_model_type;

  int head_dim() const { return explicit_head_dim > 0 ? explicit_head_dim : hidden / heads; }
  // Columns of Q (and of the attention output that the output projection reads).
  std::int64_t query_width() const { return std::int64_t{heads} * head_dim(); }
  std::int64_t kv_width() const { return std::int64_t{kv_heads} * head_dim(); }
  // Query-key pairs the attention core computes per sequence of `seq_len`, counted as the
  // unmasked s² of full attention is (the causal mask is not exploited, profiles/analytic.cpp):
  // s², or s² − (s − w)² = 2sw − w² with a sliding window w < s.
  double attention_pairs(int seq_len) const;
  std::int64_t block_parameters() const;
  std::int64_t embedding_parameters() const;  // token (+ learned position) embeddings
  std::int64_t head_parameters() const;       // final norm + LM head (0 for the head if tied)
  std::int64_t parameter_count() const;
  bool moe() const { return experts > 0; }
  // Routed-expert parameters of one block (0 for a dense model).
  std::int64_t block_expert_parameters() const;
  // Parameters one token passes through: all of them, less the routed experts it is not sent to
  // (Mixtral-8x7B: 12.9B of 46.7B).
  std::int64_t active_parameter_count() const;
  // PaLM appendix B: 6N + 12·L·H·Q·T model FLOPs per token (recomputation not counted), N the
  // active parameters; with a sliding window, T is attention_pairs / seq_len.
  double flops_per_token(int seq_len) const;
  // embedding, block × layers, head. The "uniform" family has blocks only.
  std::vector<LayerKind> layer_list() const;
};

// Throws FieldError("model", ...) when a size is above planner/base/limits.h (layers, widths,
// heads, vocabulary, sequence): what every loader refuses, for models built some other way.
void check_model_limits(const ModelConfig& model);

std::vector<std::string> model_preset_names();
ModelConfig model_preset(std::string_view name);  // throws Error naming the unknown model
// Reads a Hugging Face config.json (LLaMA, Mistral, Mixtral, Qwen2, Qwen2-MoE, Qwen3, Qwen3-MoE,
// Phi-3, GPT-2 and GPT-NeoX field names), named after its folder. Sizes above planner/base/limits.h
// are refused, naming the file and field.
ModelConfig load_hf_config(const std::filesystem::path& path);
// The same from parsed JSON; `source` names it in errors, `name` becomes the model's name.
ModelConfig hf_config_from_json(const nlohmann::json& config, std::string_view source,
                                std::string name);
nlohmann::json model_to_json(const ModelConfig& model);
ModelConfig model_from_json(const nlohmann::json& json, std::string_view source);  // throws Error
// As above, naming fields with a JSON path prefix in errors, e.g. "p.json: field 'model.hidden'".
ModelConfig model_from_json(const nlohmann::json& json, std::string_view source,
                            std::string_view path_prefix);
// A preset name, or a path to a config.json.
ModelConfig resolve_model(std::string_view name_or_path);

}  // namespace pipeplan
