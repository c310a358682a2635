// `--schedule auto` with overlapped pairs (dualpipe-v's F&B, a seed of the V layout): the local
// search moves a pair as a whole or its actions where the pair keeps its form, so every plan it
// returns has the pairs check_schedule asks for, and it is never slower than dualpipe-v itself;
// the compact evaluation refuses a broken pair.
#include <gtest/gtest.h>

#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "planner/base/error.h"
#include "planner/graph/validator.h"
#include "planner/plan/make_plan.h"
#include "planner/search/auto_moves.h"
#include "schedules/family.h"
#include "tests/planner/search/auto_fixtures.h"
#include "tools/plan_options.h"

namespace pipeplan {
namespace {

int pair_count(const Schedule& schedule) {
  int pairs = 0;
  for (const std::vector<Action>& actions : schedule.per_device) {
    for (const Action& a : actions)
      pairs += a.overlaps_next ? 1 : 0;
  }
  return pairs;
}

struct Input {
  std::string label;
  PlanOptions options;
};

std::vector<Input> inputs() {
  std::vector<Input> out;
  PlanOptions llama;
  llama.model = "llama-7b";
  llama.gpu = "h100";
  llama.seq = 2048;
  out.push_back({"llama-7b", llama});
  PlanOptions gpt;
  gpt.model = "gpt-1.5b";
  gpt.gpu = "h100";
  gpt.seq = 1024;
  out.push_back({"gpt-1.5b", gpt});
  PlanOptions uniform;
  uniform.uniform = "1:2:1:0.1";
  out.push_back({"uniform 1:2:1:0.1", uniform});
  return out;
}

// At each overlap efficiency auto's plan passes check_schedule and the validator, and its step
// time is at most dualpipe-v's (one of its seeds) on the same input.
TEST(AutoOverlap, KeepsWellFormedPairsAndIsNoSlowerThanDualPipeV) {
  const std::vector<std::pair<int, int>> shapes = {{2, 4},  {2, 8},  {2, 16}, {4, 8},
                                                   {4, 16}, {4, 24}, {8, 16}, {8, 32}};
  for (const Input& input : inputs()) {
    for (const auto& [p, m] : shapes) {
      for (const char* efficiency : {"1", "0.5"}) {
        const std::string label = input.label + " P=" + std::to_string(p) +
                                  " m=" + std::to_string(m) + " overlap efficiency " + efficiency;
        PlanOptions o = input.options;
        o.stages = p;
        o.microbatches = m;
        o.overlap_efficiency = efficiency;
        o.schedule = "dualpipe-v";
        const Plan dualpipe_v = make_plan(make_request(o));
        o.schedule = "auto";
        o.backward = "2bp";
        Plan automatic;
        try {
          automatic = make_plan(make_request(o));
        } catch (const Error& e) {
          ADD_FAILURE() << label << ": " << e.what();
          continue;
        }
        EXPECT_NO_THROW(check_schedule(automatic.graph.schedule)) << label;
        EXPECT_NO_THROW(validate(automatic.graph)) << label;
        EXPECT_LE(automatic.sim.makespan_us, dualpipe_v.sim.makespan_us * (1 + 1e-9)) << label;
      }
    }
  }
}

// dualpipe-v on 2P stages of uneven costs, the V layout auto evaluates it on.
struct Seeded {
  std::vector<StageCost> costs;
  PlanMeta meta;
  Schedule schedule;
};

Seeded dualpipe_v_seed(int p, int m, double efficiency) {
  Seeded s;
  for (int v = 0; v < 2 * p; ++v)
    s.costs.push_back(
        testing::stage(1.0 + 0.15 * (v % 3), 1.2 + 0.1 * (v % 4), 0.7, 1.0, 0.5, 0.0, m));
  s.meta =
      testing::meta_for(std::vector<StageCost>(s.costs.begin(), s.costs.begin() + p), m, {}, 0.05);
  s.meta.chunks = 2;
  s.meta.overlap.efficiency = efficiency;
  const ScheduleFamily& family = find_schedule_family("dualpipe-v");
  const ScheduleRequest request{p, 2, m, BackwardMode::twobp, 0, nullptr};
  s.schedule = with_backward_mode(family, family.generate(request), request, s.costs, s.meta);
  s.schedule.family = "auto";
  return s;
}

// The local search on a dualpipe-v order never breaks a pair's form: every order it keeps passes
// check_schedule and the validator and holds as many pairs as the seed, and it finds moves that
// help.
TEST(AutoOverlap, MovesKeepThePairsWellFormed) {
  int improved = 0;
  for (const int p : {2, 4}) {
    for (const int m : {2 * p, 4 * p}) {
      for (const double efficiency : {1.0, 0.5, 0.0}) {
        const std::string label = "P=" + std::to_string(p) + " m=" + std::to_string(m) +
                                  " efficiency " + std::to_string(efficiency);
        Seeded s = dualpipe_v_seed(p, m, efficiency);
        ASSERT_NO_THROW(check_schedule(s.schedule)) << label;
        const int pairs = pair_count(s.schedule);
        ASSERT_GT(pairs, 0) << label;
        const EvalContext context{&s.costs, &s.meta, Objective::step};
        std::string first_error;
        std::optional<AutoEval> seed = evaluate_order(s.schedule, context, true, first_error);
        ASSERT_TRUE(seed) << label << ": " << first_error;
        AutoEval current = *seed;
        int budget = 2000;
        improved += improve_by_moves(s.schedule, current, context, first_error, budget) > 0;
        EXPECT_NO_THROW(check_schedule(s.schedule)) << label;
        EXPECT_EQ(pair_count(s.schedule), pairs) << label;
        EXPECT_FALSE(better(seed->score, current.score, Objective::step)) << label;
        // The kept score is the order's own.
        const std::optional<AutoEval> again =
            evaluate_order(s.schedule, context, false, first_error);
        ASSERT_TRUE(again) << label;
        EXPECT_DOUBLE_EQ(again->score.makespan_us, current.score.makespan_us) << label;
        const TaskGraph graph = lower(s.schedule, s.costs, s.meta);
        EXPECT_NO_THROW(validate(graph)) << label;
      }
    }
  }
  EXPECT_GT(improved, 0);
}

// An order whose pair check_schedule refuses cannot be evaluated: the compact evaluation says
// why in check_schedule's words, instead of timing the flagged F with whatever follows it.
TEST(AutoOverlap, TheEvaluationRefusesABrokenPair) {
  Seeded s = dualpipe_v_seed(4, 16, 1.0);
  const EvalContext context{&s.costs, &s.meta, Objective::step};
  std::vector<Action>& actions = s.schedule.per_device[0];
  std::size_t first = 0;
  while (first < actions.size() && !actions[first].overlaps_next)
    ++first;
  ASSERT_LT(first + 1, actions.size());
  const auto expect_refused = [&](const Schedule& broken, const std::string& what) {
    std::string message;
    try {
      check_schedule(broken);
    } catch (const Error& e) {
      message = e.what();
    }
    ASSERT_NE(message.find(what), std::string::npos) << message;
    std::string first_error;
    EXPECT_FALSE(evaluate_order(broken, context, false, first_error)) << what;
    EXPECT_EQ("schedule check: " + first_error, message) << what;
  };
  {
    // The pair's backward swapped with a later P2: the flagged F is followed by the P2.
    Schedule broken = s.schedule;
    std::vector<Action>& list = broken.per_device[0];
    std::size_t later = first + 2;
    while (later < list.size() && list[later].op != OpType::P2)
      ++later;
    ASSERT_LT(later, list.size());
    std::swap(list[first + 1], list[later]);
    expect_refused(
        broken, "an overlapped pair is an F then a B or P1, got " + format_action(list[first + 1]));
  }
  {
    // A flagged action at a device's end.
    Schedule broken = s.schedule;
    broken.per_device[0].back().overlaps_next = true;
    expect_refused(broken, "overlaps the next action but is the device's last");
  }
}

}  // namespace
}  // namespace pipeplan
