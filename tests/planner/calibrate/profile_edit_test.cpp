// Carrying a contention model or working memory from one profile into another: the fields that
// must agree, what is copied, what stays, and the provenance notes.
#include "planner/calibrate/profile_edit.h"

#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "planner/base/error.h"
#include "tests/error_support.h"

namespace pipeplan {
namespace {

constexpr std::int64_t kMiB = std::int64_t{1} << 20;

Profile shipped() {
  return load_profile(std::string(PIPEPLAN_SOURCE_DIR) +
                      "/profiles/h100-sxm-llama-7b.analytic.json");
}

using testing::error_of;

// The shipped profile with working memory added to every block pass.
Profile with_work(Profile p) {
  p.provenance = {"measured", "TEST GPU", "2026-11-26", "pipeplan profile --test", ""};
  for (auto& [kind, by_mbs] : p.layers) {
    for (auto& [mbs, cost] : by_mbs) {
      const std::int64_t scale = kind == "block" ? mbs : 0;
      cost.forward_work_bytes = 16 * kMiB * scale;
      cost.p1_work_bytes = 1500 * kMiB * scale;
      for (int k = 2; k <= 4; ++k)
        cost.p2_work_bytes[k] = 64 * kMiB * k * scale;
    }
  }
  return p;
}

TEST(ProfileEdit, SmPartitionIsReadFromTheMeasuringCommand) {
  Profile p = shipped();
  p.provenance.command = "pipeplan profile --backend cuda --sm-partition 32 --mbs 1";
  EXPECT_EQ(measured_sm_partition(p), 32);
  p.provenance.command = "pipeplan profile --backend cuda --sm-partition=16";
  EXPECT_EQ(measured_sm_partition(p), 16);
  p.provenance.command = "pipeplan profile --backend cuda";
  EXPECT_EQ(measured_sm_partition(p), std::nullopt);
}

TEST(ProfileEdit, CopiesTheContentionModelAndKeepsTheTimes) {
  Profile source = shipped();
  source.contention.slowdown = {1.1, 1.2};
  source.contention.copy = CopySlowdown{1.3, 6};
  source.contention.source = "fitted";
  const Profile target = shipped();
  const Profile out = with_contention_of(target, "dir/new.json", source, "dir/fitted.json");
  EXPECT_EQ(out.contention.slowdown, source.contention.slowdown);
  EXPECT_EQ(out.contention.copy, source.contention.copy);
  EXPECT_EQ(out.contention.source, "copied from fitted.json by pipeplan calibrate copy: fitted");
  EXPECT_NE(out.provenance.notes.find("fitted.json"), std::string::npos);
  EXPECT_EQ(profile_to_json(out)["layers"], profile_to_json(target)["layers"]);
}

// A sustained term alone (separate GPUs, each with its own clock) is a model to copy too, and it
// survives the profile file.
TEST(ProfileEdit, CopiesASustainedTermAlone) {
  Profile source = shipped();
  source.contention.sustained = SustainedLoad{.factor = 0.3, .time_constant_us = 40000};
  source.contention.source = "power cap";
  const Profile out = with_contention_of(shipped(), "new.json", source, "capped.json");
  EXPECT_TRUE(out.contention.slowdown.empty());
  EXPECT_EQ(out.contention.sustained, source.contention.sustained);
  const nlohmann::json j = profile_to_json(out);
  ASSERT_TRUE(j.contains("contention"));
  EXPECT_FALSE(j["contention"].contains("slowdown"));
  EXPECT_EQ(profile_from_json(j, "new.json").contention.sustained, source.contention.sustained);
}

TEST(ProfileEdit, CopyRefusesAnotherSequenceShareOrNoModel) {
  Profile source = shipped();
  source.contention.slowdown = {1.1};
  Profile other = shipped();
  other.seq *= 2;
  EXPECT_EQ(error_of([&] { with_contention_of(other, "other.json", source, "fitted.json"); }),
            "other.json: field 'seq' differs from fitted.json's");
  Profile share = shipped();
  share.provenance.command = "pipeplan profile --sm-partition 16";
  EXPECT_NE(error_of([&] {
              with_contention_of(share, "new.json", source, "fitted.json");
            }).find("new.json: field 'provenance.command' measured in 16 SMs"),
            std::string::npos);
  EXPECT_EQ(error_of([&] { with_contention_of(shipped(), "new.json", shipped(), "plain.json"); }),
            "plain.json: field 'contention' is missing (nothing to copy)");
}

// The model is compared as fit and eval compare a run's: its name aside (a config.json model is
// named after where it was read), and a shape that differs named by its field.
TEST(ProfileEdit, ModelsOfOneShapeUnderAnotherNameAreTheSameModel) {
  Profile source = with_work(shipped());
  source.contention.slowdown = {1.1};
  source.model.name = "llama-7b-elsewhere";
  EXPECT_EQ(with_contention_of(shipped(), "new.json", source, "fitted.json").contention.slowdown,
            source.contention.slowdown);
  EXPECT_EQ(with_working_memory_of(shipped(), "p.json", source, profile_to_json(source), "m.json")
                .layers.at("block")
                .at(1)
                .p1_work_bytes,
            1500 * kMiB);
  Profile deeper = source;
  deeper.model.layers = 16;
  EXPECT_EQ(error_of([&] { with_contention_of(shipped(), "new.json", deeper, "fitted.json"); }),
            "new.json: field 'model.layers' differs from fitted.json's");
  EXPECT_EQ(error_of([&] {
              with_working_memory_of(shipped(), "p.json", deeper, profile_to_json(deeper),
                                     "m.json");
            }),
            "m.json: field 'model.layers' differs from p.json's");
}

TEST(ProfileEdit, CopiesWorkingMemoryAndKeepsTimesAndContention) {
  const Profile measured = with_work(shipped());
  Profile target = shipped();
  target.contention.slowdown = {1.2};
  const Profile out = with_working_memory_of(target, "p.json", measured, profile_to_json(measured),
                                             "dir/measured.json");
  const LayerCost& block = out.layers.at("block").at(1);
  EXPECT_EQ(block.p1_work_bytes, 1500 * kMiB);
  EXPECT_EQ(block.p2_work(3), 192 * kMiB);
  EXPECT_EQ(block.forward_us, target.layers.at("block").at(1).forward_us);
  EXPECT_EQ(out.contention.slowdown, target.contention.slowdown);
  EXPECT_NE(out.provenance.notes.find("measured.json (TEST GPU, 2026-11-26"), std::string::npos)
      << out.provenance.notes;
}

TEST(ProfileEdit, WorkingMemoryRefusesAnotherSequenceOrAProfileWithoutIt) {
  Profile measured = with_work(shipped());
  measured.seq *= 2;
  EXPECT_EQ(error_of([&] {
              with_working_memory_of(shipped(), "p.json", measured, profile_to_json(measured),
                                     "m.json");
            }),
            "m.json: field 'seq' differs from p.json's");
  Profile plain = shipped();
  plain.provenance.source = "measured";
  EXPECT_NE(error_of([&] {
              with_working_memory_of(shipped(), "p.json", plain, profile_to_json(plain), "m.json");
            }).find("forward_work_bytes' is missing (measured before working memory was)"),
            std::string::npos);
  // The CPU backend measures none: said so, not that the profile is old.
  plain.gpu = "cpu";
  EXPECT_NE(error_of([&] {
              with_working_memory_of(shipped(), "p.json", plain, profile_to_json(plain), "m.json");
            })
                .find("(the cpu backend does not measure working memory: give a profile measured "
                      "with --backend cuda)"),
            std::string::npos);
}

// An analytic profile given working memory (by this command, which keeps the target's
// provenance) is still an estimate: it is no source of working memory.
TEST(ProfileEdit, WorkingMemoryComesFromAMeasuredProfileOnly) {
  Profile estimated = with_work(shipped());
  estimated.provenance.source = "analytic";
  EXPECT_EQ(error_of([&] {
              with_working_memory_of(shipped(), "p.json", estimated, profile_to_json(estimated),
                                     "m.json");
            }),
            "m.json: field 'provenance.source' is 'analytic', not 'measured' (working memory "
            "comes from a measured profile)");
}

}  // namespace
}  // namespace pipeplan
