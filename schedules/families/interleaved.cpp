// Interleaved 1F1B (Megatron-LM, Narayanan et al. 2021): each device holds V = chunks model
// chunks; virtual stage v runs on device v mod P. Forwards walk the chunks in groups of P
// micro-batches; backwards mirror them from the last chunk. The bubble shrinks by a factor V
// for V times the point-to-point traffic. Orders follow Megatron-LM's
// forward_backward_pipelining_with_interleaving.
#include <algorithm>

#include "planner/base/error.h"
#include "schedules/family.h"

namespace pipeplan {

namespace {

struct Shape {
  int devices, chunks, microbatches;
};

// The k-th forward (or backward) of a device: micro-batch groups of P cycle over the chunks.
int microbatch_of(const Shape& shape, int k) {
  return (k / (shape.devices * shape.chunks)) * shape.devices + k % shape.devices;
}

Action forward_action(const Shape& shape, int device, int k) {
  const int chunk = (k / shape.devices) % shape.chunks;
  return {OpType::F, chunk * shape.devices + device, {microbatch_of(shape, k)}};
}

Action backward_action(const Shape& shape, int device, int k) {
  const int chunk = shape.chunks - 1 - (k / shape.devices) % shape.chunks;
  return {OpType::B, chunk * shape.devices + device, {microbatch_of(shape, k)}};
}

// Megatron-LM's warm-up: (P - i - 1)·2 + (V - 1)·P, capped at m·V. With one chunk the schedule
// is plain 1F1B, whose warm-up is P - i - 1 (Megatron runs the non-interleaved code there).
int warmup_count(const Shape& shape, int device) {
  const int total = shape.microbatches * shape.chunks;
  if (shape.chunks == 1) return std::min(shape.devices - device - 1, total);
  return std::min((shape.devices - device - 1) * 2 + (shape.chunks - 1) * shape.devices, total);
}

Schedule make_interleaved(const ScheduleRequest& request) {
  // Megatron's rule for V > 1 (micro-batches go round the devices in groups of P); with one
  // chunk the order is 1F1B's, for any count.
  if (request.chunks > 1 && request.microbatches % request.devices != 0)
    throw FieldError("microbatches", "interleaved needs a multiple of the " +
                                         std::to_string(request.devices) + " devices, got " +
                                         std::to_string(request.microbatches));
  Schedule schedule = schedule_skeleton(request, "interleaved");
  const Shape shape{request.devices, request.chunks, request.microbatches};
  const int total = shape.microbatches * shape.chunks;
  for (int d = 0; d < shape.devices; ++d) {
    std::vector<Action>& actions = schedule.per_device[static_cast<std::size_t>(d)];
    const int warmup = warmup_count(shape, d);
    for (int k = 0; k < warmup; ++k)
      actions.push_back(forward_action(shape, d, k));
    for (int k = 0; k + warmup < total; ++k) {
      actions.push_back(forward_action(shape, d, k + warmup));
      actions.push_back(backward_action(shape, d, k));
    }
    for (int k = total - warmup; k < total; ++k)
      actions.push_back(backward_action(shape, d, k));
  }
  return schedule;
}

// Device 0 runs warmup_count + 1 chunk forwards before its first backward frees one.
double interleaved_peak(int p, int v, int m) {
  return static_cast<double>(std::min(warmup_count({p, v, m}, 0) + 1, m * v)) / v;
}

const ScheduleFamilyRegistration kInterleaved(
    {.name = "interleaved",
     .description = "Interleaved 1F1B (Megatron-LM, Narayanan et al. 2021): --chunks virtual "
                    "stages per device, virtual stage v on device v mod P; bubble shrinks by the "
                    "chunk count; needs micro-batches divisible by devices (with --chunks 2 or "
                    "more)",
     .listing_order = 30,
     .chunks = {.min = 1, .max = 64, .preferred = 2},
     .memory = {"min(2(P-1) + (V-1)P + 1, mV) / V (V = 1: min(P, m))", interleaved_peak},
     .bpipe = true},
    make_interleaved);

}  // namespace

}  // namespace pipeplan
