#include "schedules/schedule.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <map>
#include <optional>
#include <sstream>
#include <utility>

#include "planner/base/error.h"
#include "planner/base/limits.h"

namespace pipeplan {

namespace {

// Indexed by OpType: the name, and the spelling inside an action ("0P1_3").
constexpr std::array<std::string_view, 5> kOpNames = {"F", "B", "P1", "P2", "O"};
constexpr std::array<std::string_view, 4> kOpSpellings = {"F", "B", "P1_", "P2_"};

}  // namespace

std::string_view to_string(OpType op) {
  return kOpNames[static_cast<std::size_t>(op)];
}

namespace {

constexpr std::array<std::pair<BackwardMode, std::string_view>, 3> kBackwardModes = {{
    {BackwardMode::fused, "fused"},
    {BackwardMode::twobp, "2bp"},
    {BackwardMode::twobp_fill, "2bp-fill"},
}};

}  // namespace

std::string_view to_string(BackwardMode mode) {
  for (const auto& [value, name] : kBackwardModes) {
    if (value == mode) return name;
  }
  return "?";
}

BackwardMode backward_mode_from_string(std::string_view text) {
  for (const auto& [value, name] : kBackwardModes) {
    if (name == text) return value;
  }
  throw FieldError("backward", "unknown backward mode '" + std::string(text) +
                                   "' (valid: fused, 2bp, 2bp-fill)");
}

// ---------------------------------------------------------------------------------------------
// Action notation: <stage><op><microbatch>, op one of F, B, P1_, P2_ (P2 may join micro-batches
// with '+'). Only the canonical spelling is accepted (no leading zeros, no spaces) so that
// parse_action and format_action are exact inverses.

std::string format_action(const Action& action) {
  std::string text;
  append_action(text, action);
  return text;
}

void append_action(std::string& out, const Action& action) {
  append_action(out, action.op, action.stage, action.microbatches);
}

void append_action(std::string& out, OpType op, int stage, const MicroBatches& microbatches) {
  if (op == OpType::O) {  // a device's optimizer step: no stage or micro-batch of its own
    out += "optimizer";
    return;
  }
  // Written into a stack buffer, then appended in one go: this runs for every node a plan file or
  // a trace names (39k for 64 stages and 96 micro-batches), and a short label (SSO) never touches
  // the heap. A long concatenated P2 flushes the buffer as it fills.
  constexpr std::size_t kNumber = 11;  // an int in decimal, sign included
  std::array<char, 64> buffer;         // written before it is read: no zeroing
  char* end = buffer.data();
  char* const limit = buffer.data() + buffer.size();
  const auto flush = [&] {
    out.append(buffer.data(), end);
    end = buffer.data();
  };
  const auto number = [&](int value) {
    if (limit - end < static_cast<std::ptrdiff_t>(kNumber + 1)) flush();
    end = std::to_chars(end, limit, value).ptr;
  };
  number(stage);
  const std::string_view spelling = kOpSpellings[static_cast<std::size_t>(op)];
  end = std::copy(spelling.begin(), spelling.end(), end);
  for (std::size_t i = 0; i < microbatches.size(); ++i) {
    if (i > 0) *end++ = '+';
    number(microbatches[i]);
  }
  flush();
}

namespace {

[[noreturn]] void bad_action(std::string_view text, std::string_view why) {
  throw Error("action '" + std::string(text) + "': " + std::string(why) +
              " (expected e.g. 0F3, 0B3, 0P1_3, 0P2_3 or 0P2_4+5+6)");
}

// Reads a canonical non-negative decimal at the front of `rest`; advances `rest` past it.
std::optional<int> take_number(std::string_view& rest) {
  std::size_t digits = 0;
  while (digits < rest.size() && rest[digits] >= '0' && rest[digits] <= '9')
    ++digits;
  if (digits == 0 || digits > 9 || (digits > 1 && rest[0] == '0')) return std::nullopt;
  int value = 0;
  std::from_chars(rest.data(), rest.data() + digits, value);
  rest.remove_prefix(digits);
  return value;
}

std::optional<OpType> take_op(std::string_view& rest) {
  for (std::size_t i = 0; i < kOpSpellings.size(); ++i) {
    if (rest.starts_with(kOpSpellings[i])) {
      rest.remove_prefix(kOpSpellings[i].size());
      return static_cast<OpType>(i);
    }
  }
  return std::nullopt;
}

}  // namespace

Action parse_action(std::string_view text) {
  std::string_view rest = text;
  Action action;
  const std::optional<int> stage = take_number(rest);
  if (!stage) bad_action(text, "expected a stage number first");
  action.stage = *stage;
  const std::optional<OpType> op = take_op(rest);
  if (!op) bad_action(text, "expected F, B, P1_ or P2_ after the stage number");
  action.op = *op;
  while (true) {
    const std::optional<int> microbatch = take_number(rest);
    if (!microbatch) bad_action(text, "expected a micro-batch number");
    action.microbatches.push_back(*microbatch);
    if (rest.empty()) break;
    if (rest[0] != '+' || action.op != OpType::P2) bad_action(text, "unexpected trailing text");
    rest.remove_prefix(1);
  }
  return action;
}

// ---------------------------------------------------------------------------------------------
// Text form of a whole schedule.

namespace {

std::string join_ints(const std::vector<int>& values) {
  std::string text;
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i > 0) text += ',';
    text += std::to_string(values[i]);
  }
  return text;
}

std::vector<std::string_view> split(std::string_view text, char separator) {
  std::vector<std::string_view> parts;
  std::size_t start = 0;
  while (true) {
    const std::size_t end = text.find(separator, start);
    parts.push_back(text.substr(start, end == std::string_view::npos ? end : end - start));
    if (end == std::string_view::npos) break;
    start = end + 1;
  }
  return parts;
}

std::vector<std::string_view> split_words(std::string_view line) {
  std::vector<std::string_view> words;
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t'))
      ++i;
    std::size_t end = i;
    while (end < line.size() && line[end] != ' ' && line[end] != '\t')
      ++end;
    if (end > i) words.push_back(line.substr(i, end - i));
    i = end;
  }
  return words;
}

[[noreturn]] void bad_line(int line_number, std::string_view token, std::string_view why) {
  throw Error("schedule line " + std::to_string(line_number) + ": " + std::string(why) + " '" +
              std::string(token) + "'");
}

int parse_int(std::string_view token, int line_number, std::string_view what) {
  std::string_view rest = token;
  const std::optional<int> value = take_number(rest);
  if (!value || !rest.empty()) bad_line(line_number, token, std::string(what) + ": bad number");
  return *value;
}

std::vector<int> parse_int_list(std::string_view token, int line_number, std::string_view what) {
  std::vector<int> values;
  if (token.empty()) return values;
  for (std::string_view part : split(token, ','))
    values.push_back(parse_int(part, line_number, what));
  return values;
}

void parse_header(std::string_view line, Schedule& schedule) {
  const std::vector<std::string_view> words = split_words(line);
  if (words.size() < 2 || words[0] != "schedule") bad_line(1, line, "expected a header");
  if (words[1] != "v1") bad_line(1, words[1], "unsupported version");
  std::map<std::string_view, std::string_view> fields;
  for (std::size_t i = 2; i < words.size(); ++i) {
    const std::size_t eq = words[i].find('=');
    if (eq == std::string_view::npos) bad_line(1, words[i], "expected key=value, got");
    const std::string_view key = words[i].substr(0, eq);
    if (!fields.emplace(key, words[i].substr(eq + 1)).second)
      bad_line(1, words[i], "duplicate key");
  }
  constexpr std::array<std::string_view, 5> kKeys = {"family", "backward", "devices",
                                                     "microbatches", "stages"};
  for (std::string_view key : kKeys) {
    if (!fields.contains(key)) bad_line(1, key, "missing key");
  }
  for (const auto& [key, value] : fields) {
    if (std::find(kKeys.begin(), kKeys.end(), key) == kKeys.end() && key != "replicas")
      bad_line(1, key, "unknown key");
  }
  if (const auto it = fields.find("replicas"); it != fields.end()) {
    schedule.replicas = parse_int(it->second, 1, "replicas");
    if (schedule.replicas != 1 && schedule.replicas != 2)
      bad_line(1, it->second, "replicas: expected 1 or 2, got");
  }
  schedule.family = std::string(fields["family"]);
  try {
    schedule.backward = backward_mode_from_string(fields["backward"]);
  } catch (const Error&) {
    bad_line(1, fields["backward"], "backward: expected fused, 2bp or 2bp-fill, got");
  }
  schedule.devices = parse_int(fields["devices"], 1, "devices");
  if (schedule.devices > limits::kMaxDevices)
    bad_line(1, fields["devices"], limits::above_limit("devices", limits::kMaxDevices) + ":");
  schedule.microbatches = parse_int(fields["microbatches"], 1, "microbatches");
  if (schedule.microbatches > limits::kMaxMicrobatches) {
    bad_line(1, fields["microbatches"],
             limits::above_limit("microbatches", limits::kMaxMicrobatches) + ":");
  }
  // At most kMaxStages entries of up to 10 characters each: refused before they are split.
  if (fields["stages"].size() > static_cast<std::size_t>(limits::kMaxStages) * 11)
    bad_line(1, "stages=...", limits::above_limit("stages", limits::kMaxStages) + ":");
  schedule.stage_device = parse_int_list(fields["stages"], 1, "stages");
  if (schedule.stage_count() > limits::kMaxStages)
    bad_line(1, "stages=...", limits::above_limit("stages", limits::kMaxStages) + ":");
}

std::vector<Action> parse_device_line(std::string_view line, int line_number, int device) {
  const std::vector<std::string_view> words = split_words(line);
  const std::string label = std::to_string(device) + ":";
  if (words.empty() || words[0] != label)
    bad_line(line_number, words.empty() ? line : words[0], "expected '" + label + "', got");
  std::vector<Action> actions;
  for (std::size_t i = 1; i < words.size(); ++i) {
    const std::string_view word = words[i];
    try {
      if (word.starts_with('(')) {  // an overlapped pair, "(0F7;7B3)"
        const std::size_t semicolon = word.find(';');
        if (!word.ends_with(')') || semicolon == std::string_view::npos) throw Error("pair");
        actions.push_back(parse_action(word.substr(1, semicolon - 1)));
        actions.back().overlaps_next = true;
        actions.push_back(parse_action(word.substr(semicolon + 1, word.size() - semicolon - 2)));
      } else {
        actions.push_back(parse_action(word));
      }
    } catch (const Error&) {
      bad_line(line_number, word, "malformed action");
    }
  }
  return actions;
}

}  // namespace

std::string schedule_to_text(const Schedule& schedule) {
  std::ostringstream out;
  out << "schedule v1 family=" << schedule.family << " backward=" << to_string(schedule.backward)
      << " devices=" << schedule.devices << " microbatches=" << schedule.microbatches
      << " stages=" << join_ints(schedule.stage_device);
  if (schedule.replicas != 1) out << " replicas=" << schedule.replicas;
  out << '\n';
  for (std::size_t d = 0; d < schedule.per_device.size(); ++d) {
    out << d << ':';
    bool in_pair = false;
    for (const Action& action : schedule.per_device[d]) {
      out << (in_pair ? ";" : action.overlaps_next ? " (" : " ") << format_action(action);
      if (in_pair) out << ')';
      in_pair = action.overlaps_next && !in_pair;
    }
    if (in_pair) out << ')';  // a pair cut short (check_schedule refuses it): kept readable
    out << '\n';
  }
  return out.str();
}

Schedule schedule_from_text(std::string_view text) {
  std::vector<std::string_view> lines = split(text, '\n');
  for (std::string_view& line : lines) {
    if (line.ends_with('\r')) line.remove_suffix(1);
  }
  while (!lines.empty() && split_words(lines.back()).empty())
    lines.pop_back();
  if (lines.empty()) throw Error("schedule line 1: empty text, expected a 'schedule v1' header");
  Schedule schedule;
  parse_header(lines[0], schedule);
  const int expected_lines = schedule.devices + 1;
  if (static_cast<int>(lines.size()) != expected_lines) {
    const int line_number = std::min(static_cast<int>(lines.size()), expected_lines) + 1;
    throw Error("schedule line " + std::to_string(line_number) + ": expected " +
                std::to_string(schedule.devices) + " device lines for devices=" +
                std::to_string(schedule.devices) + ", found " + std::to_string(lines.size() - 1));
  }
  for (int d = 0; d < schedule.devices; ++d) {
    schedule.per_device.push_back(
        parse_device_line(lines[static_cast<std::size_t>(d) + 1], d + 2, d));
  }
  return schedule;
}

// ---------------------------------------------------------------------------------------------
// Structural check.

namespace {

// What has been seen of one (stage, micro-batch) so far, in device order.
struct MicrobatchState {
  bool forward = false;
  bool fused_backward = false;
  bool p1 = false;
  bool p2 = false;
  int p1_device = -1, p1_position = -1;  // to name an unmatched P1
};

[[noreturn]] void bad_action_at(int device, int position, const Action& action,
                                std::string_view rule) {
  throw Error("schedule check: device " + std::to_string(device) + " position " +
              std::to_string(position) + " (" + format_action(action) + "): " + std::string(rule));
}

void check_shape(const Schedule& schedule) {
  if (schedule.devices < 1)
    throw Error("schedule check: devices must be >= 1, got " + std::to_string(schedule.devices));
  if (schedule.microbatches < 1)
    throw Error("schedule check: microbatches must be >= 1, got " +
                std::to_string(schedule.microbatches));
  // The check below keeps a state per (stage, micro-batch): bounded before it is allocated.
  if (schedule.devices > limits::kMaxDevices)
    throw Error(
        "schedule check: " +
        limits::above_limit("devices " + std::to_string(schedule.devices), limits::kMaxDevices));
  if (schedule.microbatches > limits::kMaxMicrobatches)
    throw Error("schedule check: " +
                limits::above_limit("microbatches " + std::to_string(schedule.microbatches),
                                    limits::kMaxMicrobatches));
  if (schedule.stage_count() > limits::kMaxStages)
    throw Error("schedule check: " +
                limits::above_limit(std::to_string(schedule.stage_count()) + " stages",
                                    limits::kMaxStages));
  const std::int64_t pairs = std::int64_t{schedule.stage_count()} * schedule.microbatches;
  if (pairs > limits::kMaxStageMicrobatches)
    throw Error("schedule check: " +
                limits::above_limit(std::to_string(pairs) + " stage micro-batches",
                                    static_cast<double>(limits::kMaxStageMicrobatches)));
  if (static_cast<int>(schedule.per_device.size()) != schedule.devices)
    throw Error("schedule check: " + std::to_string(schedule.per_device.size()) +
                " device lists for devices=" + std::to_string(schedule.devices));
  if (!schedule.copies_divide())
    throw Error("schedule check: replicas=" + std::to_string(schedule.replicas) +
                ": a schedule holds 1 or 2 copies of the model, with stages (" +
                std::to_string(schedule.stage_count()) + ") and micro-batches (" +
                std::to_string(schedule.microbatches) + ") in multiples of the copies");
  for (int s = 0; s < schedule.stage_count(); ++s) {
    const int device = schedule.stage_device[static_cast<std::size_t>(s)];
    if (device < 0 || device >= schedule.devices)
      throw Error("schedule check: stage " + std::to_string(s) + " maps to device " +
                  std::to_string(device) + ", outside 0.." + std::to_string(schedule.devices - 1));
  }
}

// Checks where the action runs and what it names; the order rules come after.
void check_placement(const Schedule& schedule, int device, int position, const Action& action) {
  if (action.stage < 0 || action.stage >= schedule.stage_count())
    bad_action_at(device, position, action,
                  "stage does not exist (" + std::to_string(schedule.stage_count()) + " stages)");
  const int owner = schedule.stage_device[static_cast<std::size_t>(action.stage)];
  if (owner != device)
    bad_action_at(
        device, position, action,
        "stage " + std::to_string(action.stage) + " runs on device " + std::to_string(owner));
  if (action.microbatches.empty() || (action.op != OpType::P2 && action.microbatches.size() != 1))
    bad_action_at(device, position, action, "needs exactly one micro-batch");
  for (int mb : action.microbatches) {
    if (mb < 0 || mb >= schedule.microbatches)
      bad_action_at(device, position, action,
                    "micro-batch " + std::to_string(mb) + " outside 0.." +
                        std::to_string(schedule.microbatches - 1));
    if (!schedule.passes(action.stage, mb))
      bad_action_at(device, position, action,
                    "micro-batch " + std::to_string(mb) + " passes stages " +
                        std::to_string(schedule.first_stage_of(mb)) + ".." +
                        std::to_string(schedule.last_stage_of(mb)) + " only");
  }
}

// Whether the action fits what came before it: the test alone, which runs for every action of
// every plan; order_violation spells the rule only for one that does not.
bool fits_order(OpType op, const MicrobatchState& seen) {
  switch (op) {
    case OpType::F:
      return !seen.forward;
    case OpType::B:
    case OpType::P1:
      return seen.forward && !seen.fused_backward && !seen.p1;
    case OpType::P2:
      return !seen.fused_backward && !seen.p2 && seen.p1;
    case OpType::O:  // the optimizer step is the task graph's, never a schedule's
      return false;
  }
  return false;
}

// Returns the rule the action breaks given what came before it, or "" when it fits.
std::string order_violation(OpType op, const MicrobatchState& seen, int mb) {
  const auto which = [mb] { return " of micro-batch " + std::to_string(mb); };
  switch (op) {
    case OpType::F:
      if (seen.forward) return "duplicate F" + which();
      return "";
    case OpType::B:
    case OpType::P1:
      if (!seen.forward) return std::string(to_string(op)) + " before F" + which();
      if (seen.fused_backward || seen.p1) return "second backward" + which();
      return "";
    case OpType::P2:
      if (seen.fused_backward) return "P2 after a fused B" + which();
      if (seen.p2) return "micro-batch " + std::to_string(mb) + " already in an earlier P2";
      if (!seen.p1) return "P2 before P1" + which();
      return "";
    case OpType::O:
      return "the optimizer step is not a schedule action";
  }
  return "";
}

void record(OpType op, MicrobatchState& seen, int device, int position) {
  switch (op) {
    case OpType::F:
      seen.forward = true;
      break;
    case OpType::B:
      seen.fused_backward = true;
      break;
    case OpType::P1:
      seen.p1 = true;
      seen.p1_device = device;
      seen.p1_position = position;
      break;
    case OpType::O:
      break;
    case OpType::P2:
      seen.p2 = true;
      break;
  }
}

void check_complete(const Schedule& schedule,
                    const std::vector<std::vector<MicrobatchState>>& states) {
  for (int s = 0; s < schedule.stage_count(); ++s) {
    for (int mb = 0; mb < schedule.microbatches; ++mb) {
      if (!schedule.passes(s, mb)) continue;
      const MicrobatchState& seen =
          states[static_cast<std::size_t>(s)][static_cast<std::size_t>(mb)];
      const auto where = [&] {
        return "schedule check: stage " + std::to_string(s) + " micro-batch " + std::to_string(mb);
      };
      if (!seen.forward) throw Error(where() + ": no F");
      if (!seen.fused_backward && !seen.p1) throw Error(where() + ": no B or P1");
      if (seen.p1 && !seen.p2) {
        const Action p1{OpType::P1, s, {mb}};
        bad_action_at(seen.p1_device, seen.p1_position, p1, "P1 without a P2");
      }
    }
  }
}

}  // namespace

std::optional<PairFault> overlapped_pair_fault(const std::vector<Action>& actions, int position) {
  const Action& first = actions[static_cast<std::size_t>(position)];
  if (!first.overlaps_next) return std::nullopt;
  if (position + 1 >= static_cast<int>(actions.size()))
    return PairFault{position, "overlaps the next action but is the device's last"};
  const Action& second = actions[static_cast<std::size_t>(position) + 1];
  if (first.op != OpType::F || (second.op != OpType::B && second.op != OpType::P1))
    return PairFault{position,
                     "an overlapped pair is an F then a B or P1, got " + format_action(second)};
  if (second.overlaps_next)
    return PairFault{position + 1, "overlaps both the action before and after it"};
  if (first.stage == second.stage && first.microbatches == second.microbatches)
    return PairFault{position, "overlapped with its own backward"};
  return std::nullopt;
}

namespace {

// An overlapped pair: an F then a B or P1, independent of each other, the second not overlapping
// further.
void check_pair(const std::vector<Action>& actions, int device, int position) {
  if (const std::optional<PairFault> fault = overlapped_pair_fault(actions, position)) {
    bad_action_at(device, fault->position, actions[static_cast<std::size_t>(fault->position)],
                  fault->rule);
  }
}

}  // namespace

void check_schedule(const Schedule& schedule) {
  check_shape(schedule);
  std::vector<std::vector<MicrobatchState>> states(
      static_cast<std::size_t>(schedule.stage_count()),
      std::vector<MicrobatchState>(static_cast<std::size_t>(schedule.microbatches)));
  for (int d = 0; d < schedule.devices; ++d) {
    const std::vector<Action>& actions = schedule.per_device[static_cast<std::size_t>(d)];
    for (int i = 0; i < static_cast<int>(actions.size()); ++i) {
      const Action& action = actions[static_cast<std::size_t>(i)];
      check_placement(schedule, d, i, action);
      check_pair(actions, d, i);
      for (int mb : action.microbatches) {
        MicrobatchState& seen =
            states[static_cast<std::size_t>(action.stage)][static_cast<std::size_t>(mb)];
        if (!fits_order(action.op, seen))
          bad_action_at(d, i, action, order_violation(action.op, seen, mb));
        record(action.op, seen, d, i);
      }
    }
  }
  check_complete(schedule, states);
}

}  // namespace pipeplan
