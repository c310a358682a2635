#include "profiles/model.h"

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "planner/base/error.h"
#include "planner/base/io.h"
#include "tests/error_support.h"

namespace pipeplan {
namespace {

namespace fs = std::filesystem;

// A fresh directory under the system temp dir, removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::temp_directory_path() /
            ("pipeplan_model_" + std::string(info->name()) + "_" + std::to_string(::getpid()));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  fs::path write(const std::string& relative, const std::string& text) const {
    fs::path file = path_ / relative;
    fs::create_directories(file.parent_path());
    std::ofstream(file) << text;
    return file;
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

using testing::error_of;

void expect_same_model(const ModelConfig& a, const ModelConfig& b) {
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.family, b.family);
  EXPECT_EQ(a.layers, b.layers);
  EXPECT_EQ(a.hidden, b.hidden);
  EXPECT_EQ(a.heads, b.heads);
  EXPECT_EQ(a.kv_heads, b.kv_heads);
  EXPECT_EQ(a.ffn_hidden, b.ffn_hidden);
  EXPECT_EQ(a.vocab, b.vocab);
  EXPECT_EQ(a.seq, b.seq);
  EXPECT_EQ(a.mlp, b.mlp);
  EXPECT_EQ(a.norm, b.norm);
  EXPECT_EQ(a.tied_embeddings, b.tied_embeddings);
  EXPECT_EQ(a.learned_positions, b.learned_positions);
  EXPECT_EQ(a.explicit_head_dim, b.explicit_head_dim);
  EXPECT_EQ(a.qkv_bias, b.qkv_bias);
  EXPECT_EQ(a.qk_norm, b.qk_norm);
  EXPECT_EQ(a.sliding_window, b.sliding_window);
  EXPECT_EQ(a.experts, b.experts);
  EXPECT_EQ(a.experts_per_token, b.experts_per_token);
  EXPECT_EQ(a.shared_ffn_hidden, b.shared_ffn_hidden);
  EXPECT_EQ(a.hf_model_type, b.hf_model_type);
}

TEST(Model, Llama7bParameterCountIsExact) {
  const ModelConfig m = model_preset("llama-7b");
  // Block: Q, K, V, O 4·4096² = 67,108,864; gate, up, down 3·4096·11008 = 135,266,304;
  // two RMSNorm gains 2·4096 = 8,192 -> 202,383,360.
  EXPECT_EQ(m.block_parameters(), 202'383'360);
  EXPECT_EQ(m.embedding_parameters(), 32000LL * 4096);    // 131,072,000
  EXPECT_EQ(m.head_parameters(), 4096 + 32000LL * 4096);  // final norm + untied LM head
  // 32 · 202,383,360 + 131,072,000 + 131,076,096 = 6,738,415,616 (Meta's "6.7B").
  EXPECT_EQ(m.parameter_count(), 6'738'415'616);
}

TEST(Model, Gpt3_96bAndBertLargeParameterCounts) {
  // GPT block with biases: 12h² + 13h. h = 9984: 1,196,292,864 per block, × 80.
  // Embeddings 51200·9984 + 2048·9984 (learned positions); head: final LayerNorm 2h, LM head tied.
  const ModelConfig gpt3 = model_preset("gpt3-96b");
  EXPECT_EQ(gpt3.block_parameters(), 1'196'292'864);
  EXPECT_EQ(gpt3.parameter_count(), 96'235'077'120);
  EXPECT_NEAR(static_cast<double>(gpt3.parameter_count()), 96e9, 0.01 * 96e9);
  // BERT-Large: 24 × 12,596,224 + embeddings 31,782,912 (word, position, token type, LayerNorm)
  // + MLM head 1,082,170 (dense, LayerNorm, output bias; decoder tied) = 335,174,458
  // (HF's 336.2M adds the pooler and next-sentence head).
  EXPECT_EQ(model_preset("bert-large").parameter_count(), 335'174'458);
}

TEST(Model, ZeroBubbleModelsMatchTheirNames) {
  for (const auto& [name, billions] : std::vector<std::pair<std::string, double>>{
           {"gpt-1.5b", 1.5}, {"gpt-6.2b", 6.2}, {"gpt-14.6b", 14.6}, {"gpt-28.3b", 28.3}}) {
    const ModelConfig m = model_preset(name);
    EXPECT_NEAR(static_cast<double>(m.parameter_count()) / 1e9, billions, 0.05 * billions) << name;
    EXPECT_EQ(m.seq, 1024) << name;
    EXPECT_EQ(m.ffn_hidden, 4 * m.hidden) << name;
  }
}

TEST(Model, PalmFlopsPerToken) {
  const ModelConfig m = model_preset("llama-7b");
  // 6 · 6,738,415,616 + 12 · 32 layers · 32 heads · 128 head dim · 2048 tokens
  // = 40,430,493,696 + 3,221,225,472.
  EXPECT_DOUBLE_EQ(m.flops_per_token(2048), 43'651'719'168.0);
  // The attention term is linear in the sequence length.
  EXPECT_DOUBLE_EQ(m.flops_per_token(4096) - m.flops_per_token(2048), 3'221'225'472.0);
}

TEST(Model, GroupedQueryAttentionShrinksKAndV) {
  ModelConfig m = model_preset("llama-7b");
  const auto full = m.block_parameters();
  m.kv_heads = 8;  // K and V become 4096 × 1024 each
  EXPECT_EQ(full - m.block_parameters(), 2LL * 4096 * (4096 - 1024));
}

TEST(Model, LayerListAndKindNames) {
  const auto list = model_preset("tiny").layer_list();
  ASSERT_EQ(list.size(), 6u);
  EXPECT_EQ(list.front(), LayerKind::embedding);
  EXPECT_EQ(list[1], LayerKind::block);
  EXPECT_EQ(list.back(), LayerKind::head);
  for (LayerKind k : {LayerKind::embedding, LayerKind::block, LayerKind::head}) {
    EXPECT_EQ(layer_kind_from_string(to_string(k)), k);
  }
  EXPECT_NE(error_of([] { layer_kind_from_string("mlp"); }).find("'mlp'"), std::string::npos);
}

TEST(Model, UnknownPresetListsKnownOnes) {
  const std::string message = error_of([] { model_preset("llama-8b"); });
  EXPECT_NE(message.find("'llama-8b'"), std::string::npos) << message;
  for (const auto& name : model_preset_names()) {
    EXPECT_NE(message.find(name), std::string::npos) << name;
  }
}

TEST(Model, JsonRoundTripOfEveryPreset) {
  for (const auto& name : model_preset_names()) {
    const ModelConfig m = model_preset(name);
    expect_same_model(model_from_json(model_to_json(m), "test"), m);
  }
}

TEST(Model, JsonErrorsNameTheField) {
  nlohmann::json j = model_to_json(model_preset("tiny"));
  j.erase("hidden");
  EXPECT_EQ(error_of([&] { model_from_json(j, "m.json"); }), "m.json: field 'hidden' is missing");
  j = model_to_json(model_preset("tiny"));
  j["kv_heads"] = 3;
  EXPECT_EQ(error_of([&] { model_from_json(j, "p.json", "model"); }),
            "p.json: field 'model.kv_heads' must divide heads");
  j = model_to_json(model_preset("tiny"));
  j["mlp"] = "relu";
  EXPECT_NE(error_of([&] { model_from_json(j, "m.json"); }).find("'mlp'"), std::string::npos);
  j = model_to_json(model_preset("tiny"));
  j["layers"] = 2.5;
  EXPECT_EQ(error_of([&] { model_from_json(j, "m.json"); }),
            "m.json: field 'layers' must be a positive integer");
}

TEST(Model, HfLlamaConfigWithGroupedQueryAttention) {
  TempDir dir;
  const auto path = dir.write("mistral-7b/config.json", R"({
    "model_type": "mistral", "num_hidden_layers": 32, "hidden_size": 4096,
    "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
    "vocab_size": 32000, "max_position_embeddings": 32768, "tie_word_embeddings": false})");
  const ModelConfig m = load_hf_config(path);
  EXPECT_EQ(m.name, "mistral-7b");
  // A config under any other file name is named by that file, not its folder.
  EXPECT_EQ(load_hf_config(dir.write("runs/llama-7b-blocks8.json", read_text_file(path))).name,
            "llama-7b-blocks8");
  // A folder name that is no UTF-8 (Linux paths are bytes) gives a name a JSON file can hold.
  EXPECT_EQ(load_hf_config(dir.write("m\xffodel/config.json", read_text_file(path))).name,
            "m?odel");
  EXPECT_EQ(m.family, "llama");
  EXPECT_EQ(m.kv_heads, 8);
  EXPECT_EQ(m.ffn_hidden, 14336);
  EXPECT_EQ(m.seq, 32768);
  EXPECT_EQ(m.mlp, MlpKind::swiglu);
  EXPECT_EQ(m.norm, NormKind::rmsnorm);
  // Mistral 7B: 7,241,732,096 parameters.
  EXPECT_EQ(m.parameter_count(), 7'241'732'096);
}

TEST(Model, HfGpt2ConfigWithNullInner) {
  TempDir dir;
  const auto path = dir.write("gpt2-xl/config.json", R"({
    "model_type": "gpt2", "n_layer": 48, "n_embd": 1600, "n_head": 25, "n_inner": null,
    "vocab_size": 50257, "n_positions": 1024, "n_ctx": 1024})");
  const ModelConfig m = load_hf_config(path);
  EXPECT_EQ(m.family, "gpt");
  EXPECT_EQ(m.ffn_hidden, 6400);
  EXPECT_EQ(m.learned_positions, 1024);
  EXPECT_TRUE(m.tied_embeddings);
  EXPECT_EQ(m.mlp, MlpKind::gelu);
  // GPT-2 XL: 1,557,611,200 parameters (tied LM head).
  EXPECT_EQ(m.parameter_count(), 1'557'611'200);
}

TEST(Model, HfGpt2WidthWhoseDefaultMlpIsAboveTheLimitNamesNEmbd) {
  TempDir dir;
  // Without n_inner the MLP is 4 x n_embd: the field to change is n_embd, not one the file lacks.
  const auto path = dir.write("wide/config.json", R"({
    "model_type": "gpt2", "n_layer": 2, "n_embd": 300000, "n_head": 16,
    "vocab_size": 50257, "n_positions": 1024})");
  try {
    load_hf_config(path);
    FAIL() << "a 1,200,000-wide MLP was accepted";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("n_embd"), std::string::npos) << what;
    EXPECT_NE(
        what.find("(4 x 300000, the MLP width without n_inner) is above the limit of 1048576"),
        std::string::npos)
        << what;
    EXPECT_EQ(what.find("ffn_hidden"), std::string::npos) << what;
  }
}

TEST(Model, HfNeoxConfig) {
  TempDir dir;
  const auto path = dir.write("pythia-1b/config.json", R"({
    "model_type": "gpt_neox", "num_hidden_layers": 16, "hidden_size": 2048,
    "num_attention_heads": 8, "intermediate_size": 8192, "vocab_size": 50304,
    "max_position_embeddings": 2048, "tie_word_embeddings": false})");
  const ModelConfig m = load_hf_config(path);
  EXPECT_EQ(m.family, "gpt");
  EXPECT_EQ(m.norm, NormKind::layernorm);
  EXPECT_EQ(m.learned_positions, 0);  // rotary
  // Pythia-1B: 1,011,781,632 parameters.
  EXPECT_EQ(m.parameter_count(), 1'011'781'632);
  // GPTNeoXConfig's dropouts default to 0: no masks, and the model JSON says so.
  EXPECT_TRUE(m.without_dropout);
  EXPECT_FALSE(m.dropout());
  const nlohmann::json j = model_to_json(m);
  EXPECT_EQ(j.at("dropout"), false);
  EXPECT_TRUE(model_from_json(j, "p.json").without_dropout);
}

TEST(Model, DropoutFollowsTheConfigsProbabilities) {
  TempDir dir;
  const std::string shape = R"("n_layer": 2, "n_embd": 64, "n_head": 4, "vocab_size": 100,
    "n_positions": 128)";
  // GPT2Config's probabilities default to 0.1: a config without them trains with dropout.
  EXPECT_TRUE(load_hf_config(dir.write("a/config.json", R"({"model_type": "gpt2", )" + shape + "}"))
                  .dropout());
  EXPECT_FALSE(load_hf_config(dir.write("b/config.json", R"({"model_type": "gpt2", )" + shape +
                                                             R"(, "resid_pdrop": 0, "embd_pdrop": 0,
    "attn_pdrop": 0.0})"))
                   .dropout());
  EXPECT_TRUE(
      load_hf_config(dir.write("c/config.json", R"({"model_type": "gpt2", )" + shape +
                                                    R"(, "resid_pdrop": 0, "embd_pdrop": 0})"))
          .dropout());
  EXPECT_TRUE(load_hf_config(dir.write("d/config.json", R"({"model_type": "gpt_neox",
    "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 256,
    "vocab_size": 100, "max_position_embeddings": 128, "hidden_dropout": 0.1})"))
                  .dropout());
  // Presets: the GPT-3 recipe with dropout, LLaMA without; files without the field unchanged.
  EXPECT_TRUE(model_preset("gpt-1.5b").dropout());
  EXPECT_FALSE(model_preset("llama-7b").dropout());
  EXPECT_FALSE(model_to_json(model_preset("gpt-1.5b")).contains("dropout"));
  nlohmann::json llama = model_to_json(model_preset("llama-7b"));
  llama["dropout"] = true;
  EXPECT_EQ(error_of([&] { model_from_json(llama, "p.json"); }),
            "p.json: field 'dropout' is true; pipeplan models dropout for LayerNorm models only");
}

TEST(Model, HfQwen2ConfigHasQkvBiases) {
  TempDir dir;
  // Qwen2.5-7B's config.json (the fields pipeplan reads, and some it does not).
  const auto path = dir.write("Qwen2.5-7B/config.json", R"({
    "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_act": "silu",
    "num_hidden_layers": 28, "hidden_size": 3584, "num_attention_heads": 28,
    "num_key_value_heads": 4, "intermediate_size": 18944, "vocab_size": 152064,
    "max_position_embeddings": 131072, "rope_theta": 1000000.0, "sliding_window": 131072,
    "use_sliding_window": false, "tie_word_embeddings": false, "torch_dtype": "bfloat16"})");
  const ModelConfig m = load_hf_config(path);
  EXPECT_EQ(m.hf_model_type, "qwen2");
  EXPECT_EQ(m.family, "llama");
  EXPECT_TRUE(m.qkv_bias);
  EXPECT_FALSE(m.qk_norm);
  EXPECT_EQ(m.explicit_head_dim, 0);
  // Block: Q, O 2·3584² = 25,690,112; K, V 2·3584·512 = 3,670,016; Q, K, V biases
  // 3584 + 2·512 = 4,608; MLP 3·3584·18944 = 203,685,888; norms 7,168 -> 233,057,792.
  EXPECT_EQ(m.block_parameters(), 233'057'792);
  // Qwen2.5-7B: 7,615,616,512 parameters (6.53B without the two 152064 x 3584 tables).
  EXPECT_EQ(m.parameter_count(), 7'615'616'512);
  expect_same_model(model_from_json(model_to_json(m), "test"), m);
}

TEST(Model, HfQwen3ConfigHasItsHeadWidthAndQkNorms) {
  TempDir dir;
  const auto path = dir.write("Qwen3-8B/config.json", R"({
    "model_type": "qwen3", "num_hidden_layers": 36, "hidden_size": 4096,
    "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
    "intermediate_size": 12288, "vocab_size": 151936, "max_position_embeddings": 40960,
    "attention_bias": false, "tie_word_embeddings": false})");
  const ModelConfig m = load_hf_config(path);
  EXPECT_TRUE(m.qk_norm);
  EXPECT_FALSE(m.qkv_bias);
  EXPECT_EQ(m.explicit_head_dim, 0);  // 128 = 4096 / 32: the default width, spelt out
  // Qwen3-8B: 8,190,735,360 parameters (Q/K norm gains 2·128 per block).
  EXPECT_EQ(m.parameter_count(), 8'190'735'360);

  // Qwen3-0.6B: 16 heads of 128 make queries 2048 wide on a 1024-wide model; tied embeddings.
  const auto small = dir.write("Qwen3-0.6B/config.json", R"({
    "model_type": "qwen3", "num_hidden_layers": 28, "hidden_size": 1024,
    "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128,
    "intermediate_size": 3072, "vocab_size": 151936, "max_position_embeddings": 40960,
    "tie_word_embeddings": true})");
  const ModelConfig s = load_hf_config(small);
  EXPECT_EQ(s.explicit_head_dim, 128);
  EXPECT_EQ(s.head_dim(), 128);
  EXPECT_EQ(s.query_width(), 2048);
  EXPECT_EQ(s.kv_width(), 1024);
  // Q 1024·2048, K, V 2·1024·1024, O 2048·1024 = 6,291,456; Q/K norms 256; MLP 9,437,184;
  // norms 2,048 -> 15,730,944 per block; 596,049,920 in all (0.44B without the tied table).
  EXPECT_EQ(s.block_parameters(), 15'730'944);
  EXPECT_EQ(s.parameter_count(), 596'049'920);
  // PaLM's attention term counts heads x head width, not hidden.
  EXPECT_DOUBLE_EQ(s.flops_per_token(4096) - 6.0 * static_cast<double>(s.parameter_count()),
                   12.0 * 28 * 2048 * 4096);
  expect_same_model(model_from_json(model_to_json(s), "test"), s);
  // Qwen3Config's default head_dim is 128, whatever hidden / heads is.
  nlohmann::json config = read_json_file(small);
  config.erase("head_dim");
  EXPECT_EQ(hf_config_from_json(config, "c.json", "c").head_dim(), 128);
}

TEST(Model, MistralsSlidingWindowBoundsTheAttentionPairs) {
  TempDir dir;
  // Mistral-7B-v0.1: every layer attends to the 4096 tokens before each query at most.
  const auto path = dir.write("Mistral-7B-v0.1/config.json", R"({
    "model_type": "mistral", "num_hidden_layers": 32, "hidden_size": 4096,
    "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
    "vocab_size": 32000, "max_position_embeddings": 32768, "sliding_window": 4096})");
  const ModelConfig m = load_hf_config(path);
  EXPECT_EQ(m.sliding_window, 4096);
  EXPECT_DOUBLE_EQ(m.attention_pairs(2048), 2048.0 * 2048.0);  // inside the window: all of them
  EXPECT_DOUBLE_EQ(m.attention_pairs(4096), 4096.0 * 4096.0);
  // s² − (s − w)²: the pairs of full attention less the square the window leaves out.
  EXPECT_DOUBLE_EQ(m.attention_pairs(8192), 8192.0 * 8192.0 - 4096.0 * 4096.0);
  const double six_n = 6.0 * static_cast<double>(m.parameter_count());
  EXPECT_DOUBLE_EQ(m.flops_per_token(8192) - six_n, 12.0 * 32 * 4096 * 8192 * 0.75);
  expect_same_model(model_from_json(model_to_json(m), "test"), m);
  // v0.2 and later have none: null reads as no window.
  nlohmann::json later = read_json_file(path);
  later["sliding_window"] = nullptr;
  EXPECT_EQ(hf_config_from_json(later, "c.json", "c").sliding_window, 0);
  // A window in some layers only (Qwen's use_sliding_window) is refused by name.
  nlohmann::json qwen = later;
  qwen["model_type"] = "qwen2";
  qwen["use_sliding_window"] = true;
  EXPECT_EQ(error_of([&] { hf_config_from_json(qwen, "c.json", "c"); }),
            "c.json: field 'use_sliding_window' is true; pipeplan models layers alike, not a "
            "window in some of them");
}

TEST(Model, HfPhi3ConfigWithItsWindow) {
  TempDir dir;
  // Phi-3-mini-4k-instruct: fused QKV and gate/up weights (the same GEMMs), a 2047-token window.
  const auto path = dir.write("Phi-3-mini-4k-instruct/config.json", R"({
    "model_type": "phi3", "num_hidden_layers": 32, "hidden_size": 3072,
    "num_attention_heads": 32, "num_key_value_heads": 32, "intermediate_size": 8192,
    "vocab_size": 32064, "max_position_embeddings": 4096, "sliding_window": 2047,
    "attention_dropout": 0.0, "resid_pdrop": 0.0, "embd_pdrop": 0.0, "rope_scaling": null,
    "tie_word_embeddings": false})");
  const ModelConfig m = load_hf_config(path);
  EXPECT_EQ(m.hf_model_type, "phi3");
  EXPECT_EQ(m.sliding_window, 2047);
  // Phi-3-mini: 3,821,079,552 parameters.
  EXPECT_EQ(m.parameter_count(), 3'821'079'552);
}

TEST(Model, AConfigWithoutModelTypeButWithExpertsIsRefusedByTheKey) {
  // Without model_type a config reads as a dense LLaMA; an MoE key says it is not one.
  TempDir dir;
  const std::string shape = R"("num_hidden_layers": 2, "hidden_size": 64,
    "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 100,
    "max_position_embeddings": 64)";
  EXPECT_EQ(load_hf_config(dir.write("dense/config.json", "{" + shape + "}")).hf_model_type,
            "llama");
  const auto path = dir.write("moe/config.json", "{" + shape + R"(, "num_local_experts": 8})");
  EXPECT_EQ(error_of([&] { load_hf_config(path); }),
            path.string() +
                ": field 'num_local_experts' is set but 'model_type' is missing; without it the "
                "config reads as a dense LLaMA (give model_type)");
}

TEST(Model, AModelFileRefusesAFieldItDoesNotHave) {
  nlohmann::json j = model_to_json(model_preset("tiny"));
  j["kv_head"] = 2;
  EXPECT_EQ(error_of([&] { model_from_json(j, "m.json"); }),
            "m.json: field 'kv_head' is not a field of a model (did you mean 'kv_heads'?)");
}

TEST(Model, HfMixtralConfigRoutesEachTokenToTwoOfItsEightExperts) {
  TempDir dir;
  const auto path = dir.write("Mixtral-8x7B-v0.1/config.json", R"({
    "model_type": "mixtral", "num_hidden_layers": 32, "hidden_size": 4096,
    "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
    "num_local_experts": 8, "num_experts_per_tok": 2, "vocab_size": 32000,
    "max_position_embeddings": 32768, "sliding_window": null, "router_jitter_noise": 0.0,
    "tie_word_embeddings": false})");
  const ModelConfig m = load_hf_config(path);
  EXPECT_TRUE(m.moe());
  EXPECT_EQ(m.experts, 8);
  EXPECT_EQ(m.experts_per_token, 2);
  EXPECT_EQ(m.ffn_hidden, 14336);  // each expert as wide as Mistral-7B's MLP
  EXPECT_EQ(m.sliding_window, 0);
  // Attention 41,943,040 + router 4096·8 + experts 8·3·4096·14336 + norms 8192 per block.
  EXPECT_EQ(m.block_expert_parameters(), 1'409'286'144);
  EXPECT_EQ(m.block_parameters(), 1'451'270'144);
  // Mixtral-8x7B: 46,702,792,704 parameters, 12,879,925,248 of them active per token (two of
  // the eight experts).
  EXPECT_EQ(m.parameter_count(), 46'702'792'704);
  EXPECT_EQ(m.active_parameter_count(), 12'879'925'248);
  // PaLM's 6N counts the active parameters: the FLOPs a token costs, not the weights it could use.
  EXPECT_DOUBLE_EQ(m.flops_per_token(4096), 6.0 * 12'879'925'248.0 + 12.0 * 32 * 4096 * 4096);
  expect_same_model(model_from_json(model_to_json(m), "test"), m);
  // A dense model's active parameters are all of them.
  const ModelConfig dense = model_preset("llama-7b");
  EXPECT_EQ(dense.active_parameter_count(), dense.parameter_count());
  EXPECT_EQ(dense.block_expert_parameters(), 0);
  EXPECT_FALSE(model_to_json(dense).contains("experts"));  // dense files unchanged
}

TEST(Model, HfQwenMoeConfigsWithTheirExpertWidthAndSharedExpert) {
  TempDir dir;
  // Qwen3-30B-A3B: 128 experts of 768, 8 per token; Q/K norms, 32 query heads of 128 on a
  // 2048-wide model. intermediate_size (6144) is for dense layers, of which it has none.
  const auto path = dir.write("Qwen3-30B-A3B/config.json", R"({
    "model_type": "qwen3_moe", "num_hidden_layers": 48, "hidden_size": 2048,
    "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
    "intermediate_size": 6144, "moe_intermediate_size": 768, "num_experts": 128,
    "num_experts_per_tok": 8, "decoder_sparse_step": 1, "mlp_only_layers": [],
    "norm_topk_prob": true, "vocab_size": 151936, "max_position_embeddings": 40960,
    "use_sliding_window": false, "tie_word_embeddings": false})");
  const ModelConfig m = load_hf_config(path);
  EXPECT_EQ(m.experts, 128);
  EXPECT_EQ(m.experts_per_token, 8);
  EXPECT_EQ(m.ffn_hidden, 768);
  EXPECT_TRUE(m.qk_norm);
  EXPECT_EQ(m.explicit_head_dim, 128);
  // 30,532,122,624 parameters, 3,353,032,704 active ("A3B").
  EXPECT_EQ(m.parameter_count(), 30'532'122'624);
  EXPECT_EQ(m.active_parameter_count(), 3'353'032'704);
  expect_same_model(model_from_json(model_to_json(m), "test"), m);
  // Unlike Qwen3Config, Qwen3MoeConfig has no head_dim of its own: without one, h / heads.
  nlohmann::json no_width = read_json_file(path);
  no_width.erase("head_dim");
  EXPECT_EQ(hf_config_from_json(no_width, "c.json", "c").head_dim(), 64);

  // Qwen1.5-MoE-A2.7B: 60 experts of 1408, 4 per token, a shared expert of 5632 with its gate,
  // Q, K and V biases: 14,315,784,192 parameters, 2,689,173,504 active.
  nlohmann::json qwen2 = {{"model_type", "qwen2_moe"},
                          {"num_hidden_layers", 24},
                          {"hidden_size", 2048},
                          {"num_attention_heads", 16},
                          {"num_key_value_heads", 16},
                          {"intermediate_size", 5632},
                          {"moe_intermediate_size", 1408},
                          {"shared_expert_intermediate_size", 5632},
                          {"num_experts", 60},
                          {"num_experts_per_tok", 4},
                          {"decoder_sparse_step", 1},
                          {"vocab_size", 151936},
                          {"max_position_embeddings", 8192},
                          {"tie_word_embeddings", false}};
  const ModelConfig q = hf_config_from_json(qwen2, "c.json", "Qwen1.5-MoE-A2.7B");
  EXPECT_TRUE(q.qkv_bias);
  EXPECT_EQ(q.shared_ffn_hidden, 5632);
  EXPECT_EQ(q.parameter_count(), 14'315'784'192);
  EXPECT_EQ(q.active_parameter_count(), 2'689'173'504);
  expect_same_model(model_from_json(model_to_json(q), "test"), q);

  // Dense layers among the sparse ones, or more experts per token than experts, by name.
  nlohmann::json stepped = qwen2;
  stepped["decoder_sparse_step"] = 2;
  EXPECT_EQ(error_of([&] { hf_config_from_json(stepped, "c.json", "c"); }),
            "c.json: field 'decoder_sparse_step' is not 1; pipeplan models blocks alike, not "
            "dense MLPs between sparse ones");
  nlohmann::json dense_layers = qwen2;
  dense_layers["mlp_only_layers"] = {0, 1};
  EXPECT_EQ(error_of([&] { hf_config_from_json(dense_layers, "c.json", "c"); }),
            "c.json: field 'mlp_only_layers' is not empty; pipeplan models blocks alike, not "
            "dense MLPs in some of them");
  nlohmann::json greedy = qwen2;
  greedy["num_experts_per_tok"] = 61;
  EXPECT_EQ(error_of([&] { hf_config_from_json(greedy, "c.json", "c"); }),
            "c.json: field 'num_experts_per_tok' is above num_experts (60)");
  nlohmann::json unshared = qwen2;  // Qwen2MoeConfig always builds its shared expert
  unshared.erase("shared_expert_intermediate_size");
  EXPECT_EQ(error_of([&] { hf_config_from_json(unshared, "c.json", "c"); }),
            "c.json: field 'shared_expert_intermediate_size' is missing");
  nlohmann::json unnamed = qwen2;
  unnamed.erase("moe_intermediate_size");
  EXPECT_EQ(error_of([&] { hf_config_from_json(unnamed, "c.json", "c"); }),
            "c.json: field 'moe_intermediate_size' is missing");

  // Our own model JSON checks the same.
  nlohmann::json own = model_to_json(m);
  own["experts_per_token"] = 129;
  EXPECT_EQ(error_of([&] { model_from_json(own, "m.json"); }),
            "m.json: field 'experts_per_token' must be between 1 and experts (128)");
  own = model_to_json(model_preset("llama-7b"));
  own["experts_per_token"] = 2;
  EXPECT_EQ(error_of([&] { model_from_json(own, "m.json"); }),
            "m.json: field 'experts_per_token' needs experts (a dense model routes nothing)");
  // Sizes each within their limits can multiply past any count: the whole model is bounded.
  own = model_to_json(m);
  own["layers"] = 1024;
  own["experts"] = 4096;
  own["experts_per_token"] = 8;
  own["hidden"] = 1 << 20;
  own["ffn_hidden"] = 1 << 20;
  EXPECT_EQ(error_of([&] { model_from_json(own, "m.json"); }),
            "m.json: field 'layers' (1024) with the other sizes makes 1.38351e+19 parameters, "
            "above the limit of 10^15 (docs/reference/limits.md)");
  own = model_to_json(model_preset("gpt-1.5b"));
  own["experts"] = 8;
  own["experts_per_token"] = 2;
  EXPECT_EQ(error_of([&] { model_from_json(own, "m.json"); }),
            "m.json: field 'experts' is for swiglu, rmsnorm models (Mixtral, Qwen-MoE)");
}

TEST(Model, HfConfigOptionsTheCostModelLacksAreRefusedByName) {
  const nlohmann::json llama = {
      {"model_type", "llama"},        {"num_hidden_layers", 2},   {"hidden_size", 64},
      {"num_attention_heads", 4},     {"intermediate_size", 128}, {"vocab_size", 256},
      {"max_position_embeddings", 32}};
  nlohmann::json biased = llama;
  biased["attention_bias"] = true;
  EXPECT_EQ(error_of([&] { hf_config_from_json(biased, "c.json", "c"); }),
            "c.json: field 'attention_bias' is true; pipeplan models attention without biases "
            "for llama");
  nlohmann::json mlp_bias = llama;
  mlp_bias["mlp_bias"] = true;
  EXPECT_EQ(error_of([&] { hf_config_from_json(mlp_bias, "c.json", "c"); }),
            "c.json: field 'mlp_bias' is true; pipeplan models no MLP biases");
  nlohmann::json mla = llama;
  mla["model_type"] = "deepseek_v3";
  EXPECT_EQ(error_of([&] { hf_config_from_json(mla, "c.json", "c"); }),
            "c.json: field 'model_type' is 'deepseek_v3'; supported: llama, mistral, mixtral, "
            "qwen2, qwen2_moe, qwen3, qwen3_moe, phi3, gpt2, gpt_neox");
  nlohmann::json dropout = llama;
  dropout["model_type"] = "phi3";
  dropout["resid_pdrop"] = 0.1;
  EXPECT_EQ(error_of([&] { hf_config_from_json(dropout, "c.json", "c"); }),
            "c.json: field 'resid_pdrop' is not 0; pipeplan models dropout for LayerNorm models "
            "only");
  // A head width too wide for the limits is refused by the field that makes it so.
  nlohmann::json wide = llama;
  wide["head_dim"] = 1 << 19;
  EXPECT_NE(error_of([&] { hf_config_from_json(wide, "c.json", "c"); }).find("field 'head_dim'"),
            std::string::npos);
  // Our own model JSON: Q/K norms and biases belong to the RMSNorm recipes.
  nlohmann::json own = model_to_json(model_preset("gpt-1.5b"));
  own["qk_norm"] = true;
  EXPECT_EQ(error_of([&] { model_from_json(own, "m.json"); }),
            "m.json: field 'qk_norm' is for rmsnorm models (Qwen2, Qwen3)");
}

TEST(Model, HfConfigErrorsNameFileAndField) {
  TempDir dir;
  const auto path = dir.write("broken/config.json", R"({"model_type": "llama",
    "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 8,
    "vocab_size": 16, "max_position_embeddings": 8})");
  EXPECT_EQ(error_of([&] { load_hf_config(path); }),
            path.string() + ": field 'hidden_size' is missing");
  const auto bad = dir.write("bad/config.json", R"({"n_layer": -1, "n_embd": 8, "n_head": 2,
    "vocab_size": 16, "n_positions": 8})");
  EXPECT_EQ(error_of([&] { load_hf_config(bad); }),
            bad.string() + ": field 'n_layer' must be a positive integer");
  // GPT-2's learned positions come from n_positions or the older n_ctx: both are named.
  const auto positions = dir.write("gpt2/config.json", R"({"model_type": "gpt2", "n_layer": 2,
    "n_embd": 8, "n_head": 2, "vocab_size": 16})");
  EXPECT_EQ(error_of([&] { load_hf_config(positions); }),
            positions.string() +
                ": field 'n_positions' is missing, and so is field 'n_ctx' (either gives the "
                "learned positions)");
  const auto other = dir.write("t5/config.json", R"({"model_type": "t5"})");
  EXPECT_NE(error_of([&] { load_hf_config(other); }).find("'model_type'"), std::string::npos);
}

TEST(Model, ResolvePresetOrPath) {
  EXPECT_EQ(resolve_model("llama-13b").layers, 40);
  TempDir dir;
  const auto own = dir.write("mine.json", model_to_json(model_preset("tiny")).dump());
  expect_same_model(resolve_model(own.string()), model_preset("tiny"));
  const std::string message = error_of([] { resolve_model("no-such-model"); });
  EXPECT_NE(message.find("llama-7b"), std::string::npos) << message;
  EXPECT_NE(
      error_of([&] { resolve_model((dir.path() / "missing.json").string()); }).find("missing.json"),
      std::string::npos);
  // A Hugging Face model folder is read through its config.json, named by the folder.
  const auto config = dir.write("qwen-tiny/config.json", R"({"model_type": "llama",
    "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 128,
    "vocab_size": 256, "max_position_embeddings": 128})");
  const ModelConfig from_folder = resolve_model(config.parent_path().string());
  expect_same_model(from_folder, resolve_model(config.string()));
  EXPECT_EQ(from_folder.name, "qwen-tiny");
  EXPECT_EQ(error_of([&] { resolve_model(dir.path().string()); }),
            "model: " + dir.path().string() +
                " is a folder without a config.json (give a preset, a model JSON or a Hugging "
                "Face config.json or model folder)");
}

}  // namespace
}  // namespace pipeplan
