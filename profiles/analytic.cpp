// Analytic profile: per-layer FLOPs, HBM traffic and memory from the model shape, turned into
// times with the efficiency factors below. See docs/design/analytic-model.md for the derivation.
#include "profiles/analytic.h"

#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <string>

#include "planner/base/error.h"
#include "planner/base/limits.h"

namespace pipeplan {

namespace {

// ---- Efficiency factors (fractions of the datasheet peak) -------------------------------------
// Large bf16 GEMMs reach ~75-80 % of the dense peak on A100/H100 with cuBLAS; MFU reports of
// 45-50 % for whole training steps (Megatron-LM, llm.c) are consistent with that
// once attention, elementwise ops and bubbles are added.
constexpr double kGemmEfficiencyMax = 0.80;
// GEMM efficiency saturates with the token count M (rows of X): eff(M) = max · M / (M + M_half).
// Small M leaves SMs idle and makes the GEMM memory-bound on the weights; at M_half = 256 tokens a
// GEMM runs at half its large-M efficiency (a 4096×4096 weight read at 3.35 TB/s costs as much as
// ~256 tokens of compute on an H100). This is what makes concatenating p2 calls pay off.
constexpr double kGemmHalfTokens = 256.0;
// Materialized attention: batched QK^T and PV GEMMs with K = head_dim (64-128) reach about half of
// peak; the s×s score traffic is charged separately as HBM time.
constexpr double kMaterializedAttentionEfficiency = 0.50;
// FlashAttention-2 (Dao 2023): 50-73 % of peak on A100, ~35-50 % on H100 forward+backward;
// softmax and masking run inside the kernel, so no s×s HBM traffic.
constexpr double kFlashAttentionEfficiency = 0.45;
// Elementwise kernels (norms, activations, residual adds, softmax) stream through HBM at ~80 %
// of its peak bandwidth.
constexpr double kHbmEfficiency = 0.80;
// Fixed cost per kernel: launch plus the tail of a dependent kernel in eager PyTorch-style code.
constexpr double kKernelOverheadUs = 4.0;
// Backward of an elementwise op reads the saved input and the incoming gradient and writes the
// input gradient (norms re-read their input): about twice the forward's traffic.
constexpr double kBackwardTrafficFactor = 2.0;

// ---- Memory per parameter (mixed-precision AdamW, Rajbhandari et al. 2020 "ZeRO" §3.1) --------
constexpr std::int64_t kWeightBytes = 2;      // bf16 weights used by F/p1/p2
constexpr std::int64_t kGradBytes = 4;        // fp32 gradient accumulators
constexpr std::int64_t kOptimizerBytes = 12;  // fp32 master weights + Adam m and v
constexpr std::int64_t kAct = 2;              // bf16 activation element
// A block's norms (pre-attention and pre-MLP), and the elements per token p2 needs for their
// gains: each norm's x̂ (normalised, before the gain) and its output gradient dY.
constexpr int kBlockNorms = 2;
constexpr std::int64_t kNormGainInputs = 2 * kBlockNorms;
constexpr std::int64_t kFp32 = 4;
constexpr std::int64_t kTokenIdBytes = 4;  // int32 token ids

// Work of one pass, split by the rate it runs at.
struct PassWork {
  double gemm_flops = 0;  // linear-layer GEMMs: efficiency eff(tokens)
  // Routed experts' grouped GEMMs: each expert's GEMM has tokens · expert_row_share rows
  // (top-k / experts of them, routing balanced), so its efficiency is eff(tokens · share).
  double expert_gemm_flops = 0;
  double expert_row_share = 1;
  double attention_flops = 0;  // attention core: efficiency per attention kind
  double hbm_bytes = 0;        // memory-bound elementwise traffic
  int kernels = 0;
  int elementwise_kernels = 0;
  int gemm_kernels = 0;

  void gemm(double flops) {
    gemm_flops += flops;
    ++kernels;
    ++gemm_kernels;
  }
  void expert_gemm(double flops) {
    expert_gemm_flops += flops;
    ++kernels;  // one grouped GEMM over every expert
    ++gemm_kernels;
  }
  void attention(double flops, int kernel_count) {
    attention_flops += flops;
    kernels += kernel_count;
  }
  void elementwise(double bytes) {
    hbm_bytes += bytes;
    ++kernels;
    ++elementwise_kernels;
  }
  double flops() const { return gemm_flops + expert_gemm_flops + attention_flops; }
};

// The GEMMs of p1 (dX = dY·W^T) or p2 (dW = X^T·dY) of a forward's linear ops: the same FLOPs,
// rows and kernel count.
PassWork linear_backward(const PassWork& forward) {
  PassWork w;
  w.gemm_flops = forward.gemm_flops;
  w.expert_gemm_flops = forward.expert_gemm_flops;
  w.expert_row_share = forward.expert_row_share;
  w.kernels = forward.gemm_kernels;
  w.gemm_kernels = forward.gemm_kernels;
  return w;
}

struct LayerWork {
  PassWork forward, p1, p2;
};

double gemm_efficiency(double tokens) {
  return kGemmEfficiencyMax * tokens / (tokens + kGemmHalfTokens);
}

// Time of one call running `k` concatenated micro-batches of `tokens` tokens each (k = 1 for F and
// p1): the GEMMs see k·tokens rows, everything else scales linearly, kernels launch once.
double pass_time_us(const PassWork& w, double tokens, int k, Attention attention,
                    const GpuSpec& gpu) {
  const double peak_flops_per_us = gpu.peak_bf16_tflops * 1e6;   // TFLOP/s -> FLOP/us
  const double hbm_bytes_per_us = gpu.hbm_bandwidth_GBps * 1e3;  // GB/s -> B/us
  const double attention_efficiency =
      attention == Attention::flash ? kFlashAttentionEfficiency : kMaterializedAttentionEfficiency;
  double us = 0;
  if (w.gemm_flops > 0) us += k * w.gemm_flops / (peak_flops_per_us * gemm_efficiency(k * tokens));
  if (w.expert_gemm_flops > 0) {
    us += k * w.expert_gemm_flops /
          (peak_flops_per_us * gemm_efficiency(k * tokens * w.expert_row_share));
  }
  us += k * w.attention_flops / (peak_flops_per_us * attention_efficiency);
  us += k * w.hbm_bytes / (hbm_bytes_per_us * kHbmEfficiency);
  return us + w.kernels * kKernelOverheadUs;
}

// Shape of one layer call.
struct Shape {
  std::int64_t b, s, t, h, q, kvd, f, a, v;  // q: query width heads·head_dim (h unless explicit)
  // Mixture of experts: e routed experts of width f, k of them per token, a shared expert of
  // width fs; e = 0 for a dense MLP of width f.
  std::int64_t e, k, fs;
  bool swiglu, dropout, rope, bert, qk_norm;
  double pairs;  // query-key pairs per sequence (ModelConfig::attention_pairs): s², or less in a
                 // window
};

Shape shape_of(const ModelConfig& m, int mbs, int seq) {
  Shape x{};
  x.b = mbs;
  x.s = seq;
  x.t = x.b * x.s;
  x.h = m.hidden;
  x.q = m.query_width();
  x.kvd = m.kv_width();
  x.f = m.ffn_hidden;
  x.a = m.heads;
  x.v = m.vocab;
  x.swiglu = m.mlp == MlpKind::swiglu;
  // GPT-3/BERT recipes (Korthikanti et al.) train with dropout; LLaMA and Pythia do not.
  x.dropout = m.dropout();
  x.rope = m.learned_positions == 0;
  x.bert = m.family == "bert";
  x.qk_norm = m.qk_norm;
  x.e = m.experts;
  x.k = m.experts_per_token;
  x.fs = m.shared_ffn_hidden;
  x.pairs = m.attention_pairs(seq);
  return x;
}

// The MLP of a mixture-of-experts block after its norm (Mixtral, Qwen-MoE; Megatron-Core's
// token dispatcher and grouped GEMMs): a router GEMM (h -> e) and its softmax / top-k on fp32
// logits; the tokens copied into expert order, k rows each; the experts' SwiGLU as two grouped
// GEMMs over t·k rows, each expert's GEMM t·k/e rows when routing is balanced (the auxiliary
// loss's aim; an imbalanced step is slower, which this does not model); the k outputs summed
// back per token with their routing weights; a shared expert (Qwen2-MoE) on every token with its
// sigmoid gate.
void moe_forward(PassWork& F, const Shape& x) {
  const double t = static_cast<double>(x.t), h = static_cast<double>(x.h);
  const double f = static_cast<double>(x.f), e = static_cast<double>(x.e);
  const double k = static_cast<double>(x.k), fs = static_cast<double>(x.fs);
  F.expert_row_share = k / e;
  F.gemm(2 * t * h * e);                  // router logits
  F.elementwise(kFp32 * t * e * 2);       // softmax and top-k: read logits, write weights
  F.elementwise(kAct * t * h * (1 + k));  // dispatch: read each token, write its k copies
  F.expert_gemm(2 * t * k * h * 2 * f);   // gate and up of the routed experts
  F.elementwise(kAct * t * k * 3 * f);    // SiLU(gate)·up
  F.expert_gemm(2 * t * k * f * h);       // down
  F.elementwise(kAct * t * h * (k + 1));  // combine: read k outputs, write their weighted sum
  if (x.fs > 0) {
    F.gemm(2 * t * h * 2 * fs);        // shared expert: gate and up
    F.elementwise(kAct * t * 3 * fs);  // SiLU(gate)·up
    F.gemm(2 * t * fs * h);            // down
    F.gemm(2 * t * h);                 // its gate (h -> 1)
    F.elementwise(kAct * t * 3 * h);   // sigmoid(gate)·shared + routed
  }
}

// Transformer block, tensor by tensor. Linear FLOPs = 2 · tokens · parameters per pass (F: Y = XW,
// p1: dX = dY·W^T, p2: dW = X^T·dY). Attention core forward QK^T + PV = 4·b·s²·q, q = heads ·
// head_dim (= h unless the head width is explicit; independent of grouped-query K/V: every query
// head does its own products). Zero Bubble §2 / Table 1. Q, K and V biases (Qwen2) add in the
// GEMM epilogue and their gradients are the epilogue's row sums: no time of their own.
LayerWork block_work(const Shape& x, Attention attention) {
  const double t = static_cast<double>(x.t), h = static_cast<double>(x.h);
  const double q = static_cast<double>(x.q);
  const double kvd = static_cast<double>(x.kvd), f = static_cast<double>(x.f);
  const double f_out = x.swiglu ? 2 * f : f;                         // up (+ gate) output width
  const double scores = static_cast<double>(x.b * x.a * x.s * x.s);  // elements of b·a·s×s
  // A sliding window (Mistral) shrinks the pairs a flash kernel visits; the materialized score
  // matrix is s×s whatever the mask.
  const double pairs = attention == Attention::flash ? x.pairs : static_cast<double>(x.s * x.s);
  const double core_forward = 4.0 * static_cast<double>(x.b) * pairs * q;

  LayerWork w;
  PassWork& F = w.forward;
  F.elementwise(kAct * t * 2 * h);                         // norm 1: read x, write x̂
  F.gemm(2 * t * h * (q + 2 * kvd));                       // fused QKV projection
  if (x.qk_norm) F.elementwise(kAct * t * 2 * (q + kvd));  // RMSNorm per Q and K head
  if (x.rope) F.elementwise(kAct * t * 2 * (q + kvd));     // rotary on Q and K
  if (attention == Attention::flash) {
    F.attention(core_forward, 1);  // one fused kernel, scores stay in SRAM
  } else {
    F.attention(core_forward, 2);              // QK^T and PV batched GEMMs
    F.elementwise(kAct * scores * 4);          // write S, softmax read S / write P, PV reads P
    if (x.dropout) F.elementwise(scores * 5);  // read P, write P' (bf16) and a 1-byte mask
  }
  F.gemm(2 * t * q * h);  // output projection
  // Residual add (read 2, write 1), with dropout fused in GPT recipes (+ 1-byte mask).
  const double residual_bytes = kAct * t * 3 * h + (x.dropout ? t * h : 0);
  F.elementwise(residual_bytes);
  F.elementwise(kAct * t * 2 * h);  // norm 2
  if (x.e > 0) {
    moe_forward(F, x);
  } else {
    F.gemm(2 * t * h * f_out);                             // up (+ gate)
    F.elementwise(kAct * t * (x.swiglu ? 3 * f : 2 * f));  // GeLU, or SiLU(gate)·up
    F.gemm(2 * t * f * h);                                 // down
  }
  F.elementwise(residual_bytes);

  PassWork& P1 = w.p1;
  P1 = linear_backward(F);  // dX of the linear ops: the same FLOPs as their forward
  // Attention backward: dP = dO·V^T, dV = P^T·dO, dQ = dS·K, dK = dS^T·Q: 8·b·s²·q.
  double core_backward = 2 * core_forward;
  if (attention == Attention::recompute) core_backward += core_forward;  // forward run again
  // FlashAttention-2 backward recomputes S = QK^T (2·b·s²·q), not PV: 10·b·s²·q = 2.5× forward.
  if (attention == Attention::flash) core_backward += core_forward / 2;
  P1.attention(core_backward, attention == Attention::flash ? 2 : 4);
  const double forward_elementwise = F.hbm_bytes;
  double recomputed = 0;  // recompute attention re-creates the s×s scores before the backward
  if (attention == Attention::recompute)
    recomputed = kAct * scores * 4 + (x.dropout ? scores * 5 : 0);
  P1.hbm_bytes += kBackwardTrafficFactor * forward_elementwise + recomputed;
  P1.kernels += F.elementwise_kernels;  // one backward kernel per forward elementwise op

  // p2: dW = X^T·dY for the linear ops (bias gradients Σ dY fuse into the GEMM epilogue), and
  // each norm's gain (and bias) gradient Σ x̂·dY from the x̂ and dY p1 left: read both, 2h.
  w.p2 = linear_backward(F);
  for (int norm = 0; norm < kBlockNorms; ++norm)
    w.p2.elementwise(kAct * t * 2 * h);
  if (x.qk_norm) w.p2.elementwise(kAct * t * 2 * (q + kvd));  // the Q and K norms' gains
  return w;
}

// Head: final norm (BERT: dense + GeLU + LayerNorm transform), LM-head GEMM 2·t·h·V in each of F,
// p1 and p2, and the cross-entropy on fp32 logits.
LayerWork head_work(const Shape& x) {
  const double t = static_cast<double>(x.t), h = static_cast<double>(x.h);
  const double v = static_cast<double>(x.v);
  LayerWork w;
  PassWork& F = w.forward;
  if (x.bert) {
    F.gemm(2 * t * h * h);            // MLM transform dense
    F.elementwise(kAct * t * 2 * h);  // GeLU
  }
  F.elementwise(kAct * t * 2 * h);  // final norm
  F.gemm(2 * t * h * v);            // LM head
  // Loss: upcast logits to fp32 (read 2, write 4 bytes), log-softmax + NLL read them again.
  F.elementwise(t * v * (2.0 + 4.0));
  F.elementwise(t * v * 4.0);

  PassWork& P1 = w.p1;
  P1.elementwise(t * v * (4.0 + 2.0));  // dlogits = softmax − onehot: read fp32, write bf16
  P1.gemm(2 * t * h * v);               // dX = dlogits · W
  P1.elementwise(kBackwardTrafficFactor * kAct * t * 2 * h);  // norm backward
  if (x.bert) {
    P1.elementwise(kBackwardTrafficFactor * kAct * t * 2 * h);  // GeLU backward
    P1.gemm(2 * t * h * h);
  }

  PassWork& P2 = w.p2;
  P2.gemm(2 * t * h * v);            // dW of the LM head (the tied copy too)
  P2.elementwise(kAct * t * 2 * h);  // the final norm's gain: Σ x̂·dY
  if (x.bert) P2.gemm(2 * t * h * h);
  return w;
}

LayerWork embedding_work(const Shape& x) {
  const double t = static_cast<double>(x.t), h = static_cast<double>(x.h);
  LayerWork w;
  PassWork& F = w.forward;
  F.elementwise(kAct * t * 2 * h);                                 // gather rows: read, write
  if (!x.rope) F.elementwise(kAct * t * 3 * h);                    // + learned positions
  if (x.bert) F.elementwise(kAct * t * 3 * h + kAct * t * 2 * h);  // + token type, LayerNorm
  // p1 of the first layer has no work (token ids have no gradient); the pass still costs one
  // kernel's worth of synchronisation with the incoming gradient.
  w.p1.kernels = 1;
  // p2: scatter-add dY into the fp32 table gradient (read dY, read-modify-write fp32 rows).
  PassWork& P2 = w.p2;
  P2.elementwise(kAct * t * h + 2 * kFp32 * t * h);
  if (!x.rope) P2.elementwise(kAct * t * h + 2 * kFp32 * static_cast<double>(x.s) * h);
  return w;
}

LayerWork layer_work(LayerKind kind, const Shape& x, Attention attention) {
  switch (kind) {
    case LayerKind::embedding:
      return embedding_work(x);
    case LayerKind::block:
      return block_work(x, attention);
    case LayerKind::head:
      return head_work(x);
  }
  return {};
}

// Activations allocated by F and held until p1 (bytes).
std::int64_t block_stash_bytes(const Shape& x, Attention attention) {
  // Korthikanti et al. 2022 ("Reducing Activation Recomputation", §4.1), tensor by tensor, bf16:
  //   norm-1 input 2h, QKV input (norm-1 output) 2h, Q 2q, K 2·kvd, V 2·kvd, attention output
  //   (= output-projection input) 2q, norm-2 input 2h, MLP input (norm-2 output) 2h
  //                                                                        = 8h + 4q + 4kvd
  //   (q = heads·head_dim, h unless the head width is explicit: 12h + 4kvd)
  //   Q/K norm (Qwen3): its inputs, Q and K before the norm                = 2q + 2kvd
  //   GeLU MLP: GeLU input 2f, down input (GeLU output) 2f                            = 4f
  //   SwiGLU MLP (LLaMA): gate output 2f, up output 2f, down input SiLU(gate)·up 2f   = 6f
  //   dropout masks after the output projection and after the MLP (1 byte each)       = 2h
  // per token. With h = kvd, f = 4h and dropout: 34h — Korthikanti's 34sbh.
  // A mixture of experts keeps, in place of the MLP's 6f: the router's fp32 weights 4e, the k
  // dispatched copies of the input 2kh, each expert's SwiGLU 6kf, the k expert outputs 2kh (the
  // routing weights' gradient needs them); a shared expert 6fs and its output 2h.
  // Norm statistics (mean/rstd, O(sb)) are not counted, as in Korthikanti.
  const std::int64_t mlp =
      x.e > 0 ? kFp32 * x.e + 4 * x.k * x.h + 6 * x.k * x.f + (x.fs > 0 ? 6 * x.fs + 2 * x.h : 0)
              : (x.swiglu ? 6 : 4) * x.f;
  const std::int64_t per_token = 8 * x.h + 4 * x.q + 4 * x.kvd +
                                 (x.qk_norm ? 2 * (x.q + x.kvd) : 0) + mlp +
                                 (x.dropout ? 2 * x.h : 0);
  std::int64_t bytes = x.t * per_token;
  const std::int64_t scores = x.b * x.a * x.s * x.s;
  switch (attention) {
    case Attention::materialized:
      // softmax output 2as²b; with dropout also its 1-byte mask and the dropout output 2as²b:
      // Korthikanti's 5as²b.
      bytes += 2 * scores + (x.dropout ? 3 * scores : 0);
      break;
    case Attention::recompute:
      break;  // scores are recomputed in p1 (Korthikanti's selective recomputation)
    case Attention::flash:
      bytes += kFp32 * x.b * x.a * x.s;  // logsumexp per row and head; O is counted above
      break;
  }
  return bytes;
}

// X and dY of every linear op, held from p1 until p2 (2BP §3; Zero Bubble Table 1: 32sbh):
//   inputs X: QKV input h, output-projection input q, MLP input h (shared by gate and up),
//             down input f;
//   output gradients dY: QKV q + 2kvd, output projection h, up (+ gate) f (2f), down h.
// and, for the gains of the block's two norms (their gradient Σ x̂·dY is a weight gradient, so
// it waits for p2 too), each norm's x̂ (normalised, before the gain) and output gradient dY: 4h
// (kNormGainInputs); Qwen3's per-head Q and K norms likewise 2(q + kvd).
// GPT: 32sbh + 8sbh = 40sbh; Zero Bubble counts the linear ops only.
// A mixture of experts: the MLP input h feeds the router (dY e) and the shared expert; the
// experts hold their dispatched inputs kh and down inputs kf, dY of gate and up 2kf and of down
// kh; a shared expert its down input fs, dY 2fs and h, its gate's dY 1.
std::int64_t block_retained_bytes(const Shape& x) {
  const std::int64_t norm_gains = kNormGainInputs * x.h + (x.qk_norm ? 2 * (x.q + x.kvd) : 0);
  if (x.e > 0) {
    const std::int64_t shared_inputs = x.fs > 0 ? x.fs : 0;
    const std::int64_t shared_grads = x.fs > 0 ? 2 * x.fs + x.h + 1 : 0;
    const std::int64_t inputs = 2 * x.h + x.q + x.k * x.h + x.k * x.f + shared_inputs;
    const std::int64_t output_grads =
        (x.q + 2 * x.kvd) + x.h + x.e + 2 * x.k * x.f + x.k * x.h + shared_grads;
    return kAct * x.t * (inputs + output_grads + norm_gains);
  }
  const std::int64_t inputs = 2 * x.h + x.q + x.f;
  const std::int64_t output_grads = (x.q + 2 * x.kvd) + x.h + (x.swiglu ? 2 : 1) * x.f + x.h;
  return kAct * x.t * (inputs + output_grads + norm_gains);
}

std::string efficiency_notes() {
  auto fmt = [](double value) {
    std::string s = std::to_string(value);
    s.erase(s.find_last_not_of('0') + 1);
    if (!s.empty() && s.back() == '.') s.pop_back();
    return s;
  };
  return "GEMM eff(M) = " + fmt(kGemmEfficiencyMax) + "*M/(M+" + fmt(kGemmHalfTokens) +
         ") of peak; attention core " + fmt(kMaterializedAttentionEfficiency) +
         " (materialized/recompute) or " + fmt(kFlashAttentionEfficiency) +
         " (flash); elementwise at " + fmt(kHbmEfficiency) + " of HBM bandwidth; " +
         fmt(kKernelOverheadUs) +
         " us per kernel; weights bf16, grads fp32, AdamW fp32 master+m+v (2/4/12 bytes per "
         "parameter); optimizer step: 34 bytes moved per parameter at " +
         fmt(kHbmEfficiency) +
         " of HBM bandwidth, two kernels per tensor. See docs/design/analytic-model.md.";
}

// The optimizer step over `params` parameters held in `tensors` tensors, as the runtime runs it
// (runtime/cuda/adamw.cu): AdamW reads the fp32 master weights, both moments and the gradient and
// writes the first three and the bf16 weights (30 bytes per parameter), then the gradients are
// zeroed (4 more); memory-bound, one AdamW kernel and one memset per tensor.
double optimizer_time_us(std::int64_t params, int tensors, const GpuSpec& gpu) {
  constexpr double kBytesPerParameter = 34;
  const double hbm_bytes_per_us = gpu.hbm_bandwidth_GBps * 1e3;  // GB/s -> B/us
  return kBytesPerParameter * static_cast<double>(params) / (hbm_bytes_per_us * kHbmEfficiency) +
         2 * tensors * kKernelOverheadUs;
}

// Parameter tensors of a layer (the optimizer's kernels): a block's two norms (four with the
// Q/K norms), four attention and three MLP projections (two for a non-gated MLP; biases are not
// counted as tensors of their own; a mixture of experts has its router, gate, up and down of
// all its experts stacked as grouped GEMMs keep them, and a shared expert's three and its gate);
// the embedding's token table (and learned positions); the head's norm and projection.
int parameter_tensors(const ModelConfig& m, LayerKind kind) {
  switch (kind) {
    case LayerKind::block:
      if (m.moe()) return 6 + (m.qk_norm ? 2 : 0) + 4 + (m.shared_ffn_hidden > 0 ? 4 : 0);
      return 6 + (m.qk_norm ? 2 : 0) + (m.mlp == MlpKind::swiglu ? 3 : 2);
    case LayerKind::embedding:
      return m.learned_positions > 0 ? 2 : 1;
    case LayerKind::head:
      return 2;
  }
  return 1;
}

LayerCost layer_cost(const ModelConfig& m, LayerKind kind, const Shape& x,
                     const AnalyticOptions& options, const GpuSpec& gpu) {
  const LayerWork w = layer_work(kind, x, options.attention);
  const double tokens = static_cast<double>(x.t);
  LayerCost c;
  c.forward_us = pass_time_us(w.forward, tokens, 1, options.attention, gpu);
  c.p1_us = pass_time_us(w.p1, tokens, 1, options.attention, gpu);
  c.p2_us = pass_time_us(w.p2, tokens, 1, options.attention, gpu);
  for (int k = 1; k <= options.max_p2_concat; ++k) {
    c.p2_concat_us[k] = pass_time_us(w.p2, tokens, k, options.attention, gpu);
  }

  std::int64_t params = 0;
  switch (kind) {
    case LayerKind::block:
      params = m.block_parameters();
      c.stash_bytes = block_stash_bytes(x, options.attention);
      c.retained_bytes = block_retained_bytes(x);
      c.send_bytes = kAct * x.t * x.h;
      break;
    case LayerKind::embedding:
      params = m.embedding_parameters();
      // Token ids (int32, as pipeplan's runtime keeps them) live from F to p2; p2 also needs dY
      // of the output.
      c.stash_bytes = kTokenIdBytes * x.t;
      c.retained_bytes = kTokenIdBytes * x.t + kAct * x.t * x.h;
      c.send_bytes = kAct * x.t * x.h;
      break;
    case LayerKind::head: {
      // A tied LM head still keeps its own copy (weights, grads, optimizer state) on the last
      // stage, as Megatron-LM does; the parameter count does not count it twice.
      params = m.head_parameters() + (m.tied_embeddings ? x.v * x.h : 0);
      // Stash: norm input 2h, LM-head input 2h, the target ids (int32) and the final norm's fp32
      // statistic (what the runtime keeps; a block's statistics are not counted), the softmax's
      // probabilities 2V per token for the loss backward (bf16: the loss upcasts to fp32 in
      // flight, and dlogits later overwrite the probabilities in place) (BERT: + dense input 2h
      // and GeLU input 2h).
      c.stash_bytes = x.t * (kAct * 2 * x.h + kTokenIdBytes + kFp32 + kAct * x.v +
                             (x.bert ? kAct * 2 * x.h : 0));
      // Retained: LM-head X (2h) and dlogits (2V) per token, and for the final norm's gain its
      // x̂ (before the gain, so not the LM-head X) and dY, 4h (BERT: + dense X and dY, 4h).
      c.retained_bytes =
          x.t * (kAct * x.h + kAct * x.v + kAct * 2 * x.h + (x.bert ? kAct * 2 * x.h : 0));
      c.send_bytes = 0;  // the last layer sends nothing onward
      break;
    }
  }
  c.param_bytes = kWeightBytes * params;
  c.grad_bytes = kGradBytes * params;
  c.optimizer_bytes = kOptimizerBytes * params;
  if (params > 0) c.optimizer_us = optimizer_time_us(params, parameter_tensors(m, kind), gpu);
  return c;
}

[[noreturn]] void fail_option(std::string_view field, std::string_view what) {
  throw FieldError(std::string(field), std::string(what));
}

// A model too large for its sizes to stay exact: the profile must hold what a file may hold
// (planner/base/limits.h), so that stage sums and memory totals stay far from overflow.
void check_cost_limits(const LayerCost& c, LayerKind kind, int mbs, int seq) {
  const auto fail = [&](const std::string& what, double limit, std::string_view unit,
                        std::string_view hint = "") {
    fail_option("micro_batch_sizes",
                limits::above_limit("at micro-batch size " + std::to_string(mbs) +
                                        " and sequence " + std::to_string(seq) + ", one " +
                                        std::string(to_string(kind)) + "'s " + what,
                                    limit, unit) +
                    std::string(hint));
  };
  // Times come from the GPU's peak and HBM bandwidth too, which a gpus.json may set low.
  constexpr std::string_view kTimeHint =
      "; a smaller --mbs or --seq, or see the GPU's peak_bf16_tflops and hbm_bandwidth_GBps in "
      "gpus.json";
  for (const double us : {c.forward_us, c.p1_us, c.p2_us}) {
    if (!(us <= limits::kMaxLayerTimeUs))
      fail("pass time", limits::kMaxLayerTimeUs, "us", kTimeHint);
  }
  if (!(c.optimizer_us <= limits::kMaxLayerTimeUs))
    fail("optimizer step time", limits::kMaxLayerTimeUs, "us", kTimeHint);
  for (const std::int64_t bytes : {c.stash_bytes, c.retained_bytes, c.param_bytes, c.grad_bytes,
                                   c.optimizer_bytes, c.send_bytes}) {
    if (bytes > limits::kMaxLayerBytes)
      fail("memory", static_cast<double>(limits::kMaxLayerBytes), "bytes");
  }
}

// Splits "a:b:c" and parses every part as a finite number; errors name `option`.
std::vector<double> parse_numbers(std::string_view text, std::size_t expected,
                                  std::string_view field, std::string_view form) {
  std::vector<double> values;
  std::size_t start = 0;
  while (true) {
    const std::size_t colon = text.find(':', start);
    const std::string_view part = text.substr(
        start, colon == std::string_view::npos ? std::string_view::npos : colon - start);
    double value = 0;
    const char* end = part.data() + part.size();
    auto [ptr, ec] = std::from_chars(part.data(), end, value);
    if (part.empty() || ec != std::errc() || ptr != end || !std::isfinite(value)) {
      fail_option(field, "'" + std::string(part) + "' is not a number (expected " +
                             std::string(form) + ")");
    }
    values.push_back(value);
    if (colon == std::string_view::npos) break;
    start = colon + 1;
  }
  if (values.size() != expected) {
    fail_option(field, "expected " + std::to_string(expected) + " values " + std::string(form) +
                           ", got " + std::to_string(values.size()));
  }
  return values;
}

}  // namespace

PassFlops analytic_flops(const ModelConfig& model, LayerKind kind, int mbs, int seq,
                         Attention attention) {
  const LayerWork w = layer_work(kind, shape_of(model, mbs, seq), attention);
  return PassFlops{w.forward.flops(), w.p1.flops(), w.p2.flops()};
}

Profile analytic_profile(const ModelConfig& model, const GpuSpec& gpu,
                         const AnalyticOptions& options) {
  if (model.family == "uniform") {
    throw Error("analytic profile: model '" + model.name + "' is synthetic (family uniform)");
  }
  // gpus.json's "cpu" entry is the CPU backend's, every figure in it nominal (its notes).
  if (gpu.name == "cpu") {
    fail_option("gpu",
                "'cpu' is pipeplan's CPU backend, whose gpus.json figures are nominal: no "
                "analytic estimate for it (measure it: pipeplan profile --backend cpu)");
  }
  check_model_limits(model);
  const int seq = options.seq == 0 ? model.seq : options.seq;
  if (seq < 1) fail_option("seq", "must be a positive integer");
  limits::check_limit("seq", seq, limits::kMaxSeq);
  // A learned position table has a row per position: no token past its last row has one.
  if (model.learned_positions > 0 && seq > model.learned_positions) {
    if (options.seq == 0) {  // the model's own default, not the user's --seq
      fail_option("model", model.name + "'s seq " + std::to_string(seq) +
                               " is above its learned_positions " +
                               std::to_string(model.learned_positions) + " (give --seq)");
    }
    fail_option("seq", std::to_string(seq) + " is above the " +
                           std::to_string(model.learned_positions) + " learned positions of " +
                           model.name);
  }
  if (options.micro_batch_sizes.empty())
    fail_option("micro_batch_sizes", "needs at least one size");
  limits::check_limit("micro_batch_sizes",
                      static_cast<std::int64_t>(options.micro_batch_sizes.size()),
                      limits::kMaxSizeCandidates);
  for (int mbs : options.micro_batch_sizes) {
    if (mbs < 1)
      fail_option("micro_batch_sizes", "micro-batch size " + std::to_string(mbs) + " must be >= 1");
    limits::check_limit("micro_batch_sizes", mbs, limits::kMaxMicroBatchSize);
    const std::int64_t tokens = std::int64_t{mbs} * seq;
    if (tokens > limits::kMaxTokensPerMicrobatch) {
      fail_option(
          "micro_batch_sizes",
          limits::above_limit("micro-batch size " + std::to_string(mbs) + " x sequence " +
                                  std::to_string(seq) + " = " + std::to_string(tokens) + " tokens",
                              static_cast<double>(limits::kMaxTokensPerMicrobatch)));
    }
  }
  if (options.max_p2_concat < 1) fail_option("max_p2_concat", "must be >= 1");
  limits::check_limit("max_p2_concat", options.max_p2_concat, limits::kMaxMicrobatches);
  if (gpu.peak_bf16_tflops <= 0 || gpu.hbm_bandwidth_GBps <= 0) {
    throw Error("analytic profile: GPU '" + gpu.name + "' needs a peak and an HBM bandwidth");
  }

  Profile p;
  p.model = model;
  p.gpu = gpu.name;
  p.seq = seq;
  p.attention = options.attention;
  p.provenance = Provenance{"analytic", gpu.name, utc_now_iso(), "", efficiency_notes()};
  p.p2p = node_link(gpu);
  for (LayerKind kind : {LayerKind::embedding, LayerKind::block, LayerKind::head}) {
    for (int mbs : options.micro_batch_sizes) {
      const LayerCost cost = layer_cost(model, kind, shape_of(model, mbs, seq), options, gpu);
      check_cost_limits(cost, kind, mbs, seq);
      p.layers[std::string(to_string(kind))][mbs] = cost;
    }
  }
  return p;
}

UniformCosts parse_uniform(std::string_view times, std::string_view memory) {
  const auto t = parse_numbers(times, 4, "uniform_times", "F:B:W:COMM in ms");
  UniformCosts c;
  c.forward_ms = t[0];
  c.p1_ms = t[1];
  c.p2_ms = t[2];
  c.comm_ms = t[3];
  if (c.forward_ms <= 0) fail_option("uniform_times", "F must be positive");
  if (c.p1_ms <= 0) fail_option("uniform_times", "B must be positive");
  if (c.p2_ms < 0) fail_option("uniform_times", "W must not be negative");
  if (c.comm_ms < 0) fail_option("uniform_times", "COMM must not be negative");
  // The limits of one layer's pass and of a link's latency, in ms.
  constexpr double kMaxMs = limits::kMaxLayerTimeUs / 1000.0;
  for (const double ms : {c.forward_ms, c.p1_ms, c.p2_ms, c.comm_ms}) {
    if (ms > kMaxMs)
      fail_option(
          "uniform_times",
          limits::above_limit(limits::general_number_beside(ms, kMaxMs) + " ms", kMaxMs, "ms"));
  }
  if (memory.empty()) return c;  // no memory model: every pass allocates nothing
  const auto m = parse_numbers(memory, 3, "uniform_memory", "F:P1:P2 in GiB");
  c.mem_f_gib = m[0];
  c.mem_p1_gib = m[1];
  c.mem_p2_gib = m[2];
  if (c.mem_f_gib < 0) fail_option("uniform_memory", "F memory must not be negative");
  constexpr double kMaxGib = static_cast<double>(limits::kMaxLayerBytes) / (1024.0 * 1024 * 1024);
  for (const double gib : {c.mem_f_gib, -c.mem_p1_gib, -c.mem_p2_gib}) {
    if (gib > kMaxGib)
      fail_option("uniform_memory",
                  limits::above_limit(limits::general_number_beside(gib, kMaxGib) + " GiB", kMaxGib,
                                      "GiB"));
  }
  if (c.mem_p1_gib > 0 || c.mem_p2_gib > 0) {
    fail_option("uniform_memory", "P1 and P2 release memory and must be <= 0");
  }
  if (std::abs(c.mem_f_gib + c.mem_p1_gib + c.mem_p2_gib) > 1e-9) {
    fail_option("uniform_memory", "F + P1 + P2 must sum to 0 (what F allocates is released)");
  }
  return c;
}

Profile uniform_profile(const UniformCosts& costs, int layers, int layers_per_stage) {
  if (layers < 1) fail_option("uniform profile", "needs at least one layer");
  if (layers_per_stage < 1) fail_option("layers_per_stage", "must be >= 1");
  constexpr double kBytesPerGiB = 1024.0 * 1024.0 * 1024.0;
  const double per = static_cast<double>(layers_per_stage);

  Profile p;
  p.model.name = "uniform";
  p.model.family = "uniform";
  p.model.layers = layers;
  p.model.seq = 1;
  p.gpu = "";
  p.seq = 1;
  p.attention = Attention::flash;
  p.provenance =
      Provenance{"uniform", "", utc_now_iso(), "", "identical stages: F, B, W per stage"};
  // Zero Bubble's T_comm: a pure latency per cross-stage edge (bandwidth 0 = infinite).
  p.p2p = P2pLink{costs.comm_ms * 1000.0, 0.0};

  LayerCost c;
  c.forward_us = costs.forward_ms * 1000.0 / per;
  c.p1_us = costs.p1_ms * 1000.0 / per;
  c.p2_us = costs.p2_ms * 1000.0 / per;
  for (int k = 1; k <= AnalyticOptions{}.max_p2_concat; ++k)
    c.p2_concat_us[k] = k * c.p2_us;
  c.stash_bytes = std::llround(costs.mem_f_gib * kBytesPerGiB / per);
  c.retained_bytes = std::llround(-costs.mem_p2_gib * kBytesPerGiB / per);
  p.layers["block"][1] = c;
  return p;
}

}  // namespace pipeplan
