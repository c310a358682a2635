#include "profiles/layout.h"

#include <cstdint>
#include <cstdio>

#include "planner/base/error.h"
#include "planner/base/limits.h"

namespace pipeplan {

namespace {

// What one virtual stage holds, as layer kinds counted.
struct StageContent {
  bool embedding = false;
  int blocks = 0;
  bool head = false;
};

std::vector<StageContent> contents(const ModelConfig& model,
                                   const std::vector<StageLayers>& stages) {
  const std::vector<LayerKind> layers = model.layer_list();
  std::vector<StageContent> out;
  for (const StageLayers& s : stages) {
    StageContent c;
    for (int i = s.first_layer; i < s.first_layer + s.layer_count; ++i) {
      const LayerKind kind = layers.at(static_cast<std::size_t>(i));
      if (kind == LayerKind::embedding) c.embedding = true;
      if (kind == LayerKind::block) ++c.blocks;
      if (kind == LayerKind::head) c.head = true;
    }
    out.push_back(c);
  }
  return out;
}

std::string stage_text(const StageContent& c) {
  std::string text = c.embedding ? "E" : "";
  if (c.blocks >= 3) {
    text += "t*" + std::to_string(c.blocks);
  } else {
    text += std::string(static_cast<std::size_t>(c.blocks), 't');
  }
  if (c.head) text += "L";
  return text;
}

[[noreturn]] void bad_layout(const std::string& what) {
  throw FieldError("layout", what);
}

// The longest layout text, and the most symbols its repeats may expand to: far above a real
// layout (1,024 stages of a few symbols), and no input expands without bound.
constexpr std::size_t kMaxLayoutChars = 1U << 16;
constexpr std::size_t kMaxExpandedChars = 1U << 20;

// A layout without its commas (Megatron removes every one before reading it: "t*1,0" is t*10),
// and where each of its characters was in the text given, for messages.
struct Cleaned {
  std::string text;
  std::vector<std::size_t> at;  // at[i]: the index in the given text of text[i]
  // The 1-based character number, in the text given, of text[i].
  [[nodiscard]] std::string character(std::size_t i) const { return std::to_string(at[i] + 1); }
};

// The repeat count after "*" at `at` (digits); advances `at` past it. `base`: where `text`
// starts in `layout.text`, so that a position is the user's character number.
std::size_t repeat_count(std::string_view text, std::size_t& at, std::size_t base,
                         const Cleaned& layout) {
  if (at >= text.size() || text[at] != '*') return 1;
  ++at;
  const std::size_t start = at;
  std::uint64_t n = 0;
  while (at < text.size() && text[at] >= '0' && text[at] <= '9') {
    n = n * 10 + static_cast<std::uint64_t>(text[at] - '0');
    if (n > kMaxExpandedChars)
      bad_layout("repeat count at character " + layout.character(base + start) + " is too large");
    ++at;
  }
  if (at == start)
    bad_layout("'*' at character " + layout.character(base + start - 1) + " needs a count");
  return static_cast<std::size_t>(n);
}

void append_repeated(std::string& out, std::string_view piece, std::size_t times) {
  if (out.size() + piece.size() * times > kMaxExpandedChars) {
    bad_layout(limits::above_limit("the expanded layout", static_cast<double>(kMaxExpandedChars),
                                   "symbols"));
  }
  for (std::size_t i = 0; i < times; ++i)
    out += piece;
}

// Megatron's grammar: "(pattern)*N" repeats a pattern (not nested), "x*N" a symbol. `text` is
// part of `layout.text` (no commas), from `base` (a pattern's inside is expanded on its own; its
// positions are still the user's).
std::string expand(std::string_view text, std::size_t base, const Cleaned& layout) {
  std::string out;
  std::size_t at = 0;
  const auto where = [&](std::size_t index) { return layout.character(base + index); };
  while (at < text.size()) {
    const char c = text[at];
    if (c == '(') {
      const std::size_t close = text.find_first_of("()", at + 1);
      if (close == std::string_view::npos || text[close] == '(') {
        bad_layout(close == std::string_view::npos
                       ? "'(' at character " + where(at) + " is not closed"
                       : "nested parentheses at character " + where(close) +
                             " (Megatron's layout repeats one level)");
      }
      const std::string_view inner = text.substr(at + 1, close - at - 1);
      // Megatron's pattern needs a symbol inside: it leaves "()*N" unexpanded and refuses it.
      if (inner.empty()) bad_layout("empty '()' at character " + where(at));
      const std::size_t inner_base = base + at + 1;
      at = close + 1;
      if (at >= text.size() || text[at] != '*') {
        bad_layout("')' at character " + where(close) + " needs '*' and a count");
      }
      const std::string pattern = expand(inner, inner_base, layout);
      append_repeated(out, pattern, repeat_count(text, at, base, layout));
    } else if (c == ')') {
      bad_layout("')' at character " + where(at) + " has no '('");
    } else if (c == '*') {
      bad_layout("'*' at character " + where(at) + " follows no symbol");
    } else {
      ++at;
      append_repeated(out, std::string_view(&c, 1), repeat_count(text, at, base, layout));
    }
  }
  return out;
}

// An expanded stage as a message shows it: runs written "t*N" (as a layout is), cut to 60
// characters ("..." marks a cut): a stage of a million blocks is not a megabyte of error.
std::string stage_excerpt(std::string_view stage) {
  std::string out;
  for (std::size_t at = 0; at < stage.size() && out.size() <= 60;) {
    std::size_t end = at;
    while (end < stage.size() && stage[end] == stage[at])
      ++end;
    out += stage[at];
    if (end - at > 2) {
      out += "*" + std::to_string(end - at);
    } else if (end - at == 2) {
      out += stage[at];
    }
    at = end;
  }
  return out.size() > 60 ? out.substr(0, 57) + "..." : out;
}

const char* layer_name(char symbol) {
  switch (symbol) {
    case 'E':
      return "the embedding (E)";
    case 'L':
      return "the loss (L)";
    default:
      return "";
  }
}

}  // namespace

std::string megatron_layout(const ModelConfig& model, const std::vector<StageLayers>& stages) {
  std::vector<std::string> texts;
  for (const StageContent& c : contents(model, stages))
    texts.push_back(stage_text(c));
  std::string out;
  for (std::size_t i = 0; i < texts.size();) {
    std::size_t run = 1;
    while (i + run < texts.size() && texts[i + run] == texts[i])
      ++run;
    const bool ends = i + run == texts.size();
    // A run that ends the layout writes its last stage on its own: no "|" after the last stage.
    const std::size_t grouped = ends ? run - 1 : run;
    // "(S|)*N" where it is shorter than N stages written out ("tt|tt|tt|" stays as it is).
    const std::size_t group_chars = texts[i].size() + 4 + std::to_string(grouped).size();
    if (grouped >= 2 && group_chars < grouped * (texts[i].size() + 1)) {
      out += "(" + texts[i] + "|)*" + std::to_string(grouped);
    } else {
      for (std::size_t k = 0; k < grouped; ++k)
        out += texts[i] + "|";
    }
    if (ends) out += texts[i];
    i += run;
  }
  return out;
}

namespace {

// The stages of a layout, repeats expanded and commas dropped, within the length, expansion and
// stage-count bounds.
// The character that starts at byte `at` of `text`, whole: a UTF-8 sequence of 2 to 4 bytes, or
// the byte as \xNN where no valid sequence starts there.
std::string character_at(std::string_view text, std::size_t at) {
  const auto lead = static_cast<unsigned char>(text[at]);
  const std::size_t length = lead >= 0xF0 && lead < 0xF8   ? 4
                             : lead >= 0xE0 && lead < 0xF0 ? 3
                             : lead >= 0xC2 && lead < 0xE0 ? 2
                                                           : 0;
  bool whole = length > 0 && at + length <= text.size();
  for (std::size_t i = 1; whole && i < length; ++i)
    whole = (static_cast<unsigned char>(text[at + i]) & 0xC0U) == 0x80U;
  if (whole) return std::string(text.substr(at, length));
  char byte[8];
  std::snprintf(byte, sizeof byte, "\\x%02X", static_cast<unsigned>(lead));
  return byte;
}

std::vector<std::string> layout_stages(std::string_view text) {
  if (text.empty()) bad_layout("is empty");
  if (text.size() > kMaxLayoutChars) {
    bad_layout(limits::above_limit(std::to_string(text.size()) + " characters",
                                   static_cast<double>(kMaxLayoutChars)));
  }
  // Every symbol of the grammar is ASCII: anything else is named whole, with its byte offset.
  for (std::size_t at = 0; at < text.size(); ++at) {
    if (static_cast<unsigned char>(text[at]) >= 0x80) {
      bad_layout("'" + character_at(text, at) + "' at byte " + std::to_string(at + 1) +
                 " is not a layer type (E embedding, t transformer layer, L loss) or a layout "
                 "symbol (| * ( ) , digits)");
    }
  }
  std::vector<std::string> stages(1);
  Cleaned cleaned;
  for (std::size_t at = 0; at < text.size(); ++at) {
    if (text[at] == ',') continue;
    cleaned.text += text[at];
    cleaned.at.push_back(at);
  }
  if (cleaned.text.empty()) bad_layout("is empty (commas only)");
  for (const char c : expand(cleaned.text, 0, cleaned)) {
    if (c == '|') {
      stages.emplace_back();
    } else {
      stages.back() += c;
    }
  }
  if (stages.size() > static_cast<std::size_t>(limits::kMaxStages)) {
    bad_layout(limits::above_limit(std::to_string(stages.size()) + " stages", limits::kMaxStages));
  }
  // Layer types, and a transformer layer in every stage, whatever the model: the stage count a
  // layout gives is only read once they are.
  for (std::size_t s = 0; s < stages.size(); ++s) {
    const std::string where =
        "stage " + std::to_string(s) + " ('" + stage_excerpt(stages[s]) + "')";
    for (const char c : stages[s]) {
      if (c == 'E' || c == 't' || c == 'L') continue;
      if (c == 'm') bad_layout(where + " holds an MTP layer (m), which pipeplan does not model");
      bad_layout(where + " holds '" + std::string(1, c) +
                 "', not a layer type (E embedding, t transformer layer, L loss; m MTP is "
                 "not modelled)");
    }
    if (stages[s].find('t') == std::string::npos) {
      bad_layout(where + " holds no transformer layer; pipeplan gives every stage at least one");
    }
  }
  return stages;
}

}  // namespace

int megatron_layout_stages(std::string_view text) {
  return static_cast<int>(layout_stages(text).size());
}

std::vector<int> blocks_from_megatron_layout(std::string_view text, const ModelConfig& model) {
  const std::vector<std::string> stages = layout_stages(text);
  const bool ends = model.family != "uniform";  // a synthetic model has blocks only
  std::vector<int> blocks;
  int total = 0;
  for (std::size_t s = 0; s < stages.size(); ++s) {
    const std::string where =
        "stage " + std::to_string(s) + " ('" + stage_excerpt(stages[s]) + "')";
    int count = 0;
    for (std::size_t i = 0; i < stages[s].size(); ++i) {
      const char c = stages[s][i];
      if (c == 't') {
        ++count;
      } else {  // E or L: layout_stages refused every other symbol
        if (!ends) {
          bad_layout(where + " holds " + layer_name(c) + ", but " + model.name +
                     " has blocks only");
        }
        const bool first = c == 'E' && s == 0 && i == 0;
        const bool last = c == 'L' && s + 1 == stages.size() && i + 1 == stages[s].size();
        if (!first && !last) {
          bad_layout(where + " holds " + layer_name(c) + "; pipeplan runs " +
                     (c == 'E' ? "it first in the first stage" : "it last in the last stage"));
        }
      }
    }
    blocks.push_back(count);  // at least 1: layout_stages refused a stage without one
    total += count;
  }
  if (ends && (stages.front().empty() || stages.front().front() != 'E')) {
    bad_layout("stage 0 must start with the embedding (E)");
  }
  if (ends && (stages.back().empty() || stages.back().back() != 'L')) {
    bad_layout("stage " + std::to_string(stages.size() - 1) + " must end with the loss (L)");
  }
  if (total != model.layers) {
    bad_layout(std::to_string(total) + " transformer layers (t), but " + model.name + " has " +
               std::to_string(model.layers));
  }
  return blocks;
}

std::vector<std::vector<std::string>> module_names_per_stage(
    const ModelConfig& model, const std::vector<StageLayers>& stages) {
  const std::string& type = model.hf_model_type;
  std::vector<std::string> embedding;
  std::string block_prefix;
  std::vector<std::string> head;
  if (type == "gpt2") {
    embedding = {"transformer.wte", "transformer.wpe"};
    block_prefix = "transformer.h.";
    head = {"transformer.ln_f", "lm_head"};
  } else if (type == "gpt_neox") {
    embedding = {"gpt_neox.embed_in"};
    block_prefix = "gpt_neox.layers.";
    head = {"gpt_neox.final_layer_norm", "embed_out"};
  } else if (!type.empty()) {
    // The LLaMA-named ones (llama, mistral, mixtral, qwen2, qwen2_moe, qwen3, qwen3_moe, phi3).
    embedding = {"model.embed_tokens"};
    block_prefix = "model.layers.";
    head = {"model.norm", "lm_head"};
  } else {  // torchtitan's own model definitions
    embedding = {"tok_embeddings"};
    block_prefix = "layers.";
    head = {"norm", "output"};
  }
  const std::vector<LayerKind> layers = model.layer_list();
  // Blocks are numbered from 0 after the embedding, whatever stage they are in.
  const int first_block = !layers.empty() && layers.front() == LayerKind::embedding ? 1 : 0;
  std::vector<std::vector<std::string>> out;
  for (const StageLayers& s : stages) {
    std::vector<std::string> names;
    for (int i = s.first_layer; i < s.first_layer + s.layer_count; ++i) {
      switch (layers.at(static_cast<std::size_t>(i))) {
        case LayerKind::embedding:
          names.insert(names.end(), embedding.begin(), embedding.end());
          break;
        case LayerKind::block:
          names.push_back(block_prefix + std::to_string(i - first_block));
          break;
        case LayerKind::head:
          names.insert(names.end(), head.begin(), head.end());
          break;
      }
    }
    out.push_back(std::move(names));
  }
  return out;
}

}  // namespace pipeplan
