#include "schedules/registry.h"

#include "planner/base/error.h"

namespace pipeplan {

const std::vector<ScheduleFamily>& schedule_families() {
  static const std::vector<ScheduleFamily> families = {
      {"gpipe",
       "GPipe (Huang et al. 2019): every forward, then every backward; holds m micro-batches of "
       "activations per stage",
       false, make_gpipe},
      {"1f1b",
       "1F1B (PipeDream-Flush): P-i-1 warm-up forwards on device i, then one forward one "
       "backward; holds min(P-i, m) micro-batches",
       false, make_1f1b},
      {"interleaved",
       "Interleaved 1F1B (Megatron-LM, Narayanan et al. 2021): --chunks virtual stages per "
       "device, virtual stage v on device v mod P; bubble shrinks by the chunk count; needs "
       "micro-batches divisible by devices",
       true, make_interleaved},
      {"looped-bfs",
       "Breadth-first looping (Lamy-Poirier 2023): --chunks virtual stages per device, v on "
       "device v mod P; every micro-batch through chunk 0, then chunk 1, ...; backwards in "
       "reverse; holds m micro-batches like GPipe",
       true, make_looped_bfs},
      {"zb-h1",
       "ZB-H1 (Qi et al. 2024): 1F1B warm-up, p2 of device i lags its p1 by i; bubble "
       "(P-1)(F+B-W) at 1F1B's memory P*M_B; needs --backward 2bp",
       false, make_zb_h1, true},
      {"zb-h2",
       "ZB-H2 (Qi et al. 2024): 2(P-i-1)+1 warm-up forwards, p2 lags p1 by 2i; bubble "
       "(P-1)(F+B-2W) per stage span with (2P-1)*M_B; needs --backward 2bp",
       false, make_zb_h2, true},
      {"zb-v",
       "ZB-V (Qi et al. 2024): --chunks 2 in a V (virtual stage v on device v, then 2P-1-v), "
       "the published order: zero bubble per stage span at F=B=W with m >= 2P, at 1F1B's "
       "memory P*M_B (m < P: memory-capped greedy); needs --backward 2bp",
       true, make_zb_v, true},
      {"v-half",
       "V-Half (Qi et al. 2405.15362): the V placement capped at about half of 1F1B's memory, "
       "(P+2)/2*M_B; --chunks 2; needs --backward 2bp",
       true, make_v_half, true},
      {"v-min",
       "V-Min (Qi et al. 2405.15362): the paper's building block with minimal offsets repeated "
       "every 6 passes; (P+4)/3*M_B of activations, bubble about 2P/3 of (F+B+W); --chunks 2; "
       "needs --backward 2bp",
       true, make_v_min, true},
      {"auto",
       "Automatic (pipeplan, docs/auto-schedule.md): list scheduling over the real per-stage "
       "F/p1/p2 times and per-device memory limits, p2 placed and concatenated where it pays; "
       "the best of its variants and the fixed families, improved by a local search on the "
       "order; needs --backward 2bp",
       false, make_auto_unplanned, true},
  };
  return families;
}

const ScheduleFamily& find_schedule_family(std::string_view name) {
  std::string valid;
  for (const ScheduleFamily& family : schedule_families()) {
    if (family.name == name) return family;
    valid += (valid.empty() ? "" : ", ") + family.name;
  }
  throw Error("--schedule: unknown schedule family '" + std::string(name) + "' (valid: " + valid +
              ")");
}

void check_schedule_request(const ScheduleRequest& request, std::string_view family,
                            bool uses_chunks) {
  if (request.devices < 1)
    throw Error("--stages: need at least 1 device, got " + std::to_string(request.devices));
  if (request.microbatches < 1)
    throw Error("--microbatches: need at least 1 micro-batch, got " +
                std::to_string(request.microbatches));
  if (request.chunks < 1)
    throw Error("--chunks: need at least 1 chunk per device, got " +
                std::to_string(request.chunks));
  if (request.chunks > 1 && !uses_chunks)
    throw Error("--chunks: schedule '" + std::string(family) + "' runs one chunk per device, got " +
                std::to_string(request.chunks) + " (use --schedule interleaved)");
}

Schedule schedule_skeleton(const ScheduleRequest& request, std::string_view family) {
  Schedule schedule;
  schedule.family = std::string(family);
  schedule.backward = BackwardMode::fused;
  schedule.devices = request.devices;
  schedule.microbatches = request.microbatches;
  const int stages = request.devices * request.chunks;
  for (int v = 0; v < stages; ++v)
    schedule.stage_device.push_back(v % request.devices);
  schedule.per_device.resize(static_cast<std::size_t>(request.devices));
  return schedule;
}

}  // namespace pipeplan
