// A schedule is data: per device, the ordered list of actions it executes. Text notation
// (round-trips): `<stage><op><microbatch>` with op F (forward), B (fused backward: p1 then p2),
// P1_ (input gradient), P2_ (weight gradient, possibly over several micro-batches joined by '+'):
//   0F3   0B3   0P1_3   0P2_3   0P2_4+5+6+7
// An overlapped pair (DualPipe's F&B: one micro-batch's forward and another's backward run at
// once on one device, each hiding the other's communication) is written in parentheses:
//   (0F7;7B3)
// Stages are virtual stages (model order); Schedule::stage_device maps them to devices.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "schedules/microbatches.h"

namespace pipeplan {

// F, B, P1 and P2 are a schedule's actions. O, the optimizer step (AdamW over a device's
// layers), is no action: lowering appends one per device after its last weight gradient, when
// the profile gives its time (planner/graph/taskgraph.h); its label is "optimizer".
enum class OpType : std::uint8_t { F, B, P1, P2, O };
std::string_view to_string(OpType op);

enum class BackwardMode { fused, twobp, twobp_fill };
std::string_view to_string(BackwardMode mode);                  // "fused", "2bp", "2bp-fill"
BackwardMode backward_mode_from_string(std::string_view text);  // throws Error

struct Action {
  OpType op = OpType::F;
  int stage = 0;              // virtual stage
  MicroBatches microbatches;  // one, except a concatenated P2
  // Runs overlapped with the next action of its device: the two start together and end together
  // (an F followed by a B or P1 of another stage or micro-batch; check_schedule's rules).
  bool overlaps_next = false;
  bool operator==(const Action&) const = default;
};

std::string format_action(const Action& action);
// Appends format_action(action) to `out`: a task-graph node's label is spelt this way.
void append_action(std::string& out, const Action& action);
void append_action(std::string& out, OpType op, int stage, const MicroBatches& microbatches);
Action parse_action(std::string_view text);  // throws Error quoting the text

struct Schedule {
  std::string family;  // generator name, e.g. "1f1b"
  BackwardMode backward = BackwardMode::fused;
  int devices = 0;
  int microbatches = 0;
  std::vector<int> stage_device;  // virtual stage -> device
  std::vector<std::vector<Action>> per_device;
  // Copies of the model that the virtual stages hold: 1, or 2 for a bidirectional pipeline
  // (DualPipe). With c copies of S / c stages each, copy k is stages k S/c .. (k+1) S/c - 1,
  // holding the model's stages in order (stage k S/c + s is a replica of model stage s: the same
  // layers, with parameters of its own whose weight gradients the replicas sum before the
  // optimizer step), and micro-batch mb passes copy mb c / m only: the first m / c micro-batches
  // enter at stage 0, the next m / c at stage S / c, and so on.
  int replicas = 1;

  int stage_count() const { return static_cast<int>(stage_device.size()); }
  int model_stage_count() const { return stage_count() / replicas; }
  int model_stage(int stage) const { return stage % model_stage_count(); }
  int replica_of_microbatch(int mb) const {
    return replicas == 1
               ? 0
               : static_cast<int>(std::int64_t{mb} * replicas / std::max(microbatches, 1));
  }
  // The first and last virtual stage that micro-batch mb passes.
  int first_stage_of(int mb) const { return replica_of_microbatch(mb) * model_stage_count(); }
  int last_stage_of(int mb) const { return first_stage_of(mb) + model_stage_count() - 1; }
  bool passes(int stage, int mb) const {
    return replicas == 1 || stage / model_stage_count() == replica_of_microbatch(mb);
  }
  // Micro-batches that pass each stage: m / replicas.
  int microbatches_per_stage() const { return microbatches / replicas; }
  // Whether the copies are well formed: 1 or 2 of them, with stages and micro-batches in
  // multiples of their number (and at least one stage when there are two).
  bool copies_divide() const {
    return (replicas == 1 || replicas == 2) && stage_count() % replicas == 0 &&
           microbatches % replicas == 0 && (replicas == 1 || stage_count() > 0);
  }
  // The same model stage in the other copy (the stage itself when there is one copy).
  int other_copy(int stage) const {
    return replicas == 1 ? stage : (stage + model_stage_count()) % stage_count();
  }
  // The stage pairs (s, s + S / c) whose copies exchange their weight gradients, in stage order:
  // those on two devices (two copies on one device share their layers' gradients).
  std::vector<std::pair<int, int>> gradient_exchanges() const {
    std::vector<std::pair<int, int>> pairs;
    const int copy = replicas > 1 ? model_stage_count() : stage_count();
    for (int s = 0; s + copy < stage_count(); ++s) {
      if (stage_device[static_cast<std::size_t>(s)] !=
          stage_device[static_cast<std::size_t>(s) + static_cast<std::size_t>(copy)])
        pairs.emplace_back(s, s + copy);
    }
    return pairs;
  }
  std::size_t action_count() const {  // over every device
    std::size_t actions = 0;
    for (const std::vector<Action>& list : per_device)
      actions += list.size();
    return actions;
  }
  bool operator==(const Schedule&) const = default;
};

// Text form:
//   schedule v1 family=1f1b backward=2bp devices=4 microbatches=8 stages=0,1,2,3
//   0: 0F0 0F1 ...
//   1: ...
// with an overlapped pair as one word, "(0F7;7B3)", and "replicas=2" in the header of a
// schedule holding two copies of the model (absent when 1).
std::string schedule_to_text(const Schedule& schedule);
Schedule schedule_from_text(std::string_view text);  // throws Error naming line and token

// Structural check: every (stage, micro-batch) that the micro-batch passes (Schedule::passes)
// has exactly one F and either one B or one P1 and one P2, each on the stage's device, and no
// other pair has any, F before P1/B before P2 in the device's order. An
// overlapped pair is an F followed by a B or P1 of another stage or micro-batch, the last pair
// member not overlapping further. Throws Error naming the first offending action and rule.
void check_schedule(const Schedule& schedule);

// The overlapped-pair rule of check_schedule for the pair that starts at `position` of one
// device's actions: the position of the offending action and the rule it breaks, or nothing
// where that action does not overlap its next or the pair is well formed.
struct PairFault {
  int position = 0;
  std::string rule;
};
std::optional<PairFault> overlapped_pair_fault(const std::vector<Action>& actions, int position);

}  // namespace pipeplan
