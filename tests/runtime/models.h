// Model shapes for the runtime tests, built by hand so the tests need only ModelConfig's fields.
#pragma once

#include "profiles/model.h"

namespace pipeplan::testing {

// The `tiny` preset's dimensions: 4 layers, hidden 64, 4 heads, ffn 172, vocab 256, seq 32.
inline ModelConfig tiny_model() {
  ModelConfig model;
  model.name = "tiny";
  model.family = "llama";
  model.layers = 4;
  model.hidden = 64;
  model.heads = 4;
  model.kv_heads = 4;
  model.ffn_hidden = 172;
  model.vocab = 256;
  model.seq = 32;
  return model;
}

// Small enough for finite differences over every weight; grouped-query (4 heads, 2 kv heads).
inline ModelConfig gradcheck_model() {
  ModelConfig model;
  model.name = "gradcheck";
  model.family = "llama";
  model.layers = 2;
  model.hidden = 16;
  model.heads = 4;
  model.kv_heads = 2;
  model.ffn_hidden = 24;
  model.vocab = 13;
  model.seq = 5;
  return model;
}

}  // namespace pipeplan::testing
