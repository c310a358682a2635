#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "planner/base/error.h"
#include "planner/base/io.h"
#include "planner/base/limits.h"
#include "planner/graph/simulator.h"
#include "planner/graph/trace.h"
#include "planner/graph/validator.h"
#include "profiles/gpu.h"
#include "profiles/recompute.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/cpu/profiler.h"
#include "runtime/emulate.h"
#include "runtime/executor.h"
#include "runtime/gpu_plugin.h"
#include "runtime/layer_spec.h"
#include "tools/cli_checks.h"
#include "tools/commands.h"
#include "tools/report.h"
#include "tools/run_command.h"
#include "tools/run_report.h"
#include "tools/units.h"

namespace pipeplan {

namespace {

constexpr std::int64_t kMaxTimeoutMs = 24LL * 3600 * 1000;  // one day per wait

void print_step(const StepResult& r) {
  std::printf("step %4d  loss %.6f  step %9.3f ms  makespan %9.3f ms  %10.0f tokens/s\n", r.step,
              r.loss, r.step_time_us / 1e3, r.measured.makespan_us / 1e3, r.tokens_per_s);
}

// "mpi, 4 mpi ranks" under MPI, "nccl, 4 env ranks" under an env launch; the transport's own
// name in one process.
std::string transport_label(const std::string& name, const RunRanks& ranks) {
  if (!ranks.group) return name;
  return name + ", " + std::to_string(ranks.group->size()) + " " + ranks.group->name() + " ranks";
}

// A model the runtime's layers do not implement is refused for what it is, before anything is
// sized or set up for it, naming the plan as the plan's other refusals do.
void check_model_runs(const TaskGraph& plan, const std::string& plan_name,
                      const std::string& backend) {
  try {
    check_model_supported(plan.meta.model, "backend " + backend);
  } catch (const Error& e) {
    throw Error(plan_name + ": " + e.what());
  }
}

}  // namespace

// A pipeline message is the (mbs, seq, hidden) activation or its gradient (each GPU's share under
// tensor parallelism), in the profiler's dtype: bf16 for a GPU's profile (the analytic model, the
// CUDA profiler), f32 for the CPU backend's. A uniform model has no shape: nothing to check.
void check_message_shapes(const TaskGraph& plan, const std::string& plan_name) {
  const PlanMeta& m = plan.meta;
  if (m.model.family == "uniform" || m.model.hidden <= 0) return;
  const bool cpu = m.gpu == cpu::kCpuDeviceName;
  const std::int64_t elements = std::int64_t{m.mbs} * m.seq * m.model.hidden;
  // Tensor parallelism splits each message between the stage's GPUs (profiles/tensor_parallel.h).
  const std::int64_t parts = std::max(1, m.tensor_parallel);
  const std::int64_t expected = (cpu ? 4 : 2) * elements / parts;
  for (int id = 0; id < plan.node_count(); ++id) {
    const Node& n = plan.node(id);
    if (n.kind != NodeKind::send ||
        (n.transfer != Transfer::activation && n.transfer != Transfer::gradient))
      continue;
    if (n.bytes == expected) continue;
    throw Error(plan_name + ": " + plan.node_name(id) + " carries " + std::to_string(n.bytes) +
                " bytes, but meta.mbs " + std::to_string(m.mbs) + " x meta.seq " +
                std::to_string(m.seq) + " x meta.model.hidden " + std::to_string(m.model.hidden) +
                (parts > 1 ? " / tensor parallel " + std::to_string(parts) : std::string()) +
                " makes " + std::to_string(expected) + " bytes in " +
                (cpu ? "f32 (a CPU profile's)" : "bf16 (a GPU profile's, meta.gpu " + m.gpu + ")") +
                ": the plan's costs are of another shape than the model the runtime would build "
                "(plan it again rather than edit its meta)");
  }
}

void RunRanks::agree(const std::optional<std::string>& error, std::string_view what,
                     std::chrono::milliseconds timeout) const {
  if (group) {
    group->agree(error, what, timeout);
  } else if (error) {
    throw Error(*error);
  }
}

void RunCommand::check_host_memory(const TaskGraph& plan, int rank) const {
  // One process per plan device: each holds its own device's share (the agreed error names the
  // rank).
  const auto need = static_cast<double>(estimate_cpu_host_bytes(plan, rank));
  if (need > max_host_gib * kBytesPerGiB) {
    throw Error(input_name(plan_path) + ": a CPU run of model '" + plan.meta.model.name +
                "' needs about " + format_gib(need) + " of host memory" +
                (rank >= 0 ? " for its device" : std::string()) + ", above --max-host-gib " +
                format_gib(max_host_gib * kBytesPerGiB) +
                (plan.meta.model.name == "tiny" ? std::string(" (raise --max-host-gib)")
                                                : " (plan the 'tiny' model for CPU runs)"));
  }
}

std::string RunCommand::header(const TaskGraph& plan, const std::string& backend_name,
                               const std::string& transport_name) const {
  const PlanMeta& m = plan.meta;
  return input_name(plan_path) + ": " + m.model.name + ", " + m.schedule + " " +
         std::string(to_string(m.backward)) +
         (m.recompute.any() ? ", recompute " + to_string(m.recompute) : std::string()) + ", " +
         std::to_string(m.devices) + " devices, " + std::to_string(m.microbatches) +
         " micro-batches x " + std::to_string(m.mbs) + " x " + std::to_string(m.seq) +
         " tokens, backend " + backend_name + ", transport " + transport_name + ", seed " +
         std::to_string(seed) + "\n";
}

TaskGraph RunCommand::load_and_check(bool as_rank, bool writes) const {
  TaskGraph plan = load_plan(plan_path);
  validate(plan, input_name(plan_path));
  if (writes && !trace.empty()) check_output(trace);  // before the run, not after it
  if (const ModelConfig& model = plan.meta.model;
      model.sliding_window > 0 && plan.meta.seq > model.sliding_window) {
    throw Error(input_name(plan_path) + ": model '" + model.name + "': sequence " +
                std::to_string(plan.meta.seq) + " is longer than its sliding_window " +
                std::to_string(model.sliding_window) +
                ", and the runtime's attention sees every earlier token (plan --seq " +
                std::to_string(model.sliding_window) + " or less to run it)");
  }
  if (plan.meta.tensor_parallel > 1) {
    throw Error(input_name(plan_path) + ": planned with tensor parallelism " +
                std::to_string(plan.meta.tensor_parallel) +
                " (its times and bytes are per GPU of a stage's group); the runtime runs each "
                "stage whole on one GPU (plan with --tensor-parallel 1 to run it)");
  }
  if (plan.meta.data_parallel.replicas > 1) {
    throw Error(input_name(plan_path) + ": planned with data parallelism " +
                std::to_string(plan.meta.data_parallel.replicas) +
                " (its optimizer steps hold the gradients' reduction across the replicas); the "
                "runtime runs one replica and reduces nothing across replicas (plan with "
                "--data-parallel 1 to run it)");
  }
  check_message_shapes(plan, input_name(plan_path));
  if (steps < 1) throw Error("--steps must be at least 1");
  if (backend != "cpu" && backend != "cuda") {
    throw Error("--backend: unknown backend '" + backend + "' (cpu, cuda)");
  }
  check_emulate(emulate, plan, backend);
  if (!gpu.empty() && backend != "cuda") throw Error("--gpu: only with --backend cuda");
  if (gemm_candidates != 1 && backend != "cuda") {
    throw Error("--gemm-candidates: only with --backend cuda");
  }
  if (as_rank && emulate > 0) {
    throw Error(
        "--emulate: runs every stage on one GPU in one process; as one rank of a multi-process "
        "run each rank has a GPU of its own (drop --emulate, or run without "
        "mpirun/srun/torchrun)");
  }
  const GpuTransport chosen = gpu_transport();
  if (chosen != GpuTransport::automatic && backend != "cuda") {
    throw Error(
        "--transport: only with --backend cuda (CPU stages exchange tensors in the "
        "process, or over MPI between ranks)");
  }
  if (chosen == GpuTransport::device_local &&
      (as_rank || (emulate == 0 && plan.meta.devices > 1))) {
    throw Error(
        "--transport device-local: copies between stages on one GPU in one process; this "
        "run has " +
        std::string(as_rank ? "one rank per plan device" : "one GPU per plan device") +
        " (use --emulate " + std::to_string(plan.meta.devices) +
        " in one process, or --transport nccl)");
  }
  return plan;
}

GpuTransport RunCommand::gpu_transport() const {
  if (transport_kind == "auto") return GpuTransport::automatic;
  if (transport_kind == "device-local") return GpuTransport::device_local;
  if (transport_kind == "nccl") return GpuTransport::nccl;
  throw Error("--transport: unknown transport '" + transport_kind + "' (auto, device-local, nccl)");
}

std::string RunCommand::shared_options() const {
  return "backend=" + backend + " steps=" + std::to_string(steps) +
         " seed=" + std::to_string(seed) + " timeout_ms=" + std::to_string(timeout_ms) +
         " gpu=" + gpu + " gemm_candidates=" + std::to_string(gemm_candidates) +
         " transport=" + transport_kind;
}

int RunCommand::run() const {
  const Launcher chosen = parse_launcher(launcher);
  const LaunchEnvironment environment = detect_launch_environment();
  switch (choose_launch(chosen, environment, mpi_support_built())) {
    case LaunchMode::mpi:
      return run_under_mpi(*this, environment);
    case LaunchMode::env:
      return run_under_env(*this, environment);
    case LaunchMode::single:
      break;
  }
  TaskGraph plan = load_and_check(false);
  if (backend == "cpu") return run_cpu(std::move(plan), {});
  return run_cuda(std::move(plan), {});
}

ExecutorOptions RunCommand::executor_options(const RunRanks& ranks) const {
  ExecutorOptions options;
  options.seed = seed;
  options.timeout = timeout();
  options.group = ranks.group;
  options.before_node = ranks.before_node;
  return options;
}

int RunCommand::run_cpu(TaskGraph plan, const RunRanks& ranks) const {
  std::unique_ptr<Executor> executor;
  {
    std::optional<std::string> error;
    try {
      // The model first: a model no backend runs is refused for what it is, not for its size.
      check_model_runs(plan, input_name(plan_path), cpu::CpuBackend().name());
      check_host_memory(plan, ranks.group != nullptr ? ranks.group->rank() : -1);
      std::unique_ptr<Transport> transport;
      if (ranks.session != nullptr) transport = ranks.session->make_transport(timeout());
      if (ranks.wrap_transport) transport = ranks.wrap_transport(std::move(transport));
      executor = std::make_unique<Executor>(
          std::move(plan), [](int) { return std::make_unique<cpu::CpuBackend>(); },
          executor_options(ranks), std::move(transport));
    } catch (const Error& e) {
      error = e.what();
    }
    ranks.agree(error, "setting up the executors", timeout());
  }
  const std::string backend_name = cpu::CpuBackend().name();
  const std::string transport_name = transport_label(executor->transport().name(), ranks);
  if (!json && ranks.prints()) {
    std::cout << header(executor->plan(), backend_name, transport_name) << std::flush;
  }
  nlohmann::json rows = nlohmann::json::array();
  const StepResult last = run_steps(*executor, rows, ranks, [] {});
  executor->transport().close(timeout());
  write_outputs(ranks, [&] {
    write_trace(executor->plan(), last, "");
    if (json) {
      nlohmann::json report = {{"plan", input_name(plan_path)},
                               {"backend", backend_name},
                               {"seed", seed},
                               {"steps", std::move(rows)},
                               {"peak_memory_bytes", last.measured.peak_memory_bytes()}};
      if (!trace.empty()) report["trace"] = trace;
      if (ranks.group) report["ranks"] = ranks.group->size();
      std::cout << json_text(report, 2) << "\n";
    } else {
      std::cout << "peak memory per device (measured, last step):";
      for (const std::int64_t bytes : last.measured.peak_memory_bytes())
        std::printf(" %.2f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
      std::cout << "\n";
      if (!trace.empty()) std::cout << "wrote " << trace << " (measured trace, last step)\n";
    }
  });
  return 0;
}

int RunCommand::run_cuda(TaskGraph plan, const RunRanks& ranks) const {
  GpuPlugin* plugin = nullptr;
  {
    std::optional<std::string> error;
    try {
      // As on the CPU, and before the GPUs are set up for it (the CUDA backend's layers are the
      // same, and would refuse it only once the executor initialises them).
      check_model_runs(plan, input_name(plan_path), "cuda");
      plugin = &load_gpu_plugin();
    } catch (const Error& e) {
      error = e.what();
    }
    ranks.agree(error, "loading the CUDA module", timeout());
  }
  const SimResult predicted = simulate(plan);
  // Collective under MPI: the ranks agree on their GPUs and exchange the NCCL unique id.
  const std::unique_ptr<GpuRun> gpu_run = plugin->prepare_run(
      plan, {emulate, gpu, ranks.group.get(), timeout(), gemm_candidates, gpu_transport()});
  std::unique_ptr<Executor> executor;
  {
    std::optional<std::string> error;
    try {
      ExecutorOptions options = executor_options(ranks);
      options.node_timer = gpu_run->node_timer();
      std::unique_ptr<Transport> transport = gpu_run->take_transport();
      if (ranks.wrap_transport) transport = ranks.wrap_transport(std::move(transport));
      executor = std::make_unique<Executor>(std::move(plan), gpu_run->backend_factory(), options,
                                            std::move(transport));
    } catch (const Error& e) {
      error = e.what();
    }
    ranks.agree(error, "setting up the executors", timeout());
  }
  const std::string transport_name = transport_label(gpu_run->transport_name(), ranks);
  const MeasuredHardware& hw = gpu_run->hardware();
  const std::string backend_name = gpu_run->backend_name() + " on " + hw.device_name;
  if (hw.emulated() && ranks.prints()) {  // each stage's allocator keeps its own peak
    const auto together = static_cast<double>(predicted.shared_gpu_memory_bytes());
    if (const double hbm = gpu_hbm_bytes(hw.gpu); hbm > 0 && together > hbm) {
      std::cerr << "pipeplan: warning: the plan's " << hw.emulated_stages
                << " stages are predicted to hold " << format_gib(together) << " together, more "
                << "than the " << format_gib(hbm) << " of one " << hw.gpu
                << ": the run may fail to allocate\n";
    }
  }
  if (!json && ranks.prints()) {
    std::cout << header(executor->plan(), backend_name, transport_name);
    if (hw.emulated()) std::cout << emulation_line(hw) << "\n";
    std::cout << std::flush;
  }
  nlohmann::json rows = nlohmann::json::array();
  std::vector<double> makespans;
  const StepResult last = run_steps(
      *executor, rows, ranks, [&] { gpu_run->reset_peaks(); }, &makespans);
  std::vector<std::int64_t> peaks = gpu_run->allocator_peak_bytes();
  if (ranks.group) {  // each rank knows its own device's allocator
    const auto rank = static_cast<std::size_t>(ranks.group->rank());
    const std::vector<std::string> all =
        ranks.group->gather(std::to_string(peaks.at(rank)), "the allocator peaks", timeout());
    for (std::size_t r = 0; r < all.size(); ++r)
      peaks.at(r) = std::stoll(all[r]);
  }
  // Every wait of the teardown bounded too: a peer gone after the last step is an error here.
  executor->transport().close(timeout());
  write_outputs(ranks, [&] {
    RunComparison comparison = compare_with_prediction(executor->plan(), predicted, last.measured,
                                                       last.step_time_us, peaks, hw);
    set_steady_steps(comparison, makespans);
    write_trace(executor->plan(), last, hw.emulated() ? std::string(kEmulatedNote) : "");
    if (json) {
      nlohmann::json report = run_report_json(comparison, hw);
      report["plan"] = input_name(plan_path);
      report["backend"] = backend_name;
      report["transport"] = transport_name;
      report["seed"] = seed;
      report["steps"] = std::move(rows);
      if (!trace.empty()) report["trace"] = trace;
      if (ranks.group) report["ranks"] = ranks.group->size();
      std::cout << json_text(report, 2) << "\n";
    } else {
      std::cout << "last step against the plan's prediction:\n"
                << format_run_report(comparison, hw);
      if (!trace.empty()) std::cout << "wrote " << trace << " (measured trace, last step)\n";
    }
  });
  return 0;
}

// Runs every step (before_step first: e.g. resetting the allocators' peaks) and returns the
// last one; one JSON row per step, or one printed line (rank 0 only under MPI).
StepResult RunCommand::run_steps(Executor& executor, nlohmann::json& rows, const RunRanks& ranks,
                                 const std::function<void()>& before_step,
                                 std::vector<double>* makespans_us) const {
  StepResult last;
  for (int s = 0; s < steps; ++s) {
    before_step();
    last = executor.step();
    if (makespans_us != nullptr) makespans_us->push_back(last.measured.makespan_us);
    if (json) {
      rows.push_back({{"step", last.step},
                      {"loss", last.loss},
                      {"step_time_us", last.step_time_us},
                      {"makespan_us", last.measured.makespan_us},
                      {"tokens_per_s", last.tokens_per_s}});
    } else if (ranks.prints()) {
      print_step(last);
      std::fflush(stdout);
    }
  }
  return last;
}

void RunCommand::write_outputs(const RunRanks& ranks, const std::function<void()>& write) const {
  std::optional<std::string> error;
  if (ranks.prints()) {
    try {
      if (ranks.before_outputs) ranks.before_outputs(*this);
      write();
      std::cout << std::flush;
    } catch (const Error& e) {
      error = e.what();
    }
  }
  // As one rank: the others hear how rank 0 fared, so that a failure there fails every rank.
  ranks.agree(error, "writing the report", timeout());
}

void RunCommand::write_trace(const TaskGraph& plan, const StepResult& last,
                             const std::string& note) const {
  if (trace.empty()) return;
  std::string title = "measured: " + input_name(plan_path) + " step " + std::to_string(last.step);
  if (!note.empty()) title += " (" + note + ")";
  write_perfetto_trace(plan, last.measured, trace, title);
}

Command add_run_command(CLI::App& app) {
  auto cmd = std::make_shared<RunCommand>();
  auto* sub = app.add_subcommand("run", "train for N steps by executing a plan's task graph");
  sub->add_option("plan", cmd->plan_path, "plan JSON (pipeplan plan -o; - reads standard input)")
      ->required();
  sub->add_option("--backend", cmd->backend, "cpu (reference) or cuda")->capture_default_str();
  sub->add_option("--steps", cmd->steps, "training steps")
      ->capture_default_str()
      ->check(int_range(1, limits::kMaxRunSteps));
  sub->add_option("--seed", cmd->seed, "weights and synthetic data")->capture_default_str();
  sub->add_flag("--json", cmd->json, "print machine-readable results");
  sub->add_option("--trace", cmd->trace, "write the last step's measured Perfetto trace");
  sub->add_option("--timeout-ms", cmd->timeout_ms, "limit on every wait in the executor")
      ->capture_default_str()
      ->check(int_range(1, kMaxTimeoutMs));
  sub->add_option("--max-host-gib", cmd->max_host_gib, "refuse CPU runs estimated above this")
      ->capture_default_str()
      ->check(finite_range(0, limits::kMaxMemoryBytes / kBytesPerGiB));
  sub->add_option("--emulate", cmd->emulate,
                  "cuda: run the plan's P stages on one GPU, each in a green context of "
                  "SMs/P (rounded down to 8); P must equal the plan's device count")
      ->check(int_range(0, limits::kMaxDevices));
  sub->add_option("--gpu", cmd->gpu,
                  "cuda: gpus.json entry for the MFU peak (default: from the device name)");
  sub->add_option("--gemm-candidates", cmd->gemm_candidates,
                  "cuda: each stage runs each GEMM shape with the fastest of N cuBLASLt answers, "
                  "timed at its first call (in the first step); 1: the heuristic's first")
      ->capture_default_str()
      ->check(int_range(1, limits::kMaxGemmCandidates));
  sub->add_option(
         "--launcher", cmd->launcher,
         "none (one process runs every device), mpi (one rank per plan device under "
         "mpirun/srun), env (one rank per plan device from RANK, WORLD_SIZE, LOCAL_RANK, "
         "MASTER_ADDR, MASTER_PORT as torchrun sets them; cuda only), auto (mpi when "
         "OMPI_COMM_WORLD_SIZE, PMI_SIZE, SLURM_STEP_NUM_TASKS or SLURM_NTASKS shows more than "
         "one rank, env when WORLD_SIZE does with RANK, MASTER_ADDR and MASTER_PORT set; "
         "refused when both do)")
      ->capture_default_str();
  sub->add_option("--transport", cmd->transport_kind,
                  "cuda: auto (device-local copies between stages on one GPU, NCCL between "
                  "GPUs), device-local (one GPU), nccl (also between the stages of one GPU: NCCL "
                  "2.30 or later with NCCL_MULTI_RANK_GPU_ENABLE=1)")
      ->capture_default_str();
  return {sub, [cmd] { return cmd->run(); }};
}

}  // namespace pipeplan
