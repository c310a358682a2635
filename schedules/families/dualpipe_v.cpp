// DualPipeV: DeepSeek-V3's DualPipe (arXiv 2412.19437, section 3.2.1) cut in half into a V, as
// deepseek-ai/DualPipe and PyTorch's ScheduleDualPipeV run it. Two chunks per device in the V of
// the ZB-V families (virtual stage v on device v, then 2P - 1 - v), and in the steady state each
// device runs a forward of one chunk overlapped with a full backward of the other (an overlapped
// pair, schedules/schedule.h): the two share the device, each hiding the other's communication
// (expert-parallel all-to-all in a MoE model), and take the profile's overlapped time F&B.
//
// Per device d of P, over m >= 2P micro-batches, with chunk 0 = stage d and chunk 1 = stage
// 2P - 1 - d and micro-batches taken in order per stage and pass, the order is eight phases:
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
// a device in the step is the paper's bubble (PP/2 - 1)(F&B + B - 3W) with PP = 2P stages, for
// any F&B from max(F, B) to F + B (tests/schedules/dualpipe_v_test.cpp), and a device holds at
// most 2P + 1 chunk stashes (PP + 1): P + 1/2 micro-batches of its layers.
#include <deque>
#include <string>
#include <vector>

#include "planner/base/error.h"
#include "schedules/families/v_shape.h"

namespace pipeplan {

namespace {

// One device's order, built pass by pass.
class DualPipeVOrder {
 public:
  DualPipeVOrder(int devices, int device, std::vector<Action>& out)
      : stage_{device, 2 * devices - 1 - device}, out_(out) {}

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
  Action next_forward(int chunk) { return {OpType::F, stage_[chunk], {forwards_[chunk]++}}; }
  Action next_backward(int chunk) { return {OpType::B, stage_[chunk], {backwards_[chunk]++}}; }

  int stage_[2];
  int forwards_[2] = {0, 0};
  int backwards_[2] = {0, 0};
  std::deque<Action> owed_;  // p2s of split backwards, oldest first
  std::vector<Action>& out_;
};

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
    DualPipeVOrder o(p, d, schedule.per_device[static_cast<std::size_t>(d)]);
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
     .memory = {"P + 1/2", [](int p, int, int) { return p + 0.5; }}},
    make_dualpipe_v);

}  // namespace

}  // namespace pipeplan
