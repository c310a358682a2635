#include "runtime/step_exchange.h"

#include <algorithm>
#include <optional>

#include <nlohmann/json.hpp>

#include "planner/base/error.h"

namespace pipeplan {

namespace {

using nlohmann::json;

// CBOR keeps every double exactly (losses and times must not change on the way).
std::string to_bytes(const json& j) {
  const std::vector<std::uint8_t> cbor = json::to_cbor(j);
  return {cbor.begin(), cbor.end()};
}

json from_bytes(const std::string& bytes, const char* what) {
  try {
    return json::from_cbor(bytes.begin(), bytes.end());
  } catch (const json::exception& e) {
    throw Error(std::string(what) + ": a corrupted message from another rank (" + e.what() + ")");
  }
}

std::string describe(const std::vector<std::optional<RankStep>>& ranks,
                     const ProcessGroup::Gathered& gathered, int step,
                     std::chrono::milliseconds timeout) {
  std::vector<int> causes;
  std::vector<int> consequences;
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    if (ranks[r] && !ranks[r]->ok) {
      (ranks[r]->consequence ? consequences : causes).push_back(static_cast<int>(r));
    }
  }
  std::string text = "step " + std::to_string(step) + ": ";
  std::vector<std::string> parts;
  if (!gathered.missing.empty()) {
    parts.push_back(rank_list(gathered.missing) + " did not finish the step within " +
                    std::to_string(timeout.count()) + " ms (dead or hung)");
  }
  if (!gathered.left.empty()) {
    parts.push_back(rank_list(gathered.left) + " left the run during the step (" +
                    (gathered.left.size() == 1 ? "its own error is on its output)"
                                               : "their own errors are on their outputs)"));
  }
  // The causes; only when there are none, what ended the others.
  const bool absent = !gathered.missing.empty() || !gathered.left.empty();
  const std::vector<int>& shown = causes.empty() && !absent ? consequences : causes;
  constexpr std::size_t kShown = 2;
  for (std::size_t i = 0; i < shown.size() && i < kShown; ++i) {
    const int r = shown[i];
    parts.push_back("rank " + std::to_string(r) + ": " + ranks[static_cast<std::size_t>(r)]->error);
  }
  if (shown.size() > kShown) {
    parts.push_back(rank_list({shown.begin() + kShown, shown.end()}) + " failed too");
  }
  for (std::size_t i = 0; i < parts.size(); ++i)
    text += (i == 0 ? "" : "; ") + parts[i];
  return text;
}

json encode_times(const std::vector<std::pair<int, NodeTime>>& times) {
  json entries = json::array();
  for (const auto& [id, t] : times)
    entries.push_back({id, t.start_us, t.end_us});
  return entries;
}

// Each entry (node id, start, end); anything else is a malformed message, not a shorter list.
std::vector<std::pair<int, NodeTime>> decode_times(const json& entries, const char* field) {
  const auto malformed = [field] {
    throw Error(std::string("step results: a malformed message from another rank (field '") +
                field + "' is not a list of [node, start, end])");
  };
  if (!entries.is_array()) malformed();
  std::vector<std::pair<int, NodeTime>> times;
  for (const json& entry : entries) {
    if (!entry.is_array() || entry.size() != 3) malformed();
    times.emplace_back(entry.at(0).get<int>(),
                       NodeTime{entry.at(1).get<double>(), entry.at(2).get<double>()});
  }
  return times;
}

}  // namespace

std::string encode_rank_step(const RankStep& step) {
  json timeline = json::array();
  for (const auto& [us, bytes] : step.memory_timeline)
    timeline.push_back({us, bytes});
  json losses = json::array();
  for (const auto& [mb, loss] : step.losses)
    losses.push_back({mb, loss});
  return to_bytes(
      {{"ok", step.ok},
       {"error", step.error},
       {"consequence", step.consequence},
       {"losses", losses},
       {"times", encode_times(step.times)},
       {"host_times", encode_times(step.host_times)},
       {"peak", step.peak_bytes},
       {"timeline", timeline},
       {"bpipe", {step.bpipe.evicted, step.bpipe.accepted, step.bpipe.returned, step.bpipe.loaded}},
       {"step_time_us", step.step_time_us}});
}

RankStep decode_rank_step(const std::string& bytes) {
  const json j = from_bytes(bytes, "step results");
  RankStep step;
  try {
    step.ok = j.at("ok").get<bool>();
    step.error = j.at("error").get<std::string>();
    step.consequence = j.at("consequence").get<bool>();
    for (const json& entry : j.at("losses"))
      step.losses[entry.at(0).get<int>()] = entry.at(1).get<double>();
    step.times = decode_times(j.at("times"), "times");
    step.host_times = decode_times(j.at("host_times"), "host_times");
    step.peak_bytes = j.at("peak").get<std::int64_t>();
    for (const json& entry : j.at("timeline"))
      step.memory_timeline.emplace_back(entry.at(0).get<double>(), entry.at(1).get<std::int64_t>());
    const json& bpipe = j.at("bpipe");
    step.bpipe = {bpipe.at(0).get<std::int64_t>(), bpipe.at(1).get<std::int64_t>(),
                  bpipe.at(2).get<std::int64_t>(), bpipe.at(3).get<std::int64_t>()};
    step.step_time_us = j.at("step_time_us").get<double>();
  } catch (const json::exception& e) {
    throw Error(std::string("step results: a malformed message from another rank (") + e.what() +
                ")");
  }
  return step;
}

StepOutcome exchange_step(ProcessGroup& group, const RankStep& local, int step, int microbatches,
                          std::chrono::milliseconds timeout) {
  const std::string what = "the end of step " + std::to_string(step);
  StepOutcome outcome;
  std::string verdict;  // CBOR: {"ok", "error", "losses", "step_time_us"}
  bool missing = false;
  if (group.rank() == 0) {
    const ProcessGroup::Gathered gathered =
        group.gather_available(encode_rank_step(local), what, timeout);
    missing = !gathered.missing.empty();
    std::vector<std::optional<RankStep>> ranks(gathered.parts.size());
    bool ok = true;
    for (std::size_t r = 0; r < gathered.parts.size(); ++r) {
      if (gathered.parts[r]) ranks[r] = decode_rank_step(*gathered.parts[r]);
      ok = ok && ranks[r] && ranks[r]->ok;
    }
    std::vector<double> losses(static_cast<std::size_t>(microbatches), 0.0);
    double step_time_us = 0;
    std::string malformed;  // a report naming a micro-batch the plan does not have
    for (std::size_t r = 0; r < ranks.size(); ++r) {
      const std::optional<RankStep>& rank = ranks[r];
      if (!rank) continue;
      for (const auto& [mb, loss] : rank->losses) {
        if (mb < 0 || mb >= microbatches) {
          if (malformed.empty()) {
            malformed = "step " + std::to_string(step) + ": rank " + std::to_string(r) +
                        " reported the loss of micro-batch " + std::to_string(mb) +
                        ", outside the plan's 0.." + std::to_string(microbatches - 1);
          }
          continue;
        }
        losses[static_cast<std::size_t>(mb)] = loss;
      }
      step_time_us = std::max(step_time_us, rank->step_time_us);
    }
    const bool ranks_ok = ok;
    ok = ok && malformed.empty();
    verdict = to_bytes({{"ok", ok},
                        {"error", ok         ? std::string()
                                  : ranks_ok ? malformed
                                             : describe(ranks, gathered, step, timeout)},
                        {"losses", losses},
                        {"step_time_us", step_time_us}});
    if (ok) {
      for (std::optional<RankStep>& rank : ranks)
        outcome.ranks.push_back(std::move(*rank));
    }
    // Tell the ranks that arrived (a missing one is dead or hung: the job ends without it).
    for (int r = 1; r < group.size(); ++r) {
      if (ranks[static_cast<std::size_t>(r)]) group.reply(r, verdict, what);
    }
  } else {
    group.gather_available(encode_rank_step(local), what, timeout);
    // Rank 0 may itself wait `timeout` for a missing rank before it decides.
    verdict = group.answer(std::string(), what, timeout);
  }
  const json j = from_bytes(verdict, "step outcome");
  if (!j.at("ok").get<bool>()) {
    if (missing) group.mark_broken();
    throw AgreedError(j.at("error").get<std::string>());
  }
  outcome.microbatch_losses = j.at("losses").get<std::vector<double>>();
  outcome.step_time_us = j.at("step_time_us").get<double>();
  return outcome;
}

}  // namespace pipeplan
