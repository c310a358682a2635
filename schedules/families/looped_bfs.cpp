// Breadth-first looping (Lamy-Poirier, "Breadth-First Pipeline Parallelism", 2023): each device
// holds V = chunks model chunks, virtual stage v on device v mod P. A device runs the forwards of
// every micro-batch through chunk 0, then through chunk 1, ..., then the backwards from the last
// chunk down to chunk 0. With m >= P no device waits between chunks, so the step is
// m(T_F + T_B + T_W) + (P - 1)(T_F + T_B + T_W)/V (fused, uniform, comm = 0) and stage 0 holds
// the activations of all m micro-batches, like GPipe.
#include "schedules/family.h"

namespace pipeplan {

namespace {

Schedule make_looped_bfs(const ScheduleRequest& request) {
  Schedule schedule = schedule_skeleton(request, "looped-bfs");
  for (int d = 0; d < request.devices; ++d) {
    std::vector<Action>& actions = schedule.per_device[static_cast<std::size_t>(d)];
    for (int chunk = 0; chunk < request.chunks; ++chunk) {
      for (int mb = 0; mb < request.microbatches; ++mb)
        actions.push_back({OpType::F, chunk * request.devices + d, {mb}});
    }
    for (int chunk = request.chunks - 1; chunk >= 0; --chunk) {
      for (int mb = 0; mb < request.microbatches; ++mb)
        actions.push_back({OpType::B, chunk * request.devices + d, {mb}});
    }
  }
  return schedule;
}

const ScheduleFamilyRegistration kLoopedBfs(
    {.name = "looped-bfs",
     .description = "Breadth-first looping (Lamy-Poirier 2023): --chunks virtual stages per "
                    "device, v on device v mod P; every micro-batch through chunk 0, then chunk "
                    "1, ...; backwards in reverse; holds m micro-batches like GPipe",
     .listing_order = 40,
     .chunks = {.min = 1, .max = 64, .preferred = 2},
     .memory = {"m", [](int, int, int m) { return double(m); }},
     .bpipe = true},
    make_looped_bfs);

}  // namespace

}  // namespace pipeplan
