// Whether the per-device orders of a schedule can all run to the end: every action waits for
// its inputs (a forward for the previous stage's forward of its micro-batch, a backward (B or
// P1) for its own forward and the next stage's backward, a P2 for its P1), and a device runs its
// actions in order. When they cannot, the devices stuck at their next action wait on each other
// in a cycle; this finds it and names the action that closes it, for a message that points at
// the place to fix (an imported PyTorch CSV names the row and cell).
#pragma once

#include <optional>
#include <vector>

#include "schedules/schedule.h"

namespace pipeplan {

struct DeadlockStep {
  int device = 0, position = 0;  // the action a device is stuck at
  Action waits_for;              // the input it needs
  int producer_position = 0;     // where that input is in its device's order (behind its head)
};

// The cycle reached from the lowest stuck device: steps[i]'s input is produced on the device
// of steps[i + 1] (the last one's on the device of steps[0]), behind the action that device is
// stuck at. steps.back() is the action that closes the cycle.
struct Deadlock {
  std::vector<DeadlockStep> steps;
};

// The inputs `a` waits for, as above (one action per input; none for a first stage's forward).
std::vector<Action> action_inputs(const Action& a, const Schedule& schedule);
// Whether `producer` makes `input`, an entry of action_inputs (a B or a P1 makes a backward input).
bool produces(const Action& producer, const Action& input);

// Needs a schedule that passes check_schedule (every input exists exactly once). Linear in the
// number of actions. `starts_together` (optional, per device and action): how many actions from
// there on start together, once the inputs of them all are there (a PyTorch OVERLAP_F_B cell);
// an overlapped pair (Action::overlaps_next) always does.
std::optional<Deadlock> find_deadlock(
    const Schedule& schedule, const std::vector<std::vector<int>>* starts_together = nullptr);

}  // namespace pipeplan
