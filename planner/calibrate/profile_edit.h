// What calibration changes in a profile besides fitting: another profile's contention model
// carried into a new measurement of the same ops, a measured profile's working memory carried
// into a calibrated one, and the provenance notes that say where each came from.
#pragma once

#include <optional>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "profiles/profile.h"

namespace pipeplan {

// The SM share the profile was measured in: the --sm-partition value of the command in its
// provenance, or nullopt (the whole GPU).
std::optional<int> measured_sm_partition(const Profile& profile);

// `profile` with `source`'s contention model. Both must describe the same model (its name aside:
// a model from a config.json is named after where it was read), sequence length, attention and
// GPU, measured in the same SM share; else Error naming `profile_name` and the field that differs
// (a model's subfield: 'model.layers'). `source` must have a model (Error naming `source_name`).
Profile with_contention_of(const Profile& profile, std::string_view profile_name,
                           const Profile& source, std::string_view source_name);

// `profile` with every layer's working memory (forward_work_bytes, p1_work_bytes,
// p2_work_bytes) taken from `measured` (its JSON as read, `measured_json`, tells a field never
// measured from one measured as 0): same model (its name aside), sequence length and attention,
// and every (kind, micro-batch size) of `profile` in `measured`; else Error naming
// `measured_name` and the field. Times and contention stay `profile`'s.
Profile with_working_memory_of(const Profile& profile, std::string_view profile_name,
                               const Profile& measured, const nlohmann::json& measured_json,
                               std::string_view measured_name);

// Appends a sentence to the provenance notes.
void add_provenance_note(Profile& profile, std::string_view note);

}  // namespace pipeplan
