#include "schedules/family.h"

#include <algorithm>
#include <stdexcept>

#include "planner/base/error.h"

namespace pipeplan {

namespace {

// Function-local so that registrations running during static initialisation, in whatever order
// the linker placed the families' files, find it constructed.
std::vector<std::unique_ptr<ScheduleFamily>>& registry() {
  static std::vector<std::unique_ptr<ScheduleFamily>> families;
  return families;
}

std::vector<const ScheduleFamily*>& listing() {
  static std::vector<const ScheduleFamily*> sorted;
  return sorted;
}

std::string count_text(int value) {
  return std::to_string(value);
}

// "interleaved, looped-bfs": the families that accept more than one chunk per device.
std::string chunked_families() {
  std::string names;
  for (const auto& family : registry()) {
    if (family->traits().chunks.max > 1 && family->traits().chunks.min == 1)
      names += (names.empty() ? "" : ", ") + family->name();
  }
  return names;
}

}  // namespace

std::string_view to_string(Objective objective) {
  return objective == Objective::steady ? "steady" : "step";
}

Objective objective_from_string(std::string_view text) {
  if (text == "step") return Objective::step;
  if (text == "steady") return Objective::steady;
  throw FieldError("objective", "'" + std::string(text) + "' is not step or steady");
}

ScheduleFamily::ScheduleFamily(const ScheduleFamilyTraits& traits, Generate generate)
    : traits_(traits), name_(traits.name), generate_(std::move(generate)) {}

std::vector<BackwardMode> ScheduleFamily::backward_modes() const {
  if (places_p2()) return {BackwardMode::twobp};
  return {BackwardMode::fused, BackwardMode::twobp, BackwardMode::twobp_fill};
}

bool ScheduleFamily::accepts(BackwardMode mode) const {
  const std::vector<BackwardMode> modes = backward_modes();
  return std::find(modes.begin(), modes.end(), mode) != modes.end();
}

void ScheduleFamily::check(const ScheduleRequest& request) const {
  if (request.devices < 1)
    throw FieldError("devices", "need at least 1 device, got " + count_text(request.devices));
  if (request.microbatches < 1)
    throw FieldError("microbatches",
                     "need at least 1 micro-batch, got " + count_text(request.microbatches));
  if (request.chunks < 1)
    throw FieldError("chunks",
                     "need at least 1 chunk per device, got " + count_text(request.chunks));
  const ChunkRule& rule = traits_.chunks;
  if (!rule.accepts(request.chunks)) {
    if (traits_.needs_costs) {  // auto: one or two per device, its own choice
      throw FieldError("chunks", "schedule '" + name_ +
                                     "' chooses its chunks per device itself (one or two), got " +
                                     count_text(request.chunks) + "; leave --chunks out");
    }
    if (rule.max == 1) {
      throw FieldError("chunks", "schedule '" + name_ + "' runs one chunk per device, got " +
                                     count_text(request.chunks) + " (" + chunked_families() +
                                     " take more)");
    }
    const std::string range = rule.min == rule.max
                                  ? "exactly " + count_text(rule.min)
                                  : count_text(rule.min) + " to " + count_text(rule.max);
    throw FieldError("chunks", "schedule '" + name_ + "' runs " + range +
                                   " chunks per device, got " + count_text(request.chunks));
  }
  static_cast<void>(resolve_backward_mode(*this, request.backward));
  if (request.p2_concat < 0) throw FieldError("p2_concat", "must be 0 (all) or a positive count");
}

Schedule ScheduleFamily::generate(const ScheduleRequest& request) const {
  check(request);
  if (traits_.needs_costs && request.costs == nullptr) {
    throw FieldError("schedule", "'" + name_ +
                                     "' is built from the stage costs, which this request lacks "
                                     "(plan it with make_plan)");
  }
  ScheduleRequest resolved = request;
  resolved.backward = resolve_backward_mode(*this, request.backward);
  Schedule schedule = generate_(resolved);
  schedule.family = name_;
  schedule.backward = places_p2() ? resolved.backward.value() : BackwardMode::fused;
  return schedule;
}

ScheduleFamilyRegistration::ScheduleFamilyRegistration(const ScheduleFamilyTraits& traits,
                                                       ScheduleFamily::Generate generate) {
  auto& families = registry();
  for (const auto& family : families) {
    if (family->name() == traits.name)
      throw std::logic_error("schedule family '" + std::string(traits.name) + "' registered twice");
  }
  families.push_back(std::make_unique<ScheduleFamily>(traits, std::move(generate)));
  auto& sorted = listing();
  sorted.clear();
  for (const auto& family : families)
    sorted.push_back(family.get());
  std::stable_sort(sorted.begin(), sorted.end(), [](const auto* a, const auto* b) {
    const int ao = a->traits().listing_order, bo = b->traits().listing_order;
    return ao != bo ? ao < bo : a->name() < b->name();
  });
}

const std::vector<const ScheduleFamily*>& schedule_families() {
  return listing();
}

const ScheduleFamily& find_schedule_family(std::string_view name) {
  std::string valid;
  for (const ScheduleFamily* family : schedule_families()) {
    if (family->name() == name) return *family;
    valid += (valid.empty() ? "" : ", ") + family->name();
  }
  throw FieldError("schedule",
                   "unknown schedule family '" + std::string(name) + "' (valid: " + valid + ")");
}

Schedule generate_schedule(std::string_view family, const ScheduleRequest& request) {
  return find_schedule_family(family).generate(request);
}

BackwardMode resolve_backward_mode(const ScheduleFamily& family,
                                   std::optional<BackwardMode> requested) {
  // The family's own placement of p2 is a split backward; the others keep B whole unless asked.
  const BackwardMode mode =
      requested.value_or(family.places_p2() ? BackwardMode::twobp : BackwardMode::fused);
  if (!family.accepts(mode)) {
    throw FieldError("backward", "schedule '" + family.name() +
                                     "' places p1 and p2 itself; use 2bp, got " +
                                     std::string(to_string(mode)));
  }
  return mode;
}

int default_chunks(const ScheduleFamily& family) {
  // The family's own count: interleaved at one chunk is 1F1B, so it runs two unless told.
  return family.traits().chunks.preferred;
}

std::vector<int> v_stage_device(int devices) {
  std::vector<int> map;
  map.reserve(static_cast<std::size_t>(std::max(2 * devices, 0)));
  for (int v = 0; v < 2 * devices; ++v)
    map.push_back(v < devices ? v : 2 * devices - 1 - v);
  return map;
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
