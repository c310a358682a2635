// Schedule families: each one a file in schedules/families/ (or, for a family built from the
// costs, in the layer that can evaluate them, like `auto` in planner/search/) that declares what
// it accepts and registers itself by name. Nothing else in the tree lists families: the planner,
// the search, `compare` and the tests ask the registry and the family's declared traits.
//
// A family produces the per-device order of a step. Families that leave the backward to the
// backward mode emit forwards (F) and fused backwards (B), which schedules/backward.h (fused,
// 2bp) or planner/plan/backward_fill.h (2bp-fill) split into p1/p2; families that place p2
// themselves (Zero Bubble style) emit P1 and P2 and accept --backward 2bp only.
//
// Adding a family (docs/design/architecture.md has a complete example):
//   namespace {
//   Schedule make_reverse(const ScheduleRequest& request) { ... }
//   const ScheduleFamilyRegistration kReverse({.name = "reverse", .description = "...",
//                                              .memory = {"m", [](int, int, int m) { ... }}},
//                                             make_reverse);
//   }
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "profiles/partition.h"
#include "profiles/profile.h"
#include "schedules/schedule.h"

namespace pipeplan {

// One cut of the model into virtual stages: transformer blocks per stage (the embedding rides
// with the first stage, the head with the last) and each stage's costs.
struct StageCut {
  std::vector<int> blocks;
  std::vector<StageCost> costs;
};

// What a balanced cut balances: each device's stages as a whole (stages s and n - 1 - s
// together: `folded`; s mod P: `mod_devices`), or each stage alone (`stages`).
enum class CutBalance : std::uint8_t { mod_devices, folded, stages };

// What a family built from the costs (`auto`) needs beyond the shape; absent for the others.
struct StageCostContext {
  std::vector<StageCost> costs;            // per virtual stage of the request's cut, model order
  std::vector<double> memory_limit_bytes;  // per device; 0 = unlimited
  P2pLink link;                            // every device pair
  OverlapModel overlap;                    // an overlapped pair's time (profiles/overlap.h)
  // The profile's contention model (profiles/contention.h): a sustained-load term, a shared GPU's
  // curves; empty where it has none.
  Contention contention;
  // The HBM of the GPU, which the stages share where `contention` has curves; 0 where unknown.
  double gpu_hbm_bytes = 0;
  // Other cuts of the model, for a family that chooses the layout itself (auto): the balanced
  // cut into `stage_count` virtual stages when `blocks` is empty (`balance` says what it
  // balances), else those blocks per stage. With `replicas` copies of the model
  // (Schedule::replicas) the model is cut into stage_count / replicas stages (`blocks` and the
  // grouping count those; the returned blocks too) and the costs are that cut `replicas` times, as
  // make_plan costs the plan. Throws Error when the model cannot be cut so. Unset: only `costs` is
  // known.
  std::function<StageCut(int stage_count, const std::vector<int>& blocks, CutBalance balance,
                         int replicas)>
      cut;
  // Set by a family that chooses the layout: the blocks per stage of the schedule it returned
  // (empty: the request's own cut), and the smallest lower bounds on the step time and on the
  // largest stage span over every layout it considered (0: none); make_plan builds the plan's
  // stages from the first and reports the second.
  std::vector<int> chosen_blocks;
  double bound_step_us = 0, bound_span_us = 0;
  // What it chose, in words (auto: the layout and the candidate, e.g. "V seed=zb-v +2 moves").
  std::string chosen;
  // Set by a family that calls evaluate_first: true when the schedule it returned is the very
  // candidate it handed to the hook, unchanged (make_plan then takes the graph lowered from it
  // without comparing the two orders action by action).
  bool returned_first = false;
  // Set by the planner for a family that evaluates candidates (auto), which calls it with its
  // first candidate, that candidate's stage costs and the evaluation it is about to run on it.
  // The hook runs `evaluate` once before it returns, and may meanwhile prepare the candidate's
  // plan (make_plan lowers it beside the evaluation, and uses that graph if the family returns
  // this very order). Unset: the family evaluates it itself.
  std::function<void(const Schedule& candidate, const std::vector<StageCost>& costs,
                     const std::function<void()>& evaluate)>
      evaluate_first;
};

// What `auto` minimises first, the other breaking ties: the global step time with a
// synchronising optimizer step (`step`), or the iteration time when successive iterations
// overlap, bounded by the largest single-device span (`steady`: the figure Zero Bubble's bubble
// rates use).
enum class Objective : std::uint8_t { step, steady };
std::string_view to_string(Objective objective);
Objective objective_from_string(std::string_view text);  // throws FieldError("objective")

struct ScheduleRequest {
  int devices = 0;
  int chunks = 1;  // virtual stages per device
  int microbatches = 0;
  // The backward mode; empty: the family's default (resolve_backward_mode decides it, and a
  // family's generator always sees it decided). Read by families that place p2 themselves.
  std::optional<BackwardMode> backward{};
  int p2_concat = 1;                      // 0: all micro-batches of a stage in one call
  StageCostContext* costs = nullptr;      // set by make_plan for families that need it (in and out)
  Objective objective = Objective::step;  // read by families built from the costs
  int max_copies = 2;  // copies of the model a family built from the costs may hold (auto)
};

// Who turns a backward into p1 and p2.
enum class P2Placement : std::uint8_t {
  by_backward_mode,  // the family emits fused B; --backward fused, 2bp or 2bp-fill splits it
  by_family,         // the family emits P1 and P2 itself; --backward 2bp only
};

// Accepted --chunks (virtual stages per device) and the count that `compare` and the search
// try: a family whose one-chunk form is another family's (interleaved with V = 1 is 1F1B) is
// tried only at its preferred count.
struct ChunkRule {
  int min = 1;
  int max = 1;
  int preferred = 1;
  bool accepts(int chunks) const { return chunks >= min && chunks <= max; }
};

// Peak activation memory of the family's order on its busiest device, in micro-batch stashes of
// one device's layers (M_B), with uniform stages: every micro-batch counts from its forward until
// its backward has finished (p2 included). `peak` takes (devices P, chunks V, micro-batches m);
// `formula` says the same for people. tests/schedules/families_test.cpp holds every family to
// its declaration against the simulator. Families built from the costs fit the memory limit
// instead (`peak` is empty).
struct MemoryModel {
  std::string_view formula;
  std::function<double(int devices, int chunks, int microbatches)> peak;
};

struct ScheduleFamilyTraits {
  std::string_view name;
  std::string_view description;
  // Position in listings (`compare`, --help); ties by name.
  int listing_order = 100;
  P2Placement p2 = P2Placement::by_backward_mode;
  ChunkRule chunks{};
  MemoryModel memory{};
  // Built from the stage costs and memory limits (ScheduleRequest::costs).
  bool needs_costs = false;
  // BPipe activation transfers can be added to its plans (planner/plan/bpipe.h).
  bool bpipe = false;
  // Copies of the model its virtual stages hold (Schedule::replicas): the planner cuts the model
  // into stages / replicas and gives every copy that cut.
  int replicas = 1;
  // Which stages of the model's cut share a device, for the balanced cut (planner/plan): false,
  // stage s on device s mod P (one-chunk and interleaved families); true, folded, stages s and
  // n - 1 - s of the n-stage cut on one device (the V families' 2P stages; DualPipe's P stages,
  // device r holding stage r of one copy and P - 1 - r of the other).
  bool folded_stages = false;
};

class ScheduleFamily {
 public:
  using Generate = std::function<Schedule(const ScheduleRequest&)>;
  ScheduleFamily(const ScheduleFamilyTraits& traits, Generate generate);

  const ScheduleFamilyTraits& traits() const { return traits_; }
  const std::string& name() const { return name_; }

  // fused, 2bp, 2bp-fill for families that leave p2 to the backward mode; 2bp for the others.
  std::vector<BackwardMode> backward_modes() const;
  bool accepts(BackwardMode mode) const;
  bool places_p2() const { return traits_.p2 == P2Placement::by_family; }
  // Whether a p2 group size (--p2-concat) means anything in `mode`: it joins deferred p2s, of
  // which a fused backward defers none, and a family placing each p2 itself (but one built from
  // the costs, auto) runs one micro-batch a call. `plan` refuses it elsewhere; compare's rows and
  // the search's points are planned without it there.
  bool takes_p2_concat(BackwardMode mode) const {
    return mode != BackwardMode::fused && (!places_p2() || traits_.needs_costs);
  }

  // Throws FieldError naming the field (devices, microbatches, chunks, backward, p2_concat) when
  // the request's shape does not suit the family.
  void check(const ScheduleRequest& request) const;
  // check(), then (FieldError "schedule" for a family that needs the costs and got none) the
  // family's order, labelled with the family's name and, when the family places p2 itself, the
  // request's backward mode as resolve_backward_mode decides it (fused otherwise: the mode is
  // applied after, by planner/plan/make_plan.h's with_backward_mode).
  Schedule generate(const ScheduleRequest& request) const;

 private:
  ScheduleFamilyTraits traits_;
  std::string name_;
  Generate generate_;
};

// Every registered family, in listing order. Stable for the life of the process.
const std::vector<const ScheduleFamily*>& schedule_families();
// Throws FieldError("schedule") listing the valid names.
const ScheduleFamily& find_schedule_family(std::string_view name);

// find_schedule_family(family).generate(request).
Schedule generate_schedule(std::string_view family, const ScheduleRequest& request);

// The backward mode a plan of `family` runs, decided here and nowhere else: `requested` when the
// family takes it; when empty, the family's default: 2bp for a family that places p2 itself (it
// takes nothing else), fused for the others. Throws FieldError("backward") when the family does
// not take `requested`. Front ends call it once where they build a request; the planner applies
// the mode it returns as given.
BackwardMode resolve_backward_mode(const ScheduleFamily& family,
                                   std::optional<BackwardMode> requested);

// Virtual stages per device when a request names none: the family's preferred count (1 for most;
// 2 for the V families, which take no other, and for interleaved and looped-bfs, which at one
// chunk are 1F1B and GPipe). A count a request names is checked by ScheduleFamily::check.
int default_chunks(const ScheduleFamily& family);

// A static object of this type in a family's file adds the family at start-up. Throws
// (terminating the program: a programming error) on a duplicate name.
class ScheduleFamilyRegistration {
 public:
  ScheduleFamilyRegistration(const ScheduleFamilyTraits& traits, ScheduleFamily::Generate generate);
};

// A fused schedule with no actions yet: devices × chunks virtual stages, v on device v mod P.
Schedule schedule_skeleton(const ScheduleRequest& request, std::string_view family);
// The V's map of 2P virtual stages on P devices: v on device v, then on 2P - 1 - v (the V
// families; DualPipe's two copies, copy 1 from the last device back).
std::vector<int> v_stage_device(int devices);

}  // namespace pipeplan
