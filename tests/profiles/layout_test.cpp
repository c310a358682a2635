// Megatron-LM layouts and torchtitan module lists: written from a partition, read back to the
// same blocks, and every form pipeplan cannot execute refused by name.
#include "profiles/layout.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "planner/base/error.h"
#include "profiles/model.h"
#include "profiles/partition.h"
#include "tests/error_support.h"

namespace pipeplan {
namespace {

using testing::error_of;

std::vector<StageLayers> stages_of(const ModelConfig& model, const std::vector<int>& blocks) {
  return partition_fixed(model, blocks).stages;
}

std::string layout_error(std::string_view text, const ModelConfig& model) {
  return error_of([&] { blocks_from_megatron_layout(text, model); });
}

ModelConfig llama7b() {
  return model_preset("llama-7b");
}

TEST(MegatronLayout, WritesEmbeddingBlocksAndLossWithRepeats) {
  const ModelConfig m = llama7b();  // 32 blocks
  EXPECT_EQ(megatron_layout(m, stages_of(m, {8, 8, 8, 8})), "Et*8|t*8|t*8|t*8L");
  EXPECT_EQ(megatron_layout(m, stages_of(m, {7, 9, 9, 7})), "Et*7|t*9|t*9|t*7L");
  EXPECT_EQ(megatron_layout(m, stages_of(m, {3, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 1})),
            "Et*3|(tt|)*14tL");
  EXPECT_EQ(megatron_layout(m, stages_of(m, {16, 16})), "Et*16|t*16L");
  EXPECT_EQ(megatron_layout(m, stages_of(m, {2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2})),
            "Ett|(tt|)*14ttL");
  EXPECT_EQ(megatron_layout(m, stages_of(m, {32})), "Et*32L");
  EXPECT_EQ(megatron_layout(m, stages_of(m, {10, 1, 1, 20})), "Et*10|t|t|t*20L");
}

TEST(MegatronLayout, EveryWrittenLayoutReadsBackToItsBlocks) {
  std::mt19937 rng(7);
  for (const char* name : {"llama-7b", "gpt-1.5b", "tiny"}) {
    const ModelConfig m = model_preset(name);
    for (int round = 0; round < 200; ++round) {
      // A random split of the blocks into 1..layers stages.
      const int stages = std::uniform_int_distribution<int>(1, m.layers)(rng);
      std::vector<int> blocks(static_cast<std::size_t>(stages), 1);
      for (int extra = m.layers - stages; extra > 0; --extra)
        ++blocks[static_cast<std::size_t>(std::uniform_int_distribution<int>(0, stages - 1)(rng))];
      const std::string text = megatron_layout(m, stages_of(m, blocks));
      EXPECT_EQ(blocks_from_megatron_layout(text, m), blocks) << name << " " << text;
      EXPECT_EQ(megatron_layout_stages(text), stages) << text;
    }
  }
}

TEST(MegatronLayout, ReadsMegatronsOwnNotation) {
  const ModelConfig m = llama7b();
  // Commas are for the eye; x*N and (pattern)*N repeat; Megatron's own spelling of 8 x 4.
  EXPECT_EQ(blocks_from_megatron_layout("Ettttttt,t|(t*8|)*2,ttttttttL", m),
            (std::vector<int>{8, 8, 8, 8}));
  EXPECT_EQ(blocks_from_megatron_layout("Et*3|(tt|)*14,tL", m),
            (std::vector<int>{3, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 1}));
  EXPECT_EQ(megatron_layout_stages("Et*3|(tt|)*29,tL"), 31);
  // A stage of the loss alone (Megatron's own example ends so) holds no block: refused before
  // its count is used, as an empty stage is.
  EXPECT_THROW((void)megatron_layout_stages("Et*3|(tt|)*29,t|L"), Error);
  // Stages are counted once every symbol is a layer type pipeplan runs: an MTP layer is named
  // before its stage count is used (e.g. against --stages).
  EXPECT_THROW((void)megatron_layout_stages("Et*3|(tt|)*29,m|L"), Error);
}

// Megatron removes every comma before reading a layout, inside a pattern and inside a count.
TEST(MegatronLayout, CommasAreIgnoredEverywhereAsMegatronIgnoresThem) {
  ModelConfig m = llama7b();
  m.layers = 22;
  EXPECT_EQ(blocks_from_megatron_layout("Et*11|(t,*5|)*2tL", m), (std::vector<int>{11, 5, 5, 1}));
  EXPECT_EQ(blocks_from_megatron_layout("Et*5|(t*1,0|)*1,t*6|tL", m),
            (std::vector<int>{5, 10, 6, 1}));
}

TEST(MegatronLayout, WhatPipeplanCannotExecuteIsRefusedByName) {
  const ModelConfig m = llama7b();
  // DeepSeek-V3's example: its MTP layer has no model in pipeplan.
  EXPECT_EQ(layout_error("Et*3|(tt|)*29,m|L", m),
            "layout: stage 30 ('m') holds an MTP layer (m), which pipeplan does not model");
  EXPECT_EQ(layout_error("E|t*32|L", m),
            "layout: stage 0 ('E') holds no transformer layer; pipeplan gives every stage at "
            "least one");
  EXPECT_EQ(layout_error("Et*16||t*16L", m),
            "layout: stage 1 ('') holds no transformer layer; pipeplan gives every stage at least "
            "one");
  EXPECT_EQ(layout_error("t*16E|t*16L", m),
            "layout: stage 0 ('t*16E') holds the embedding (E); pipeplan runs it first "
            "in the first stage");
  EXPECT_EQ(layout_error("Et*16L|t*16", m),
            "layout: stage 0 ('Et*16L') holds the loss (L); pipeplan runs it last in "
            "the last stage");
  EXPECT_EQ(layout_error("t*16|t*16L", m), "layout: stage 0 must start with the embedding (E)");
  EXPECT_EQ(layout_error("Et*16|t*16", m), "layout: stage 1 must end with the loss (L)");
  EXPECT_EQ(layout_error("Et*16|t*15L", m),
            "layout: 31 transformer layers (t), but llama-7b has 32");
  EXPECT_EQ(layout_error("Et*16|x*16L", m),
            "layout: stage 1 ('x*16L') holds 'x', not a layer type (E embedding, t "
            "transformer layer, L loss; m MTP is not modelled)");
  // A character outside ASCII is named whole (its UTF-8 bytes), with its byte offset; a byte
  // that starts no UTF-8 character, as \xNN.
  EXPECT_EQ(layout_error("Et*16|t*15\u00e9L", m),
            "layout: '\u00e9' at byte 11 is not a layer type (E embedding, t transformer layer, L "
            "loss) or a layout symbol (| * ( ) , digits)");
  EXPECT_EQ(layout_error("Et*16|t*16\xffL", m),
            "layout: '\\xFF' at byte 11 is not a layer type (E embedding, t transformer layer, L "
            "loss) or a layout symbol (| * ( ) , digits)");
  EXPECT_EQ(layout_error("E((t|)*2)*2L", m),
            "layout: nested parentheses at character 3 (Megatron's layout repeats one level)");
  EXPECT_EQ(layout_error("E(t|*2L", m), "layout: '(' at character 2 is not closed");
  // Megatron's pattern needs a symbol inside the parentheses, commas aside.
  EXPECT_EQ(layout_error("E()*5t*16|t*16L", m), "layout: empty '()' at character 2");
  EXPECT_EQ(layout_error("E(,)*3t*16|t*16L", m), "layout: empty '()' at character 2");
  EXPECT_EQ(layout_error("Et*|tL", m), "layout: '*' at character 3 needs a count");
  EXPECT_EQ(layout_error("E(t|)t", m), "layout: ')' at character 5 needs '*' and a count");
  EXPECT_EQ(layout_error("", m), "layout: is empty");
  EXPECT_EQ(layout_error(",,,", m), "layout: is empty (commas only)");
  // Positions inside a pattern are the layout's own, commas counted.
  EXPECT_EQ(layout_error("Et*15|(t*|)*2t*15L", m), "layout: '*' at character 9 needs a count");
  EXPECT_EQ(layout_error("Et*15|(,*t|)*2t*15L", m), "layout: '*' at character 9 follows no symbol");
  // A stage is quoted as a layout writes it, and cut: not a megabyte of 't'.
  const std::string huge = layout_error("Et*1000000x|t|t|L", m);
  EXPECT_EQ(huge,
            "layout: stage 0 ('Et*1000000x') holds 'x', not a layer type (E embedding, t "
            "transformer layer, L loss; m MTP is not modelled)");
  EXPECT_LT(layout_error("(Etx)*100000|t|t|L", m).size(), 300U);
  EXPECT_NE(layout_error("E(t|)*99999999999L", m).find("too large"), std::string::npos);
  EXPECT_EQ(layout_error("(t*2000|)*1000", m),
            "layout: the expanded layout is above the limit of 1048576 symbols "
            "(docs/reference/limits.md)");
  // A synthetic model has blocks only.
  ModelConfig uniform = m;
  uniform.family = "uniform";
  EXPECT_NE(layout_error("Et|tL", uniform).find("has blocks only"), std::string::npos);
}

TEST(ModuleNames, TorchtitanForPresetsAndHuggingFaceForConfigs) {
  ModelConfig m = model_preset("tiny");  // 4 blocks
  const std::vector<StageLayers> stages = stages_of(m, {1, 3});
  EXPECT_EQ(
      module_names_per_stage(m, stages),
      (std::vector<std::vector<std::string>>{
          {"tok_embeddings", "layers.0"}, {"layers.1", "layers.2", "layers.3", "norm", "output"}}));
  m.hf_model_type = "llama";
  EXPECT_EQ(module_names_per_stage(m, stages),
            (std::vector<std::vector<std::string>>{
                {"model.embed_tokens", "model.layers.0"},
                {"model.layers.1", "model.layers.2", "model.layers.3", "model.norm", "lm_head"}}));
  m.hf_model_type = "gpt2";
  EXPECT_EQ(module_names_per_stage(m, stages).front(),
            (std::vector<std::string>{"transformer.wte", "transformer.wpe", "transformer.h.0"}));
  m.hf_model_type = "gpt_neox";
  EXPECT_EQ(module_names_per_stage(m, stages).back().back(), "embed_out");
}

TEST(ModuleNames, AConfigJsonRecordsItsModelTypeThroughModelJson) {
  const nlohmann::json config = {
      {"model_type", "mistral"},      {"num_hidden_layers", 2},   {"hidden_size", 64},
      {"num_attention_heads", 4},     {"intermediate_size", 128}, {"vocab_size", 256},
      {"max_position_embeddings", 32}};
  const ModelConfig m = hf_config_from_json(config, "config.json", "m");
  EXPECT_EQ(m.hf_model_type, "mistral");
  EXPECT_EQ(model_from_json(model_to_json(m), "m.json").hf_model_type, "mistral");
  // A preset writes no such field: its files stay as they were.
  EXPECT_FALSE(model_to_json(llama7b()).contains("hf_model_type"));
  nlohmann::json bad = model_to_json(m);
  bad["hf_model_type"] = "t5";
  EXPECT_NE(error_of([&] { model_from_json(bad, "m.json"); }).find("hf_model_type"),
            std::string::npos);
}

}  // namespace
}  // namespace pipeplan
