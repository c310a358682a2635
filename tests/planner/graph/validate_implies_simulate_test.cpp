// Property: a plan the validator accepts also simulates (what `show` and `run` do with it). Small
// plans of several families are mutated at random in their JSON (edges added, removed or made
// self-edges, node fields changed, stream orders swapped); every mutant that loads and validates
// must simulate without a deadlock, an error or a violation. A validator that skips a rule the
// simulator relies on fails here (it accepted a self-edge `[3, 3]` that show then refused).
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "planner/base/error.h"
#include "planner/graph/evaluate.h"
#include "planner/graph/simulator.h"
#include "planner/graph/taskgraph.h"
#include "planner/graph/validator.h"
#include "tests/planner/plan_fixtures.h"

namespace pipeplan {
namespace {

using nlohmann::json;

struct Mutator {
  std::mt19937 rng;

  int pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng); }

  void mutate(json& plan) {
    json& nodes = plan["nodes"];
    json& edges = plan["edges"];
    const int n = static_cast<int>(nodes.size());
    switch (pick(7)) {
      case 0:  // an edge between two nodes, sometimes a node and itself
        if (pick(4) == 0) {
          const int a = pick(n);
          edges.push_back({a, a});
        } else {
          edges.push_back({pick(n), pick(n)});
        }
        break;
      case 1:  // an edge removed
        if (!edges.empty())
          edges.erase(static_cast<std::size_t>(pick(static_cast<int>(edges.size()))));
        break;
      case 2: {  // a small integer field of a node changed
        static const char* kFields[] = {"device", "stage", "stream", "match", "peer"};
        json& node = nodes[static_cast<std::size_t>(pick(n))];
        const char* field = kFields[pick(5)];
        if (node.contains(field)) node[field] = pick(6) - 1;
        break;
      }
      case 3: {  // two entries of one stream's order swapped
        json& streams = plan["streams"];
        json& order =
            streams[static_cast<std::size_t>(pick(static_cast<int>(streams.size())))]["order"];
        if (order.size() >= 2) {
          const auto i = static_cast<std::size_t>(pick(static_cast<int>(order.size())));
          const auto j = static_cast<std::size_t>(pick(static_cast<int>(order.size())));
          std::swap(order[i], order[j]);
        }
        break;
      }
      case 4: {  // a compute op changed
        static const char* kOps[] = {"F", "B", "P1", "P2"};
        json& node = nodes[static_cast<std::size_t>(pick(n))];
        if (node["kind"] == "compute") node["op"] = kOps[pick(4)];
        break;
      }
      case 5: {  // memory moved between nodes
        json& node = nodes[static_cast<std::size_t>(pick(n))];
        node["alloc_bytes"] = pick(3) * 4096;
        node["free_bytes"] = pick(3) * 4096;
        break;
      }
      default: {  // a micro-batch changed
        json& node = nodes[static_cast<std::size_t>(pick(n))];
        node["microbatches"] = json::array({pick(4)});
        break;
      }
    }
  }
};

TEST(ValidateImpliesSimulate, EveryPlanTheValidatorAcceptsSimulates) {
  std::vector<testing::UniformPlan> bases(4);
  bases[0] = {.devices = 2, .microbatches = 3};
  bases[1] = {.devices = 3, .microbatches = 3, .backward = BackwardMode::twobp};
  bases[2] = {.devices = 2, .microbatches = 4, .chunks = 2, .schedule = "interleaved"};
  bases[3] = {
      .devices = 2, .microbatches = 3, .schedule = "zb-h1", .backward = BackwardMode::twobp};
  Mutator mutator{std::mt19937(20261127)};
  int accepted = 0;
  int refused = 0;
  for (const testing::UniformPlan& base : bases) {
    const json original = plan_to_json(testing::uniform_plan(base).graph);
    for (int round = 0; round < 600; ++round) {
      json plan = original;
      const int mutations = 1 + mutator.pick(3);
      for (int k = 0; k < mutations; ++k)
        mutator.mutate(plan);
      TaskGraph graph;
      try {
        graph = plan_from_json(plan, "mutant.json");
      } catch (const Error&) {
        ++refused;  // the loader's own checks
        continue;
      }
      if (find_violation(graph)) {
        ++refused;
        continue;
      }
      ++accepted;
      CheckedSimulation checked;
      ASSERT_NO_THROW(checked = validate_and_simulate(graph)) << plan.dump();
      EXPECT_FALSE(checked.violation) << checked.violation->message << "\n" << plan["edges"].dump();
      SimResult sim;
      ASSERT_NO_THROW(sim = simulate(graph)) << plan["edges"].dump();
      EXPECT_GT(sim.makespan_us, 0);
    }
  }
  // Both sides are exercised: mutants the validator takes, and mutants it refuses.
  EXPECT_GT(accepted, 100);
  EXPECT_GT(refused, 1000);
}

}  // namespace
}  // namespace pipeplan
