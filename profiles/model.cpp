#include "profiles/model.h"

#include <algorithm>
#include <array>
#include <limits>
#include <optional>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "planner/base/error.h"
#include "planner/base/io.h"
#include "planner/base/limits.h"

namespace pipeplan {

namespace {

using nlohmann::json;

// The Hugging Face model_type values read from a config.json and kept as hf_model_type.
constexpr std::array<std::string_view, 10> kHfModelTypes{
    "llama", "mistral",   "mixtral", "qwen2", "qwen2_moe",
    "qwen3", "qwen3_moe", "phi3",    "gpt2",  "gpt_neox"};

// Linear layers carry biases exactly in the LayerNorm recipes we model (GPT-2, GPT-3/Megatron,
// GPT-NeoX, BERT); the RMSNorm recipes (LLaMA, Mistral) have none (dropout: ModelConfig).
bool has_bias(const ModelConfig& m) {
  return m.norm == NormKind::layernorm;
}

std::int64_t norm_parameters(const ModelConfig& m) {
  const std::int64_t h = m.hidden;
  return m.norm == NormKind::layernorm ? 2 * h : h;  // LayerNorm: gain + bias; RMSNorm: gain
}

std::string join_names(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names)
    out += (out.empty() ? "" : ", ") + n;
  return out;
}

std::string hf_model_type_list() {
  return join_names({kHfModelTypes.begin(), kHfModelTypes.end()});
}

std::string field_path(std::string_view prefix, std::string_view field) {
  return prefix.empty() ? std::string(field) : std::string(prefix) + "." + std::string(field);
}

// Reads fields of one JSON object; errors read "<source>: field '<path>' must be ...".
struct FieldReader {
  const json& object;
  std::string_view source;
  std::string_view prefix;

  [[noreturn]] void fail(std::string_view field, std::string_view what) const {
    throw Error(std::string(source) + ": field '" + field_path(prefix, field) + "' " +
                std::string(what));
  }
  const json* find(std::string_view field) const {
    auto it = object.find(field);
    return it == object.end() || it->is_null() ? nullptr : &*it;
  }
  const json& get(std::string_view field) const {
    const json* value = find(field);
    if (value == nullptr) fail(field, "is missing");
    return *value;
  }
  // An integer in [lo, max]; above max names the limit (planner/base/limits.h).
  int bounded_int(std::string_view field, std::int64_t lo, int max, std::string_view kind) const {
    const json& given = get(field);
    const std::optional<std::int64_t> value = int64_value(given);
    // A number beyond int64 is above the limit too, not "not an integer" (as require_integer
    // says): nlohmann holds one up to 2^64 as unsigned, a larger one as a double.
    constexpr double kBeyondInt64 = 9223372036854775808.0;  // 2^63
    if (!value && given.is_number() && given.get<double>() >= kBeyondInt64)
      fail(field, limits::above_limit("(" + given.dump() + ")", max));
    if (!value || *value < lo) fail(field, "must be " + std::string(kind));
    const std::int64_t v = *value;
    if (v > max) fail(field, limits::above_limit("(" + std::to_string(v) + ")", max));
    return static_cast<int>(v);
  }
  int positive_int(std::string_view field, int max) const {
    return bounded_int(field, 1, max, "a positive integer");
  }
  int nonnegative_int(std::string_view field, int max) const {
    return bounded_int(field, 0, max, "a non-negative integer");
  }
  std::string string(std::string_view field) const {
    const json& value = get(field);
    if (!value.is_string()) fail(field, "must be a string");
    return value.get<std::string>();
  }
  bool boolean(std::string_view field) const {
    const json& value = get(field);
    if (!value.is_boolean()) fail(field, "must be true or false");
    return value.get<bool>();
  }
  bool boolean_or(std::string_view field, bool fallback) const {
    return find(field) == nullptr ? fallback : boolean(field);
  }
  double number_or(std::string_view field, double fallback) const {
    const json* value = find(field);
    if (value == nullptr) return fallback;
    if (!value->is_number()) fail(field, "must be a number");
    return value->get<double>();
  }
};

// The parameter count in double: each size is bounded, their product not (1024 blocks of 4096
// experts of 2^20 x 2^20 would overflow parameter_count()'s int64).
double parameters_estimate(const ModelConfig& m) {
  return static_cast<double>(m.layers) * static_cast<double>(m.block_parameters()) +
         static_cast<double>(m.embedding_parameters()) + static_cast<double>(m.head_parameters());
}

// "(1024) with the other sizes makes 1.38351e+19 parameters, above the limit of 10^15 (...)".
std::string parameters_above_limit(const ModelConfig& m) {
  static_assert(limits::kMaxParameters == 1e15);
  return "(" + std::to_string(m.layers) + ") with the other sizes makes " +
         limits::general_number(parameters_estimate(m)) +
         " parameters, above the limit of 10^15 (docs/reference/limits.md)";
}

// Shape checks shared by every way a model comes in. `fail` names the field.
void check_shape(const ModelConfig& m, const FieldReader& r) {
  if (m.family == "uniform") return;  // synthetic: only `layers` is meaningful
  if (m.explicit_head_dim == 0 && m.hidden % m.heads != 0) {
    r.fail("hidden", "must be a multiple of heads");
  }
  if (m.kv_heads > m.heads || m.heads % m.kv_heads != 0) {
    r.fail("kv_heads", "must divide heads");
  }
  if (m.experts == 0 && m.experts_per_token != 0) {
    r.fail("experts_per_token", "needs experts (a dense model routes nothing)");
  }
  if (m.experts == 0 && m.shared_ffn_hidden != 0) r.fail("shared_ffn_hidden", "needs experts");
  if (parameters_estimate(m) > limits::kMaxParameters) r.fail("layers", parameters_above_limit(m));
  if (m.experts > 0) {
    if (m.experts_per_token < 1 || m.experts_per_token > m.experts) {
      r.fail("experts_per_token",
             "must be between 1 and experts (" + std::to_string(m.experts) + ")");
    }
    if (m.mlp != MlpKind::swiglu || m.norm != NormKind::rmsnorm) {
      r.fail("experts", "is for swiglu, rmsnorm models (Mixtral, Qwen-MoE)");
    }
  }
  if (m.query_width() > limits::kMaxHidden) {
    r.fail("head_dim", limits::above_limit("times heads (" + std::to_string(m.query_width()) + ")",
                                           limits::kMaxHidden));
  }
}

ModelConfig llama_like(std::string name, int layers, int hidden, int heads, int ffn) {
  ModelConfig m;
  m.name = std::move(name);
  m.family = "llama";
  m.layers = layers;
  m.hidden = hidden;
  m.heads = heads;
  m.kv_heads = heads;
  m.ffn_hidden = ffn;
  m.vocab = 32000;
  m.seq = 2048;
  m.mlp = MlpKind::swiglu;
  m.norm = NormKind::rmsnorm;
  m.tied_embeddings = false;
  return m;
}

// GPT-2/GPT-3 (Megatron) layout: GeLU MLP of 4h, LayerNorm, learned positions, tied LM head.
ModelConfig gpt_like(std::string name, int layers, int hidden, int heads, int vocab, int seq) {
  ModelConfig m;
  m.name = std::move(name);
  m.family = "gpt";
  m.layers = layers;
  m.hidden = hidden;
  m.heads = heads;
  m.kv_heads = heads;
  m.ffn_hidden = 4 * hidden;
  m.vocab = vocab;
  m.seq = seq;
  m.mlp = MlpKind::gelu;
  m.norm = NormKind::layernorm;
  m.tied_embeddings = true;
  m.learned_positions = seq;
  return m;
}

std::vector<ModelConfig> presets() {
  std::vector<ModelConfig> all;
  // LLaMA (Touvron et al. 2023, Table 2); intermediate sizes from the released configs.
  all.push_back(llama_like("llama-7b", 32, 4096, 32, 11008));
  all.push_back(llama_like("llama-13b", 40, 5120, 40, 13824));
  all.push_back(llama_like("llama-65b", 80, 8192, 64, 22016));
  // GPT-3 96B as evaluated by BPipe (Kim et al. 2023; arXiv 2401.02088).
  all.push_back(gpt_like("gpt3-96b", 80, 9984, 104, 51200, 2048));
  // Zero Bubble (Qi et al. 2024) Table 3. The paper gives no vocabulary; we assume the GPT-2
  // tokenizer's 50257 (Megatron would pad to a multiple of 128: 50304, +0.1 % parameters).
  all.push_back(gpt_like("gpt-1.5b", 22, 2304, 24, 50257, 1024));
  all.push_back(gpt_like("gpt-6.2b", 30, 4096, 32, 50257, 1024));
  all.push_back(gpt_like("gpt-14.6b", 46, 5120, 40, 50257, 1024));
  all.push_back(gpt_like("gpt-28.3b", 62, 6144, 48, 50257, 1024));
  // BERT-Large (Devlin et al. 2019): post-LN encoder, MLM head tied to the word embeddings.
  ModelConfig bert = gpt_like("bert-large", 24, 1024, 16, 30522, 512);
  bert.family = "bert";
  all.push_back(bert);
  // A LLaMA-shaped toy for CPU runs and tests.
  ModelConfig tiny = llama_like("tiny", 4, 64, 4, 172);
  tiny.vocab = 256;
  tiny.seq = 32;
  all.push_back(tiny);
  return all;
}

// The experts of a Mixtral or Qwen-MoE config.json. Qwen's dense layers among the sparse ones
// (decoder_sparse_step > 1, mlp_only_layers) are refused: pipeplan models blocks alike.
void read_hf_experts(ModelConfig& m, const FieldReader& r, std::string_view model_type) {
  const bool mixtral = model_type == "mixtral";
  const char* experts_field = mixtral ? "num_local_experts" : "num_experts";
  m.experts = r.positive_int(experts_field, limits::kMaxExperts);
  m.experts_per_token = r.positive_int("num_experts_per_tok", limits::kMaxExperts);
  if (m.experts_per_token > m.experts) {
    r.fail("num_experts_per_tok",
           "is above " + std::string(experts_field) + " (" + std::to_string(m.experts) + ")");
  }
  if (mixtral) return;  // its experts are intermediate_size wide, as a dense MLP would be
  m.ffn_hidden = r.positive_int("moe_intermediate_size", limits::kMaxHidden);
  if (model_type == "qwen2_moe") {  // Qwen2MoeConfig always builds its shared expert
    m.shared_ffn_hidden = r.positive_int("shared_expert_intermediate_size", limits::kMaxHidden);
  }
  if (r.find("decoder_sparse_step") != nullptr &&
      r.positive_int("decoder_sparse_step", limits::kMaxLayers) != 1) {
    r.fail("decoder_sparse_step",
           "is not 1; pipeplan models blocks alike, not dense MLPs between sparse ones");
  }
  if (const json* dense = r.find("mlp_only_layers"); dense != nullptr) {
    if (!dense->is_array()) r.fail("mlp_only_layers", "must be a list of layer indices");
    if (!dense->empty()) {
      r.fail("mlp_only_layers",
             "is not empty; pipeplan models blocks alike, not dense MLPs in "
             "some of them");
    }
  }
}

bool ends_with(std::string_view text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
}

}  // namespace

std::string_view to_string(LayerKind kind) {
  switch (kind) {
    case LayerKind::embedding:
      return "embedding";
    case LayerKind::block:
      return "block";
    case LayerKind::head:
      return "head";
  }
  return "block";
}

LayerKind layer_kind_from_string(std::string_view text) {
  if (text == "embedding") return LayerKind::embedding;
  if (text == "block") return LayerKind::block;
  if (text == "head") return LayerKind::head;
  throw Error("unknown layer kind '" + std::string(text) + "' (expected embedding, block, head)");
}

std::int64_t ModelConfig::block_parameters() const {
  if (family == "uniform") return 0;
  const std::int64_t h = hidden, f = ffn_hidden, q = query_width(), kv = kv_width();
  const bool bias = has_bias(*this);
  // Attention: Q (h×q, q = heads·head_dim: h unless the head width is explicit), K and V (h×kv
  // each, grouped-query when kv < q), output projection (q×h).
  std::int64_t n = h * q + 2 * h * kv + q * h;
  if (bias) n += q + 2 * kv + h;
  if (qkv_bias && !bias) n += q + 2 * kv;          // Qwen2: Q, K and V biases, none on the output
  if (qk_norm) n += 2 * std::int64_t{head_dim()};  // one RMSNorm gain for queries, one for keys
  if (moe()) {
    // Router (h×E), the routed experts, and a shared expert with its sigmoid gate (h×1).
    n += h * experts + block_expert_parameters();
    if (shared_ffn_hidden > 0) n += 3 * h * shared_ffn_hidden + h;
    return n + 2 * norm_parameters(*this);
  }
  // MLP: SwiGLU has gate and up (h×f) and down (f×h); GeLU has up (h×f) and down (f×h).
  n += mlp == MlpKind::swiglu ? 3 * h * f : 2 * h * f;
  if (bias) n += (mlp == MlpKind::swiglu ? 2 * f : f) + h;
  return n + 2 * norm_parameters(*this);  // pre-attention and pre-MLP norms
}

std::int64_t ModelConfig::block_expert_parameters() const {
  if (!moe()) return 0;
  // Each routed expert is a SwiGLU MLP: gate and up (h×f), down (f×h).
  return std::int64_t{experts} * 3 * hidden * ffn_hidden;
}

std::int64_t ModelConfig::active_parameter_count() const {
  if (!moe()) return parameter_count();
  const std::int64_t unused_experts =
      block_expert_parameters() / experts * (experts - experts_per_token);
  return parameter_count() - layers * unused_experts;
}

std::int64_t ModelConfig::embedding_parameters() const {
  if (family == "uniform") return 0;
  const std::int64_t h = hidden;
  std::int64_t n = static_cast<std::int64_t>(vocab) * h + learned_positions * h;
  if (family == "bert") n += 2 * h + 2 * h;  // token-type table (2 rows) + embedding LayerNorm
  return n;
}

std::int64_t ModelConfig::head_parameters() const {
  if (family == "uniform") return 0;
  const std::int64_t h = hidden, v = vocab;
  const std::int64_t lm_head = tied_embeddings ? 0 : v * h;
  if (family == "bert") {
    // MLM head: dense h×h + bias, LayerNorm, decoder (tied) + its output bias. The pooler and
    // next-sentence head of BertForPreTraining are not modelled.
    return h * h + h + 2 * h + lm_head + v;
  }
  return norm_parameters(*this) + lm_head;  // final norm + LM head (no bias in GPT or LLaMA)
}

std::int64_t ModelConfig::parameter_count() const {
  return layers * block_parameters() + embedding_parameters() + head_parameters();
}

double ModelConfig::flops_per_token(int seq_len) const {
  if (family == "uniform") return 0;
  // PaLM (Chowdhery et al. 2022, appendix B): 6N for the matmuls of forward + backward, plus
  // 12·L·H·Q·T for attention scores and values. N counts every parameter, embeddings included;
  // of a mixture of experts, the ones a token passes through (the routed experts it is sent to).
  const double n = static_cast<double>(active_parameter_count());
  const double keys = seq_len > 0 ? attention_pairs(seq_len) / seq_len : 0.0;
  return 6.0 * n + 12.0 * layers * heads * head_dim() * keys;
}

double ModelConfig::attention_pairs(int seq_len) const {
  const double s = seq_len;
  if (sliding_window <= 0 || sliding_window >= seq_len) return s * s;
  const double w = sliding_window;
  return 2.0 * s * w - w * w;
}

std::vector<LayerKind> ModelConfig::layer_list() const {
  std::vector<LayerKind> list;
  if (family != "uniform") list.push_back(LayerKind::embedding);
  list.insert(list.end(), static_cast<std::size_t>(std::max(layers, 0)), LayerKind::block);
  if (family != "uniform") list.push_back(LayerKind::head);
  return list;
}

void check_model_limits(const ModelConfig& m) {
  const std::pair<const char*, std::pair<int, int>> sizes[] = {
      {"layers", {m.layers, limits::kMaxLayers}},
      {"hidden", {m.hidden, limits::kMaxHidden}},
      {"ffn_hidden", {m.ffn_hidden, limits::kMaxHidden}},
      {"heads", {m.heads, limits::kMaxHeads}},
      {"kv_heads", {m.kv_heads, limits::kMaxHeads}},
      {"vocab", {m.vocab, limits::kMaxVocab}},
      {"seq", {m.seq, limits::kMaxSeq}},
      {"learned_positions", {m.learned_positions, limits::kMaxSeq}},
      {"head_dim", {m.explicit_head_dim, limits::kMaxHidden}},
      {"sliding_window", {m.sliding_window, limits::kMaxSeq}},
      {"experts", {m.experts, limits::kMaxExperts}},
      {"experts_per_token", {m.experts_per_token, limits::kMaxExperts}},
      {"shared_ffn_hidden", {m.shared_ffn_hidden, limits::kMaxHidden}}};
  for (const auto& [name, value_and_limit] : sizes) {
    const auto [value, limit] = value_and_limit;
    if (value < 0) throw FieldError("model", std::string(name) + " must not be negative");
    if (value > limit) {
      throw FieldError("model", limits::above_limit(
                                    std::string(name) + " (" + std::to_string(value) + ")", limit));
    }
  }
  if (m.family != "uniform" && parameters_estimate(m) > limits::kMaxParameters) {
    throw FieldError("model", "layers " + parameters_above_limit(m));
  }
}

std::vector<std::string> model_preset_names() {
  std::vector<std::string> names;
  for (const auto& m : presets())
    names.push_back(m.name);
  return names;
}

ModelConfig model_preset(std::string_view name) {
  for (auto& m : presets()) {
    if (m.name == name) return m;
  }
  throw FieldError("model", "unknown model '" + std::string(name) +
                                "'; known presets: " + join_names(model_preset_names()));
}

ModelConfig load_hf_config(const std::filesystem::path& path) {
  const std::string source = path.string();
  // Hugging Face's layout, <model>/config.json, names the model by its folder; any other file
  // by its own name (llama-7b-blocks8.json: "llama-7b-blocks8").
  const std::string parent = path.parent_path().filename().string();
  std::string name =
      printable_text(path.filename() == "config.json" ? parent : path.stem().string());
  if (name.empty() || name == "." || name == "..") name = "hf:" + source;
  return hf_config_from_json(read_json_file(path), source, name);
}

ModelConfig hf_config_from_json(const json& config, std::string_view source_view,
                                std::string name) {
  const std::string source(source_view);
  if (!config.is_object()) throw Error(source + ": expected a JSON object");
  const FieldReader r{config, source, ""};
  const std::string model_type = r.find("model_type") != nullptr ? r.string("model_type") : "";

  ModelConfig m;
  m.name = std::move(name);

  if (model_type == "gpt2" || (model_type.empty() && r.find("n_embd") != nullptr)) {
    // GPT-2 names (transformers GPT2Config).
    m.family = "gpt";
    m.hf_model_type = "gpt2";
    m.layers = r.positive_int("n_layer", limits::kMaxLayers);
    m.hidden = r.positive_int("n_embd", limits::kMaxHidden);
    m.heads = r.positive_int("n_head", limits::kMaxHeads);
    m.kv_heads = m.heads;
    if (r.find("n_inner") != nullptr) {
      m.ffn_hidden = r.positive_int("n_inner", limits::kMaxHidden);
    } else if (m.hidden > limits::kMaxHidden / 4) {
      r.fail("n_embd", limits::above_limit(
                           "(4 x " + std::to_string(m.hidden) + ", the MLP width without n_inner)",
                           limits::kMaxHidden));
    } else {
      m.ffn_hidden = 4 * m.hidden;
    }
    m.vocab = r.positive_int("vocab_size", limits::kMaxVocab);
    // GPT2Config names the learned positions n_positions, older configs n_ctx: one is needed.
    if (r.find("n_positions") == nullptr && r.find("n_ctx") == nullptr) {
      r.fail("n_positions",
             "is missing, and so is field 'n_ctx' (either gives the learned positions)");
    }
    const char* seq_field = r.find("n_positions") != nullptr ? "n_positions" : "n_ctx";
    m.seq = r.positive_int(seq_field, limits::kMaxSeq);
    m.learned_positions = m.seq;
    m.mlp = MlpKind::gelu;
    m.norm = NormKind::layernorm;
    m.tied_embeddings = r.boolean_or("tie_word_embeddings", true);
    // GPT2Config's dropout probabilities default to 0.1; any of them above 0 keeps the masks.
    m.without_dropout = true;
    for (const char* p : {"resid_pdrop", "embd_pdrop", "attn_pdrop"}) {
      if (r.number_or(p, 0.1) != 0.0) m.without_dropout = false;
    }
  } else if (model_type == "gpt_neox") {
    // GPT-NeoX names (Pythia): rotary positions, GeLU MLP, LayerNorm, untied output.
    m.family = "gpt";
    m.hf_model_type = "gpt_neox";
    m.layers = r.positive_int("num_hidden_layers", limits::kMaxLayers);
    m.hidden = r.positive_int("hidden_size", limits::kMaxHidden);
    m.heads = r.positive_int("num_attention_heads", limits::kMaxHeads);
    m.kv_heads = m.heads;
    m.ffn_hidden = r.positive_int("intermediate_size", limits::kMaxHidden);
    m.vocab = r.positive_int("vocab_size", limits::kMaxVocab);
    // A rotary model's context capacity, only the default --seq: one above the sequence limit
    // (Llama-3-8B-Instruct-Gradient-4194k: 4194304) is read as the limit, so that --seq works.
    m.seq = std::min(r.positive_int("max_position_embeddings", std::numeric_limits<int>::max()),
                     limits::kMaxSeq);
    m.mlp = MlpKind::gelu;
    m.norm = NormKind::layernorm;
    m.tied_embeddings = r.boolean_or("tie_word_embeddings", false);
    // GPTNeoXConfig's dropouts default to 0 (Pythia trains without).
    m.without_dropout =
        r.number_or("attention_dropout", 0.0) == 0.0 && r.number_or("hidden_dropout", 0.0) == 0.0;
  } else if (model_type.empty() || model_type == "llama" || model_type == "mistral" ||
             model_type == "mixtral" || model_type == "qwen2" || model_type == "qwen2_moe" ||
             model_type == "qwen3" || model_type == "qwen3_moe" || model_type == "phi3") {
    // LLaMA names (transformers LlamaConfig / MistralConfig / MixtralConfig / Qwen2Config /
    // Qwen2MoeConfig / Qwen3Config / Qwen3MoeConfig / Phi3Config): SwiGLU, RMSNorm, rotary.
    // Qwen2 adds biases to Q, K and V; Qwen3 normalises each query and key head; Phi-3 fuses QKV
    // and gate/up into one weight each (the same GEMMs); the MoE types route each token to some
    // of their experts.
    if (model_type.empty()) {
      // Read as a dense LLaMA: a key of another architecture says it is not one.
      for (const char* key : {"num_local_experts", "num_experts", "n_routed_experts",
                              "moe_intermediate_size", "q_lora_rank", "kv_lora_rank"}) {
        if (r.find(key) != nullptr) {
          r.fail(key,
                 "is set but 'model_type' is missing; without it the config reads as a "
                 "dense LLaMA (give model_type)");
        }
      }
    }
    m.family = "llama";
    m.hf_model_type = model_type.empty() ? "llama" : model_type;
    m.layers = r.positive_int("num_hidden_layers", limits::kMaxLayers);
    m.hidden = r.positive_int("hidden_size", limits::kMaxHidden);
    m.heads = r.positive_int("num_attention_heads", limits::kMaxHeads);
    m.kv_heads = r.find("num_key_value_heads") != nullptr
                     ? r.positive_int("num_key_value_heads", limits::kMaxHeads)
                     : m.heads;
    m.ffn_hidden = r.positive_int("intermediate_size", limits::kMaxHidden);
    m.vocab = r.positive_int("vocab_size", limits::kMaxVocab);
    // A rotary model's context capacity, only the default --seq: one above the sequence limit
    // (Llama-3-8B-Instruct-Gradient-4194k: 4194304) is read as the limit, so that --seq works.
    m.seq = std::min(r.positive_int("max_position_embeddings", std::numeric_limits<int>::max()),
                     limits::kMaxSeq);
    m.mlp = MlpKind::swiglu;
    m.norm = NormKind::rmsnorm;
    m.tied_embeddings = r.boolean_or("tie_word_embeddings", false);
    const bool qwen2 = model_type == "qwen2" || model_type == "qwen2_moe";
    const bool qwen3 = model_type == "qwen3" || model_type == "qwen3_moe";
    // transformers' default head_dim is hidden_size / num_attention_heads; Qwen3Config's is 128.
    if (r.find("head_dim") != nullptr) {
      m.explicit_head_dim = r.positive_int("head_dim", limits::kMaxHidden);
    } else if (model_type == "qwen3") {
      m.explicit_head_dim = 128;  // Qwen3MoeConfig has no default: its attention takes h / heads
    }
    if (m.explicit_head_dim == m.hidden / m.heads && m.hidden % m.heads == 0) {
      m.explicit_head_dim = 0;  // the default width, spelt out
    }
    m.qkv_bias = qwen2;
    m.qk_norm = qwen3;
    if (model_type == "mixtral" || model_type == "qwen2_moe" || model_type == "qwen3_moe") {
      read_hf_experts(m, r, model_type);
    }
    // Mistral's, Mixtral's and Phi-3's window is in every layer; Qwen's, when on, only from
    // max_window_layers up.
    if ((model_type == "mistral" || model_type == "mixtral" || model_type == "phi3") &&
        r.find("sliding_window") != nullptr) {
      m.sliding_window = r.positive_int("sliding_window", limits::kMaxSeq);
    }
    if (r.boolean_or("use_sliding_window", false)) {
      r.fail("use_sliding_window",
             "is true; pipeplan models layers alike, not a window in some of them");
    }
    // Options these model types have that the cost model does not: refused by name rather than
    // planned as if they were off.
    if (r.boolean_or("attention_bias", false)) {
      r.fail("attention_bias",
             "is true; pipeplan models attention without biases for " + m.hf_model_type);
    }
    if (r.boolean_or("mlp_bias", false))
      r.fail("mlp_bias", "is true; pipeplan models no MLP biases");
    for (const char* dropout : {"attention_dropout", "resid_pdrop", "embd_pdrop"}) {
      if (r.number_or(dropout, 0.0) != 0.0) {
        r.fail(dropout, "is not 0; pipeplan models dropout for LayerNorm models only");
      }
    }
  } else {
    r.fail("model_type", "is '" + model_type + "'; supported: " + hf_model_type_list());
  }
  const bool gpt2_names = r.find("n_embd") != nullptr;
  if (m.explicit_head_dim == 0 && m.hidden % m.heads != 0) {
    r.fail(gpt2_names ? "n_embd" : "hidden_size", "must be a multiple of the head count");
  }
  if (m.heads % m.kv_heads != 0) r.fail("num_key_value_heads", "must divide the head count");
  if (m.query_width() > limits::kMaxHidden) {
    r.fail("head_dim", limits::above_limit(
                           "times num_attention_heads (" + std::to_string(m.query_width()) + ")",
                           limits::kMaxHidden));
  }
  if (parameters_estimate(m) > limits::kMaxParameters) {
    r.fail(gpt2_names ? "n_layer" : "num_hidden_layers", parameters_above_limit(m));
  }
  return m;
}

json model_to_json(const ModelConfig& m) {
  json j{{"name", m.name},
         {"family", m.family},
         {"layers", m.layers},
         {"hidden", m.hidden},
         {"heads", m.heads},
         {"kv_heads", m.kv_heads},
         {"ffn_hidden", m.ffn_hidden},
         {"vocab", m.vocab},
         {"seq", m.seq},
         {"mlp", m.mlp == MlpKind::swiglu ? "swiglu" : "gelu"},
         {"norm", m.norm == NormKind::rmsnorm ? "rmsnorm" : "layernorm"},
         {"tied_embeddings", m.tied_embeddings},
         {"learned_positions", m.learned_positions}};
  // Only where they say something: files of models without them stay as they were.
  if (m.explicit_head_dim > 0) j["head_dim"] = m.explicit_head_dim;
  if (m.qkv_bias) j["qkv_bias"] = true;
  if (m.qk_norm) j["qk_norm"] = true;
  if (m.sliding_window > 0) j["sliding_window"] = m.sliding_window;
  if (m.without_dropout) j["dropout"] = false;
  if (m.experts > 0) {
    j["experts"] = m.experts;
    j["experts_per_token"] = m.experts_per_token;
  }
  if (m.shared_ffn_hidden > 0) j["shared_ffn_hidden"] = m.shared_ffn_hidden;
  if (!m.hf_model_type.empty()) j["hf_model_type"] = m.hf_model_type;
  return j;
}

ModelConfig model_from_json(const json& j, std::string_view source) {
  return model_from_json(j, source, "");
}

ModelConfig model_from_json(const json& j, std::string_view source, std::string_view path_prefix) {
  if (!j.is_object()) {
    throw Error(std::string(source) + ": field '" +
                (path_prefix.empty() ? std::string("model") : std::string(path_prefix)) +
                "' must be an object");
  }
  const FieldReader r{j, source, path_prefix};
  require_known_fields(j,
                       {"name",
                        "family",
                        "layers",
                        "hidden",
                        "heads",
                        "kv_heads",
                        "ffn_hidden",
                        "vocab",
                        "seq",
                        "mlp",
                        "norm",
                        "tied_embeddings",
                        "learned_positions",
                        "head_dim",
                        "qkv_bias",
                        "qk_norm",
                        "sliding_window",
                        "dropout",
                        "experts",
                        "experts_per_token",
                        "shared_ffn_hidden",
                        "hf_model_type"},
                       source, path_prefix, "a model");
  ModelConfig m;
  m.name = r.string("name");
  if (const std::string problem = control_character_problem(m.name); !problem.empty()) {
    r.fail("name", problem);
  }
  m.family = r.string("family");
  static constexpr std::array<std::string_view, 4> kFamilies{"llama", "gpt", "bert", "uniform"};
  if (std::find(kFamilies.begin(), kFamilies.end(), m.family) == kFamilies.end()) {
    r.fail("family", "must be one of llama, gpt, bert, uniform");
  }
  m.layers = r.positive_int("layers", limits::kMaxLayers);
  const bool synthetic = m.family == "uniform";
  auto dim = [&](std::string_view field, int max) {
    return synthetic ? r.nonnegative_int(field, max) : r.positive_int(field, max);
  };
  m.hidden = dim("hidden", limits::kMaxHidden);
  m.heads = dim("heads", limits::kMaxHeads);
  m.kv_heads = dim("kv_heads", limits::kMaxHeads);
  m.ffn_hidden = dim("ffn_hidden", limits::kMaxHidden);
  m.vocab = dim("vocab", limits::kMaxVocab);
  m.seq = dim("seq", limits::kMaxSeq);
  const std::string mlp = r.string("mlp");
  if (mlp == "swiglu") {
    m.mlp = MlpKind::swiglu;
  } else if (mlp == "gelu") {
    m.mlp = MlpKind::gelu;
  } else {
    r.fail("mlp", "must be 'swiglu' or 'gelu'");
  }
  const std::string norm = r.string("norm");
  if (norm == "rmsnorm") {
    m.norm = NormKind::rmsnorm;
  } else if (norm == "layernorm") {
    m.norm = NormKind::layernorm;
  } else {
    r.fail("norm", "must be 'rmsnorm' or 'layernorm'");
  }
  m.tied_embeddings = r.boolean("tied_embeddings");
  m.learned_positions = r.nonnegative_int("learned_positions", limits::kMaxSeq);
  if (r.find("head_dim") != nullptr) {
    m.explicit_head_dim = r.positive_int("head_dim", limits::kMaxHidden);
  }
  m.qkv_bias = r.boolean_or("qkv_bias", false);
  m.qk_norm = r.boolean_or("qk_norm", false);
  if (r.find("sliding_window") != nullptr) {
    m.sliding_window = r.nonnegative_int("sliding_window", limits::kMaxSeq);
  }
  if (r.find("experts") != nullptr) m.experts = r.nonnegative_int("experts", limits::kMaxExperts);
  if (r.find("experts_per_token") != nullptr) {
    m.experts_per_token = r.nonnegative_int("experts_per_token", limits::kMaxExperts);
  }
  if (r.find("shared_ffn_hidden") != nullptr) {
    m.shared_ffn_hidden = r.nonnegative_int("shared_ffn_hidden", limits::kMaxHidden);
  }
  if ((m.qkv_bias || m.qk_norm) && m.norm != NormKind::rmsnorm) {
    r.fail(m.qkv_bias ? "qkv_bias" : "qk_norm", "is for rmsnorm models (Qwen2, Qwen3)");
  }
  // Dropout follows the norm (LayerNorm recipes with, RMSNorm without); "dropout": false marks a
  // LayerNorm model without it.
  if (r.find("dropout") != nullptr) {
    const bool dropout = r.boolean("dropout");
    if (dropout && m.norm != NormKind::layernorm)
      r.fail("dropout", "is true; pipeplan models dropout for LayerNorm models only");
    m.without_dropout = !dropout && m.norm == NormKind::layernorm;
  }
  if (r.find("hf_model_type") != nullptr) {
    m.hf_model_type = r.string("hf_model_type");
    if (std::find(kHfModelTypes.begin(), kHfModelTypes.end(), m.hf_model_type) ==
        kHfModelTypes.end()) {
      r.fail("hf_model_type", "must be one of " + hf_model_type_list());
    }
  }
  check_shape(m, r);
  return m;
}

ModelConfig resolve_model(std::string_view name_or_path) {
  const auto names = model_preset_names();
  if (std::find(names.begin(), names.end(), name_or_path) != names.end()) {
    return model_preset(name_or_path);
  }
  std::filesystem::path path{std::string(name_or_path)};
  std::error_code ec;
  // A Hugging Face model folder: its config.json.
  if (!ends_with(name_or_path, ".json") && std::filesystem::is_directory(path, ec)) {
    if (!std::filesystem::is_regular_file(path / "config.json", ec)) {
      throw FieldError("model", path.string() +
                                    " is a folder without a config.json (give a preset, a model "
                                    "JSON or a Hugging Face config.json or model folder)");
    }
    path /= "config.json";
  }
  if (ends_with(path.string(), ".json") || std::filesystem::is_regular_file(path, ec)) {
    // Our own model JSON (model_to_json) carries "family"; anything else is a HF config.json.
    const json j = read_json_file(path);
    if (j.is_object() && j.contains("family")) return model_from_json(j, path.string());
    // A pipeplan file holds its model under "model": name the file for what it is.
    if (const auto format = j.is_object() ? j.find("format") : j.end();
        format != j.end() && format->is_string() &&
        format->get<std::string>().starts_with("pipeplan-")) {
      throw FieldError("model", path.string() + " is a " + format->get<std::string>() +
                                    " file, not a model (a preset, a model JSON or a Hugging "
                                    "Face config.json)");
    }
    return load_hf_config(path);
  }
  throw FieldError("model",
                   "unknown model '" + std::string(name_or_path) +
                       "' (neither a preset, a .json file nor a model folder); known presets: " +
                       join_names(names));
}

}  // namespace pipeplan
