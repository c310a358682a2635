#include "runtime/cpu/profiler.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "planner/base/error.h"
#include "planner/base/limits.h"
#include "planner/base/stats.h"
#include "profiles/gpu.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/host_tensor.h"
#include "runtime/layer_inputs.h"
#include "runtime/layer_spec.h"
#include "runtime/progress.h"
#include "runtime/transport.h"

namespace pipeplan::cpu {

namespace {

using Clock = std::chrono::steady_clock;

struct HostTiming {
  double median_us = 0, min_us = 0, max_us = 0;
};

// `warmup` untimed runs of `timed`, then `repetitions` timed ones; `setup` (may be empty) runs
// untimed before each.
HostTiming time_host(int warmup, int repetitions, const std::function<void()>& setup,
                     const std::function<void()>& timed) {
  for (int i = 0; i < warmup; ++i) {
    if (setup) setup();
    timed();
  }
  std::vector<double> times;
  times.reserve(static_cast<std::size_t>(repetitions));
  for (int i = 0; i < repetitions; ++i) {
    if (setup) setup();
    const auto start = Clock::now();
    timed();
    times.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
  }
  const auto [lo, hi] = std::minmax_element(times.begin(), times.end());
  return {median(times), *lo, *hi};
}

LayerCost measure_kind(CpuBackend& backend, LayerKind kind, int mbs, int seq,
                       const CpuProfileOptions& options, std::ostringstream& notes) {
  const ModelConfig& model = options.model;
  const int warmup = options.warmup, reps = options.repetitions;
  LayerParams layer = backend.init_layer(model, kind, kind == LayerKind::block ? 1 : 0, 1);
  const LayerInputs in = make_layer_inputs(backend, kind, model, mbs, seq);
  LayerCost cost;
  ForwardResult fwd;
  const auto forward = [&] { fwd = backend.forward(layer, in.input, in.targets); };
  const HostTiming f = time_host(
      warmup, reps, [&] { fwd = {}; }, forward);
  // The bytes the executor counts for a micro-batch (runtime/device_worker.cpp): its stash from
  // F to p1, its retained set from p1 to p2, and the output it sends.
  cost.stash_bytes = fwd.stash.bytes();
  cost.send_bytes = kind == LayerKind::head ? 0 : fwd.output.bytes();
  BackwardP1Result p1;
  const HostTiming b1 = time_host(
      warmup, reps,
      [&] {
        p1 = {};
        forward();
      },
      [&] { p1 = backend.backward_p1(layer, std::move(fwd.stash), in.dy); });
  cost.retained_bytes = p1.retained.bytes();
  std::vector<BackwardP1Result> sets;
  sets.push_back(std::move(p1));
  for (int k = 1; k <= options.max_concat; ++k) {
    while (static_cast<int>(sets.size()) < k) {
      forward();
      sets.push_back(backend.backward_p1(layer, std::move(fwd.stash), in.dy));
    }
    std::vector<const Retained*> view;
    view.reserve(sets.size());
    for (const BackwardP1Result& set : sets)
      view.push_back(&set.retained);
    const HostTiming b2 = time_host(warmup, reps, {}, [&] { backend.backward_p2(layer, view); });
    cost.p2_concat_us[k] = b2.median_us;
    if (k == 1) {
      cost.p2_us = b2.median_us;
      notes << to_string(kind) << " mbs " << mbs << ": F " << f.median_us << " us [" << f.min_us
            << ", " << f.max_us << "], p1 " << b1.median_us << " [" << b1.min_us << ", "
            << b1.max_us << "], p2 " << b2.median_us << " [" << b2.min_us << ", " << b2.max_us
            << "]; ";
    }
  }
  // The optimizer step over the layer, as the executor's optimizer node runs it: AdamW, then the
  // gradients zeroed (independent of the micro-batch size).
  int step = 0;
  const HostTiming opt = time_host(warmup, reps, {}, [&] {
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
  return cost;
}

// The in-process transport between two stage threads, as `pipeplan run --backend cpu` uses it in
// one process: a message sent on one thread and taken on another, which wakes for it. Measured
// as round trips to a thread that echoes a 4-byte message back: the latency is half a round trip
// of 4 bytes, and the bandwidth the extra time a 64 MiB message takes one way.
P2pLink measure_link(const CpuProfileOptions& options) {
  InProcessTransport transport;
  const auto message = [](std::int64_t floats) {
    Message m;
    m.tag = "probe";
    m.tensors.emplace_back("x", host_zeros({floats}, DType::f32));
    m.bytes = m.payload_bytes();
    return m;
  };
  const std::chrono::milliseconds timeout(60000);
  const Message tiny = message(1);
  const auto round_trips = [&](const Message& out, int count) {
    // Either side's failure (a timed-out receive) ends both and comes back as one error: the
    // echo thread's own is handed over, and the main side cancels the transport before joining.
    std::exception_ptr echo_error;
    std::thread echo([&] {
      try {
        for (int i = 0; i < count; ++i) {
          static_cast<void>(transport.recv(1, 0, Channel::pipeline, "probe", timeout));
          transport.send(1, 0, Channel::pipeline, tiny);
        }
      } catch (...) {
        echo_error = std::current_exception();
        transport.cancel();
      }
    });
    std::vector<double> times;
    try {
      for (int i = 0; i < count; ++i) {
        const auto start = Clock::now();
        transport.send(0, 1, Channel::pipeline, out);
        static_cast<void>(transport.recv(0, 1, Channel::pipeline, "probe", timeout));
        times.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
      }
    } catch (const Cancelled&) {
      echo.join();  // the echo side failed first: its error is the cause
      if (echo_error) std::rethrow_exception(echo_error);
      throw;
    } catch (...) {
      transport.cancel();
      echo.join();
      throw;
    }
    echo.join();
    if (echo_error) std::rethrow_exception(echo_error);
    const std::size_t warm =
        std::min<std::size_t>(static_cast<std::size_t>(options.warmup), times.size() - 1);
    return median(
        std::vector<double>(times.begin() + static_cast<std::ptrdiff_t>(warm), times.end()));
  };
  constexpr std::int64_t kBigFloats = std::int64_t{16} << 20;  // 64 MiB
  const double tiny_us = round_trips(tiny, options.warmup + options.repetitions);
  const double big_us =
      round_trips(message(kBigFloats), options.warmup + std::min(options.repetitions, 5));
  const double bytes = static_cast<double>(kBigFloats) * 4;
  return {tiny_us / 2, bytes / (std::max(big_us - tiny_us, 1.0) * 1e3)};
}

}  // namespace

std::string host_cpu_name() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string name = line.substr(colon + 1);
    name.erase(0, name.find_first_not_of(" \t"));
    return name;
  }
  return "";
}

namespace {

// The options' own bounds; returns the sequence length.
int checked_seq(const CpuProfileOptions& options) {
  if (options.max_concat < 1) throw FieldError("max_p2_concat", "must be at least 1");
  limits::check_limit("max_p2_concat", options.max_concat, limits::kMaxMeasuredP2Concat);
  const int seq = options.seq > 0 ? options.seq : options.model.seq;
  limits::check_limit("micro_batch_sizes",
                      static_cast<std::int64_t>(options.micro_batch_sizes.size()),
                      limits::kMaxSizeCandidates);
  for (const int mbs : options.micro_batch_sizes) {
    if (mbs < 1) throw FieldError("micro_batch_sizes", "must be at least 1");
    limits::check_limit("micro_batch_sizes", mbs, limits::kMaxMicroBatchSize);
    if (std::int64_t{mbs} * seq > limits::kMaxTokensPerMicrobatch) {
      throw FieldError(
          "micro_batch_sizes",
          "micro-batch size " + std::to_string(mbs) + " x sequence " + std::to_string(seq) + " = " +
              std::to_string(std::int64_t{mbs} * seq) + " tokens is above the limit of " +
              std::to_string(limits::kMaxTokensPerMicrobatch) + " (docs/reference/limits.md)");
    }
  }
  if (options.repetitions < 1) throw Error("profile repetitions must be at least 1");
  if (options.micro_batch_sizes.empty()) throw Error("profile: no micro-batch size given");
  // What the backend cannot run is refused before anything is measured, not at the first block.
  check_model_supported(options.model, "backend cpu");
  check_sequence_supported(options.model, seq);
  return seq;
}

}  // namespace

std::int64_t estimate_host_bytes(const CpuProfileOptions& options) {
  const int seq = checked_seq(options);
  const ModelConfig& model = options.model;
  // The runtime's own tensor lists (runtime/layer_spec.h), in the CPU backend's f32.
  constexpr std::int64_t kF32 = 4;
  const auto bytes_of = [](const auto& specs) {
    std::int64_t elements = 0;
    for (const auto& spec : specs)
      elements += shape_numel(spec.shape);
    return kF32 * elements;
  };
  constexpr std::int64_t kStatesPerParameter = 4;  // weight, gradient, AdamW m and v
  std::int64_t most = 0;
  for (const LayerKind kind : {LayerKind::embedding, LayerKind::block, LayerKind::head}) {
    const std::int64_t parameters = bytes_of(param_specs(model, kind)) * kStatesPerParameter;
    for (const int mbs : options.micro_batch_sizes) {
      const std::int64_t stash = bytes_of(stash_specs(model, kind, mbs, seq));
      const std::int64_t retained = bytes_of(retained_specs(model, kind, mbs, seq));
      // A layer's input and output (and dX, the input's gradient p1 makes): B x T x C.
      const std::int64_t hidden = kF32 * mbs * seq * model.hidden;
      // One layer at a time (measure_kind): its state, a forward's stash beside the one p1
      // consumes, up to max_concat p1 results (each a retained set and its dX), inputs and outputs.
      const std::int64_t activations =
          2 * stash + options.max_concat * (retained + hidden) + 3 * hidden;
      most = std::max(most, parameters + activations);
    }
  }
  constexpr std::int64_t kLinkProbeBytes = std::int64_t{2} * (64 << 20);  // measure_link's message
  return most + kLinkProbeBytes;
}

Profile measure_profile(const CpuProfileOptions& options) {
  const int seq = checked_seq(options);
  CpuBackend backend;
  Profile profile;
  profile.model = options.model;
  profile.seq = seq;
  // The CPU backend materialises the attention probabilities (runtime/cpu/attention.h).
  profile.attention = Attention::materialized;
  profile.gpu = kCpuDeviceName;
  std::ostringstream notes;
  notes << "cpu backend (" << backend.name() << ", one thread per plan device), median of "
        << options.repetitions << " after " << options.warmup
        << " warm-up; working memory not measured (no allocator to count: 0); [min, max] per "
           "pass: ";
  const std::vector<LayerKind> kinds = {LayerKind::embedding, LayerKind::block, LayerKind::head};
  Progress progress(options.progress,
                    static_cast<int>(kinds.size() * options.micro_batch_sizes.size()) + 1);
  for (const int mbs : options.micro_batch_sizes) {
    for (const LayerKind kind : kinds) {
      const std::string label = std::string(to_string(kind)) + " mbs " + std::to_string(mbs);
      progress.start(label);
      profile.layers[std::string(to_string(kind))][mbs] =
          measure_kind(backend, kind, mbs, profile.seq, options, notes);
      progress.step(label);
    }
  }
  progress.start("link");
  profile.p2p = measure_link(options);
  progress.step("link");
  notes << "link: in-process transport, " << profile.p2p.latency_us << " us, "
        << profile.p2p.bandwidth_GBps << " GB/s";
  // An overlapped pair's two ops run one after the other on the CPU backend (Backend's default
  // begin_pair/end_pair): the sequential default, stated.
  profile.overlap = {0, "cpu backend: a pair's ops run one after the other"};
  const std::string cpu_name = host_cpu_name();
  profile.provenance = {"measured", cpu_name.empty() ? std::string("host CPU") : cpu_name,
                        utc_now_iso(), options.command, notes.str()};
  return profile;
}

}  // namespace pipeplan::cpu
