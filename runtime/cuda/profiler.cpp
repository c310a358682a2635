#include "runtime/cuda/profiler.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <span>
#include <sstream>

#include "planner/base/limits.h"
#include "profiles/gpu.h"
#include "runtime/cuda/context.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/green_context.h"
#include "runtime/cuda/load_profile.h"
#include "runtime/cuda/op_timing.h"
#include "runtime/emulate.h"
#include "runtime/progress.h"
#include "runtime/random.h"

namespace pipeplan::cuda {

namespace {

// p2p: a device-to-device copy on one GPU (peer copy 0 → 1 when `devices` is two or more, with
// peer access enabled where the GPUs allow it: without it CUDA stages the copy through the
// host): bandwidth from 1 GiB, latency from 4-byte copies.
P2pLink measure_p2p(DeviceContext& ctx, int devices, const GpuProfileOptions& options) {
  const std::int64_t big = std::int64_t{256} << 20;
  const Tensor src = ctx.zeros({big}, DType::i32);
  std::optional<Tensor> dst;
  std::unique_ptr<void, void (*)(void*)> peer(nullptr, [](void* p) { cudaFree(p); });
  if (devices >= 2) {
    int can_access = 0;
    CUDA_CHECK(cudaDeviceCanAccessPeer(&can_access, 0, 1));
    if (can_access != 0) {
      const cudaError_t enabled = cudaDeviceEnablePeerAccess(1, 0);  // device 0 is current
      if (enabled == cudaErrorPeerAccessAlreadyEnabled) {
        static_cast<void>(cudaGetLastError());  // not left for the next check to find
      } else {
        CUDA_CHECK(enabled);
      }
    }
    void* memory = nullptr;
    CUDA_CHECK(cudaSetDevice(1));
    const cudaError_t allocated = cudaMalloc(&memory, static_cast<std::size_t>(big) * 4);
    CUDA_CHECK(cudaSetDevice(0));
    CUDA_CHECK(allocated);
    peer.reset(memory);
  } else {
    dst = ctx.zeros({big}, DType::i32);
  }
  void* target = peer != nullptr ? peer.get() : dst->data();
  const auto copy = [&](std::int64_t bytes) {
    if (peer != nullptr) {
      CUDA_CHECK(cudaMemcpyPeerAsync(target, 1, src.data(), 0, static_cast<std::size_t>(bytes),
                                     ctx.stream()));
    } else {
      CUDA_CHECK(cudaMemcpyAsync(target, src.data(), static_cast<std::size_t>(bytes),
                                 cudaMemcpyDeviceToDevice, ctx.stream()));
    }
  };
  const OpTiming bulk =
      time_op(ctx.stream(), options.warmup, options.repetitions, {}, [&] { copy(big * 4); });
  const OpTiming tiny =
      time_op(ctx.stream(), options.warmup, options.repetitions, {}, [&] { copy(4); });
  return {tiny.median_us, static_cast<double>(big * 4) / (bulk.median_us * 1e3)};
}

// The working memory of `pass` (run once, synchronised): the allocator's peak while it ran
// minus the larger of its level before and after (LayerCost::forward_work_bytes).
std::int64_t work_bytes(CudaBackend& backend, const std::function<void()>& pass) {
  DeviceAllocator& allocator = backend.context().allocator();
  backend.synchronize();
  const std::int64_t before = allocator.stats().current_bytes;
  allocator.reset_peak();
  pass();
  backend.synchronize();
  const AllocatorStats after = allocator.stats();
  return after.peak_bytes - std::max(before, after.current_bytes);
}

LayerCost measure_kind(CudaBackend& backend, LayerKind kind, int mbs, int seq,
                       const GpuProfileOptions& options, std::ostringstream& notes) {
  const ModelConfig& model = options.model;
  DeviceAllocator& allocator = backend.context().allocator();
  cudaStream_t stream = backend.context().stream();
  LayerParams layer = backend.init_layer(model, kind, kind == LayerKind::block ? 1 : 0, 1);
  const LayerInputs in = make_layer_inputs(backend, kind, model, mbs, seq);
  LayerCost cost;
  ForwardResult fwd;
  const auto forward = [&] { fwd = backend.forward(layer, in.input, in.targets); };
  const OpTiming f = time_op(
      stream, options.warmup, options.repetitions, [&] { fwd = {}; }, forward);
  backend.synchronize();
  // Bytes from the allocator: what one forward leaves allocated, minus its output; plus inputs
  // the stash keeps (the embedding's token ids), allocated before the forward but held by the
  // micro-batch until its backward like the rest.
  fwd = {};
  const std::int64_t before = allocator.stats().current_bytes;
  cost.forward_work_bytes = work_bytes(backend, forward);
  cost.stash_bytes = allocator.stats().current_bytes - before - fwd.output.bytes();
  const auto& entries = fwd.stash.entries();
  for (const Tensor& input : {in.input, in.targets}) {
    const bool kept = input.defined() &&
                      std::any_of(entries.begin(), entries.end(),
                                  [&](const auto& e) { return e.second.data() == input.data(); });
    if (kept) cost.stash_bytes += input.bytes();
  }
  BackwardP1Result p1;
  const OpTiming b1 = time_op(
      stream, options.warmup, options.repetitions,
      [&] {
        p1 = {};
        forward();
      },
      [&] { p1 = backend.backward_p1(layer, std::move(fwd.stash), in.dy); });
  backend.synchronize();
  p1 = {};
  forward();
  cost.p1_work_bytes =
      work_bytes(backend, [&] { p1 = backend.backward_p1(layer, std::move(fwd.stash), in.dy); });
  cost.retained_bytes = p1.retained.bytes();
  std::vector<BackwardP1Result> sets(1);
  sets[0] = std::move(p1);
  for (int k = 1; k <= options.max_concat; ++k) {
    while (static_cast<int>(sets.size()) < k) {
      forward();
      sets.push_back(backend.backward_p1(layer, std::move(fwd.stash), in.dy));
    }
    std::vector<const Retained*> view;
    view.reserve(sets.size());
    for (const BackwardP1Result& set : sets)
      view.push_back(&set.retained);
    const OpTiming b2 = time_op(stream, options.warmup, options.repetitions, {},
                                [&] { backend.backward_p2(layer, view); });
    cost.p2_concat_us[k] = b2.median_us;
    cost.p2_work_bytes[k] = work_bytes(backend, [&] { backend.backward_p2(layer, view); });
    if (k == 1) {
      cost.p2_us = b2.median_us;
      notes << to_string(kind) << " mbs " << mbs << ": F " << f.median_us << " us [" << f.min_us
            << ", " << f.max_us << "], p1 " << b1.median_us << " [" << b1.min_us << ", "
            << b1.max_us << "], p2 " << b2.median_us << " [" << b2.min_us << ", " << b2.max_us
            << "]; ";
    }
  }
  // The optimizer step over the layer, as the runtime's optimizer node runs it: AdamW, then the
  // gradients zeroed (both memory-bound; independent of the micro-batch size).
  int step = 0;
  const OpTiming opt = time_op(stream, options.warmup, options.repetitions, {}, [&] {
    backend.adamw_step(layer, AdamWConfig{}, ++step);
    backend.zero_grads(layer);
  });
  cost.optimizer_us = opt.median_us;
  notes << to_string(kind) << " optimizer step " << opt.median_us << " us; ";
  cost.forward_us = f.median_us;
  cost.p1_us = b1.median_us;
  cost.param_bytes = layer.param_bytes();
  cost.grad_bytes = layer.grad_bytes();
  cost.optimizer_bytes = backend.optimizer_bytes(layer);
  cost.send_bytes = kind == LayerKind::head ? 0 : std::int64_t{mbs} * seq * model.hidden * 2;
  return cost;
}

// The overlap efficiency (profiles/overlap.h) of a block's forward on the stage's stream beside
// another block's full backward (p1 then p2) on a second stream of the same SMs: each alone, then
// both at once, as dualpipe-v's overlapped pairs run them.
OverlapModel measure_overlap(CudaBackend& backend, CudaBackend& side, int mbs, int seq,
                             const GpuProfileOptions& options) {
  const ModelConfig& model = options.model;
  LayerParams forward_layer = backend.init_layer(model, LayerKind::block, 1, 1);
  LayerParams backward_layer = side.init_layer(model, LayerKind::block, 2, 1);
  const LayerInputs in_f = make_layer_inputs(backend, LayerKind::block, model, mbs, seq);
  const LayerInputs in_b = make_layer_inputs(side, LayerKind::block, model, mbs, seq);
  ForwardResult fwd, stashed;
  BackwardP1Result p1;
  const auto forward = [&] { fwd = backend.forward(forward_layer, in_f.input, in_f.targets); };
  const auto backward = [&] {
    p1 = side.backward_p1(backward_layer, std::move(stashed.stash), in_b.dy);
    const Retained* retained = &p1.retained;
    side.backward_p2(backward_layer, std::span<const Retained* const>(&retained, 1));
  };
  // Untimed: a fresh stash for the backward, and both streams idle.
  const auto prepare = [&] {
    fwd = {};
    p1 = {};
    stashed = side.forward(backward_layer, in_b.input, in_b.targets);
    side.synchronize();
    backend.synchronize();
  };
  cudaStream_t a = backend.context().stream(), b = side.context().stream();
  const OpTiming f = time_op(a, options.warmup, options.repetitions, prepare, forward);
  const OpTiming full_b = time_op(b, options.warmup, options.repetitions, prepare, backward);
  const OpTiming pair =
      time_pair(a, b, options.warmup, options.repetitions, prepare, forward, backward);
  prepare();
  const double efficiency = overlap_efficiency_from(f.median_us, full_b.median_us, pair.median_us);
  std::ostringstream source;
  source << "measured: a block's forward beside another block's full backward, mbs " << mbs
         << ", on two streams of " << (options.sm_partition > 0 ? "one SM partition" : "the GPU")
         << ": F " << f.median_us << " us, B " << full_b.median_us << " us, together "
         << pair.median_us << " us";
  return {efficiency, source.str()};
}

}  // namespace

Profile measure_profile(const GpuProfileOptions& options) {
  const int devices = cuda_device_count();
  if (devices == 0) throw Error("no CUDA device found");
  if (options.max_concat < 1) throw FieldError("max_p2_concat", "must be at least 1");
  limits::check_limit("max_p2_concat", options.max_concat, limits::kMaxMeasuredP2Concat);
  if (options.repetitions < 1) throw Error("profile repetitions must be at least 1");
  limits::check_limit("micro_batch_sizes",
                      static_cast<std::int64_t>(options.micro_batch_sizes.size()),
                      limits::kMaxSizeCandidates);
  // The answers are timed at a shape's first call, which must be an untimed one.
  if (options.gemm_candidates > 1 && options.warmup < 1) {
    throw Error("profile: timing GEMM answers needs at least one warm-up run");
  }
  CUDA_CHECK(cudaSetDevice(0));
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  // Before any measurement: a profile whose GPU the planner does not know could not be used.
  const GpuSpec spec = gpu_for_device(prop.name, options.gpu);
  std::optional<GreenContext> green;
  if (options.sm_partition > 0) green.emplace(0, options.sm_partition);
  CudaBackend backend(
      {options.attention, green ? green->stream() : nullptr, options.gemm_candidates});

  Profile profile;
  profile.model = options.model;
  profile.seq = options.seq > 0 ? options.seq : options.model.seq;
  profile.attention = options.attention;
  profile.gpu = spec.name;
  std::ostringstream notes;
  notes << "cuda backend, bf16, median of " << options.repetitions << " after " << options.warmup
        << " warm-up; [min, max] per pass: ";
  notes << "(" << backend.note() << ") ";
  if (green) notes << "(EMULATED stage: green context of " << green->sm_count() << " SMs) ";
  const std::vector<LayerKind> kinds = {LayerKind::embedding, LayerKind::block, LayerKind::head};
  const int load_parts = (options.sustain_seconds > 0 ? 1 : 0) + (green ? 1 : 0);
  Progress progress(options.progress,
                    static_cast<int>(kinds.size() * options.micro_batch_sizes.size()) + 2 +
                        (options.micro_batch_sizes.empty() ? 0 : load_parts));
  for (const int mbs : options.micro_batch_sizes) {
    for (const LayerKind kind : kinds) {
      const std::string label = std::string(to_string(kind)) + " mbs " + std::to_string(mbs);
      progress.start(label);
      profile.layers[std::string(to_string(kind))][mbs] =
          measure_kind(backend, kind, mbs, profile.seq, options, notes);
      backend.context().allocator().release_cached();
      progress.step(label);
    }
  }
  // An emulated stage's transfers are copies within the GPU, on its green context's SMs: that
  // copy is timed (on the backend's stream, the green context's), never a peer copy to another
  // GPU, which would also make GPU 1 current in this thread in place of the green context.
  progress.start("p2p");
  profile.p2p = measure_p2p(backend.context(), green ? 1 : devices, options);
  progress.step("p2p");
  progress.start("overlapped F&B");
  if (!options.micro_batch_sizes.empty()) {
    // A second stream on the same SMs (the green context's, when emulating a stage).
    CudaBackend side(
        {options.attention, green ? green->create_stream() : nullptr, options.gemm_candidates});
    profile.overlap =
        measure_overlap(backend, side, options.micro_batch_sizes.front(), profile.seq, options);
    backend.context().allocator().release_cached();
  }
  progress.step("overlapped F&B");
  // Under load: the sustained clock (whole GPU, or every emulated stage at once) and, for an
  // emulated stage's profile, the contention between the stages sharing the GPU.
  const int stages = green ? prop.multiProcessorCount / green->sm_count() : 0;
  if (!options.micro_batch_sizes.empty() && (options.sustain_seconds > 0 || stages > 0)) {
    LoadRun run;
    run.mbs = options.micro_batch_sizes.front();
    run.seq = profile.seq;
    run.stages = stages;
    run.sm_per_stage = green ? green->sm_count() : 0;
    run.progress = [&](const std::string& label) { progress.step(label); };
    // measure_load makes green contexts of its own, and making them sets the device's primary
    // context current: the profiled stage's context is current again afterwards (also after an
    // error), so that the backend's stream, handles and workspace are torn down in it.
    struct Restore {
      const GreenContext* stage;
      ~Restore() {
        if (stage != nullptr) stage->make_current();
      }
    } restore{green ? &*green : nullptr};
    const LoadProfileResult measured = measure_load(options, run);
    if (measured.contention) profile.contention = *measured.contention;
    if (measured.sustained) {
      profile.sustained_load = measured.sustained;
      if (measured.sustained->model.factor > 0) {
        profile.contention.sustained = measured.sustained->model;
        if (profile.contention.source.empty())
          profile.contention.source = measured.sustained->source;
      }
    }
  }
  profile.provenance = {"measured", prop.name, utc_now_iso(), options.command, notes.str()};
  return profile;
}

}  // namespace pipeplan::cuda
