// Run under `mpirun -np 4` by mpi_gradients_test.cpp: `pipeplan_mpi_gradients FAMILY BACKWARD
// [bpipe]`. Every rank runs its plan device of the tiny model's plan over the MPI transport, one
// training step and one gradients-only step; rank 0 gathers every layer's gradients, runs the
// same two steps in one process (the in-process transport) and compares both losses and every
// gradient. Prints "gradients equal" and exits 0 when all are within 1e-6 relative.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "planner/graph/validator.h"
#include "runtime/mpi/mpi_session.h"
#include "tests/runtime/executor_fixtures.h"

namespace pipeplan {
namespace {

constexpr double kTolerance = 1e-6;
constexpr std::chrono::milliseconds kTimeout(20000);

ExecutorOptions options_for(const TaskGraph& plan) {
  ExecutorOptions options;
  options.seed = 17;
  options.timeout = kTimeout;
  // The hand-built BPipe transfers are on streams the validator does not know yet.
  options.validate = !find_violation(plan).has_value();
  return options;
}

// layer index -> one gradient per parameter, for the layers this executor holds.
nlohmann::json gradients(const Executor& executor, const TaskGraph& plan) {
  cpu::CpuBackend host;
  nlohmann::json out = nlohmann::json::object();
  for (int l = 0; l < static_cast<int>(plan.meta.model.layer_list().size()); ++l) {
    try {
      nlohmann::json params = nlohmann::json::array();
      for (const Parameter& p : executor.layer(l).params)
        params.push_back(host.download(p.grad));
      out[std::to_string(l)] = std::move(params);
    } catch (const Error&) {
      // held by another rank
    }
  }
  return out;
}

int compare(const TaskGraph& plan, const std::vector<double>& losses,
            const std::vector<std::string>& shares) {
  Executor single(plan, testing::cpu_backends(), options_for(plan));
  const std::vector<double> want = {single.step().loss, single.step(StepMode::gradients_only).loss};
  const nlohmann::json reference = gradients(single, plan);
  nlohmann::json got = nlohmann::json::object();
  for (const std::string& share : shares) {
    const nlohmann::json layers = nlohmann::json::from_cbor(share);  // outlives the loop
    for (const auto& [layer, params] : layers.items())
      got[layer] = params;
  }
  int failures = 0;
  for (std::size_t s = 0; s < want.size(); ++s) {
    if (std::abs(losses.at(s) - want[s]) > kTolerance * std::abs(want[s])) {
      std::printf("step %zu: loss %.9f under MPI, %.9f in one process\n", s + 1, losses[s],
                  want[s]);
      ++failures;
    }
  }
  double worst = 0;
  int compared = 0;
  for (const auto& [layer, params] : reference.items()) {
    if (!got.contains(layer)) {
      std::printf("layer %s: no rank sent its gradients\n", layer.c_str());
      ++failures;
      continue;
    }
    for (std::size_t p = 0; p < params.size(); ++p) {
      const double error = testing::relative_error(got[layer].at(p).get<std::vector<double>>(),
                                                   params.at(p).get<std::vector<double>>());
      worst = std::max(worst, error);
      ++compared;
      if (error > kTolerance) {
        std::printf("layer %s parameter %zu: relative error %.3g\n", layer.c_str(), p, error);
        ++failures;
      }
    }
  }
  std::printf("losses %.9f %.9f (one process %.9f %.9f); %d gradients, worst relative error %.3g\n",
              losses[0], losses[1], want[0], want[1], compared, worst);
  if (failures == 0) std::printf("gradients equal\n");
  return failures == 0 ? 0 : 1;
}

int run(int argc, char** argv, ProcessGroup& group, MpiSession& session) {
  if (argc < 3) throw AgreedError("usage: pipeplan_mpi_gradients FAMILY BACKWARD [bpipe]");
  const ScheduleFamily& family = find_schedule_family(argv[1]);
  BackwardMode mode = BackwardMode::fused;
  for (const BackwardMode m : family.backward_modes()) {
    if (to_string(m) == argv[2]) mode = m;
  }
  std::optional<TaskGraph> plan = testing::tiny_plan(family, mode);
  if (!plan) throw AgreedError("the planner does not make this plan");
  if (argc > 3 && std::string(argv[3]) == "bpipe") {
    plan = testing::with_bpipe_transfers(std::move(*plan), 0, testing::kDevices - 1);
  }
  ExecutorOptions options = options_for(*plan);
  options.group = session.group();
  std::vector<double> losses;
  std::string share;
  {
    Executor executor(*plan, testing::cpu_backends(), options, session.make_transport(kTimeout));
    losses.push_back(executor.step().loss);
    losses.push_back(executor.step(StepMode::gradients_only).loss);
    const std::vector<std::uint8_t> cbor = nlohmann::json::to_cbor(gradients(executor, *plan));
    share.assign(cbor.begin(), cbor.end());
  }
  const std::vector<std::string> shares = group.gather(share, "the gradients", kTimeout);
  return group.rank() == 0 ? compare(*plan, losses, shares) : 0;
}

}  // namespace
}  // namespace pipeplan

int main(int argc, char** argv) {
  using namespace pipeplan;
  MpiSession& session = MpiSession::start();
  ProcessGroup& group = *session.group();
  int status = 1;
  try {
    status = run(argc, argv, group, session);
  } catch (const AgreedError& e) {
    if (group.rank() == 0) std::fprintf(stderr, "error: %s\n", e.what());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: rank %d: %s\n", group.rank(), e.what());
  }
  std::fflush(stdout);
  session.finish(kTimeout);
  return status;
}
