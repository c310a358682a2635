#include "profiles/analytic.h"

#include <cmath>
#include <functional>
#include <regex>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "planner/base/error.h"
#include "tests/error_support.h"

namespace pipeplan {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

using testing::error_of;

Profile profile_for(const ModelConfig& m, Attention attention, std::vector<int> mbs = {2}) {
  AnalyticOptions options;
  options.micro_batch_sizes = std::move(mbs);
  options.attention = attention;
  return analytic_profile(m, find_gpu("h100-sxm"), options);
}

// Zero Bubble Table 1 for a GPT layer (ffn 4h), b = 2, s = 1024, h = 2304, a = 24.
TEST(Analytic, GptBlockFlopsMatchZeroBubbleTable) {
  const ModelConfig m = model_preset("gpt-1.5b");
  const double b = 2, s = 1024, h = 2304;
  const PassFlops f = analytic_flops(m, LayerKind::block, 2, 1024, Attention::materialized);
  EXPECT_DOUBLE_EQ(f.forward, s * b * h * (24 * h + 4 * s));
  EXPECT_DOUBLE_EQ(f.p1, s * b * h * (24 * h + 8 * s));
  EXPECT_DOUBLE_EQ(f.p2, s * b * h * 24 * h);
  // Recompute runs the attention core forward (4bs²h) again in p1; FlashAttention-2's backward
  // recomputes QK^T only (2bs²h).
  const double core = 4 * b * s * s * h;
  EXPECT_DOUBLE_EQ(analytic_flops(m, LayerKind::block, 2, 1024, Attention::recompute).p1,
                   f.p1 + core);
  EXPECT_DOUBLE_EQ(analytic_flops(m, LayerKind::block, 2, 1024, Attention::flash).p1,
                   f.p1 + core / 2);
  // The whole model's F + p1 + p2 equals PaLM's model FLOPs (6N + 12LHQT per token) up to the
  // embedding lookup (no matmul) and the causal-mask-free attention count: within 1 %.
  const double tokens = b * s;
  double total = 0;
  for (LayerKind k : m.layer_list()) {
    const PassFlops x = analytic_flops(m, k, 2, 1024, Attention::materialized);
    total += x.forward + x.p1 + x.p2;
  }
  EXPECT_NEAR(total / (tokens * m.flops_per_token(1024)), 1.0, 0.01);
}

TEST(Analytic, GptBlockMemoryMatchesKorthikanti) {
  const ModelConfig m = model_preset("gpt-1.5b");
  const std::int64_t b = 2, s = 1024, h = 2304, a = 24;
  const LayerCost mat = profile_for(m, Attention::materialized).cost(LayerKind::block, 2);
  EXPECT_EQ(mat.stash_bytes, s * b * (34 * h + 5 * a * s));  // sb(34h + 5as)
  // X and dY of the 4 linear ops (Zero Bubble's 32sbh) and x̂, dY of the 2 norms' gains (8sbh).
  EXPECT_EQ(mat.retained_bytes, 40 * s * b * h);
  EXPECT_EQ(mat.send_bytes, 2 * s * b * h);
  const LayerCost rec = profile_for(m, Attention::recompute).cost(LayerKind::block, 2);
  EXPECT_EQ(rec.stash_bytes, 34 * s * b * h);
  const LayerCost fla = profile_for(m, Attention::flash).cost(LayerKind::block, 2);
  EXPECT_EQ(fla.stash_bytes, 34 * s * b * h + 4 * a * s * b);  // + fp32 logsumexp
  EXPECT_EQ(fla.retained_bytes, mat.retained_bytes);
  // bf16 weights, fp32 gradients, fp32 master + Adam m, v.
  const std::int64_t n = m.block_parameters();
  EXPECT_EQ(mat.param_bytes, 2 * n);
  EXPECT_EQ(mat.grad_bytes, 4 * n);
  EXPECT_EQ(mat.optimizer_bytes, 12 * n);
}

// A LayerNorm model trained without dropout (Pythia) keeps no masks: sb(32h + 2as).
TEST(Analytic, ALayerNormModelWithoutDropoutKeepsNoMasks) {
  ModelConfig m = model_preset("gpt-1.5b");
  m.without_dropout = true;
  const std::int64_t b = 2, s = 1024, h = 2304, a = 24;
  const LayerCost mat = profile_for(m, Attention::materialized).cost(LayerKind::block, 2);
  EXPECT_EQ(mat.stash_bytes, s * b * (32 * h + 2 * a * s));
  EXPECT_EQ(mat.retained_bytes, 40 * s * b * h);
  EXPECT_EQ(profile_for(m, Attention::recompute).cost(LayerKind::block, 2).stash_bytes,
            32 * s * b * h);
  // The masks' traffic is gone too: each pass is no slower than with dropout.
  const LayerCost with =
      profile_for(model_preset("gpt-1.5b"), Attention::materialized).cost(LayerKind::block, 2);
  EXPECT_LT(mat.forward_us, with.forward_us);
  EXPECT_LE(mat.p1_us, with.p1_us);
}

TEST(Analytic, LlamaBlockMemoryListsItsTensors) {
  ModelConfig m = model_preset("llama-7b");
  m.kv_heads = 8;  // grouped-query: K and V are 1024 wide
  const std::int64_t b = 2, s = 2048, h = 4096, kvd = 1024, f = 11008, a = 32;
  const LayerCost c = profile_for(m, Attention::materialized).cost(LayerKind::block, 2);
  // norm inputs 2·2h, QKV input 2h, Q 2h, K, V 2·2kvd, attention output 2h, MLP input 2h,
  // gate, up, down input 3·2f; softmax output 2as²b (no dropout in LLaMA).
  EXPECT_EQ(c.stash_bytes, s * b * (12 * h + 4 * kvd + 6 * f) + 2 * a * s * s * b);
  // X: QKV in, O in, MLP in (h each), down in (f); dY: QKV (h + 2kvd), O (h), gate + up (2f),
  // down (h); the two norms' x̂ and dY (4h); 2 bytes each.
  EXPECT_EQ(c.retained_bytes, 2 * s * b * (3 * h + f + h + 2 * kvd + h + 2 * f + h + 4 * h));
  const PassFlops x = analytic_flops(m, LayerKind::block, 2, 2048, Attention::materialized);
  const double linear = static_cast<double>(h * (h + 2 * kvd) + h * h + 3 * h * f);
  EXPECT_DOUBLE_EQ(x.p2, 2.0 * static_cast<double>(b * s) * linear);
}

TEST(Analytic, ExplicitHeadWidthAndQkNormsInTheBlock) {
  // Qwen3-0.6B's shape: 16 query heads of 128 (q = 2048) on a 1024-wide model, 8 KV heads.
  ModelConfig m = model_preset("llama-7b");
  m.layers = 28;
  m.hidden = 1024;
  m.heads = 16;
  m.kv_heads = 8;
  m.explicit_head_dim = 128;
  m.ffn_hidden = 3072;
  m.vocab = 151936;
  m.qk_norm = true;
  const std::int64_t b = 2, s = 2048, h = 1024, q = 2048, kvd = 1024, f = 3072, a = 16;
  const LayerCost c = profile_for(m, Attention::flash).cost(LayerKind::block, 2);
  // norm inputs 2·2h, QKV input 2h, Q 2q, K, V 2·2kvd, attention output 2q, MLP input 2h;
  // Q/K norm inputs 2q + 2kvd; gate, up, down input 3·2f; fp32 logsumexp 4as per sample.
  EXPECT_EQ(c.stash_bytes,
            s * b * (8 * h + 4 * q + 4 * kvd + 2 * (q + kvd) + 6 * f) + 4 * a * s * b);
  // X: QKV in (h), O in (q), MLP in (h), down in (f); dY: QKV (q + 2kvd), O (h), gate + up
  // (2f), down (h); the two norms' x̂ and dY (4h), the Q and K norms' (2q + 2kvd).
  EXPECT_EQ(c.retained_bytes,
            2 * s * b * (h + q + h + f + q + 2 * kvd + h + 2 * f + h + 4 * h + 2 * (q + kvd)));
  const PassFlops x = analytic_flops(m, LayerKind::block, 2, 2048, Attention::materialized);
  const double linear = static_cast<double>(h * (q + 2 * kvd) + q * h + 3 * h * f);
  EXPECT_DOUBLE_EQ(x.p2, 2.0 * static_cast<double>(b * s) * linear);
  EXPECT_DOUBLE_EQ(x.forward, 2.0 * static_cast<double>(b * s) * linear +
                                  4.0 * static_cast<double>(b * s * s * q));
  // The Q/K norms cost time: the same block without them runs faster, F and p1.
  ModelConfig plain = m;
  plain.qk_norm = false;
  const LayerCost p = profile_for(plain, Attention::flash).cost(LayerKind::block, 2);
  EXPECT_GT(c.forward_us, p.forward_us);
  EXPECT_GT(c.p1_us, p.p1_us);
  EXPECT_GT(c.p2_us, p.p2_us);  // their gains' gradients
  EXPECT_EQ(c.retained_bytes - p.retained_bytes, 2 * s * b * 2 * (q + kvd));
  EXPECT_GT(c.optimizer_us, p.optimizer_us);  // two more gain tensors
  // Whole model: F + p1 + p2 equals PaLM's 6N + 12·L·heads·head_dim·T within 1 %, N without
  // the token table, whose lookup has no matmul (a quarter of this model's parameters).
  double total = 0;
  for (LayerKind k : m.layer_list()) {
    const PassFlops y = analytic_flops(m, k, 2, 2048, Attention::materialized);
    total += y.forward + y.p1 + y.p2;
  }
  const double palm = m.flops_per_token(2048) - 6.0 * static_cast<double>(m.embedding_parameters());
  EXPECT_NEAR(total / (static_cast<double>(b * s) * palm), 1.0, 0.01);
}

TEST(Analytic, ASlidingWindowShrinksTheFlashCoreOnly) {
  ModelConfig m = model_preset("llama-7b");
  const double b = 1, s = 8192, h = 4096;
  const double linear = 2.0 * b * s * (4 * h * h + 3 * h * 11008);
  m.seq = 8192;
  m.sliding_window = 4096;
  // Flash visits s² − (s − w)² pairs: 3/4 of full attention at s = 2w.
  const PassFlops windowed = analytic_flops(m, LayerKind::block, 1, 8192, Attention::flash);
  EXPECT_DOUBLE_EQ(windowed.forward - linear, 4.0 * b * (s * s - 4096.0 * 4096.0) * h);
  // A materialized score matrix is s × s whatever the mask.
  const PassFlops full = analytic_flops(m, LayerKind::block, 1, 8192, Attention::materialized);
  EXPECT_DOUBLE_EQ(full.forward - linear, 4.0 * b * s * s * h);
  // Inside the window nothing changes.
  ModelConfig none = m;
  none.sliding_window = 0;
  EXPECT_DOUBLE_EQ(analytic_flops(m, LayerKind::block, 1, 4096, Attention::flash).forward,
                   analytic_flops(none, LayerKind::block, 1, 4096, Attention::flash).forward);
  EXPECT_LT(profile_for(m, Attention::flash, {1}).cost(LayerKind::block, 1).p1_us,
            profile_for(none, Attention::flash, {1}).cost(LayerKind::block, 1).p1_us);
}

// Mixtral-8x7B's block: 8 experts of 14336, 2 per token.
ModelConfig mixtral() {
  ModelConfig m = model_preset("llama-7b");
  m.name = "mixtral";
  m.kv_heads = 8;
  m.ffn_hidden = 14336;
  m.experts = 8;
  m.experts_per_token = 2;
  m.seq = 4096;
  return m;
}

TEST(Analytic, ExpertsCostTheFlopsOfTheOnesATokenUses) {
  const ModelConfig m = mixtral();
  const double b = 1, s = 4096, t = b * s, h = 4096, kvd = 1024, f = 14336, e = 8, k = 2;
  const PassFlops x = analytic_flops(m, LayerKind::block, 1, 4096, Attention::flash);
  // Linear: QKV, output, router h·e, the k experts' gate, up and down of the token.
  const double linear = 2.0 * t * (h * (h + 2 * kvd) + h * h + h * e + k * 3 * h * f);
  EXPECT_DOUBLE_EQ(x.p2, linear);
  EXPECT_DOUBLE_EQ(x.forward, linear + 4.0 * b * s * s * h);
  // Whole model: F + p1 + p2 is PaLM's 6N over the active parameters within 1 % (N without the
  // token table; materialized attention, which recomputes nothing).
  double total = 0;
  for (LayerKind kind : m.layer_list()) {
    const PassFlops y = analytic_flops(m, kind, 1, 4096, Attention::materialized);
    total += y.forward + y.p1 + y.p2;
  }
  const double palm = m.flops_per_token(4096) - 6.0 * static_cast<double>(m.embedding_parameters());
  EXPECT_NEAR(total / (t * palm), 1.0, 0.01);

  // Memory holds every expert: weights, gradients and optimizer state of all eight.
  const LayerCost c = profile_for(m, Attention::flash, {1}).cost(LayerKind::block, 1);
  EXPECT_EQ(c.param_bytes, 2 * m.block_parameters());
  EXPECT_EQ(c.optimizer_bytes, 12 * m.block_parameters());
  // Stash per token: attention's 8h + 4h + 4kvd (bf16 bytes), the router's fp32 weights 4e, the
  // k dispatched inputs and k expert outputs 4kh, each expert's SwiGLU 6kf; the logsumexp.
  const std::int64_t hi = 4096, kvi = 1024, fi = 14336, ei = 8, ki = 2, ti = 4096;
  EXPECT_EQ(c.stash_bytes,
            ti * (8 * hi + 4 * hi + 4 * kvi + 4 * ei + 4 * ki * hi + 6 * ki * fi) + 4 * 32 * ti);
  // X: QKV in h, O in h, MLP in h, dispatched kh, down in kf; dY: QKV h + 2kvd, O h, router e,
  // gate and up 2kf, down kh; the two norms' x̂ and dY 4h.
  EXPECT_EQ(c.retained_bytes, 2 * ti *
                                  (2 * hi + hi + ki * hi + ki * fi + hi + 2 * kvi + hi + ei +
                                   2 * ki * fi + ki * hi + 4 * hi));
}

TEST(Analytic, ExpertGemmsRunAtTheRowsEachExpertGets) {
  // Qwen3-30B-A3B's block: 128 experts of 768, 8 per token: each expert's GEMM sees t/16 rows.
  ModelConfig moe = model_preset("llama-7b");
  moe.hidden = 2048;
  moe.heads = 32;
  moe.kv_heads = 4;
  moe.explicit_head_dim = 128;
  moe.qk_norm = true;
  moe.ffn_hidden = 768;
  moe.experts = 128;
  moe.experts_per_token = 8;
  // The same FLOPs as one dense MLP of 8·768: what differs is the rows per GEMM.
  ModelConfig dense = moe;
  dense.experts = 0;
  dense.experts_per_token = 0;
  dense.ffn_hidden = 8 * 768;
  const LayerCost c = profile_for(moe, Attention::flash, {1}).cost(LayerKind::block, 1);
  const LayerCost d = profile_for(dense, Attention::flash, {1}).cost(LayerKind::block, 1);
  EXPECT_GT(c.forward_us, d.forward_us);
  EXPECT_GT(c.p2_us, d.p2_us);
  // Concatenating p2s gives the experts' GEMMs more rows each: it pays more than for the dense
  // block.
  const auto gain = [](const LayerCost& x) { return 8 * x.p2_us / x.p2_concat_us.at(8); };
  EXPECT_GT(gain(c), gain(d));
  EXPECT_GT(gain(c), 1.2);
  // The optimizer updates all 128 experts every step (11 times the dense block's parameters):
  // memory-bound on them, not on the 8 a token uses.
  EXPECT_GT(c.optimizer_us, 8 * d.optimizer_us);
}

TEST(Analytic, HeadAndEmbedding) {
  const ModelConfig m = model_preset("llama-7b");
  const std::int64_t t = 2 * 2048, h = 4096, v = 32000;
  const PassFlops f = analytic_flops(m, LayerKind::head, 2, 2048, Attention::flash);
  const double lm = 2.0 * static_cast<double>(t * h * v);
  EXPECT_DOUBLE_EQ(f.forward, lm);
  EXPECT_DOUBLE_EQ(f.p1, lm);
  EXPECT_DOUBLE_EQ(f.p2, lm);
  const Profile p = profile_for(m, Attention::flash);
  const LayerCost& head = p.cost(LayerKind::head, 2);
  // Norm and LM-head inputs, int32 target ids and the norm's fp32 statistic, the softmax's bf16
  // probabilities.
  EXPECT_EQ(head.stash_bytes, t * (4 * h + 4 + 4 + 2 * v));
  EXPECT_EQ(head.param_bytes, 2 * m.head_parameters());
  EXPECT_EQ(head.send_bytes, 0);
  const LayerCost& emb = p.cost(LayerKind::embedding, 2);
  EXPECT_EQ(emb.param_bytes, 2 * m.embedding_parameters());
  EXPECT_EQ(emb.send_bytes, 2 * t * h);
  EXPECT_GT(emb.p1_us, 0);
  EXPECT_LT(emb.p1_us, 0.01 * p.cost(LayerKind::block, 2).p1_us);  // nothing to compute
}

TEST(Analytic, TimesArePhysical) {
  const ModelConfig m = model_preset("llama-7b");
  const GpuSpec gpu = find_gpu("h100-sxm");
  const Profile p = profile_for(m, Attention::flash, {1, 2, 4});
  for (int mbs : {1, 2, 4}) {
    const LayerCost& c = p.cost(LayerKind::block, mbs);
    const PassFlops f = analytic_flops(m, LayerKind::block, mbs, 2048, Attention::flash);
    const double peak_per_us = gpu.peak_bf16_tflops * 1e6;
    // No pass beats the peak, and none is slower than 25 % of it for a 7B block.
    for (auto [us, flops] :
         {std::pair{c.forward_us, f.forward}, std::pair{c.p1_us, f.p1}, std::pair{c.p2_us, f.p2}}) {
      EXPECT_GT(us, flops / peak_per_us);
      EXPECT_LT(us, flops / (0.25 * peak_per_us));
    }
    EXPECT_GT(c.p1_us, c.forward_us);  // backward does more than forward
  }
  EXPECT_GT(p.cost(LayerKind::block, 4).forward_us, 1.9 * p.cost(LayerKind::block, 2).forward_us);
  EXPECT_EQ(p.micro_batch_sizes(), (std::vector<int>{1, 2, 4}));
  EXPECT_DOUBLE_EQ(p.p2p.bandwidth_GBps, 450);
  EXPECT_DOUBLE_EQ(p.p2p.latency_us, gpu.p2p_latency_us);
  EXPECT_EQ(p.provenance.source, "analytic");
  EXPECT_EQ(p.provenance.gpu, "h100-sxm");
  EXPECT_TRUE(
      std::regex_match(p.provenance.date, std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)")));
  EXPECT_NE(p.provenance.notes.find("GEMM"), std::string::npos);
  // The profile passes the strict reader.
  EXPECT_NO_THROW(profile_from_json(profile_to_json(p), "analytic"));
}

TEST(Analytic, P2ConcatenationHelpsSmallTokenCountsOnly) {
  const Profile small = profile_for(model_preset("tiny"), Attention::flash, {1});
  const Profile large = profile_for(model_preset("llama-7b"), Attention::flash, {4});
  for (const auto* p : {&small, &large}) {
    const LayerCost& c = p->cost(LayerKind::block, p->micro_batch_sizes().front());
    ASSERT_EQ(c.p2_concat_us.size(), 8u);
    EXPECT_DOUBLE_EQ(c.p2_concat_us.at(1), c.p2_us);
    for (int k = 2; k <= 8; ++k) {
      EXPECT_LE(c.p2_concat_us.at(k) / k, c.p2_concat_us.at(k - 1) / (k - 1)) << k;
      EXPECT_GT(c.p2_concat_us.at(k), c.p2_concat_us.at(k - 1)) << k;
    }
  }
  const auto gain = [](const Profile& p) {
    const LayerCost& c = p.cost(LayerKind::block, p.micro_batch_sizes().front());
    return 8 * c.p2_us / c.p2_concat_us.at(8);
  };
  EXPECT_GT(gain(small), 2.0);   // 32 tokens: the GEMMs were far from saturated
  EXPECT_LT(gain(large), 1.05);  // 8192 tokens: already saturated
}

TEST(Analytic, RejectsBadOptions) {
  AnalyticOptions options;
  options.micro_batch_sizes = {0};
  EXPECT_NE(error_of([&] {
              analytic_profile(model_preset("tiny"), find_gpu("h100"), options);
            }).find("micro_batch_sizes"),
            std::string::npos);
  // A learned position table (GPT-2's, GPT-3's) ends at its last row; rotary models take any.
  ModelConfig gpt = model_preset("gpt-1.5b");
  gpt.learned_positions = 1024;
  AnalyticOptions longer;
  longer.seq = 1025;
  EXPECT_EQ(error_of([&] { analytic_profile(gpt, find_gpu("h100"), longer); }),
            "seq: 1025 is above the 1024 learned positions of gpt-1.5b");
  // Without --seq the model's own seq is the one too long: the model is named, not --seq.
  gpt.seq = 2048;
  EXPECT_EQ(error_of([&] { analytic_profile(gpt, find_gpu("h100"), AnalyticOptions{}); }),
            "model: gpt-1.5b's seq 2048 is above its learned_positions 1024 (give --seq)");
  longer.seq = 4 * model_preset("llama-7b").seq;
  EXPECT_NO_THROW(analytic_profile(model_preset("llama-7b"), find_gpu("h100"), longer));
}

TEST(Analytic, ParseUniform) {
  const UniformCosts c = parse_uniform("1:2:1.5:0.25", "3:-1:-2");
  EXPECT_EQ(c.forward_ms, 1);
  EXPECT_EQ(c.p1_ms, 2);
  EXPECT_EQ(c.p2_ms, 1.5);
  EXPECT_EQ(c.comm_ms, 0.25);
  EXPECT_EQ(c.mem_f_gib, 3);
  EXPECT_EQ(c.mem_p1_gib, -1);
  EXPECT_EQ(c.mem_p2_gib, -2);
  EXPECT_NO_THROW(parse_uniform("1:1:0:0", "0.1:-0.05:-0.05"));  // W and COMM may be 0
}

TEST(Analytic, ParseUniformErrorsNameTheOption) {
  const auto starts = [](const std::string& message, const std::string& prefix) {
    return message.rfind(prefix, 0) == 0;
  };
  EXPECT_TRUE(starts(error_of([] { parse_uniform("1:2:3", "1:-1:0"); }), "uniform_times:"));
  EXPECT_TRUE(starts(error_of([] { parse_uniform("1:2:x:0", "1:-1:0"); }), "uniform_times:"));
  EXPECT_TRUE(starts(error_of([] { parse_uniform("0:2:1:0", "1:-1:0"); }), "uniform_times:"));
  EXPECT_TRUE(starts(error_of([] { parse_uniform("1:-2:1:0", "1:-1:0"); }), "uniform_times:"));
  EXPECT_TRUE(starts(error_of([] { parse_uniform("1:2:-1:0", "1:-1:0"); }), "uniform_times:"));
  EXPECT_TRUE(starts(error_of([] { parse_uniform("1:2:1:-0.5", "1:-1:0"); }), "uniform_times:"));
  EXPECT_TRUE(starts(error_of([] { parse_uniform("1:2:1:0", "1:-1"); }), "uniform_memory:"));
  EXPECT_TRUE(starts(error_of([] { parse_uniform("1:2:1:0", "1:-1:x"); }), "uniform_memory:"));
  EXPECT_TRUE(starts(error_of([] { parse_uniform("1:2:1:0", "1:-1:-0.5"); }), "uniform_memory:"));
  EXPECT_TRUE(starts(error_of([] { parse_uniform("1:2:1:0", "-1:1:0"); }), "uniform_memory:"));
}

TEST(Analytic, UniformProfileStageCostsAreExact) {
  const UniformCosts c = parse_uniform("1.2:2.4:0.9:0.05", "3:-1:-2");
  const Profile p = uniform_profile(c, 8, 2);
  EXPECT_EQ(p.model.family, "uniform");
  EXPECT_EQ(p.model.name, "uniform");
  EXPECT_EQ(p.model.layer_list(), std::vector<LayerKind>(8, LayerKind::block));
  EXPECT_EQ(p.model.flops_per_token(1024), 0.0);
  EXPECT_EQ(p.provenance.source, "uniform");
  const LayerCost& b = p.cost(LayerKind::block, 1);
  EXPECT_DOUBLE_EQ(2 * b.forward_us, 1200);
  EXPECT_DOUBLE_EQ(2 * b.p1_us, 2400);
  EXPECT_DOUBLE_EQ(2 * b.p2_us, 900);
  EXPECT_DOUBLE_EQ(b.p2_time_us(3), 3 * b.p2_us);
  EXPECT_EQ(b.stash_bytes, static_cast<std::int64_t>(1.5 * kGiB));
  EXPECT_EQ(b.retained_bytes, static_cast<std::int64_t>(1.0 * kGiB));
  EXPECT_EQ(b.param_bytes + b.grad_bytes + b.optimizer_bytes + b.send_bytes, 0);
  EXPECT_DOUBLE_EQ(p.p2p.latency_us, 50);
  EXPECT_EQ(p.p2p.bandwidth_GBps, 0);
  const Profile back = profile_from_json(profile_to_json(p), "uniform");
  EXPECT_EQ(back.cost(LayerKind::block, 1).forward_us, b.forward_us);
  EXPECT_EQ(back.model.layers, 8);
}

}  // namespace
}  // namespace pipeplan
