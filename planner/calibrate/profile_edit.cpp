#include "planner/calibrate/profile_edit.h"

#include <array>
#include <cctype>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "planner/base/error.h"

namespace pipeplan {

namespace {

std::string base_name(std::string_view path) {
  return std::filesystem::path(path).filename().string();
}

std::string sm_text(const std::optional<int>& share) {
  return share ? std::to_string(*share) + " SMs" : "the whole GPU";
}

// Error naming `name` and `field` where the two profiles' fields differ (compared as written).
void require_same(const nlohmann::json& a, const nlohmann::json& b, std::string_view field,
                  std::string_view name, std::string_view other_name) {
  const std::string key(field);
  if (a.at(key) != b.at(key)) {
    throw Error(std::string(name) + ": field '" + key + "' differs from " +
                std::string(other_name) + "'s");
  }
}

// The same for the model, its name aside (a model from a config.json is named after where it was
// read, as the runs' checks take it): the first subfield that differs.
void require_same_model(const nlohmann::json& a, const nlohmann::json& b, std::string_view name,
                        std::string_view other_name) {
  nlohmann::json mine = a.at("model");
  nlohmann::json theirs = b.at("model");
  mine.erase("name");
  theirs.erase("name");
  if (mine == theirs) return;
  std::string key;
  for (const auto& [field, value] : mine.items()) {
    if (!theirs.contains(field) || theirs.at(field) != value) {
      key = field;
      break;
    }
  }
  if (key.empty()) {
    for (const auto& [field, value] : theirs.items()) {
      if (!mine.contains(field)) {
        key = field;
        break;
      }
    }
  }
  throw Error(std::string(name) + ": field 'model." + key + "' differs from " +
              std::string(other_name) + "'s");
}

}  // namespace

std::optional<int> measured_sm_partition(const Profile& profile) {
  const std::string& command = profile.provenance.command;
  constexpr std::string_view kFlag = "--sm-partition";
  for (std::size_t at = command.find(kFlag); at != std::string::npos;
       at = command.find(kFlag, at + 1)) {
    std::size_t i = at + kFlag.size();
    if (i >= command.size() || (command[i] != ' ' && command[i] != '=')) continue;
    ++i;
    std::size_t end = i;
    while (end < command.size() && std::isdigit(static_cast<unsigned char>(command[end])) != 0)
      ++end;
    if (end == i || end - i > 6) continue;
    return std::stoi(command.substr(i, end - i));
  }
  return std::nullopt;
}

Profile with_contention_of(const Profile& profile, std::string_view profile_name,
                           const Profile& source, std::string_view source_name) {
  if (!source.contention.has_model())
    throw Error(std::string(source_name) + ": field 'contention' is missing (nothing to copy)");
  const nlohmann::json a = profile_to_json(profile);
  const nlohmann::json b = profile_to_json(source);
  require_same_model(a, b, profile_name, source_name);
  for (const std::string_view field : {"seq", "attention", "gpu"})
    require_same(a, b, field, profile_name, source_name);
  const std::optional<int> mine = measured_sm_partition(profile);
  const std::optional<int> theirs = measured_sm_partition(source);
  if (mine != theirs) {
    throw Error(std::string(profile_name) + ": field 'provenance.command' measured in " +
                sm_text(mine) + ", " + std::string(source_name) + " in " + sm_text(theirs));
  }
  Profile out = profile;
  out.contention = source.contention;
  out.contention.source = "copied from " + base_name(source_name) +
                          " by pipeplan calibrate copy: " + source.contention.source;
  add_provenance_note(out, "Contention model copied from " + base_name(source_name) +
                               " by pipeplan calibrate copy.");
  return out;
}

Profile with_working_memory_of(const Profile& profile, std::string_view profile_name,
                               const Profile& measured, const nlohmann::json& measured_json,
                               std::string_view measured_name) {
  const nlohmann::json a = profile_to_json(measured);
  const nlohmann::json b = profile_to_json(profile);
  require_same_model(a, b, measured_name, profile_name);
  for (const std::string_view field : {"seq", "attention"})
    require_same(a, b, field, measured_name, profile_name);
  // Working memory is what an allocator saw: an estimate (or a profile given it by this
  // command, which keeps its own provenance) is no source of it.
  if (measured.provenance.source != "measured") {
    throw Error(std::string(measured_name) + ": field 'provenance.source' is '" +
                measured.provenance.source +
                "', not 'measured' (working memory comes from a measured profile)");
  }
  static constexpr std::array<const char*, 3> kFields = {"forward_work_bytes", "p1_work_bytes",
                                                         "p2_work_bytes"};
  // A profile measured before working memory was has none of the fields anywhere; one that has
  // them leaves out a layer's where all of them are 0.
  bool any = false;
  for (const auto& [kind, by_mbs] : measured_json.at("layers").items()) {
    for (const auto& [mbs, cost] : by_mbs.items())
      any = any || cost.contains(kFields[0]) || cost.contains(kFields[1]) ||
            cost.contains(kFields[2]);
  }
  Profile out = profile;
  for (auto& [kind, by_mbs] : out.layers) {
    for (auto& [mbs, cost] : by_mbs) {
      const std::string where = "layers." + kind + "." + std::to_string(mbs);
      const auto kind_it = measured.layers.find(kind);
      if (kind_it == measured.layers.end() || kind_it->second.count(mbs) == 0) {
        throw Error(std::string(measured_name) + ": no " + where + " for " +
                    std::string(profile_name));
      }
      if (!any) {
        // The CPU backend has no allocator to count; an older CUDA profile predates the fields.
        throw Error(std::string(measured_name) + ": field '" + where + "." + kFields[0] +
                    "' is missing (" +
                    (measured.gpu == "cpu"
                         ? "the cpu backend does not measure working memory: give a profile "
                           "measured with --backend cuda"
                         : "measured before working memory was") +
                    ")");
      }
      const LayerCost& source = kind_it->second.at(mbs);
      cost.forward_work_bytes = source.forward_work_bytes;
      cost.p1_work_bytes = source.p1_work_bytes;
      cost.p2_work_bytes = source.p2_work_bytes;
    }
  }
  const Provenance& origin = measured.provenance;
  add_provenance_note(out, "Working memory (forward/p1/p2_work_bytes) from " +
                               base_name(measured_name) + " (" + origin.gpu + ", " + origin.date +
                               ": " + origin.command + ") by pipeplan calibrate working-memory.");
  return out;
}

void add_provenance_note(Profile& profile, std::string_view note) {
  std::string& notes = profile.provenance.notes;
  if (!notes.empty() && notes.back() != ' ') notes += ' ';
  notes += note;
}

}  // namespace pipeplan
