// Fused causal attention (`--attention flash`) on cuDNN's scaled dot-product attention (SDPA),
// reached through NVIDIA's header-only cudnn-frontend graph API (cudnn_frontend::graph::Graph,
// sdpa / sdpa_backward). bf16 Q, K, V, O and gradients, fp32 softmax statistics, causal
// (top-left diagonal), scale 1/sqrt(D), grouped-query heads native (K and V have KV heads).
//
// Q, K and V are read in place from the fused qkv rows (B, T, (H + 2·KV)·D) through strides, and
// dQ, dK, dV are written in place into dqkv of the same layout, so no transposes or copies.
// Forward keeps the per-row logsumexp (B, H, T) fp32 instead of the (B, H, T, T) probabilities;
// p1 runs sdpa_backward from Q, K, V, O, dO and that statistic. Attention has no weights, so it
// finishes in p1.
//
// Built graphs are cached per DeviceContext (= per stage) and shape: building one runs cuDNN's
// heuristics and may compile kernels (tens of ms to seconds), so the first pass at a new shape
// is slow and later ones are not. The cuBLAS workspace of the context is reused when large
// enough (same stream, so stream order makes the sharing safe), else a transient buffer comes
// from the stage's allocator.
//
// cuDNN is loaded on first use with dlopen (cudnn-frontend's dynamic loading): `pipeplan` and the
// module link no cuDNN, so a machine without it still runs every other attention mode.
// $PIPEPLAN_CUDNN_LIBRARY names the library (default libcudnn.so.9, found by the loader's
// search path, e.g. LD_LIBRARY_PATH at a PyTorch install's nvidia/cudnn/lib). The frontend also
// dlopens the CUDA runtime; unless $CUDNN_FRONTEND_CUDART_LIB_NAME says otherwise it is pointed
// at the runtime this module was built against (libcudart.so.<major>), not whichever comes first.
//
// Where fused attention is unavailable (built without the headers, or no cuDNN 9 here), `flash`
// is refused in one line naming the reason (check_attention_available): a run or a profile asked
// for flash never measures another kernel under its name.
#pragma once

#include <string>

#include "runtime/cuda/context.h"
#include "runtime/cuda/kernels.h"
#include "runtime/layer_spec.h"

namespace pipeplan::cuda {

// Whether this module was built with the cudnn-frontend headers (else flash cannot be fused).
bool fused_attention_built();

// Empty when fused attention can run here; else why not, in one line: the module was built
// without the cudnn-frontend headers, or libcudnn could not be loaded, or is older than 9.0.
std::string fused_attention_unavailable();

// "cuDNN SDPA, cuDNN 9.19.0, cudnn-frontend 1.32.0" when available, else "".
std::string fused_attention_description();

// Throws FieldError("attention", …) when `attention` is flash and fused attention is unavailable
// here, naming why and the unfused alternative; otherwise does nothing.
void check_attention_available(Attention attention);

// out = softmax(scale·Q·Kᵀ, causal)·V per head; lse = the rows' log Σ exp(scale·q·k).
// Throws Error naming the shape when cuDNN supports no engine for it (e.g. D not a multiple of
// 8, or D > 256).
void sdpa_forward(DeviceContext& ctx,
                  bf16* out,        // (B, T, H·D)
                  float* lse,       // (B, H, T)
                  const bf16* qkv,  // (B, T, (H + 2·KV)·D) after RoPE
                  const AttentionDims& dims);

// dqkv (overwritten) = the gradient of the attention core for dout, from the forward's out, lse.
void sdpa_backward(DeviceContext& ctx,
                   bf16* dqkv,        // (B, T, (H + 2·KV)·D)
                   const bf16* dout,  // (B, T, H·D)
                   const bf16* qkv,   // (B, T, (H + 2·KV)·D) after RoPE
                   const bf16* out,   // (B, T, H·D)
                   const float* lse,  // (B, H, T)
                   const AttentionDims& dims);

}  // namespace pipeplan::cuda
