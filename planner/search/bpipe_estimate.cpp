#include "planner/search/bpipe_estimate.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <iterator>
#include <map>

#include <nlohmann/json.hpp>

#include "planner/base/error.h"
#include "planner/graph/bpipe_check.h"
#include "profiles/data_parallel.h"

namespace pipeplan {

namespace {

constexpr BackwardMode kBackwards[] = {BackwardMode::fused, BackwardMode::twobp,
                                       BackwardMode::twobp_fill};

std::string fmt(const char* format, double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, format, value);
  return buffer;
}

BpipeConfig describe(const Plan& plan, bool bpipe) {
  const TaskGraph& g = plan.graph;
  BpipeConfig c;
  c.mbs = g.meta.mbs;
  c.microbatches = g.meta.microbatches;
  c.backward = g.meta.backward;
  c.bpipe = bpipe;
  c.recompute = g.meta.recompute;
  c.step_time_us = plan.sim.makespan_us;
  c.mfu = plan.sim.mfu;
  c.bubble_ratio = plan.sim.bubble_ratio;
  // Each device's optimizer step runs once a step, not once a micro-batch: it is kept apart
  // from the per-micro-batch stage time.
  std::vector<double> optimizer(plan.sim.devices.size(), 0.0);
  for (int id = 0; id < g.node_count(); ++id) {
    const Node& n = g.node(id);
    if (n.kind != NodeKind::compute || n.op != OpType::O) continue;
    const auto device = static_cast<std::size_t>(n.device);
    if (device >= optimizer.size()) continue;
    const auto at = static_cast<std::size_t>(id);
    optimizer[device] += at < plan.sim.times.size()
                             ? plan.sim.times[at].end_us - plan.sim.times[at].start_us
                             : n.duration_us;
  }
  for (std::size_t d = 0; d < plan.sim.devices.size(); ++d) {
    const DeviceMetrics& m = plan.sim.devices[d];
    c.stage_time_us =
        std::max(c.stage_time_us, (m.busy_us - optimizer[d]) / std::max(1, c.microbatches));
    c.optimizer_us = std::max(c.optimizer_us, optimizer[d]);
    c.peak_memory_bytes = std::max(c.peak_memory_bytes, m.peak_memory_bytes);
  }
  const double stage_flops =
      g.meta.flops_per_token * c.mbs * g.meta.seq / std::max(1, g.meta.devices);
  if (c.stage_time_us > 0 && g.meta.peak_flops_per_device > 0) {
    c.stage_mfu = stage_flops / (c.stage_time_us * 1e-6 * g.meta.peak_flops_per_device);
  }
  return c;
}

struct Candidate {
  BpipeConfig config;
  Plan plan;
};

// Why candidates failed: each one's line, and the first failure that was not the memory limit
// (a request no candidate can plan, such as more stages than blocks, is that error itself).
struct Refusals {
  std::vector<std::string>& lines;
  int over_memory = 0;
  std::exception_ptr other;

  // Nothing planned and nothing failed for memory: the request itself cannot be planned, and
  // its own error says why.
  void rethrow_unplannable(bool nothing_planned) const {
    if (nothing_planned && over_memory == 0 && other) std::rethrow_exception(other);
  }
};

// Every candidate that fits (BPipe off only unless `with_bpipe`); failures go to `refused`.
std::vector<Candidate> evaluate(const SearchRequest& request, Refusals& refused,
                                bool with_bpipe = true) {
  if (request.global_batch < 1) throw FieldError("global_batch", "required (samples per step)");
  std::vector<Candidate> out;
  for (const auto& [mbs, m] : global_batch_splits(request.global_batch, request.mbs_candidates)) {
    PlanRequest r = request.base;
    r.profile = request.profile_for ? request.profile_for(mbs) : request.base.profile;
    r.mbs = mbs;
    r.microbatches = m;
    r.schedule = "1f1b";
    r.chunks = 1;
    r.layers_per_stage.clear();
    for (const BackwardMode backward : kBackwards) {
      for (const bool bpipe : {false, true}) {
        if (bpipe && !with_bpipe) continue;
        r.backward = backward;
        r.bpipe = bpipe ? BpipeMode::on : BpipeMode::off;
        try {
          Plan plan = make_plan(r);
          out.push_back({describe(plan, bpipe), std::move(plan)});
        } catch (const Error& e) {
          const auto* field = dynamic_cast<const FieldError*>(&e);
          if (field != nullptr && field->field() == "memory_limit_bytes") {
            ++refused.over_memory;
          } else if (!refused.other) {
            refused.other = std::current_exception();
          }
          refused.lines.push_back(
              "mbs " + std::to_string(mbs) + " " + std::string(to_string(backward)) + " bpipe " +
              (bpipe ? "on" : "off") +
              (r.recompute.any() ? " recompute " + to_string(r.recompute) : std::string()) + ": " +
              e.what());
        }
      }
    }
  }
  return out;
}

bool fits_without(const std::vector<Candidate>& all, const BpipeConfig& c) {
  return std::any_of(all.begin(), all.end(), [&](const Candidate& o) {
    return !o.config.bpipe && !o.config.recompute.any() && o.config.mbs == c.mbs &&
           o.config.backward == c.backward;
  });
}

// Step time the transfers add: the same graph with free transfers, simulated again. Also their
// link time, summed over the links and on the busiest directed link.
double exposed_transfer_us(const Plan& plan, double& transfer_us, double& busiest_link_us) {
  TaskGraph free = plan.graph;
  transfer_us = 0;
  std::map<std::pair<int, int>, double> by_link;  // (sender, receiver)
  for (int id = 0; id < free.node_count(); ++id) {
    if (!is_transfer(free, id)) continue;
    const Node& n = free.node(id);
    if (n.kind == NodeKind::send) {
      transfer_us += n.duration_us;
      by_link[{n.device, n.peer}] += n.duration_us;
    }
    free.node(id).duration_us = 0;
    free.node(id).bytes = 0;
  }
  busiest_link_us = 0;
  for (const auto& [link, us] : by_link)
    busiest_link_us = std::max(busiest_link_us, us);
  return std::max(0.0, plan.sim.makespan_us - simulate(free).makespan_us);
}

std::string config_text(const BpipeConfig& c) {
  return "mbs " + std::to_string(c.mbs) + ", m " + std::to_string(c.microbatches) + ", 1f1b " +
         std::string(to_string(c.backward)) + (c.bpipe ? ", BPipe on" : ", BPipe off") +
         (c.recompute.any() ? ", recompute " + recompute_text(c.recompute) : std::string());
}

// The share of the busiest link's time the step hides. The exposed time is how much longer the
// step is than with free transfers: ops that wait on an eviction can make it longer than any
// link's time, where a share would read as a plain "0 %".
std::string hidden_text(const BpipeEstimate& e) {
  if (e.busiest_link_us > 0 && e.exposed_us > e.busiest_link_us)
    return "none hidden: the step grows by more than the busiest link's time, its ops waiting on "
           "evictions";
  return fmt("%.0f %% hidden", 100 * e.hidden_fraction);
}

void judge(BpipeEstimate& e) {
  if (!e.without) {
    const BpipeConfig& b = *e.with;
    e.verdict = "BPipe needed: no configuration fits without it (" +
                (e.infeasible.empty() ? std::string("no candidates") : e.infeasible.front()) +
                "); with it " + config_text(b) + " fits, step " +
                fmt("%.1f ms", b.step_time_us / 1e3) + ", MFU " + fmt("%.1f %%", 100 * b.mfu);
    e.second_opinion = "not applicable: no plan without BPipe to compare against";
    return;
  }
  const BpipeConfig& a = *e.without;
  if (!e.with && !e.bpipe_fits) {
    e.verdict = "no benefit: no configuration fits with BPipe" +
                std::string(a.recompute.any() ? " while keeping every activation" : "") + " (" +
                config_text(a) + " is best)";
    e.second_opinion = "not applicable: BPipe makes nothing fit";
    return;
  }
  if (!e.with) {
    e.verdict = "no benefit: every configuration that fits with BPipe already fits without it (" +
                config_text(a) + " is best); BPipe would only add transfers";
    e.second_opinion = "not applicable: BPipe buys no larger micro-batch";
    return;
  }
  const BpipeConfig& b = *e.with;
  const double p = e.devices;
  e.gain = a.step_time_us / b.step_time_us - 1;
  e.simple_gain = ((a.microbatches + p - 1) * a.stage_time_us + a.optimizer_us) /
                      ((b.microbatches + p - 1) * b.stage_time_us + b.optimizer_us) -
                  1;
  // The simulated bubbles, as the step times and MFUs beside them are (the ideal 1F1B bubble
  // (P - 1)/(m + P - 1) leaves out the embedding and head, the optimizer and the transfers).
  const auto change = [](int from, int to) {
    return from == to ? std::to_string(from) : std::to_string(from) + " -> " + std::to_string(to);
  };
  // Hidden only where the transfers line shows nothing exposed (its 0.00 ms): 42 ms exposed
  // of a 17 s step is a cost of 0.2 %, not "fully hidden".
  const bool exposed = e.exposed_us >= 5;
  std::string why =
      "mbs " + change(a.mbs, b.mbs) +
      (a.recompute != b.recompute
           ? ", recompute " + recompute_text(a.recompute) + " -> " + recompute_text(b.recompute)
           : std::string()) +
      (b.stage_mfu >= a.stage_mfu ? " raises" : " lowers") + " stage MFU " +
      fmt("%.1f", 100 * a.stage_mfu) + " -> " + fmt("%.1f %%", 100 * b.stage_mfu) + ", bubble " +
      fmt("%.1f", 100 * a.bubble_ratio) + " -> " + fmt("%.1f %%", 100 * b.bubble_ratio) + " (m " +
      change(a.microbatches, b.microbatches) + (exposed ? "; the exposed transfers included" : "") +
      "), transfers " +
      (!exposed ? std::string("fully hidden")
                : hidden_text(e) + ", cost " + fmt("%.1f %%", 100 * e.exposed_us / b.step_time_us));
  e.verdict =
      std::string(bpipe_pays(a.step_time_us, b.step_time_us) ? "benefit"
                  : e.gain > 0 ? "no benefit (within " + fmt("%.1f %%", 100 * kBpipeBenefit) +
                                     ", below what the timing model tells apart)"
                               : "no benefit") +
      ": " + why + ": " + fmt("%+.1f %%", 100 * e.gain);
  e.second_opinion = std::string(a.optimizer_us > 0 || b.optimizer_us > 0
                                     ? "per-stage estimate (m + P - 1)·t_stage + t_optimizer: "
                                     : "per-stage estimate (m + P - 1)·t_stage: ") +
                     fmt("%+.1f %%", 100 * e.simple_gain);
  const double disagreement = e.gain - e.simple_gain;
  if (std::abs(disagreement) > 0.01) {
    e.second_opinion += "; the simulation differs by " + fmt("%+.1f", 100 * disagreement) +
                        " points: it also counts exposed transfers (" +
                        fmt("%.1f %%", 100 * e.exposed_us / b.step_time_us) +
                        " of the step), p2p latency and stage imbalance (first/last stage carry "
                        "embedding and head), and the backward mode's own bubble filling";
  } else {
    e.second_opinion += " (agrees with the simulation within 1 point)";
  }
}

}  // namespace

BpipeEstimate estimate_bpipe(const SearchRequest& request, const SearchRequest* recomputing) {
  BpipeEstimate e;
  e.devices = request.base.devices;
  e.global_batch = request.global_batch;
  e.data_parallel = request.base.data_parallel;
  e.memory_limit_bytes = request.base.memory_limit_bytes;
  Refusals refused{e.infeasible, 0, nullptr};
  std::vector<Candidate> all = evaluate(request, refused);
  if (recomputing != nullptr) {
    std::vector<Candidate> baseline = evaluate(*recomputing, refused, false);
    std::move(baseline.begin(), baseline.end(), std::back_inserter(all));
  }
  refused.rethrow_unplannable(all.empty());
  const Candidate* without = nullptr;
  const Candidate* with = nullptr;
  for (const Candidate& c : all) {
    const Candidate*& best = !c.config.bpipe ? without : with;
    if (c.config.bpipe && fits_without(all, c.config)) continue;  // BPipe buys nothing there
    if (!best || c.config.step_time_us < best->config.step_time_us) best = &c;
  }
  if (!without && !with) {
    throw NothingFitsError(
        field_name("global_batch") + ": no configuration fits, with BPipe or without (" +
        (e.infeasible.empty() ? std::string("no candidates") : e.infeasible.front()) + ")");
  }
  if (without) e.without = without->config;
  e.bpipe_fits =
      std::any_of(all.begin(), all.end(), [](const Candidate& c) { return c.config.bpipe; });
  if (with) {
    e.with = with->config;
    e.with_plan = with->plan;
    e.exposed_us = exposed_transfer_us(with->plan, e.transfer_us, e.busiest_link_us);
    e.hidden_fraction =
        e.busiest_link_us > 0 ? std::clamp(1 - e.exposed_us / e.busiest_link_us, 0.0, 1.0) : 1;
    for (int id = 0; id < with->plan.graph.node_count(); ++id) {
      const Node& n = with->plan.graph.node(id);
      if (n.kind == NodeKind::send && is_transfer(with->plan.graph, id))
        e.transfer_bytes += n.bytes;
    }
  }
  judge(e);
  return e;
}

Plan best_bpipe_plan(const SearchRequest& request, BpipeConfig* chosen) {
  std::vector<std::string> infeasible;
  Refusals refused{infeasible, 0, nullptr};
  std::vector<Candidate> all = evaluate(request, refused);
  refused.rethrow_unplannable(all.empty());
  if (all.empty()) {
    throw FieldError("global_batch",
                     "no configuration fits (" +
                         (infeasible.empty() ? std::string("no candidates") : infeasible.front()) +
                         ")");
  }
  const auto faster = [](const Candidate& x, const Candidate& y) {
    return x.config.step_time_us < y.config.step_time_us;
  };
  auto best = std::min_element(all.begin(), all.end(), faster);
  if (best->config.bpipe) {
    // BPipe on only for more than kBpipeBenefit over the fastest without (the verdict's rule).
    auto off = all.end();
    for (auto it = all.begin(); it != all.end(); ++it) {
      if (!it->config.bpipe && (off == all.end() || faster(*it, *off))) off = it;
    }
    if (off != all.end() && !bpipe_pays(off->config.step_time_us, best->config.step_time_us))
      best = off;
  }
  if (chosen) *chosen = best->config;
  return std::move(best->plan);
}

std::string format_estimate(const BpipeEstimate& e) {
  auto row = [](const char* name, const BpipeConfig& c) {
    return std::string(name) + config_text(c) + "\n    step " +
           fmt("%.1f ms", c.step_time_us / 1e3) +
           (c.optimizer_us > 0 ? " (optimizer " + fmt("%.1f ms", c.optimizer_us / 1e3) + ")"
                               : std::string()) +
           ", MFU " + fmt("%.1f %%", 100 * c.mfu) + ", stage MFU " +
           fmt("%.1f %%", 100 * c.stage_mfu) + ", peak " +
           fmt("%.2f GiB", static_cast<double>(c.peak_memory_bytes) / (1 << 30)) + "\n";
  };
  std::string out = "BPipe estimate: " + std::to_string(e.devices) + " stages";
  if (e.tensor_parallel > 1 || !e.tensor_parallel_note.empty()) {
    out += " x TP " + std::to_string(e.tensor_parallel) +
           (e.tensor_parallel_note.empty() ? "" : " (" + e.tensor_parallel_note + ")");
  }
  const int replicas = e.data_parallel.replicas;
  if (replicas > 1) out += " x DP " + std::to_string(replicas);
  out += ", global batch " + std::to_string(e.global_batch * replicas) +
         (replicas > 1 ? " (" + std::to_string(e.global_batch) + " per replica)" : "") +
         " (MFU = PaLM model FLOPs)\n";
  if (!e.memory_note.empty()) out += "memory: " + e.memory_note + "\n";
  if (replicas > 1) {
    // A profile without the optimizer step's time plans no optimizer node, and so no reduction.
    const bool optimizer =
        (e.without && e.without->optimizer_us > 0) || (e.with && e.with->optimizer_us > 0);
    out += "data parallel: " + data_parallel_text(e.data_parallel) +
           (optimizer ? "" : "; the gradients' reduction is left out with the optimizer step") +
           "\n";
  }
  out += e.without ? row("without BPipe: ", *e.without) : "without BPipe: no configuration fits\n";
  if (e.with) {
    out += row("with BPipe:    ", *e.with);
    out += "transfers: " + fmt("%.2f GiB", static_cast<double>(e.transfer_bytes) / (1 << 30)) +
           " per step, link time " + fmt("%.1f ms", e.busiest_link_us / 1e3) +
           " on the busiest link (" + fmt("%.1f ms", e.transfer_us / 1e3) + " over all), exposed " +
           fmt("%.2f ms", e.exposed_us / 1e3) + " (" + hidden_text(e) + ")\n";
  } else {
    out += e.bpipe_fits ? "with BPipe:    no configuration needs it\n"
                        : "with BPipe:    no configuration fits\n";
  }
  out += "verdict: " + e.verdict + "\n";
  out += "second opinion: " + e.second_opinion + "\n";
  return out;
}

nlohmann::json estimate_to_json(const BpipeEstimate& e) {
  auto config = [](const std::optional<BpipeConfig>& c) -> nlohmann::json {
    if (!c) return nullptr;
    return {{"mbs", c->mbs},
            {"microbatches", c->microbatches},
            {"schedule", "1f1b"},
            {"backward", std::string(to_string(c->backward))},
            {"bpipe", c->bpipe},
            {"recompute", recompute_to_json(c->recompute)},
            {"step_time_ms", c->step_time_us / 1e3},
            {"mfu", c->mfu},
            {"bubble_ratio", c->bubble_ratio},
            {"stage_mfu", c->stage_mfu},
            {"stage_time_ms", c->stage_time_us / 1e3},
            {"optimizer_ms", c->optimizer_us / 1e3},
            {"peak_memory_bytes", c->peak_memory_bytes}};
  };
  // Without a BPipe plan there are no transfers, and without both plans no gain: null.
  const auto with_plan = [&](const nlohmann::json& value) -> nlohmann::json {
    return e.with ? value : nullptr;
  };
  const auto with_both = [&](double value) -> nlohmann::json {
    return e.with && e.without ? nlohmann::json(value) : nullptr;
  };
  return {{"stages", e.devices},
          {"tensor_parallel", e.tensor_parallel},
          {"data_parallel", e.data_parallel.replicas},
          {"dp_optimizer", std::string(to_string(e.data_parallel.optimizer))},
          {"global_batch", e.global_batch * e.data_parallel.replicas},
          {"global_batch_per_replica", e.global_batch},
          // whole bytes, as plan --json writes them
          {"memory_limit_bytes", static_cast<std::int64_t>(std::floor(e.memory_limit_bytes))},
          {"without", config(e.without)},
          {"with", config(e.with)},
          {"bpipe_fits", e.bpipe_fits},
          {"transfer_bytes_per_step", with_plan(e.transfer_bytes)},
          {"transfer_ms", with_plan(e.transfer_us / 1e3)},
          {"busiest_link_ms", with_plan(e.busiest_link_us / 1e3)},
          {"exposed_transfer_ms", with_plan(e.exposed_us / 1e3)},
          {"hidden_fraction", with_plan(e.hidden_fraction)},
          {"gain", with_both(e.gain)},
          {"simple_gain", with_both(e.simple_gain)},
          {"verdict", e.verdict},
          {"second_opinion", e.second_opinion},
          {"infeasible", e.infeasible}};
}

}  // namespace pipeplan
