#include "profiles/recompute.h"

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "planner/base/error.h"
#include "planner/base/limits.h"

namespace pipeplan {

int Recompute::recomputed_of(int stage_blocks) const {
  switch (method) {
    case Method::none:
      return 0;
    case Method::full:
      return stage_blocks;
    case Method::block:
      return std::min(blocks, stage_blocks);
    case Method::automatic:
      break;
  }
  throw InternalError("recompute: 'auto' has no block count until the plan resolves it");
}

std::vector<bool> recomputed_layers(const Recompute& recompute,
                                    std::span<const LayerKind> stage_kinds) {
  const auto blocks = std::count(stage_kinds.begin(), stage_kinds.end(), LayerKind::block);
  int left = recompute.recomputed_of(static_cast<int>(blocks));
  std::vector<bool> recomputes(stage_kinds.size(), false);
  for (std::size_t l = 0; l < stage_kinds.size() && left > 0; ++l) {
    if (stage_kinds[l] != LayerKind::block) continue;
    recomputes[l] = true;
    --left;
  }
  return recomputes;
}

std::string to_string(const Recompute& recompute) {
  switch (recompute.method) {
    case Recompute::Method::none:
      return "none";
    case Recompute::Method::full:
      return "full";
    case Recompute::Method::block:
      return std::to_string(recompute.blocks);
    case Recompute::Method::automatic:
      return "auto";
  }
  return "none";
}

Recompute recompute_from_string(std::string_view text) {
  if (text == "none") return {};
  if (text == "full") return {Recompute::Method::full, 0};
  if (text == "auto") return {Recompute::Method::automatic, 0};
  int blocks = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), blocks);
  if (error == std::errc{} && end == text.data() + text.size() && blocks >= 1 &&
      blocks <= limits::kMaxLayers) {
    return {Recompute::Method::block, blocks};
  }
  throw FieldError("recompute", "must be none, full, auto or a block count from 1 to " +
                                    std::to_string(limits::kMaxLayers) + ", got '" +
                                    std::string(text) + "'");
}

std::string recompute_text(const Recompute& recompute) {
  switch (recompute.method) {
    case Recompute::Method::full:
      return "full (every block)";
    case Recompute::Method::block:
      return recompute.blocks == 1
                 ? std::string("the first block of each stage")
                 : "the first " + std::to_string(recompute.blocks) + " blocks of each stage";
    case Recompute::Method::automatic:
      return "auto";
    case Recompute::Method::none:
      break;
  }
  return "none";
}

std::string megatron_recompute_args(const Recompute& recompute) {
  switch (recompute.method) {
    case Recompute::Method::full:
      return "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1";
    case Recompute::Method::block:
      return "--recompute-granularity full --recompute-method block --recompute-num-layers " +
             std::to_string(recompute.blocks);
    case Recompute::Method::none:
    case Recompute::Method::automatic:
      break;
  }
  return "";
}

nlohmann::json recompute_to_json(const Recompute& recompute) {
  nlohmann::json j = {{"method", recompute.method == Recompute::Method::block
                                     ? std::string("block")
                                     : to_string(recompute)}};
  if (recompute.method == Recompute::Method::block) j["blocks"] = recompute.blocks;
  return j;
}

Recompute recompute_from_json(const nlohmann::json& json, const std::string& context) {
  if (!json.is_object()) throw Error(context + ": must be an object");
  const auto method = json.find("method");
  if (method == json.end() || !method->is_string()) {
    throw Error(context + ": field 'method' must be \"none\", \"full\" or \"block\"");
  }
  const std::string name = method->get<std::string>();
  if ((name == "none" || name == "full") && json.contains("blocks")) {
    throw Error(context + ": field 'blocks' belongs to method \"block\" only");
  }
  if (name == "none") return {};
  if (name == "full") return {Recompute::Method::full, 0};
  if (name != "block") {
    throw Error(context + ": field 'method' must be \"none\", \"full\" or \"block\", got '" + name +
                "'");
  }
  const auto blocks = json.find("blocks");
  if (blocks == json.end() || !blocks->is_number_integer() || blocks->get<std::int64_t>() < 1 ||
      blocks->get<std::int64_t>() > limits::kMaxLayers) {
    throw Error(context + ": field 'blocks' must be an integer from 1 to " +
                std::to_string(limits::kMaxLayers));
  }
  return {Recompute::Method::block, blocks->get<int>()};
}

LayerCost recomputed_block(LayerCost block) {
  LayerCost& c = block;
  const std::int64_t stash = c.stash_bytes;
  const std::int64_t checkpoint = std::min(c.send_bytes, stash);
  // Rebuilding the stash holds the checkpoint, the stash and the forward's work at once (the
  // checkpoint goes once the stash is made); p1 then runs from the whole stash as before.
  const std::int64_t peak = std::max(checkpoint + stash + c.forward_work_bytes,
                                     std::max(stash, c.retained_bytes) + c.p1_work_bytes);
  c.p1_us += c.forward_us;
  c.p1_work_bytes = std::max<std::int64_t>(0, peak - std::max(checkpoint, c.retained_bytes));
  c.forward_work_bytes = std::max<std::int64_t>(0, stash + c.forward_work_bytes - checkpoint);
  c.stash_bytes = checkpoint;
  return block;
}

}  // namespace pipeplan
