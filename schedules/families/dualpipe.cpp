// DeepSeek-V3's DualPipe (arXiv 2412.19437, section 3.2.1) and its cut-in-half form DualPipeV, as
// deepseek-ai/DualPipe runs them (and PyTorch's ScheduleDualPipeV, the V). Each device holds two
// chunks and, in the steady state, runs a forward of one chunk overlapped with a full backward of
// the other (an overlapped pair, schedules/schedule.h): the two share the device, each hiding the
// other's communication (expert-parallel all-to-all in a MoE model), and take the profile's
// overlapped time F&B.
//
// DualPipeV: the V of the ZB-V families, virtual stage v on device v, then 2P - 1 - v; chunk 0 of
// device d is stage d, chunk 1 stage 2P - 1 - d, and every micro-batch passes all 2P stages.
// DualPipe: P devices (P even), the model in P stages held twice (Schedule::replicas = 2): copy 0
// is stages 0..P-1 with stage s on device s, fed the first m/2 micro-batches at device 0; copy 1
// is stages P..2P-1 with stage P + s (model stage s) on device P - 1 - s, fed the other m/2 at
// device P - 1. Device r's chunks are its stages of the two copies; on the first half of the
// devices chunk 0 is copy 0's, on the second half copy 1's, and the order is DualPipeV's on P/2
// devices, as device min(r, P - 1 - r), with m/2 micro-batches per chunk.
//
// Per device d of P, over m >= 2P micro-batches per chunk, micro-batches taken in order per stage
// and pass, the order is eight phases:
//   1. 2(P - d - 1) chunk-0 forwards;
//   2. d + 1 rounds of a chunk-0 then a chunk-1 forward;
//   3. P - d - 1 rounds of a chunk-1 p1, the oldest owed p2, a chunk-1 forward (zero bubble);
//   4. m - 2P + d + 1 rounds of two pairs, (chunk-0 F; chunk-1 B) then (chunk-1 F; chunk-0 B),
//      the first pair of the last device run in sequence (its backward input arrives last);
//   5. P - d - 1 rounds of a chunk-1 B, then the pair (chunk-1 F; chunk-0 B);
//   6. d + 1 rounds of a chunk-1 then a chunk-0 backward, full until the middle round and split
//      into p1 (owing its p2) from there on (from the chunk-1 one on odd devices, from the chunk-0
//      one on even devices);
//   7. P - d - 1 rounds of the oldest owed p2, then a chunk-0 backward (split as phase 6 left it);
//   8. the d + 1 p2s still owed.
// At uniform costs (F = P1 = P2, B = P1 + P2 the full backward, W = P2) the largest idle time of
// a device in the step is the paper's bubble (PP/2 - 1)(F&B + B - 3W), PP the pipeline's depth
// in devices' chunks (2P for DualPipeV, P for DualPipe), for any F&B from max(F, B) to F + B
// (tests/schedules/dualpipe_v_test.cpp, dualpipe_test.cpp). A DualPipeV device holds at most
// 2P + 1 chunk stashes (PP + 1): P + 1/2 micro-batches of its layers; a DualPipe device P + 1
// stashes of its stages (PP + 1), a stage being L/P layers.
#include <algorithm>
#include <array>
#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "planner/base/error.h"
#include "schedules/families/v_shape.h"

namespace pipeplan {

namespace {

// One device's order, built pass by pass: chunk c is virtual stage stage[c], its micro-batches
// numbered from first_mb[c].
class DualPipeOrder {
 public:
  DualPipeOrder(std::array<int, 2> stage, std::array<int, 2> first_mb, std::vector<Action>& out)
      : stage_(stage), forwards_(first_mb), backwards_(first_mb), out_(out) {}

  void forward(int chunk) { out_.push_back(next_forward(chunk)); }
  // A full backward (B), or a p1 whose p2 is owed until weight() runs it.
  void backward(int chunk, bool split) {
    Action a = next_backward(chunk);
    if (split) {
      a.op = OpType::P1;
      owed_.push_back({OpType::P2, a.stage, a.microbatches});
    }
    out_.push_back(std::move(a));
  }
  // The forward of `forward_chunk` overlapped with the full backward of the other chunk.
  void pair(int forward_chunk) {
    out_.push_back(next_forward(forward_chunk));
    out_.back().overlaps_next = true;
    out_.push_back(next_backward(1 - forward_chunk));
  }
  void weight() {
    if (owed_.empty()) return;
    out_.push_back(std::move(owed_.front()));
    owed_.pop_front();
  }

 private:
  static std::size_t at(int chunk) { return static_cast<std::size_t>(chunk); }
  Action next_forward(int chunk) {
    return {OpType::F, stage_[at(chunk)], {forwards_[at(chunk)]++}};
  }
  Action next_backward(int chunk) {
    return {OpType::B, stage_[at(chunk)], {backwards_[at(chunk)]++}};
  }

  std::array<int, 2> stage_;
  std::array<int, 2> forwards_;
  std::array<int, 2> backwards_;
  std::deque<Action> owed_;  // p2s of split backwards, oldest first
  std::vector<Action>& out_;
};

// The eight phases of device d of p, with m micro-batches per chunk.
void eight_phases(DualPipeOrder& o, int p, int d, int m) {
  const int below = p - d - 1;  // devices after this one in chunk 0's direction
  for (int i = 0; i < 2 * below; ++i)
    o.forward(0);
  for (int i = 0; i <= d; ++i) {
    o.forward(0);
    o.forward(1);
  }
  for (int i = 0; i < below; ++i) {
    o.backward(1, true);
    o.weight();
    o.forward(1);
  }
  for (int i = 0; i < m - 2 * p + d + 1; ++i) {
    if (i == 0 && d == p - 1) {
      o.forward(0);
      o.backward(1, false);
    } else {
      o.pair(0);
    }
    o.pair(1);
  }
  for (int i = 0; i < below; ++i) {
    o.backward(1, false);
    o.pair(1);
  }
  bool split = false;
  for (int i = 0; i <= d; ++i) {
    const bool middle = i == (d + 1) / 2;
    if (middle && d % 2 == 1) split = true;
    o.backward(1, split);
    if (middle && d % 2 == 0) split = true;
    o.backward(0, split);
  }
  for (int i = 0; i < below; ++i) {
    o.weight();
    o.backward(0, split);
  }
  for (int i = 0; i <= d; ++i)
    o.weight();
}

Schedule make_dualpipe_v(const ScheduleRequest& request) {
  const int p = request.devices;
  const int m = request.microbatches;
  if (m < 2 * p) {
    throw FieldError("microbatches",
                     "schedule 'dualpipe-v' needs at least 2P = " + std::to_string(2 * p) +
                         " micro-batches (one per stage), got " + std::to_string(m));
  }
  Schedule schedule = v_skeleton(request, "dualpipe-v");
  for (int d = 0; d < p; ++d) {
    DualPipeOrder o({d, 2 * p - 1 - d}, {0, 0}, schedule.per_device[static_cast<std::size_t>(d)]);
    eight_phases(o, p, d, m);
  }
  return schedule;
}

Schedule make_dualpipe(const ScheduleRequest& request) {
  const int p = request.devices;
  const int m = request.microbatches;
  if (p % 2 != 0) {
    throw FieldError(
        "devices", "schedule 'dualpipe' needs an even number of devices, got " + std::to_string(p));
  }
  if (m % 2 != 0 || m < 2 * p) {
    throw FieldError(
        "microbatches",
        "schedule 'dualpipe' needs an even number of at least 2P = " + std::to_string(2 * p) +
            " micro-batches (half fed from each end), got " + std::to_string(m));
  }
  // The V's stage-to-device map is DualPipe's: stage P + s (model stage s of copy 1) lies on
  // device 2P - 1 - (P + s) = P - 1 - s.
  Schedule schedule = v_skeleton(request, "dualpipe");
  schedule.replicas = 2;
  for (int r = 0; r < p; ++r) {
    // Chunk 0 is copy 0's stage r (micro-batches from 0), chunk 1 copy 1's model stage P - 1 - r
    // (from m/2); on the second half of the devices the other way round.
    std::array<int, 2> stage{r, 2 * p - 1 - r};
    std::array<int, 2> first_mb{0, m / 2};
    if (r >= p / 2) {
      std::swap(stage[0], stage[1]);
      std::swap(first_mb[0], first_mb[1]);
    }
    DualPipeOrder o(stage, first_mb, schedule.per_device[static_cast<std::size_t>(r)]);
    eight_phases(o, p / 2, std::min(r, p - 1 - r), m / 2);
  }
  return schedule;
}

const ScheduleFamilyRegistration kDualPipeV(
    {.name = "dualpipe-v",
     .description = "DualPipeV (DeepSeek-V3's DualPipe cut in half, as PyTorch's "
                    "ScheduleDualPipeV): --chunks 2 in a V, a forward overlapped with another "
                    "chunk's backward (F&B) in the steady state, bubble (P-1)(F&B+B-3W), P+1/2 "
                    "micro-batches of activations; m >= 2P; needs --backward 2bp",
     .listing_order = 75,
     .p2 = P2Placement::by_family,
     .chunks = {.min = 2, .max = 2, .preferred = 2},
     .memory = {"P + 1/2", [](int p, int, int) { return p + 0.5; }},
     .folded_stages = true},
    make_dualpipe_v);

const ScheduleFamilyRegistration kDualPipe(
    {.name = "dualpipe",
     .description = "DualPipe (DeepSeek-V3): the model in P stages held twice, micro-batches fed "
                    "from both ends (half each), device r holding stage r of one copy and "
                    "P-1-r of the other; F&B pairs in the steady state, bubble "
                    "(P/2-1)(F&B+B-3W), two copies of the parameters, P+1 micro-batches of a "
                    "stage's activations; P even, m even and >= 2P; needs --backward 2bp",
     .listing_order = 76,
     .p2 = P2Placement::by_family,
     .chunks = {.min = 2, .max = 2, .preferred = 2},
     // M_B as for every family: a micro-batch's activations of L/P layers, here one stage's.
     .memory = {"P + 1", [](int p, int, int) { return p + 1.0; }},
     .replicas = 2,
     .folded_stages = true},
    make_dualpipe);

}  // namespace

}  // namespace pipeplan
