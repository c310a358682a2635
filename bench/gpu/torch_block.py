#!/usr/bin/env python3
"""PyTorch's own LLaMA block on the GPU, timed like bench/cuda/bench_block.cpp times pipeplan's.

RMSNorm (F.rms_norm), fused QKV projection, RoPE (Hugging Face's rotate-half form),
F.scaled_dot_product_attention(is_causal=True), output projection, residual, RMSNorm, SwiGLU MLP
(gate, up, down), residual. bf16 weights and activations (PyTorch's gradients are bf16 too;
pipeplan accumulates fp32 gradients). LLaMA-7B shapes by default: h 4096, 32 heads, ffn 11008,
seq 2048, micro-batch sizes 1 and 2.

Forward, then backward of the output against a random dY, each repetition between CUDA events;
the median of --repetitions after --warmup untimed steps. Each SDPA backend of --sdpa is timed
in turn: "default" (PyTorch's own choice), "cudnn", "flash" (torch.nn.attention.sdpa_kernel);
one that PyTorch refuses is reported with its error.

FLOPs are PaLM's model FLOPs for one block of N = mbs*seq tokens with P parameters and
h = heads*head_dim: forward 2PN + 4hsN, backward 4PN + 8hsN (pipeplan's p1 + p2), so the step is
(6P + 12hs)N, the same count bench_block uses. MFU is that over the step's median time against
the GPU's dense bf16 peak from profiles/gpus.json (picked from the device name like pipeplan
does: H100 SXM 989.4 TFLOP/s).

Prints one JSON line. `--dry-run` checks the block's shapes, parameter count and FLOP formula on
the CPU at toy sizes (no timing), where a torch is installed.
"""
import argparse
import json
import math
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_GPUS_JSON = os.path.join(HERE, "..", "..", "profiles", "gpus.json")


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=0, help="0: as many as --heads")
    ap.add_argument("--ffn", type=int, default=11008)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--mbs", default="1,2")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--repetitions", type=int, default=20)
    ap.add_argument("--sdpa", default="default,cudnn,flash",
                    help="SDPA backends to time: default, cudnn, flash, efficient, math")
    ap.add_argument("--gpu", default="", help="gpus.json entry for the peak (default: device name)")
    ap.add_argument("--gpus-json", default=os.environ.get("PIPEPLAN_GPUS_JSON", DEFAULT_GPUS_JSON))
    ap.add_argument("--dry-run", action="store_true", help="CPU shape and FLOP checks only")
    return ap.parse_args(argv)


def palm_flops(params, hidden, seq, tokens):
    """PaLM model FLOPs of one block: (forward, backward) for `tokens` tokens."""
    attention = hidden * seq  # heads * head_dim * seq
    forward = (2 * params + 4 * attention) * tokens
    backward = (4 * params + 8 * attention) * tokens
    return forward, backward


def gpu_peak(device_name, key, gpus_json):
    """(gpus.json key, dense bf16 TFLOP/s) for the device, as runtime/emulate.cpp picks it."""
    with open(gpus_json) as f:
        gpus = json.load(f)["gpus"]
    if not key:
        name = device_name.lower()
        if "h200" in name:
            key = "h200"
        elif "h100" in name and "pcie" in name:
            key = "h100-pcie"
        elif "h100" in name:
            key = "h100-sxm"
        elif "a100" in name:
            key = "a100-80g"
        else:
            return "", 0.0
    for gpu in gpus:
        if gpu["name"] == key or key in gpu.get("aliases", []):
            return gpu["name"], float(gpu["peak_bf16_tflops"])
    raise SystemExit(f"torch_block: no gpus.json entry '{key}'")


def build_block(torch, hidden, heads, kv_heads, ffn, device, dtype):
    nn = torch.nn
    F = torch.nn.functional
    head_dim = hidden // heads

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn_norm = nn.Parameter(torch.ones(hidden))
            self.wqkv = nn.Linear(hidden, (heads + 2 * kv_heads) * head_dim, bias=False)
            self.wo = nn.Linear(hidden, hidden, bias=False)
            self.mlp_norm = nn.Parameter(torch.ones(hidden))
            self.w_gate = nn.Linear(hidden, ffn, bias=False)
            self.w_up = nn.Linear(hidden, ffn, bias=False)
            self.w_down = nn.Linear(ffn, hidden, bias=False)
            for linear in (self.wqkv, self.wo, self.w_gate, self.w_up, self.w_down):
                nn.init.normal_(linear.weight, std=0.02)

        def forward(self, x, cos, sin):
            b, s, h = x.shape
            xn = F.rms_norm(x, (h,), self.attn_norm, 1e-5)
            q, k, v = self.wqkv(xn).split(
                [heads * head_dim, kv_heads * head_dim, kv_heads * head_dim], dim=-1)
            q = q.view(b, s, heads, head_dim).transpose(1, 2)
            k = k.view(b, s, kv_heads, head_dim).transpose(1, 2)
            v = v.view(b, s, kv_heads, head_dim).transpose(1, 2)
            q, k = rope(q, cos, sin), rope(k, cos, sin)
            extra = {"enable_gqa": True} if kv_heads != heads else {}
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True, **extra)
            x1 = x + self.wo(o.transpose(1, 2).reshape(b, s, h))
            xn2 = F.rms_norm(x1, (h,), self.mlp_norm, 1e-5)
            return x1 + self.w_down(F.silu(self.w_gate(xn2)) * self.w_up(xn2))

    def rope(t, cos, sin):
        half = t.shape[-1] // 2
        rotated = torch.cat((-t[..., half:], t[..., :half]), dim=-1)
        return t * cos + rotated * sin

    return Block().to(device=device, dtype=dtype)


def rope_tables(torch, seq, head_dim, device, dtype):
    inv = 1.0 / (10000.0 ** (torch.arange(0, head_dim, 2, device=device).float() / head_dim))
    angles = torch.outer(torch.arange(seq, device=device).float(), inv)
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def sdpa_context(torch, backend):
    import contextlib
    if backend == "default":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel
    kinds = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
             "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}
    return sdpa_kernel([kinds[backend]])


def time_block(torch, block, args, kv_heads, mbs, backend):
    device = "cuda"
    dtype = torch.bfloat16
    head_dim = args.hidden // args.heads
    cos, sin = rope_tables(torch, args.seq, head_dim, device, dtype)
    gen = torch.Generator(device=device).manual_seed(11)
    x = torch.randn(mbs, args.seq, args.hidden, device=device, dtype=dtype, generator=gen)
    x.requires_grad_(True)
    dy = torch.randn(mbs, args.seq, args.hidden, device=device, dtype=dtype, generator=gen)
    events = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
    forward, backward, step = [], [], []
    torch.cuda.reset_peak_memory_stats()
    with sdpa_context(torch, backend):
        for i in range(args.warmup + args.repetitions):
            block.zero_grad(set_to_none=True)
            x.grad = None
            events[0].record()
            y = block(x, cos, sin)
            events[1].record()
            y.backward(dy)
            events[2].record()
            events[2].synchronize()
            if i < args.warmup:
                continue
            forward.append(events[0].elapsed_time(events[1]))
            backward.append(events[1].elapsed_time(events[2]))
            step.append(events[0].elapsed_time(events[2]))
    return {
        "forward_ms": statistics.median(forward),
        "backward_ms": statistics.median(backward),
        "step_ms": statistics.median(step),
        "step_min_ms": min(step),
        "step_max_ms": max(step),
        "peak_memory_bytes": torch.cuda.max_memory_allocated(),
    }


def dry_run(args):
    import torch
    hidden, heads, ffn, seq = 64, 4, 172, 32  # pipeplan's `tiny` block
    block = build_block(torch, hidden, heads, heads, ffn, "cpu", torch.float32)
    params = sum(p.numel() for p in block.parameters())
    expected = 2 * hidden + (3 * hidden) * hidden + hidden * hidden + 3 * hidden * ffn
    assert params == expected, (params, expected)
    cos, sin = rope_tables(torch, seq, hidden // heads, "cpu", torch.float32)
    x = torch.randn(2, seq, hidden, requires_grad=True)
    y = block(x, cos, sin)
    y.backward(torch.randn_like(y))
    assert y.shape == x.shape and x.grad is not None
    f, b = palm_flops(params, hidden, seq, 2 * seq)
    per_token = 6 * params + 12 * hidden * seq  # ModelConfig::flops_per_token, one layer
    assert math.isclose(f + b, per_token * 2 * seq), (f + b, per_token)
    print(json.dumps({"bench": "torch_block", "dry_run": "ok", "params": params,
                      "flops_step": f + b}))


def main(argv):
    args = parse_args(argv)
    if args.dry_run:
        dry_run(args)
        return 0
    import torch
    if not torch.cuda.is_available():
        raise SystemExit("torch_block: no CUDA device")
    kv_heads = args.kv_heads or args.heads
    device_name = torch.cuda.get_device_name(0)
    gpu_key, peak_tflops = gpu_peak(device_name, args.gpu, args.gpus_json)
    torch.manual_seed(1)
    block = build_block(torch, args.hidden, args.heads, kv_heads, args.ffn, "cuda", torch.bfloat16)
    params = sum(p.numel() for p in block.parameters())
    results = []
    for backend in [b for b in args.sdpa.split(",") if b]:
        for mbs in [int(m) for m in args.mbs.split(",") if m]:
            tokens = mbs * args.seq
            forward_flops, backward_flops = palm_flops(params, args.hidden, args.seq, tokens)
            entry = {"sdpa": backend, "mbs": mbs, "tokens": tokens}
            try:
                entry.update(time_block(torch, block, args, kv_heads, mbs, backend))
            except Exception as e:  # an SDPA backend PyTorch refuses for these shapes
                entry["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                results.append(entry)
                continue
            step_flops = forward_flops + backward_flops
            entry["flops"] = {"forward": forward_flops, "backward": backward_flops,
                              "step": step_flops}
            entry["tflops"] = {
                "forward": forward_flops / (entry["forward_ms"] * 1e-3) / 1e12,
                "backward": backward_flops / (entry["backward_ms"] * 1e-3) / 1e12,
                "step": step_flops / (entry["step_ms"] * 1e-3) / 1e12,
            }
            if peak_tflops > 0:
                entry["mfu"] = step_flops / (entry["step_ms"] * 1e-3) / (peak_tflops * 1e12)
            results.append(entry)
    line = {
        "bench": "torch_block",
        "implementation": "PyTorch eager, F.scaled_dot_product_attention, bf16 weights and grads",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "gpu": device_name,
        "gpu_key": gpu_key,
        "sms": torch.cuda.get_device_properties(0).multi_processor_count,
        "peak_bf16_tflops": peak_tflops,
        "hidden": args.hidden,
        "heads": args.heads,
        "kv_heads": kv_heads,
        "ffn_hidden": args.ffn,
        "seq": args.seq,
        "warmup": args.warmup,
        "repetitions": args.repetitions,
        "statistic": "median",
        "flops": "PaLM model FLOPs of one block: F 2PN+4hsN, backward 4PN+8hsN",
        "block_parameters": params,
        "results": results,
    }
    print(json.dumps(line), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
