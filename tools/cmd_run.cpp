#include <cstdio>
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "planner/error.h"
#include "planner/trace.h"
#include "planner/validator.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/executor.h"
#include "tools/commands.h"
#include "tools/units.h"

namespace pipeplan {

namespace {

constexpr double kBytesPerGiB = 1024.0 * 1024.0 * 1024.0;

struct RunCommand {
  std::string plan_path;
  std::string backend = "cpu";
  int steps = 1;
  std::uint64_t seed = 1;
  bool json = false;
  std::string trace;
  int timeout_ms = 60000;
  double max_host_gib = 8;

  BackendFactory backend_factory() const {
    if (backend == "cuda") {
      throw Error("--backend cuda: the CUDA backend is not built into this binary");
    }
    if (backend != "cpu") throw Error("--backend: unknown backend '" + backend + "' (cpu, cuda)");
    return [](int) { return std::make_unique<cpu::CpuBackend>(); };
  }

  void check_host_memory(const TaskGraph& plan) const {
    const auto need = static_cast<double>(estimate_cpu_host_bytes(plan));
    if (need > max_host_gib * kBytesPerGiB) {
      throw Error(plan_path + ": a CPU run of model '" + plan.meta.model.name + "' needs about " +
                  format_gib(need) + " of host memory, above --max-host-gib " +
                  format_gib(max_host_gib * kBytesPerGiB) +
                  " (plan the 'tiny' model for CPU runs)");
    }
  }

  std::string header(const TaskGraph& plan, const std::string& backend_name) const {
    const PlanMeta& m = plan.meta;
    return plan_path + ": " + m.model.name + ", " + m.schedule + " " +
           std::string(to_string(m.backward)) + ", " + std::to_string(m.devices) + " devices, " +
           std::to_string(m.microbatches) + " micro-batches x " + std::to_string(m.mbs) + " x " +
           std::to_string(m.seq) + " tokens, backend " + backend_name + ", seed " +
           std::to_string(seed) + "\n";
  }

  static void print_step(const StepResult& r) {
    std::printf("step %4d  loss %.6f  step %9.3f ms  makespan %9.3f ms  %10.0f tokens/s\n", r.step,
                r.loss, r.step_time_us / 1e3, r.measured.makespan_us / 1e3, r.tokens_per_s);
  }

  int run() const {
    if (steps < 1) throw Error("--steps must be at least 1");
    const BackendFactory factory = backend_factory();
    TaskGraph plan = load_plan(plan_path);
    validate(plan);
    check_host_memory(plan);
    ExecutorOptions options;
    options.seed = seed;
    options.timeout = std::chrono::milliseconds(timeout_ms);
    Executor executor(std::move(plan), factory, options);
    const std::string backend_name = cpu::CpuBackend().name();
    if (!json) std::cout << header(executor.plan(), backend_name) << std::flush;
    nlohmann::json step_rows = nlohmann::json::array();
    StepResult last;
    for (int s = 0; s < steps; ++s) {
      last = executor.step();
      if (json) {
        step_rows.push_back({{"step", last.step},
                             {"loss", last.loss},
                             {"step_time_us", last.step_time_us},
                             {"makespan_us", last.measured.makespan_us},
                             {"tokens_per_s", last.tokens_per_s}});
      } else {
        print_step(last);
      }
    }
    if (!trace.empty()) {
      write_perfetto_trace(executor.plan(), last.measured, trace,
                           "measured: " + plan_path + " step " + std::to_string(last.step));
    }
    if (json) {
      std::cout << nlohmann::json{{"plan", plan_path},
                                  {"backend", backend_name},
                                  {"seed", seed},
                                  {"steps", std::move(step_rows)},
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
};

}  // namespace

Command add_run_command(CLI::App& app) {
  auto cmd = std::make_shared<RunCommand>();
  auto* sub = app.add_subcommand("run", "train for N steps by executing a plan's task graph");
  sub->add_option("plan", cmd->plan_path, "plan JSON (pipeplan plan -o)")->required();
  sub->add_option("--backend", cmd->backend, "cpu (reference) or cuda")->capture_default_str();
  sub->add_option("--steps", cmd->steps, "training steps")->capture_default_str();
  sub->add_option("--seed", cmd->seed, "weights and synthetic data")->capture_default_str();
  sub->add_flag("--json", cmd->json, "print machine-readable results");
  sub->add_option("--trace", cmd->trace, "write the last step's measured Perfetto trace");
  sub->add_option("--timeout-ms", cmd->timeout_ms, "limit on every wait in the executor")
      ->capture_default_str();
  sub->add_option("--max-host-gib", cmd->max_host_gib, "refuse CPU runs estimated above this")
      ->capture_default_str();
  return {sub, [cmd] { return cmd->run(); }};
}

}  // namespace pipeplan
