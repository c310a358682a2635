#include "profiles/recompute.h"

#include <algorithm>
#include <cstdint>
#include <string>

#include "planner/base/error.h"

namespace pipeplan {

std::string_view to_string(Recompute recompute) {
  return recompute == Recompute::full ? "full" : "none";
}

Recompute recompute_from_string(std::string_view text) {
  if (text == "none") return Recompute::none;
  if (text == "full") return Recompute::full;
  throw FieldError("recompute", "must be 'none' or 'full', got '" + std::string(text) + "'");
}

Profile recompute_profile(Profile profile, Recompute recompute) {
  if (recompute == Recompute::none) return profile;
  const auto blocks = profile.layers.find(std::string(to_string(LayerKind::block)));
  if (blocks == profile.layers.end()) return profile;
  for (auto& [mbs, c] : blocks->second) {
    const std::int64_t stash = c.stash_bytes;
    const std::int64_t checkpoint = std::min(c.send_bytes, stash);
    // The checkpoint is one of the stash's tensors: rebuilding the stash around it peaks where
    // the forward did, and p1 then runs from the whole stash as before.
    const std::int64_t peak =
        std::max(stash + c.forward_work_bytes, std::max(stash, c.retained_bytes) + c.p1_work_bytes);
    c.p1_us += c.forward_us;
    c.p1_work_bytes = std::max<std::int64_t>(0, peak - std::max(checkpoint, c.retained_bytes));
    c.forward_work_bytes = std::max<std::int64_t>(0, stash + c.forward_work_bytes - checkpoint);
    c.stash_bytes = checkpoint;
  }
  profile.provenance.notes +=
      " Full activation recomputation applied (profiles/recompute.h): each block keeps its input "
      "and re-runs its forward before its p1.";
  return profile;
}

}  // namespace pipeplan
