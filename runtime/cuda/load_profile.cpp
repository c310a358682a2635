#include "runtime/cuda/load_profile.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <map>
#include <memory>
#include <span>
#include <sstream>
#include <thread>
#include <vector>

#include "planner/base/error.h"
#include "planner/base/stats.h"
#include "runtime/cuda/clock_sampler.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/green_context.h"
#include "runtime/random.h"

namespace pipeplan::cuda {

namespace {

using Clock = std::chrono::steady_clock;

enum class LoadOp { F, P1, P2 };

const char* name_of(LoadOp op) {
  switch (op) {
    case LoadOp::F:
      return "F";
    case LoadOp::P1:
      return "P1";
    case LoadOp::P2:
      return "P2";
  }
  return "?";
}

// One green context (or the whole GPU) with a block, its inputs and what its passes leave.
struct LoadStage {
  GreenContext* green = nullptr;
  std::unique_ptr<CudaBackend> backend;
  LayerParams layer;
  LayerInputs in;
  ForwardResult fwd;
  BackwardP1Result p1;  // its retained inputs feed p2
  cudaEvent_t reference = nullptr;

  LoadStage() = default;
  LoadStage(const LoadStage&) = delete;
  LoadStage& operator=(const LoadStage&) = delete;
  // The tensors, the event and the backend's handles go with the context they were made in
  // current (as the run's stages do, runtime/cuda/cuda_run.cpp).
  ~LoadStage() {
    try {
      const ScopedContext current(context());
      teardown();
    } catch (const Error&) {  // the push failed: tear down in whatever context is current
      teardown();
    }
  }

  CUcontext context() const { return green != nullptr ? green->context() : nullptr; }
  cudaStream_t stream() { return backend->context().stream(); }

 private:
  void teardown() {
    p1 = {};
    fwd = {};
    in = {};
    layer = {};
    if (reference != nullptr) cudaEventDestroy(reference);
    reference = nullptr;
    backend.reset();
  }
};

// An op queued on a stage, between two events.
struct QueuedOp {
  std::size_t stage = 0;
  LoadOp op = LoadOp::F;
  bool counted = false;  // a burst's timed op (not a warm-up or a p1's untimed forward)
  cudaEvent_t start = nullptr, end = nullptr;
};

class LoadRunner {
 public:
  LoadRunner(const GpuProfileOptions& profile, const LoadRun& run,
             std::vector<std::unique_ptr<GreenContext>>& greens) {
    const int count = std::max(run.stages, 1);
    for (int s = 0; s < count; ++s) {
      auto stage = std::make_unique<LoadStage>();
      stage->green = greens.empty() ? nullptr : greens[static_cast<std::size_t>(s)].get();
      const ScopedContext current(stage->context());
      stage->backend = std::make_unique<CudaBackend>(CudaBackendOptions{
          profile.attention, stage->green != nullptr ? stage->green->stream() : nullptr,
          profile.gemm_candidates});
      stage->layer = stage->backend->init_layer(profile.model, LayerKind::block, s + 1, 1);
      stage->in =
          make_layer_inputs(*stage->backend, LayerKind::block, profile.model, run.mbs, run.seq);
      stage->reference = create_event_for(stage->stream(), cudaEventDefault);
      stages_.push_back(std::move(stage));
    }
  }
  ~LoadRunner() { release(); }
  LoadRunner(const LoadRunner&) = delete;
  LoadRunner& operator=(const LoadRunner&) = delete;

  int devices() const { return static_cast<int>(stages_.size()); }

  void synchronize() {
    for (const auto& stage : stages_) {
      const ScopedContext current(stage->context());
      stage->backend->synchronize();
    }
  }

  // Every stage idle, then each one's reference event: the ops' clock starts here.
  Clock::time_point mark_start() {
    synchronize();
    release();
    for (const auto& stage : stages_) {
      const ScopedContext current(stage->context());
      CUDA_CHECK(cudaEventRecord(stage->reference, stage->stream()));
    }
    return Clock::now();
  }

  // Queues `op` on stage `s` between two events (p1 takes the stash of the stage's last forward,
  // p2 the retained inputs of its last p1).
  const QueuedOp& queue(std::size_t s, LoadOp op, bool counted) {
    LoadStage& stage = *stages_[s];
    const ScopedContext current(stage.context());
    QueuedOp q{s, op, counted, create_event_for(stage.stream(), cudaEventDefault), nullptr};
    queued_.push_back(q);
    queued_.back().end = create_event_for(stage.stream(), cudaEventDefault);
    CUDA_CHECK(cudaEventRecord(queued_.back().start, stage.stream()));
    switch (op) {
      case LoadOp::F:
        stage.fwd = stage.backend->forward(stage.layer, stage.in.input, stage.in.targets);
        break;
      case LoadOp::P1:
        stage.p1 = stage.backend->backward_p1(stage.layer, std::move(stage.fwd.stash), stage.in.dy);
        break;
      case LoadOp::P2: {
        const Retained* retained = &stage.p1.retained;
        stage.backend->backward_p2(stage.layer, std::span<const Retained* const>(&retained, 1));
        break;
      }
    }
    CUDA_CHECK(cudaEventRecord(queued_.back().end, stage.stream()));
    return queued_.back();
  }

  // Everything queued, waited for: the timed ops from the reference events, and per op whether
  // it counts.
  struct Collected {
    std::vector<TimedOp> ops;
    std::vector<bool> counted;
  };
  // Waits for everything queued and returns it, forgetting it.
  Collected collect() {
    synchronize();
    Collected out;
    out.ops.reserve(queued_.size());
    out.counted.reserve(queued_.size());
    for (const QueuedOp& q : queued_) {
      const LoadStage& stage = *stages_[q.stage];
      const ScopedContext current(stage.context());
      const cudaEvent_t reference = stage.reference;
      float start_ms = 0, end_ms = 0;
      CUDA_CHECK(cudaEventElapsedTime(&start_ms, reference, q.start));
      CUDA_CHECK(cudaEventElapsedTime(&end_ms, reference, q.end));
      out.ops.push_back({name_of(q.op), 1000.0 * start_ms, 1000.0 * end_ms});
      out.counted.push_back(q.counted);
    }
    release();
    return out;
  }

  void wait_for(const QueuedOp& q) { CUDA_CHECK(cudaEventSynchronize(q.end)); }

 private:
  void release() noexcept {
    for (const QueuedOp& q : queued_) {
      cudaEventDestroy(q.start);  // no throwing: also run by the destructor
      cudaEventDestroy(q.end);
    }
    queued_.clear();
  }

  std::vector<std::unique_ptr<LoadStage>> stages_;
  std::deque<QueuedOp> queued_;  // stable addresses for the references queue() returns
};

void idle(double seconds) {
  if (seconds > 0) std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
}

// Forward, p1 and p2 back to back on every stage for `sustain_seconds` (and at least
// kMinOpsPerType cycles), at most kDepth cycles queued ahead of the GPU on each.
SustainedMeasurement sustained_run(LoadRunner& runner, const GpuProfileOptions& profile,
                                   const LoadRun& run) {
  constexpr std::size_t kDepth = 3;
  idle(profile.cooldown_seconds);
  ClockSampler sampler(0);
  const Clock::time_point origin = runner.mark_start();
  sampler.start(origin);
  const auto until = origin + std::chrono::duration_cast<Clock::duration>(
                                  std::chrono::duration<double>(profile.sustain_seconds));
  std::deque<const QueuedOp*> cycle_ends;
  // Also past `until` until each stage has run enough cycles to fit (a short run on a slow op).
  for (int cycles = 0; Clock::now() < until || cycles < kMinOpsPerType; ++cycles) {
    while (cycle_ends.size() >= kDepth * static_cast<std::size_t>(runner.devices())) {
      runner.wait_for(*cycle_ends.front());
      cycle_ends.pop_front();
    }
    for (std::size_t s = 0; s < static_cast<std::size_t>(runner.devices()); ++s) {
      runner.queue(s, LoadOp::F, true);
      runner.queue(s, LoadOp::P1, true);
      cycle_ends.push_back(&runner.queue(s, LoadOp::P2, true));
    }
  }
  const std::vector<TimedOp> ops = runner.collect().ops;
  const std::vector<ClockSample> samples = sampler.stop();
  SustainedMeasurement m = fit_sustained_load(ops, runner.devices());
  m.clock = summarize_clock(samples, m.seconds);
  std::ostringstream source;
  source << "measured at profile time: a block's F, p1 and p2 back to back for " << m.seconds
         << " s on "
         << (run.stages > 0 ? std::to_string(run.stages) + " green contexts of " +
                                  std::to_string(run.sm_per_stage) + " SMs at once"
                            : std::string("the whole GPU"))
         << ", mbs " << run.mbs << ", after " << profile.cooldown_seconds << " s idle; "
         << sampler.note();
  m.source = source.str();
  return m;
}

// The same op on k = 1..P stages at once, short bursts, each after an idle pause; medians of the
// timed ops' cold work under `model` (their times where it has no factor).
std::vector<double> burst_medians(LoadRunner& runner, LoadOp op, const GpuProfileOptions& profile,
                                  const SustainedLoad& model, double pause_seconds) {
  std::vector<double> medians;
  for (int k = 1; k <= runner.devices(); ++k) {
    idle(pause_seconds);
    runner.mark_start();
    for (std::size_t s = 0; s < static_cast<std::size_t>(k); ++s) {
      if (op == LoadOp::P2) {  // p2's input, untimed
        runner.queue(s, LoadOp::F, false);
        runner.queue(s, LoadOp::P1, false);
      }
    }
    for (int i = 0; i < profile.warmup + profile.repetitions; ++i) {
      for (std::size_t s = 0; s < static_cast<std::size_t>(k); ++s) {
        if (op == LoadOp::P1) runner.queue(s, LoadOp::F, false);
        runner.queue(s, op, i >= profile.warmup);
      }
    }
    const LoadRunner::Collected queued = runner.collect();
    const std::vector<double> cold = cold_work_of(queued.ops, runner.devices(), model);
    std::vector<double> counted_work;
    for (std::size_t i = 0; i < cold.size(); ++i) {
      if (queued.counted[i]) counted_work.push_back(cold[i]);
    }
    medians.push_back(median(counted_work));
  }
  return medians;
}

}  // namespace

LoadProfileResult measure_load(const GpuProfileOptions& profile, const LoadRun& run) {
  std::vector<std::unique_ptr<GreenContext>> greens;
  if (run.stages > 0) greens = GreenContext::partition(0, run.stages, run.sm_per_stage);
  LoadRunner runner(profile, run, greens);
  LoadProfileResult result;
  SustainedLoad model{0, 1};
  if (profile.sustain_seconds > 0) {
    result.sustained = sustained_run(runner, profile, run);
    model = result.sustained->model;
    if (run.progress) run.progress("sustained load");
  }
  if (run.stages > 0) {
    // Long enough for the load the last run left to fade (five time constants), within the
    // cool-down the user allowed.
    const double pause =
        model.factor > 0
            ? std::min(profile.cooldown_seconds, std::max(0.2, 5 * model.time_constant_us / 1e6))
            : std::min(profile.cooldown_seconds, 1.0);
    std::map<std::string, std::vector<double>> medians;
    for (const LoadOp op : {LoadOp::F, LoadOp::P1, LoadOp::P2})
      medians[name_of(op)] = burst_medians(runner, op, profile, model, pause);
    std::ostringstream source;
    source << "measured at profile time: a block's F, p1 and p2 (mbs " << run.mbs
           << ") at once on k = 1.." << run.stages << " green contexts of " << run.sm_per_stage
           << " SMs, median of " << profile.repetitions << " per context"
           << (model.factor > 0 ? ", as cold work under the sustained-load model" : "");
    result.contention = contention_from_bursts(medians, source.str());
    if (model.factor > 0) result.contention->sustained = model;
    if (run.progress) run.progress("contention");
  }
  return result;
}

}  // namespace pipeplan::cuda
