// A plan's partition in the forms the training frameworks take (docs/reference/layouts.md):
// Megatron-LM's --pipeline-model-parallel-layout string and torchtitan's per-stage module lists
// (module_fqns_per_model_part), and the Megatron string read back as blocks per virtual stage.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "profiles/model.h"
#include "profiles/partition.h"

namespace pipeplan {

// "Et*3|(tt|)*28,t|tL" (61 blocks): one stage per virtual stage in model order (Megatron's order:
// virtual rank 0's pipeline stages, then virtual rank 1's), E for the embedding, t for each
// transformer block, L for the head and loss; a block repeated is t*N and a run of equal stages
// (S|)*N.
std::string megatron_layout(const ModelConfig& model, const std::vector<StageLayers>& stages);

// Blocks per virtual stage of a Megatron layout, for `model`: the subset pipeplan executes, E at
// the start of the first stage, L at the end of the last, and at least one t in every stage.
// Every other form is one FieldError("layout", ...) naming what is wrong: an MTP layer (m) or an
// unknown symbol by name, an empty stage, E or L elsewhere, a block count other than the
// model's, a malformed repeat. Commas are ignored, as Megatron ignores them.
std::vector<int> blocks_from_megatron_layout(std::string_view text, const ModelConfig& model);
// The number of stages of a layout (its '|' plus one, repeats expanded), before any model is known;
// an unknown symbol and an MTP layer are refused (as blocks_from_megatron_layout refuses them).
int megatron_layout_stages(std::string_view text);

// Module names per virtual stage: torchtitan's (tok_embeddings, layers.N, norm, output) for a
// preset, the Hugging Face names for a model read from a config.json (model.embed_tokens,
// model.layers.N, model.norm, lm_head for LLaMA/Mistral; transformer.* for GPT-2; gpt_neox.* for
// GPT-NeoX).
std::vector<std::vector<std::string>> module_names_per_stage(
    const ModelConfig& model, const std::vector<StageLayers>& stages);

}  // namespace pipeplan
