// The simulator against the published closed forms (uniform stages, comm = 0) and basic
// communication behaviour.
#include "planner/graph/simulator.h"

#include <cmath>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "tests/error_support.h"
#include "tests/planner/plan_fixtures.h"

namespace pipeplan {
namespace {

using testing::error_of;
using testing::kGiB;
using testing::uniform_plan;
using testing::UniformPlan;

struct Shape {
  int p;
  int m;
  double f, b, w;
};

class ClosedForms : public ::testing::TestWithParam<Shape> {};

// GPipe and 1F1B with fused backward: step = (m + P − 1)(T_F + T_B + T_W), so each stage idles
// (P − 1)(T_F + T_B + T_W).
TEST_P(ClosedForms, FusedBackward) {
  const Shape s = GetParam();
  for (const char* schedule : {"gpipe", "1f1b"}) {
    UniformPlan u{.devices = s.p,
                  .microbatches = s.m,
                  .schedule = schedule,
                  .backward = BackwardMode::fused,
                  .f = s.f,
                  .b = s.b,
                  .w = s.w};
    const Plan plan = uniform_plan(u);
    const double per_mb = s.f + s.b + s.w;
    EXPECT_NEAR(plan.sim.makespan_us, (s.m + s.p - 1) * per_mb * 1e3, 1e-6) << schedule;
    for (const DeviceMetrics& d : plan.sim.devices) {
      EXPECT_NEAR(plan.sim.makespan_us - d.busy_us, (s.p - 1) * per_mb * 1e3, 1e-6) << schedule;
      EXPECT_NEAR(d.bubble_ratio, (s.p - 1) * per_mb / ((s.m + s.p - 1) * per_mb), 1e-12);
    }
  }
}

// 2BP with every p2 at the end: the p1 chain runs like a fused pipeline of T_F + T_B, then the
// first stage (the last to finish its p1s) runs its m weight gradients:
// step = (m + P − 1)(T_F + T_B) + m·T_W.
TEST_P(ClosedForms, TwoStageBackward) {
  const Shape s = GetParam();
  for (const char* schedule : {"gpipe", "1f1b"}) {
    UniformPlan u{.devices = s.p,
                  .microbatches = s.m,
                  .schedule = schedule,
                  .backward = BackwardMode::twobp,
                  .f = s.f,
                  .b = s.b,
                  .w = s.w};
    const Plan plan = uniform_plan(u);
    EXPECT_NEAR(plan.sim.makespan_us, ((s.m + s.p - 1) * (s.f + s.b) + s.m * s.w) * 1e3, 1e-6)
        << schedule;
    // Stage 0 idles (P − 1)(T_F + T_B): the p2 no longer sits in the ramp.
    EXPECT_NEAR(plan.sim.makespan_us - plan.sim.devices[0].busy_us, (s.p - 1) * (s.f + s.b) * 1e3,
                1e-6);
  }
}

INSTANTIATE_TEST_SUITE_P(Uniform, ClosedForms,
                         ::testing::Values(Shape{4, 4, 1, 1, 1}, Shape{4, 8, 1, 1, 1},
                                           Shape{8, 16, 1, 2, 1}, Shape{2, 6, 1.5, 1, 0.5},
                                           Shape{6, 12, 1, 1.3, 0.7}));

// Peak activation memory on stage 0: 1F1B fused holds P stashes (P·M_B); GPipe holds m.
TEST(SimulatorMemory, FusedPeaksMatchClosedForms) {
  for (const int p : {2, 4, 8}) {
    const int m = 2 * p;
    const Plan one_f_one_b = uniform_plan({.devices = p, .microbatches = m, .schedule = "1f1b"});
    EXPECT_NEAR(static_cast<double>(one_f_one_b.sim.devices[0].peak_memory_bytes), p * kGiB, 1);
    // Stage i holds min(P − i, m) micro-batches.
    for (int i = 0; i < p; ++i) {
      EXPECT_NEAR(static_cast<double>(
                      one_f_one_b.sim.devices[static_cast<std::size_t>(i)].peak_memory_bytes),
                  (p - i) * kGiB, 1);
    }
    const Plan gpipe = uniform_plan({.devices = p, .microbatches = m, .schedule = "gpipe"});
    EXPECT_NEAR(static_cast<double>(gpipe.sim.devices[0].peak_memory_bytes), m * kGiB, 1);
  }
}

// 2BP keeps X and dY of every micro-batch until the end. A p1 turns a micro-batch's stash (M_F)
// into its retained X/dY (M_R < M_F here), so stage 0 of 1F1B peaks at
// max over k of (min(P, m − k)·M_F + k·M_R) after its k-th p1: P·M_F + (m − P)·M_R.
TEST(SimulatorMemory, TwoStageBackwardRetainsUntilTheEnd) {
  const int p = 4;
  for (const int m : {4, 8, 16}) {
    const Plan plan = uniform_plan(
        {.devices = p, .microbatches = m, .schedule = "1f1b", .backward = BackwardMode::twobp});
    const double stash = 1.0, retained = 0.5;
    double expected = 0;
    for (int done = 0; done <= m; ++done) {
      expected = std::max(expected, std::min(p, m - done) * stash + done * retained);
    }
    EXPECT_NEAR(static_cast<double>(plan.sim.devices[0].peak_memory_bytes), expected * kGiB, 1)
        << "m=" << m;
    EXPECT_NEAR(expected, p * stash + (m - p) * retained, 1e-12);
    const Plan fused = uniform_plan({.devices = p, .microbatches = m, .schedule = "1f1b"});
    if (m > p) {
      EXPECT_GT(plan.sim.devices[0].peak_memory_bytes, fused.sim.devices[0].peak_memory_bytes);
    }
  }
}

// With a pure latency per boundary, 1F1B fused pays 2(P − 1) latencies on the critical path.
TEST(SimulatorComm, LatencyOnEveryBoundary) {
  const int p = 4, m = 8;
  const Plan plan = uniform_plan({.devices = p, .microbatches = m, .comm = 0.25});
  const Plan free = uniform_plan({.devices = p, .microbatches = m});
  EXPECT_GT(plan.sim.makespan_us, free.sim.makespan_us);
  EXPECT_GE(plan.sim.makespan_us, free.sim.makespan_us + 2 * (p - 1) * 0.25e3 - 1e-6);
  // Sends and receives of a pair start and end together.
  for (int id = 0; id < plan.graph.node_count(); ++id) {
    const Node& n = plan.graph.node(id);
    if (n.kind != NodeKind::send) continue;
    EXPECT_DOUBLE_EQ(plan.sim.times[static_cast<std::size_t>(id)].start_us,
                     plan.sim.times[static_cast<std::size_t>(n.match)].start_us);
    EXPECT_NEAR(plan.sim.times[static_cast<std::size_t>(id)].end_us -
                    plan.sim.times[static_cast<std::size_t>(id)].start_us,
                250.0, 1e-9);
  }
}

// Transfers that share a directed link are serialised by bandwidth.
TEST(SimulatorComm, BandwidthSerialisesALink) {
  PlanRequest r = testing::uniform_request(
      {.devices = 2, .microbatches = 4, .schedule = "gpipe", .f = 0.001, .b = 1, .w = 1});
  r.profile.p2p = {0.0, 1.0};  // 1 GB/s
  for (auto& [mbs, cost] : r.profile.layers["block"])
    cost.send_bytes = 1'000'000;  // 1 ms each
  const Plan plan = make_plan(r);
  std::vector<NodeTime> sends;
  for (int id = 0; id < plan.graph.node_count(); ++id) {
    const Node& n = plan.graph.node(id);
    if (n.kind == NodeKind::send && n.device == 0) {
      sends.push_back(plan.sim.times[static_cast<std::size_t>(id)]);
    }
  }
  ASSERT_EQ(sends.size(), 4u);
  for (std::size_t i = 1; i < sends.size(); ++i) {
    EXPECT_GE(sends[i].start_us, sends[i - 1].start_us + 1000.0 - 1e-6);
  }
}

// A link slower than a transfer's duration says (a hand-edited plan): the next transfer on the
// link waits for it, whichever order the event loop takes ready nodes in.
TEST(SimulatorComm, LinkOccupancyBeyondDurationHoldsTheNextTransfer) {
  PlanRequest r = testing::uniform_request(
      {.devices = 2, .microbatches = 4, .schedule = "gpipe", .f = 0.001, .b = 1, .w = 1});
  r.profile.p2p = {0.0, 1.0};  // 1 GB/s
  for (auto& [mbs, cost] : r.profile.layers["block"])
    cost.send_bytes = 1'000'000;  // 1 ms on the link
  Plan plan = make_plan(r);
  for (int id = 0; id < plan.graph.node_count(); ++id) {
    Node& n = plan.graph.node(id);
    if (n.kind != NodeKind::compute) n.duration_us = 10.0;  // but 10 us by the node
  }
  for (const SimOrder order : {SimOrder::automatic, SimOrder::by_ready_time}) {
    const SimResult sim = simulate(plan.graph, order);
    std::vector<double> starts;
    for (int id = 0; id < plan.graph.node_count(); ++id) {
      const Node& n = plan.graph.node(id);
      if (n.kind == NodeKind::send && n.device == 0)
        starts.push_back(sim.times[static_cast<std::size_t>(id)].start_us);
    }
    ASSERT_EQ(starts.size(), 4u);
    for (std::size_t i = 1; i < starts.size(); ++i)
      EXPECT_GE(starts[i], starts[i - 1] + 1000.0 - 1e-6);
  }
}

// A transfer starts when the later of its two halves is ready, whichever half the event loop
// takes last: here the receive waits on a long compute op of its own device (a hand-made graph;
// lowering never gives a receive an input other than its send).
TEST(SimulatorComm, TransferWaitsForTheLaterHalf) {
  TaskGraph g;
  g.meta.devices = 2;
  const auto compute = [&](int device, double us) {
    Node n;
    n.device = device;
    n.stream = g.stream(device, StreamRole::compute);
    n.duration_us = us;
    set_label(n, "0F0");
    return g.add_node(std::move(n));
  };
  const int early = compute(0, 1000.0);
  const int late = compute(1, 5000.0);
  Node send;
  send.kind = NodeKind::send;
  send.transfer = Transfer::activation;
  send.device = 0;
  send.peer = 1;
  send.stream = g.stream(0, StreamRole::send, 1);
  send.duration_us = 10.0;
  set_label(send, "0F0");
  Node recv = send;
  recv.kind = NodeKind::recv;
  recv.device = 1;
  recv.peer = 0;
  recv.stream = g.stream(1, StreamRole::recv, 0);
  const auto [s, r] = g.add_message(std::move(send), std::move(recv));
  g.add_data_edge(early, s);
  g.add_data_edge(late, r);
  for (const SimOrder order : {SimOrder::automatic, SimOrder::by_ready_time}) {
    const SimResult sim = simulate(g, order);
    EXPECT_DOUBLE_EQ(sim.times[static_cast<std::size_t>(s)].start_us, 5000.0);
    EXPECT_DOUBLE_EQ(sim.times[static_cast<std::size_t>(r)].end_us, 5010.0);
  }
}

// Stages sharing one GPU (meta.contention, emulation): processor sharing. Device 0 runs ops of
// 1000 and 500 profiled us, device 1 one of 3000; while two run each advances at 1 / 1.5, alone
// at 1 / 1.2. The first ends when it has done its 1000 us of work: at 1500 us.
TEST(SimulatorContention, OpsRunningAtOnceShareTheGpu) {
  TaskGraph g;
  g.meta.devices = 2;
  const auto compute = [&](int device, double us, OpType op) {
    Node n;
    n.device = device;
    n.stream = g.stream(device, StreamRole::compute);
    n.duration_us = us;
    n.op = op;
    set_label(n, op == OpType::F ? "0F0" : "1P1_0");
    return g.add_node(std::move(n));
  };
  const int a = compute(0, 1000.0, OpType::F);
  const int b = compute(1, 3000.0, OpType::P1);
  const int after = compute(0, 500.0, OpType::F);  // alone once b has ended
  g.meta.contention.slowdown = {1.2, 1.5};
  SimResult sim = simulate(g);
  EXPECT_DOUBLE_EQ(sim.times[static_cast<std::size_t>(a)].end_us, 1500.0);
  // `after` starts at 1500 beside b: both at 1 / 1.5. `after` ends at 1500 + 750 = 2250 having
  // let b do 500 more (1500 done); b's last 1500 alone take 1800: b ends at 4050.
  EXPECT_DOUBLE_EQ(sim.times[static_cast<std::size_t>(after)].start_us, 1500.0);
  EXPECT_DOUBLE_EQ(sim.times[static_cast<std::size_t>(after)].end_us, 2250.0);
  EXPECT_NEAR(sim.times[static_cast<std::size_t>(b)].end_us, 4050.0, 1e-9);
  EXPECT_NEAR(sim.makespan_us, 4050.0, 1e-9);

  // A curve of its own for P1 (the others keep `slowdown`): b at 1 / 2 while shared.
  g.meta.contention.by_op["P1"] = {1.0, 2.0};
  sim = simulate(g);
  // a ends at 1500 (F at 1.5); b did 750. With `after`: F at 1 / 1.5 ends at 2250, b did 375
  // more (1125); b's last 1875 alone at 1.0: ends at 4125.
  EXPECT_DOUBLE_EQ(sim.times[static_cast<std::size_t>(after)].end_us, 2250.0);
  EXPECT_NEAR(sim.times[static_cast<std::size_t>(b)].end_us, 4125.0, 1e-9);

  // Without a model the ops take their profiled times.
  g.meta.contention = {};
  sim = simulate(g);
  EXPECT_DOUBLE_EQ(sim.times[static_cast<std::size_t>(b)].end_us, 3000.0);
  EXPECT_DOUBLE_EQ(sim.times[static_cast<std::size_t>(after)].end_us, 1500.0);
}

// A curve of ones is no model at all: every plan's times equal the plain simulation's, and a
// flat factor stretches a one-device plan's step exactly.
// A 4-stage 2BP plan with communication, and a check that two simulations agree node by node.
Plan comm_plan(const char* schedule) {
  return uniform_plan({.devices = 4,
                       .microbatches = 8,
                       .schedule = schedule,
                       .backward = BackwardMode::twobp,
                       .comm = 0.05});
}

void expect_same_times(const SimResult& got, const SimResult& want, const char* label) {
  ASSERT_EQ(got.times.size(), want.times.size());
  for (std::size_t i = 0; i < got.times.size(); ++i) {
    EXPECT_NEAR(got.times[i].start_us, want.times[i].start_us, 1e-6) << label << i;
    EXPECT_NEAR(got.times[i].end_us, want.times[i].end_us, 1e-6) << label << i;
  }
}

TEST(SimulatorContention, OnesChangeNothingAndAFlatFactorStretchesOneDevice) {
  for (const char* schedule : {"gpipe", "1f1b"}) {
    Plan plan = comm_plan(schedule);
    plan.graph.meta.contention.slowdown = {1.0, 1.0, 1.0, 1.0};
    expect_same_times(simulate(plan.graph), plan.sim, schedule);
  }
  Plan one = uniform_plan({.devices = 1, .microbatches = 4});
  one.graph.meta.contention.slowdown = {1.25};
  EXPECT_NEAR(simulate(one.graph).makespan_us, 1.25 * one.sim.makespan_us, 1e-6);
}

// A transfer between stages on one GPU is a copy kernel on the sender's SMs (contention.copy):
// device 0 runs A (1000 us), then B; A's output goes to device 1 (100 us of link time). The copy
// runs beside B at 1 / sender_computing and alone at 1 / sender_idle; compute on the receiving
// device does not slow it.
class CopyGraph {
 public:
  CopyGraph() { g.meta.devices = 2; }
  int compute(int device, double us) {
    Node n;
    n.device = device;
    n.stream = g.stream(device, StreamRole::compute);
    n.duration_us = us;
    set_label(n, "0F" + std::to_string(next_mb_++));
    return g.add_node(std::move(n));
  }
  // A send of `us` link time from device 0 to 1 after `after`: an activation on the send/recv
  // streams or a BPipe move on the transfer streams.
  std::pair<int, int> send(int after, double us, Transfer what = Transfer::activation) {
    Node send;
    send.kind = NodeKind::send;
    send.transfer = what;
    send.device = 0;
    send.peer = 1;
    send.stream =
        g.stream(0, what == Transfer::activation ? StreamRole::send : StreamRole::transfer, 1);
    send.duration_us = us;
    send.microbatches = {next_mb_};
    set_label(send, "0F" + std::to_string(next_mb_++));
    Node recv = send;
    recv.kind = NodeKind::recv;
    recv.device = 1;
    recv.peer = 0;
    recv.stream =
        g.stream(1, what == Transfer::activation ? StreamRole::recv : StreamRole::transfer, 0);
    const auto pair = g.add_message(std::move(send), std::move(recv));
    g.add_data_edge(after, pair.first);
    return pair;
  }
  NodeTime time_of(const SimResult& sim, int id) const {
    return sim.times[static_cast<std::size_t>(id)];
  }
  TaskGraph g;

 private:
  int next_mb_ = 0;
};

TEST(SimulatorContention, ACopySharesItsSendersSms) {
  for (const double b_us : {3000.0, 500.0, 0.0}) {
    CopyGraph c;
    const int a = c.compute(0, 1000.0);
    if (b_us > 0) c.compute(0, b_us);  // B follows A on device 0's compute stream
    c.compute(1, 9000.0);              // the receiver computing changes nothing
    const auto [s, r] = c.send(a, 100.0);
    c.g.meta.contention.slowdown = {1.0};
    c.g.meta.contention.copy = CopySlowdown{.sender_idle = 2.0, .sender_computing = 10.0};
    const SimResult sim = simulate(c.g);
    // Beside B: 100 us of work at 1 / 10 ends at 2000. Beside a 500 us B: 50 done by 1500, the
    // other 50 at 1 / 2 by 1600. Alone: 200 us, ends at 1200.
    const double end = b_us == 3000.0 ? 2000.0 : b_us == 500.0 ? 1600.0 : 1200.0;
    EXPECT_DOUBLE_EQ(c.time_of(sim, s).start_us, 1000.0) << b_us;
    EXPECT_NEAR(c.time_of(sim, s).end_us, end, 1e-9) << b_us;
    EXPECT_NEAR(c.time_of(sim, r).end_us, end, 1e-9) << b_us;
    // Without a copy model the transfer takes its link time.
    c.g.meta.contention.copy.reset();
    EXPECT_DOUBLE_EQ(c.time_of(simulate(c.g), s).end_us, 1100.0) << b_us;
  }
}

// Transfers over one directed link go one at a time, in the order their halves met, whichever
// streams they are on; the second waits for the first's (stretched) end.
TEST(SimulatorContention, CopiesOverOneLinkGoOneAtATime) {
  CopyGraph c;
  const int a = c.compute(0, 1000.0);
  c.compute(0, 400.0);
  const auto [s1, r1] = c.send(a, 100.0);
  const auto [s2, r2] = c.send(a, 100.0, Transfer::evict);
  c.g.meta.contention.slowdown = {1.0};
  c.g.meta.contention.copy = CopySlowdown{.sender_idle = 1.0, .sender_computing = 5.0};
  const SimResult sim = simulate(c.g);
  // Both meet at 1000; the first taken (ties go by node id) does 80 us of work beside the 400 us
  // op and the last 20 alone: 1000 .. 1420. The second then runs alone.
  const NodeTime first = c.time_of(sim, s1);
  const NodeTime second = c.time_of(sim, s2);
  EXPECT_DOUBLE_EQ(first.start_us, 1000.0);
  EXPECT_NEAR(first.end_us, 1420.0, 1e-9);
  EXPECT_NEAR(second.start_us, 1420.0, 1e-9);
  EXPECT_NEAR(second.end_us, 1520.0, 1e-9);
  EXPECT_DOUBLE_EQ(c.time_of(sim, r1).end_us, c.time_of(sim, s1).end_us);
  EXPECT_DOUBLE_EQ(c.time_of(sim, r2).end_us, c.time_of(sim, s2).end_us);
}

// Copy factors of one are the plain model: each link has one in-order stream in a lowered plan,
// so holding the link until the copy ends delays nothing.
TEST(SimulatorContention, CopyFactorsOfOneChangeNothing) {
  for (const char* schedule : {"gpipe", "1f1b"}) {
    Plan plan = comm_plan(schedule);
    plan.graph.meta.contention.slowdown = {1.0};
    const SimResult plain = simulate(plan.graph);
    plan.graph.meta.contention.copy = CopySlowdown{};
    expect_same_times(simulate(plan.graph), plain, schedule);
    // A slow copy beside compute lengthens the step.
    plan.graph.meta.contention.copy = CopySlowdown{.sender_idle = 1.0, .sender_computing = 20.0};
    EXPECT_GT(simulate(plan.graph).makespan_us, plain.makespan_us + 1.0) << schedule;
  }
}

// The sustained-load model (contention.sustained): every op's rate is also divided by
// 1 + factor * H, H the share of devices computing averaged exponentially over tau.
constexpr double kTau = 1000.0;
constexpr double kBeta = 0.6;

// How long an op of profiled time `work` takes at factor 1 while the share computing is `share`
// and H starts at `h0`: by numbers (midpoint sums of the rate and bisection), not the closed
// form the simulator uses.
double numeric_duration(double work, double share, double h0, double beta = kBeta,
                        double tau = kTau) {
  const auto done_by = [&](double t) {
    constexpr int kSteps = 200000;
    const double dt = t / kSteps;
    double done = 0;
    for (int i = 0; i < kSteps; ++i) {
      const double h = share + (h0 - share) * std::exp(-(i + 0.5) * dt / tau);
      done += dt / (1 + beta * h);
    }
    return done;
  };
  double lo = work, hi = work * (1 + beta);
  for (int i = 0; i < 60; ++i) {
    const double mid = (lo + hi) / 2;
    (done_by(mid) < work ? lo : hi) = mid;
  }
  return (lo + hi) / 2;
}

class SustainedGraph {
 public:
  explicit SustainedGraph(int devices, double beta = kBeta, double tau = kTau) {
    g.meta.devices = devices;
    g.meta.contention.slowdown = {1.0};
    g.meta.contention.sustained = SustainedLoad{.factor = beta, .time_constant_us = tau};
  }
  int compute(int device, double us) {
    Node n;
    n.device = device;
    n.stream = g.stream(device, StreamRole::compute);
    n.duration_us = us;
    n.op = OpType::F;
    set_label(n, "0F" + std::to_string(g.node_count()));
    return g.add_node(std::move(n));
  }
  NodeTime time(const SimResult& sim, int id) const {
    return sim.times[static_cast<std::size_t>(id)];
  }
  TaskGraph g;
};

// Two stages busy for 20 tau bring H to 1; the short op after them, alone (share 1/2), starts at
// that load and slows down as H falls: the time the numbers give, well above 1 + factor / 2.
TEST(SimulatorSustainedLoad, AnOpAfterABusySpellRunsSlowerAsTheLoadDecays) {
  // Other lengths of the op after, from a hundredth of tau to three: each as the numbers give.
  for (const double work : {kTau / 100, kTau / 7, kTau * 1.3, kTau * 3}) {
    SustainedGraph c(2);
    c.compute(0, 20 * kTau);
    c.compute(1, 20 * kTau);
    const int after = c.compute(0, work);
    const SimResult sim = simulate(c.g);
    EXPECT_NEAR(c.time(sim, after).end_us - c.time(sim, after).start_us,
                numeric_duration(work, 0.5, 1.0), 1e-6 * kTau)
        << work;
  }
  SustainedGraph c(2);
  const int a0 = c.compute(0, 20 * kTau);
  c.compute(1, 20 * kTau);
  const int after = c.compute(0, kTau / 2);
  const SimResult sim = simulate(c.g);
  // Both long ops at share 1: H rises to 1 within a few tau from the load the step's own end
  // leaves, so they end a little before 20 tau at 1 / (1 + factor).
  EXPECT_LE(c.time(sim, a0).end_us, 20 * kTau * (1 + kBeta) + 1e-6);
  EXPECT_GT(c.time(sim, a0).end_us, 20 * kTau * (1 + kBeta) - kTau);
  const double start = c.time(sim, after).start_us;
  const double took = c.time(sim, after).end_us - start;
  EXPECT_NEAR(took, numeric_duration(kTau / 2, 0.5, 1.0), 1e-6 * kTau);
  EXPECT_GT(took, kTau / 2 * (1 + kBeta / 2) * 1.05);  // the history shows
}

// The load rising: after 20 tau of one stage alone (H = 1/2) both compute (share 1), and an op
// of either length takes the time the numbers give for H climbing from 1/2 towards 1.
TEST(SimulatorSustainedLoad, AnOpRunsSlowerAsTheLoadRises) {
  for (const double work : {kTau / 100, kTau / 7, kTau * 0.8, kTau * 1.3, kTau * 3}) {
    SustainedGraph c(2);
    const int alone = c.compute(0, 20 * kTau);
    const int x = c.compute(0, work);
    const int beside = c.compute(1, 40 * kTau);
    c.g.add_data_edge(alone, beside);
    const SimResult sim = simulate(c.g);
    EXPECT_NEAR(c.time(sim, x).end_us - c.time(sim, x).start_us, numeric_duration(work, 1.0, 0.5),
                1e-6 * kTau)
        << work;
  }
}

// The closed form and its Newton solve at the edges of what a profile may hold (factor up to
// 100, the time constant from a microsecond to seconds) and ops from 1/50 of the time constant to
// 4 times it: with the load falling (after 20 time constants of both stages busy, an op alone)
// and rising (after 20 alone, an op beside a long one), each as the numbers give.
TEST(SimulatorSustainedLoad, FactorsAndTimeConstantsAtTheEdges) {
  for (const double beta : {0.05, 2.0, 100.0}) {
    for (const double tau : {1.0, 1e3, 1e6}) {
      for (const double work : {tau / 50, tau * 4}) {
        const std::string at = "factor " + std::to_string(beta) + ", tau " + std::to_string(tau) +
                               " us, op " + std::to_string(work) + " us";
        SustainedGraph falling(2, beta, tau);
        falling.compute(0, 20 * tau);
        falling.compute(1, 20 * tau);
        const int after = falling.compute(0, work);
        const SimResult fell = simulate(falling.g);
        const NodeTime a = falling.time(fell, after);
        const double expect_fell = numeric_duration(work, 0.5, 1.0, beta, tau);
        EXPECT_NEAR(a.end_us - a.start_us, expect_fell, 1e-5 * expect_fell) << at << ", falling";

        SustainedGraph rising(2, beta, tau);
        const int alone = rising.compute(0, 20 * tau);
        const int x = rising.compute(0, work);
        const int beside = rising.compute(1, 20 * tau * (1 + beta) + 10 * work * (1 + beta));
        rising.g.add_data_edge(alone, beside);
        const SimResult rose = simulate(rising.g);
        const NodeTime b = rising.time(rose, x);
        const double expect_rose = numeric_duration(work, 1.0, 0.5, beta, tau);
        EXPECT_NEAR(b.end_us - b.start_us, expect_rose, 1e-5 * expect_rose) << at << ", rising";
      }
    }
  }
}

// A step starts at the load its own end leaves: here a short op alone on device 0, then a long
// one alone on device 1 (20 tau, share 1/2), so the next step's first op starts at H = 1/2 with
// share 1/2 and runs at exactly 1 / (1 + factor / 2), not at the faster rate of an idle GPU.
TEST(SimulatorSustainedLoad, AStepStartsAtTheLoadItsOwnEndLeaves) {
  SustainedGraph c(2);
  const int first = c.compute(0, kTau / 2);
  const int last = c.compute(1, 20 * kTau);
  c.g.add_data_edge(first, last);
  const SimResult sim = simulate(c.g);
  EXPECT_NEAR(c.time(sim, first).end_us, kTau / 2 * (1 + kBeta / 2), 1e-6 * kTau);
  EXPECT_LT(numeric_duration(kTau / 2, 0.5, 0.0), kTau / 2 * (1 + kBeta / 2) - 0.01 * kTau);
}

// A graph of a short step twice over (an op of tau / 2 on one device and of tau / 4 on the
// other, both from the start), the second copy after the first, runs each copy exactly as the
// step alone: the step starts at the load(s) it ends at. `separate`: separate GPUs (no curve).
// Returns the step's length.
double expect_repeats_run_as_the_step_alone(bool separate) {
  const auto graph = [&] {
    SustainedGraph g(2);
    if (separate) g.g.meta.contention.slowdown.clear();
    return g;
  };
  SustainedGraph once = graph();
  const int a = once.compute(0, kTau / 2);
  const int b = once.compute(1, kTau / 4);
  const SimResult one = simulate(once.g);
  SustainedGraph twice = graph();
  const int a1 = twice.compute(0, kTau / 2);
  const int b1 = twice.compute(1, kTau / 4);
  const int a2 = twice.compute(0, kTau / 2);
  const int b2 = twice.compute(1, kTau / 4);
  twice.g.add_data_edge(b1, a2);
  twice.g.add_data_edge(a1, b2);
  const SimResult two = simulate(twice.g);
  const double step = once.time(one, a).end_us;
  EXPECT_GT(step, once.time(one, b).end_us);
  for (const auto& [op, first, second] : {std::tuple{a, a1, a2}, std::tuple{b, b1, b2}}) {
    const NodeTime alone = once.time(one, op);
    EXPECT_NEAR(twice.time(two, first).start_us, alone.start_us, 1e-6 * kTau);
    EXPECT_NEAR(twice.time(two, first).end_us, alone.end_us, 1e-6 * kTau);
    EXPECT_NEAR(twice.time(two, second).start_us, step + alone.start_us, 1e-6 * kTau);
    EXPECT_NEAR(twice.time(two, second).end_us, step + alone.end_us, 1e-6 * kTau);
  }
  return step;
}

// Steps repeat, so a step starts at the load it ends at, also where the step is not many time
// constants long (here under one; share 1, then 1/2).
TEST(SimulatorSustainedLoad, AShortStepRunsAsEachOfItsRepeats) {
  EXPECT_LT(expect_repeats_run_as_the_step_alone(false), kTau);
}

// Factor 0 is the model without it, on whole plans with transfers.
TEST(SimulatorSustainedLoad, FactorZeroChangesNothing) {
  for (const char* schedule : {"gpipe", "1f1b"}) {
    Plan plan = comm_plan(schedule);
    plan.graph.meta.contention.slowdown = {1.0, 1.1, 1.2, 1.3};
    const SimResult plain = simulate(plan.graph);
    plan.graph.meta.contention.sustained = SustainedLoad{.factor = 0, .time_constant_us = 500};
    expect_same_times(simulate(plan.graph), plain, schedule);
    plan.graph.meta.contention.sustained = SustainedLoad{.factor = 0.5, .time_constant_us = 500};
    EXPECT_GT(simulate(plan.graph).makespan_us, plain.makespan_us * 1.05) << schedule;
  }
}

// Separate GPUs under a sustained-load model (a sustained term without a curve): each device is
// its own GPU with its own clock, H_d following 1 while device d computes and 0 while it idles.
// Plans to run them on: the 4-stage 2BP plans with transfers, a one-device plan, and dualpipe-v
// (overlapped pairs, each one op).
std::vector<std::pair<std::string, Plan>> separate_gpu_plans() {
  std::vector<std::pair<std::string, Plan>> plans;
  for (const char* schedule : {"gpipe", "1f1b"})
    plans.emplace_back(schedule, comm_plan(schedule));
  plans.emplace_back("one device", uniform_plan({.devices = 1,
                                                 .microbatches = 4,
                                                 .backward = BackwardMode::twobp,
                                                 .f = 0.3,
                                                 .b = 0.5,
                                                 .w = 0.2}));
  PlanRequest v = testing::uniform_request({.devices = 4,
                                            .microbatches = 8,
                                            .chunks = 2,
                                            .schedule = "dualpipe-v",
                                            .backward = BackwardMode::twobp,
                                            .f = 0.2,
                                            .b = 0.3,
                                            .w = 0.1,
                                            .comm = 0.05});
  v.profile.overlap = {0.5, "test"};
  plans.emplace_back("dualpipe-v", make_plan(v));
  return plans;
}

void expect_times_within(const SimResult& got, const SimResult& want, double relative,
                         const std::string& label) {
  ASSERT_EQ(got.times.size(), want.times.size()) << label;
  for (std::size_t i = 0; i < got.times.size(); ++i) {
    const double scale = std::max(1.0, want.times[i].end_us);
    EXPECT_NEAR(got.times[i].start_us, want.times[i].start_us, relative * scale) << label << i;
    EXPECT_NEAR(got.times[i].end_us, want.times[i].end_us, relative * scale) << label << i;
  }
}

// Factor 0 is no model, bit for bit, in either order; a factor lengthens every plan's step.
TEST(SimulatorSeparateGpus, FactorZeroIsNoModelExactly) {
  for (auto& [label, plan] : separate_gpu_plans()) {
    TaskGraph& g = plan.graph;
    ASSERT_FALSE(g.meta.contention.has_model()) << label;
    const SimResult plain = simulate(g);
    g.meta.contention.sustained = SustainedLoad{.factor = 0, .time_constant_us = 700};
    for (const SimOrder order : {SimOrder::automatic, SimOrder::by_ready_time}) {
      const SimResult zero = simulate(g, order);
      ASSERT_EQ(zero.times.size(), plain.times.size());
      for (std::size_t i = 0; i < zero.times.size(); ++i) {
        EXPECT_EQ(zero.times[i].start_us, plain.times[i].start_us) << label << " " << i;
        EXPECT_EQ(zero.times[i].end_us, plain.times[i].end_us) << label << " " << i;
      }
      EXPECT_EQ(zero.makespan_us, plain.makespan_us) << label;
    }
    g.meta.contention.sustained = SustainedLoad{.factor = 0.5, .time_constant_us = 700};
    const SimResult slower = simulate(g);
    EXPECT_GT(slower.makespan_us, plain.makespan_us * 1.1) << label;
    EXPECT_LE(slower.makespan_us, plain.makespan_us * 1.5 + 1e-6) << label;
    // Both orders give the same times.
    expect_times_within(simulate(g, SimOrder::by_ready_time), slower, 1e-12, label);
  }
}

// One device: its own GPU is the whole GPU, so the model is the shared one with the curve [1]
// and the same term.
TEST(SimulatorSeparateGpus, OneDeviceIsTheSharedModelWithACurveOfOne) {
  for (const double beta : {0.2, 0.7, 3.0}) {
    for (const double tau : {50.0, 400.0, 5000.0}) {
      Plan one = uniform_plan({.devices = 1,
                               .microbatches = 4,
                               .backward = BackwardMode::twobp,
                               .f = 0.3,
                               .b = 0.5,
                               .w = 0.2});
      const std::string label = "factor " + std::to_string(beta) + " tau " + std::to_string(tau);
      one.graph.meta.contention.sustained = SustainedLoad{.factor = beta, .time_constant_us = tau};
      const SimResult separate = simulate(one.graph);
      one.graph.meta.contention.slowdown = {1.0};
      const SimResult shared = simulate(one.graph);
      expect_times_within(separate, shared, 1e-9, label);
      EXPECT_NEAR(separate.makespan_us, shared.makespan_us, 1e-9 * shared.makespan_us) << label;
      ASSERT_EQ(periodic_start_loads(one.graph).size(), 1U);
      one.graph.meta.contention.slowdown.clear();
      const std::vector<double> loads = periodic_start_loads(one.graph);
      ASSERT_EQ(loads.size(), 1U);
      one.graph.meta.contention.slowdown = {1.0};
      EXPECT_NEAR(loads.front(), periodic_start_loads(one.graph).front(), 1e-9) << label;
    }
  }
}

// Two devices by hand, from given start loads (0.3, 0.6): A (device 0) from 0, then B (device
// 1) on A's output, then C (device 0) on B's. Device 0 idles while B runs and its load decays;
// device 1 idles until B and after it. Each op lasts what the numbers give for its start load.
TEST(SimulatorSeparateGpus, EachDeviceFollowsItsOwnLoad) {
  SustainedGraph c(2);
  c.g.meta.contention.slowdown.clear();
  const double wa = 0.8 * kTau, wb = 1.5 * kTau, wc = 0.6 * kTau;
  const int a = c.compute(0, wa);
  const int b = c.compute(1, wb);
  const int last = c.compute(0, wc);
  c.g.add_data_edge(a, b);
  c.g.add_data_edge(b, last);
  std::vector<double> loads = {0.3, 0.6};
  const SimResult sim = simulate_from(c.g, loads);
  const double da = numeric_duration(wa, 1.0, 0.3);
  EXPECT_NEAR(c.time(sim, a).end_us, da, 1e-6 * kTau);
  const double ta = c.time(sim, a).end_us;
  const double h0_after_a = 1 + (0.3 - 1) * std::exp(-ta / kTau);
  const double h1_at_b = 0.6 * std::exp(-ta / kTau);  // idle since 0
  const NodeTime tb = c.time(sim, b);
  EXPECT_DOUBLE_EQ(tb.start_us, ta);
  EXPECT_NEAR(tb.end_us - tb.start_us, numeric_duration(wb, 1.0, h1_at_b), 1e-6 * kTau);
  const double db = tb.end_us - tb.start_us;
  const double h0_at_c = h0_after_a * std::exp(-db / kTau);  // device 0 idled through B
  const NodeTime tc = c.time(sim, last);
  EXPECT_DOUBLE_EQ(tc.start_us, tb.end_us);
  const double dc = tc.end_us - tc.start_us;
  EXPECT_NEAR(dc, numeric_duration(wc, 1.0, h0_at_c), 1e-6 * kTau);
  // The gap cost device 0 its load: C runs faster than it would have right after A.
  EXPECT_LT(dc, numeric_duration(wc, 1.0, h0_after_a) - 1e-3 * kTau);
  // The loads the step leaves at its end (C's end).
  const double h1_after_b = 1 + (h1_at_b - 1) * std::exp(-db / kTau);
  ASSERT_EQ(loads.size(), 2U);
  EXPECT_NEAR(loads[0], 1 + (h0_at_c - 1) * std::exp(-dc / kTau), 1e-12);
  EXPECT_NEAR(loads[1], h1_after_b * std::exp(-dc / kTau), 1e-12);
  EXPECT_EQ(error_of([&] {
              std::vector<double> one = {0.5};
              simulate_from(c.g, one);
            }),
            "simulate: 1 start loads for a model that has 2");
}

// Steps repeat: simulate() starts at the per-device loads a step's own end leaves, so a step
// started there ends there, and a second step from the first one's end loads equals the first.
TEST(SimulatorSeparateGpus, AStepStartsAtTheLoadsItsOwnEndLeaves) {
  for (auto& [label, plan] : separate_gpu_plans()) {
    TaskGraph& g = plan.graph;
    const double step = plan.sim.makespan_us;
    // Time constants from a tenth of the step to ten steps.
    for (const double tau : {step / 10, step, 10 * step}) {
      g.meta.contention.sustained = SustainedLoad{.factor = 0.6, .time_constant_us = tau};
      const std::vector<double> start = periodic_start_loads(g);
      ASSERT_EQ(start.size(), static_cast<std::size_t>(g.meta.devices)) << label;
      std::vector<double> loads = start;
      const SimResult first = simulate_from(g, loads);
      for (std::size_t d = 0; d < start.size(); ++d) {
        EXPECT_NEAR(loads[d], start[d], 1e-9) << label << " device " << d;
        EXPECT_GT(start[d], 0.0) << label << " device " << d;
        EXPECT_LE(start[d], 1.0) << label << " device " << d;
      }
      expect_times_within(first, simulate(g), 0, label);
      const SimResult second = simulate_from(g, loads);
      expect_times_within(second, first, 1e-9, label);
      // An idle start is not the periodic one where the step is shorter than many tau.
      std::vector<double> idle(start.size(), 0.0);
      if (tau >= step) {
        EXPECT_LT(simulate_from(g, idle).makespan_us, first.makespan_us) << label;
      }
    }
  }
}

// The periodic loads per device, on a step under one time constant. Device 0 computes all
// through the step: its load is 1 and its op runs at 1 / (1 + factor).
TEST(SimulatorSeparateGpus, AShortStepRunsAsEachOfItsRepeats) {
  EXPECT_NEAR(expect_repeats_run_as_the_step_alone(true), kTau / 2 * (1 + kBeta), 1e-6 * kTau);
}

// A device with two compute streams (a plan file may give one; lowering never does) computes
// while either runs: the ops are taken in order of start whatever order the graph lists them
// in. Q on a second stream from 0; P1 then P2 on the first from 0. From an idle start each runs
// from the load of a device busy since 0.
TEST(SimulatorSeparateGpus, TwoComputeStreamsOnOneDeviceKeepItBusy) {
  SustainedGraph c(1);
  c.g.meta.contention.slowdown.clear();
  Node q;
  q.device = 0;
  q.stream = c.g.stream(0, StreamRole::compute, 0);  // a second compute stream
  q.duration_us = 3 * kTau;
  set_label(q, "0F9");
  const int qid = c.g.add_node(std::move(q));
  const int p1 = c.compute(0, kTau);
  const int p2 = c.compute(0, kTau / 2);
  for (const SimOrder order : {SimOrder::automatic, SimOrder::by_ready_time}) {
    std::vector<double> loads = {0.0};
    const SimResult sim = simulate_from(c.g, loads, order);
    EXPECT_NEAR(c.time(sim, qid).end_us, numeric_duration(3 * kTau, 1.0, 0.0), 1e-6 * kTau);
    const double d1 = c.time(sim, p1).end_us;
    EXPECT_NEAR(d1, numeric_duration(kTau, 1.0, 0.0), 1e-6 * kTau);
    EXPECT_DOUBLE_EQ(c.time(sim, p2).start_us, d1);
    const double h = 1 - std::exp(-d1 / kTau);  // busy since 0
    EXPECT_NEAR(c.time(sim, p2).end_us - d1, numeric_duration(kTau / 2, 1.0, h), 1e-6 * kTau);
    // Busy until Q's end: the load there is 1 - exp(-end / tau).
    EXPECT_NEAR(loads.front(), 1 - std::exp(-c.time(sim, qid).end_us / kTau), 1e-12);
  }
}

TEST(SimulatorMetrics, TokensAndStageSpan) {
  const Plan plan = uniform_plan({.devices = 4, .microbatches = 8});
  // The last stage starts after (P − 1) forwards; its span is shorter than the makespan.
  EXPECT_NEAR(plan.sim.devices[3].first_start_us, 3e3, 1e-6);
  EXPECT_LE(plan.sim.max_stage_span_us, plan.sim.makespan_us);
  const double tokens = 8.0 * plan.graph.meta.mbs * plan.graph.meta.seq;
  EXPECT_NEAR(plan.sim.tokens_per_s, tokens / (plan.sim.makespan_us * 1e-6), 1e-6);
  EXPECT_EQ(plan.sim.mfu, 0.0);  // a uniform model has no FLOP count
}

}  // namespace
}  // namespace pipeplan
