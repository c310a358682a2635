// One transformer block through the CUDA backend (the plugin's code: CudaBackend, the same
// layers `pipeplan run --backend cuda` runs): forward, p1 and p2 of a LLaMA-7B block by default
// (h 4096, ffn 11008, 32 heads, seq 2048), bf16, flash attention, at each --mbs. Each repetition
// records CUDA events around F, p1 and p2 issued back to back on the stage's stream; the median
// of --repetitions after --warmup untimed steps is reported per pass and for the whole step.
//
// FLOPs are PaLM's model FLOPs (Chowdhery et al. 2022, appendix B) for one block of N = mbs·seq
// tokens, P its parameters, h = heads·head_dim, s = seq (causal masking not discounted):
//   F  = 2PN + 4hsN    p1 = 2PN + 8hsN (attention finishes in p1)    p2 = 2PN
// so F + p1 + p2 = (6P + 12hs)·N, what ModelConfig::flops_per_token counts per block. MFU is
// that over the step's median time, against the GPU's dense bf16 peak from profiles/gpus.json
// (the device name picks the entry, e.g. h100-sxm 989.4 TFLOP/s; --gpu overrides).
//
// --gemm-candidates N (> 1) times N of cuBLASLt's answers per GEMM shape in the first (warm-up)
// step and keeps the fastest (runtime/cuda/matmul.h); each result then lists the choices.
//
// Prints one JSON line (bench/gpu/torch_block.py prints the same fields for PyTorch's block).
// --breakdown adds, per micro-batch size, the ops' times from --repetitions further steps with
// op marks on (runtime/cuda/op_marks.h: events around each GEMM, the attention core and the
// memory-bound kernels): per label its calls per step, median ms per step, TFLOP/s (GEMMs,
// attention) or GB/s (norms, RoPE, SwiGLU: the bytes they must move at least) and share of the
// step, and the time no mark covers (launch gaps, the events themselves). Those steps come after
// the timed ones, so the marks' events do not touch the step figures. It also measures the
// bandwidth of a device-to-device copy, the roofline to read the GB/s against.
#include <cuda_runtime.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <exception>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "planner/base/stats.h"
#include "profiles/gpu.h"
#include "runtime/cuda/context.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/matmul.h"
#include "runtime/cuda/op_marks.h"
#include "runtime/cuda/op_timing.h"
#include "runtime/emulate.h"
#include "runtime/random.h"

namespace pipeplan {
namespace {

struct Options {
  std::string model = "llama-7b";
  int seq = 2048;
  std::string mbs = "1,2";
  std::string attention = "flash";
  std::string gpu;  // gpus.json entry; empty: from the device name
  int warmup = 5;
  int repetitions = 20;
  bool breakdown = false;
  int gemm_candidates = 1;  // cuBLASLt answers timed per GEMM shape (matmul.h)
};

std::vector<int> parse_sizes(const std::string& text) {
  std::vector<int> sizes;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t end = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, end - start);
    std::size_t used = 0;
    int value = 0;
    try {
      value = std::stoi(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size() || value < 1) {
      throw Error("--mbs: '" + item + "' is not a positive integer");
    }
    sizes.push_back(value);
    start = end + 1;
  }
  return sizes;
}

std::vector<double> random_values(std::int64_t count, std::uint64_t seed) {
  std::vector<double> values(static_cast<std::size_t>(count));
  fill_normal(values, 1.0, seed);  // never zeros: they time faster than real data
  return values;
}

struct Events {
  static constexpr int kCount = 4;  // before F, after F, after p1, after p2
  cudaEvent_t at[kCount] = {};
  Events() {
    for (cudaEvent_t& event : at)
      CUDA_CHECK(cudaEventCreate(&event));
  }
  ~Events() {
    for (cudaEvent_t event : at)
      cudaEventDestroy(event);  // no throwing from a destructor
  }
  Events(const Events&) = delete;
  Events& operator=(const Events&) = delete;
  double ms(int from, int to) const {
    float value = 0;
    CUDA_CHECK(cudaEventElapsedTime(&value, at[from], at[to]));
    return value;
  }
};

// One step: F, p1, p2 back to back, events before and after each; waits for the last.
void block_step(cuda::CudaBackend& backend, LayerParams& layer, const Tensor& x, const Tensor& dy,
                const Events& events) {
  cudaStream_t stream = backend.context().stream();
  CUDA_CHECK(cudaEventRecord(events.at[0], stream));
  ForwardResult fwd = backend.forward(layer, x, {});
  CUDA_CHECK(cudaEventRecord(events.at[1], stream));
  BackwardP1Result result = backend.backward_p1(layer, std::move(fwd.stash), dy);
  CUDA_CHECK(cudaEventRecord(events.at[2], stream));
  const std::vector<const Retained*> retained = {&result.retained};
  backend.backward_p2(layer, retained);
  CUDA_CHECK(cudaEventRecord(events.at[3], stream));
  CUDA_CHECK(cudaEventSynchronize(events.at[3]));
}

// The ops of `repetitions` steps with op marks on: per label (in first-seen order) its calls per
// step, median ms per step over its calls, TFLOP/s at that median and share of the marked steps'
// median; then the time no mark covers.
nlohmann::json op_breakdown(cuda::CudaBackend& backend, LayerParams& layer, const Tensor& x,
                            const Tensor& dy, const Events& events, int repetitions) {
  cuda::OpMarks marks;
  struct Unset {
    cuda::DeviceContext& ctx;
    ~Unset() { ctx.set_op_marks(nullptr); }
  } unset{backend.context()};
  backend.context().set_op_marks(&marks);
  struct InStep {  // one label's calls within one step
    double ms = 0, flops = 0, bytes = 0;
    int calls = 0;
  };
  struct Op {
    std::vector<double> ms;  // per step
    InStep last;             // calls and FLOPs per step (the same every step)
  };
  std::vector<std::string> order;
  std::map<std::string, Op> by_label;
  std::vector<double> steps;
  for (int i = 0; i < repetitions; ++i) {
    block_step(backend, layer, x, dy, events);
    steps.push_back(events.ms(0, 3));
    std::map<std::string, InStep> step;
    for (const cuda::OpMarks::Timing& t : marks.collect()) {
      if (!by_label.contains(t.label) && !step.contains(t.label)) order.push_back(t.label);
      InStep& in = step[t.label];
      in.ms += t.ms;
      in.flops += t.flops;
      in.bytes += t.bytes;
      in.calls += 1;
    }
    for (const auto& [label, in] : step) {
      Op& op = by_label[label];
      op.ms.push_back(in.ms);
      op.last = in;
    }
  }
  const double step_ms = median(steps);
  double marked = 0;
  nlohmann::json ops = nlohmann::json::array();
  for (const std::string& label : order) {
    const Op& op = by_label.at(label);
    const double op_ms = median(op.ms);
    marked += op_ms;
    nlohmann::json row = {{"op", label},
                          {"calls_per_step", op.last.calls},
                          {"ms", op_ms},
                          {"share_of_step", op_ms / step_ms}};
    if (op.last.flops > 0) row["tflops"] = op.last.flops / (op_ms * 1e-3) / 1e12;
    if (op.last.bytes > 0) row["gbps"] = op.last.bytes / (op_ms * 1e-3) / 1e9;
    ops.push_back(row);
  }
  return {{"steps", repetitions},
          {"step_ms", step_ms},
          {"ops", ops},
          {"unmarked_ms", step_ms - marked},
          {"unmarked_share", (step_ms - marked) / step_ms}};
}

// The memory roofline the memory-bound ops are read against: the bandwidth (bytes read plus bytes
// written, over the median time of `repetitions` copies after one untimed) of device-to-device
// copies of 256 MiB.
nlohmann::json copy_bandwidth(int repetitions) {
  constexpr std::size_t kBytes = std::size_t{256} << 20;
  struct Buffers {
    void* from = nullptr;
    void* to = nullptr;
    ~Buffers() {
      cudaFree(from);  // no throwing from a destructor
      cudaFree(to);
    }
  } buffers;
  CUDA_CHECK(cudaMalloc(&buffers.from, kBytes));
  CUDA_CHECK(cudaMalloc(&buffers.to, kBytes));
  CUDA_CHECK(cudaMemset(buffers.from, 1, kBytes));
  const double us =
      cuda::time_op(nullptr, 1, repetitions, {}, [&] {
        CUDA_CHECK(cudaMemcpyAsync(buffers.to, buffers.from, kBytes, cudaMemcpyDeviceToDevice));
      }).median_us;
  return {{"what", "cudaMemcpyAsync device to device, 256 MiB, (read + written) / median time"},
          {"bytes", kBytes},
          {"gbps", 2.0 * static_cast<double>(kBytes) / (us * 1e-6) / 1e9}};
}

nlohmann::json bench_mbs(const ModelConfig& model, int mbs, const Options& options,
                         double peak_flops, std::string& attention_note) {
  cuda::CudaBackend backend(
      {attention_from_string(options.attention), nullptr, options.gemm_candidates});
  attention_note = backend.attention_note();
  LayerParams layer = backend.init_layer(model, LayerKind::block, 1, 1);
  const std::int64_t n = std::int64_t{mbs} * options.seq;
  const Tensor x =
      backend.upload(random_values(n * model.hidden, 11), {mbs, options.seq, model.hidden});
  const Tensor dy =
      backend.upload(random_values(n * model.hidden, 12), {mbs, options.seq, model.hidden});
  Events events;
  std::vector<double> forward, p1, p2, step;
  for (int i = 0; i < options.warmup + options.repetitions; ++i) {
    block_step(backend, layer, x, dy, events);
    if (i < options.warmup) continue;
    forward.push_back(events.ms(0, 1));
    p1.push_back(events.ms(1, 2));
    p2.push_back(events.ms(2, 3));
    step.push_back(events.ms(0, 3));
  }
  const double params = static_cast<double>(model.block_parameters());
  const double attention = static_cast<double>(model.heads) * model.head_dim() * options.seq;
  const double tokens = static_cast<double>(n);
  const double f_flops = (2 * params + 4 * attention) * tokens;
  const double p1_flops = (2 * params + 8 * attention) * tokens;
  const double p2_flops = 2 * params * tokens;
  const double step_flops = f_flops + p1_flops + p2_flops;
  const auto tflops = [](double flops, double ms) { return flops / (ms * 1e-3) / 1e12; };
  const double f_ms = median(forward), p1_ms = median(p1), p2_ms = median(p2);
  const double step_ms = median(step);
  nlohmann::json out = {
      {"mbs", mbs},
      {"tokens", n},
      {"forward_ms", f_ms},
      {"p1_ms", p1_ms},
      {"p2_ms", p2_ms},
      {"step_ms", step_ms},
      {"step_min_ms", *std::min_element(step.begin(), step.end())},
      {"step_max_ms", *std::max_element(step.begin(), step.end())},
      {"flops", {{"forward", f_flops}, {"p1", p1_flops}, {"p2", p2_flops}, {"step", step_flops}}},
      {"tflops",
       {{"forward", tflops(f_flops, f_ms)},
        {"p1", tflops(p1_flops, p1_ms)},
        {"p2", tflops(p2_flops, p2_ms)},
        {"step", tflops(step_flops, step_ms)}}},
      {"peak_memory_bytes", backend.context().allocator().stats().peak_bytes},
  };
  if (options.breakdown) {
    out["breakdown"] = op_breakdown(backend, layer, x, dy, events, options.repetitions);
  }
  if (options.gemm_candidates > 1) {  // which answer each shape runs, timed in the first step
    nlohmann::json choices = nlohmann::json::array();
    for (const cuda::GemmChoice& choice : cuda::gemm_choices(backend.context())) {
      choices.push_back({{"shape", choice.shape},
                         {"candidates", choice.candidates},
                         {"chosen", choice.chosen},
                         {"answer_us", choice.answer_us}});  // a failed answer's infinity: null
    }
    out["gemm_choices"] = choices;
  }
  if (peak_flops > 0) {
    out["mfu"] = step_flops / (step_ms * 1e-3) / peak_flops;
    out["mfu_per_pass"] = {{"forward", f_flops / (f_ms * 1e-3) / peak_flops},
                           {"p1", p1_flops / (p1_ms * 1e-3) / peak_flops},
                           {"p2", p2_flops / (p2_ms * 1e-3) / peak_flops}};
  }
  return out;
}

int run(const Options& options) {
  // The options first, so a typo is reported as such on any machine.
  if (options.warmup < 0 || options.repetitions < 1) {
    throw Error("--warmup must be at least 0 and --repetitions at least 1");
  }
  if (options.seq < 1) throw Error("--seq: must be at least 1");
  if (options.gemm_candidates < 1) throw Error("--gemm-candidates: must be at least 1");
  if (options.gemm_candidates > 1 && options.warmup < 1) {
    throw Error("--gemm-candidates: timing the answers needs an untimed step (--warmup 1 or more)");
  }
  const std::vector<int> sizes = parse_sizes(options.mbs);
  (void)attention_from_string(options.attention);
  ModelConfig model = resolve_model(options.model);
  model.seq = options.seq;
  if (cuda::cuda_device_count() == 0) throw Error("no CUDA device found");
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  double peak_flops = 0;
  std::string gpu_key;
  try {
    const GpuSpec spec =
        options.gpu.empty() ? gpu_for_device_name(prop.name) : find_gpu(options.gpu);
    peak_flops = spec.peak_bf16_tflops * 1e12;
    gpu_key = spec.name;
  } catch (const Error& e) {
    if (!options.gpu.empty()) throw;
    std::cerr << "bench_block: " << e.what() << "; no MFU\n";
  }
  nlohmann::json results = nlohmann::json::array();
  std::string attention_note;
  for (const int mbs : sizes)
    results.push_back(bench_mbs(model, mbs, options, peak_flops, attention_note));
  nlohmann::json line = {
      {"bench", "pipeplan_block"},
      {"implementation", "pipeplan CUDA backend (libpipeplan_cuda code), bf16, fp32 grads"},
      {"gpu", prop.name},
      {"gpu_key", gpu_key},
      {"sms", prop.multiProcessorCount},
      {"peak_bf16_tflops", peak_flops / 1e12},
      {"model", model.name},
      {"hidden", model.hidden},
      {"heads", model.heads},
      {"kv_heads", model.kv_heads > 0 ? model.kv_heads : model.heads},
      {"ffn_hidden", model.ffn_hidden},
      {"seq", options.seq},
      {"attention", attention_note},
      {"warmup", options.warmup},
      {"repetitions", options.repetitions},
      {"gemm_candidates", options.gemm_candidates},
      {"statistic", "median"},
      {"flops", "PaLM model FLOPs of one block: F 2PN+4hsN, p1 2PN+8hsN, p2 2PN"},
      {"block_parameters", model.block_parameters()},
      {"results", results},
  };
  if (options.breakdown) line["copy_bandwidth"] = copy_bandwidth(options.repetitions);
  std::cout << line.dump() << std::endl;
  return 0;
}

}  // namespace
}  // namespace pipeplan

int main(int argc, char** argv) {
  pipeplan::Options options;
  CLI::App app("One transformer block's F, p1, p2 on the CUDA backend; prints one JSON line");
  app.add_option("--model", options.model, "model preset or config.json")->capture_default_str();
  app.add_option("--seq", options.seq, "sequence length")->capture_default_str();
  app.add_option("--mbs", options.mbs, "micro-batch sizes, e.g. 1,2")->capture_default_str();
  app.add_option("--attention", options.attention, "materialized, recompute, flash")
      ->capture_default_str();
  app.add_option("--gpu", options.gpu, "gpus.json entry for the peak (default: device name)");
  app.add_option("--warmup", options.warmup, "untimed steps first")->capture_default_str();
  app.add_option("--repetitions", options.repetitions, "timed steps")->capture_default_str();
  app.add_flag("--breakdown", options.breakdown,
               "also time each op: GEMMs, attention, norms, RoPE, SwiGLU (further steps with op "
               "marks), and a device-to-device copy's bandwidth");
  app.add_option("--gemm-candidates", options.gemm_candidates,
                 "cuBLASLt answers to time per GEMM shape in the first step, keeping the "
                 "fastest (1: the heuristic's first, as pipeplan runs)")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    return pipeplan::run(options);
  } catch (const pipeplan::Error& e) {
    std::cerr << "bench_block: error: " << e.what() << "\n";
    return 1;
  }
}
