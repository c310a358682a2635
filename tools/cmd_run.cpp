#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>

#include <nlohmann/json.hpp>

#include "planner/base/error.h"
#include "planner/base/limits.h"
#include "planner/graph/simulator.h"
#include "planner/graph/trace.h"
#include "planner/graph/validator.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/emulate.h"
#include "runtime/executor.h"
#include "runtime/gpu_plugin.h"
#include "tools/cli_checks.h"
#include "tools/commands.h"
#include "tools/run_report.h"
#include "tools/units.h"

namespace pipeplan {

namespace {

constexpr double kBytesPerGiB = 1024.0 * 1024.0 * 1024.0;
constexpr std::int64_t kMaxTimeoutMs = 24LL * 3600 * 1000;  // one day per wait

struct RunCommand {
  std::string plan_path;
  std::string backend = "cpu";
  int steps = 1;
  std::uint64_t seed = 1;
  bool json = false;
  std::string trace;
  int timeout_ms = 60000;
  double max_host_gib = 8;
  int emulate = 0;
  std::string gpu;

  void check_host_memory(const TaskGraph& plan) const {
    const auto need = static_cast<double>(estimate_cpu_host_bytes(plan));
    if (need > max_host_gib * kBytesPerGiB) {
      throw Error(plan_path + ": a CPU run of model '" + plan.meta.model.name + "' needs about " +
                  format_gib(need) + " of host memory, above --max-host-gib " +
                  format_gib(max_host_gib * kBytesPerGiB) +
                  " (plan the 'tiny' model for CPU runs)");
    }
  }

  std::string header(const TaskGraph& plan, const std::string& backend_name,
                     const std::string& transport_name) const {
    const PlanMeta& m = plan.meta;
    return plan_path + ": " + m.model.name + ", " + m.schedule + " " +
           std::string(to_string(m.backward)) + ", " + std::to_string(m.devices) + " devices, " +
           std::to_string(m.microbatches) + " micro-batches x " + std::to_string(m.mbs) + " x " +
           std::to_string(m.seq) + " tokens, backend " + backend_name + ", transport " +
           transport_name + ", seed " + std::to_string(seed) + "\n";
  }

  static void print_step(const StepResult& r) {
    std::printf("step %4d  loss %.6f  step %9.3f ms  makespan %9.3f ms  %10.0f tokens/s\n", r.step,
                r.loss, r.step_time_us / 1e3, r.measured.makespan_us / 1e3, r.tokens_per_s);
  }

  void check_options(const TaskGraph& plan) const {
    if (steps < 1) throw Error("--steps must be at least 1");
    if (backend != "cpu" && backend != "cuda") {
      throw Error("--backend: unknown backend '" + backend + "' (cpu, cuda)");
    }
    check_emulate(emulate, plan, backend);
    if (!gpu.empty() && backend != "cuda") throw Error("--gpu: only with --backend cuda");
  }

  int run() const {
    TaskGraph plan = load_plan(plan_path);
    validate(plan);
    check_options(plan);
    if (backend == "cpu") return run_cpu(std::move(plan));
    return run_cuda(std::move(plan));
  }

  int run_cpu(TaskGraph plan) const {
    check_host_memory(plan);
    Executor executor(
        std::move(plan), [](int) { return std::make_unique<cpu::CpuBackend>(); },
        executor_options());
    const std::string backend_name = cpu::CpuBackend().name();
    if (!json) std::cout << header(executor.plan(), backend_name, "in-process") << std::flush;
    nlohmann::json rows = nlohmann::json::array();
    const StepResult last = run_steps(executor, rows, [] {});
    write_trace(executor.plan(), last, "");
    if (json) {
      std::cout << nlohmann::json{{"plan", plan_path},
                                  {"backend", backend_name},
                                  {"seed", seed},
                                  {"steps", std::move(rows)},
                                  {"peak_memory_bytes", last.measured.peak_memory_bytes()},
                                  {"trace", trace}}
                       .dump(2)
                << "\n";
    } else {
      std::cout << "peak memory per device (measured, last step):";
      for (const std::int64_t bytes : last.measured.peak_memory_bytes())
        std::printf(" %.2f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
      std::cout << "\n";
      if (!trace.empty()) std::cout << "wrote " << trace << " (measured trace, last step)\n";
    }
    return 0;
  }

  int run_cuda(TaskGraph plan) const {
    GpuPlugin& plugin = load_gpu_plugin();
    const SimResult predicted = simulate(plan);
    const std::unique_ptr<GpuRun> gpu_run = plugin.prepare_run(plan, {emulate, gpu});
    ExecutorOptions options = executor_options();
    options.node_timer = gpu_run->node_timer();
    const std::string transport_name = gpu_run->transport_name();
    Executor executor(std::move(plan), gpu_run->backend_factory(), options,
                      gpu_run->take_transport());
    const MeasuredHardware& hw = gpu_run->hardware();
    const std::string backend_name = gpu_run->backend_name() + " on " + hw.device_name;
    if (!json) {
      std::cout << header(executor.plan(), backend_name, transport_name);
      if (hw.emulated()) std::cout << emulation_line(hw) << "\n";
      std::cout << std::flush;
    }
    nlohmann::json rows = nlohmann::json::array();
    const StepResult last = run_steps(executor, rows, [&] { gpu_run->reset_peaks(); });
    const RunComparison comparison =
        compare_with_prediction(executor.plan(), predicted, last.measured, last.step_time_us,
                                gpu_run->allocator_peak_bytes(), hw);
    write_trace(executor.plan(), last, hw.emulated() ? std::string(kEmulatedNote) : "");
    if (json) {
      nlohmann::json report = run_report_json(comparison, hw);
      report["plan"] = plan_path;
      report["backend"] = backend_name;
      report["transport"] = transport_name;
      report["seed"] = seed;
      report["steps"] = std::move(rows);
      report["trace"] = trace;
      std::cout << report.dump(2) << "\n";
    } else {
      std::cout << "last step against the plan's prediction:\n"
                << format_run_report(comparison, hw);
      if (!trace.empty()) std::cout << "wrote " << trace << " (measured trace, last step)\n";
    }
    return 0;
  }

  ExecutorOptions executor_options() const {
    ExecutorOptions options;
    options.seed = seed;
    options.timeout = std::chrono::milliseconds(timeout_ms);
    return options;
  }

  // Runs every step (before_step first: e.g. resetting the allocators' peaks) and returns the
  // last one; one JSON row per step, or one printed line.
  StepResult run_steps(Executor& executor, nlohmann::json& rows, const auto& before_step) const {
    StepResult last;
    for (int s = 0; s < steps; ++s) {
      before_step();
      last = executor.step();
      if (json) {
        rows.push_back({{"step", last.step},
                        {"loss", last.loss},
                        {"step_time_us", last.step_time_us},
                        {"makespan_us", last.measured.makespan_us},
                        {"tokens_per_s", last.tokens_per_s}});
      } else {
        print_step(last);
      }
    }
    return last;
  }

  void write_trace(const TaskGraph& plan, const StepResult& last, const std::string& note) const {
    if (trace.empty()) return;
    std::string title = "measured: " + plan_path + " step " + std::to_string(last.step);
    if (!note.empty()) title += " (" + note + ")";
    write_perfetto_trace(plan, last.measured, trace, title);
  }
};

}  // namespace

Command add_run_command(CLI::App& app) {
  auto cmd = std::make_shared<RunCommand>();
  auto* sub = app.add_subcommand("run", "train for N steps by executing a plan's task graph");
  sub->add_option("plan", cmd->plan_path, "plan JSON (pipeplan plan -o)")->required();
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
  return {sub, [cmd] { return cmd->run(); }};
}

}  // namespace pipeplan
