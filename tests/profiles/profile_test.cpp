#include "profiles/profile.h"

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>

#include <gtest/gtest.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include "planner/base/error.h"
#include "planner/base/io.h"
#include "tests/error_support.h"

namespace pipeplan {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

using testing::error_of;

LayerCost sample_cost(double scale) {
  LayerCost c;
  c.forward_us = 101.25 * scale;
  c.p1_us = 202.5 * scale;
  c.p2_us = 150.125 * scale;
  c.p2_concat_us = {{1, 150.125 * scale}, {2, 280.0 * scale}, {4, 530.5 * scale}};
  c.stash_bytes = 123'456'789'012;
  c.retained_bytes = 98'765'432;
  c.param_bytes = 404'750'720;
  c.grad_bytes = 809'501'440;
  c.optimizer_bytes = 2'428'504'320;
  c.send_bytes = 16'777'216;
  return c;
}

std::int64_t parameters_of(const ModelConfig& model, const std::string& kind) {
  return kind == "block"       ? model.block_parameters()
         : kind == "embedding" ? model.embedding_parameters()
                               : model.head_parameters();
}

Profile sample_profile() {
  Profile p;
  p.model = model_preset("tiny");
  p.gpu = "h100-sxm";
  p.seq = 32;
  p.attention = Attention::materialized;
  p.provenance = {"measured", "NVIDIA H100 80GB HBM3", "2025-01-02T03:04:05Z",
                  "pipeplan profile --model tiny", "test profile"};
  p.p2p = {9.5, 412.75};
  p.layers["embedding"][1] = sample_cost(0.1);
  p.layers["block"][1] = sample_cost(1.0);
  p.layers["block"][2] = sample_cost(1.9);
  // Working memory, measured for the block at mbs 1 only (optional fields).
  p.layers["block"][1].forward_work_bytes = 268'435'456;
  p.layers["block"][1].p1_work_bytes = 301'989'888;
  p.layers["block"][1].p2_work_bytes = {{1, 100'663'296}, {2, 167'772'160}, {4, 301'989'888}};
  p.layers["head"][1] = sample_cost(0.7);
  p.layers["head"][2] = sample_cost(1.3);
  p.layers["embedding"][2] = sample_cost(0.2);
  p.layers["embedding"][4] = sample_cost(0.3);  // not present for every kind
  // The weights of the tiny model's layers in bf16, as its shape gives them.
  for (auto& [kind, by_mbs] : p.layers) {
    for (auto& [mbs, cost] : by_mbs)
      cost.param_bytes = 2 * parameters_of(p.model, kind);
  }
  p.contention.slowdown = {1.05, 1.125, 1.25};
  p.contention.by_op["P1"] = {1.0, 1.5};
  p.contention.sustained = SustainedLoad{.factor = 0.55, .time_constant_us = 50'000};
  p.contention.source = "fitted";
  return p;
}

void expect_same_cost(const LayerCost& a, const LayerCost& b) {
  EXPECT_EQ(a.forward_us, b.forward_us);
  EXPECT_EQ(a.p1_us, b.p1_us);
  EXPECT_EQ(a.p2_us, b.p2_us);
  EXPECT_EQ(a.p2_concat_us, b.p2_concat_us);
  EXPECT_EQ(a.stash_bytes, b.stash_bytes);
  EXPECT_EQ(a.retained_bytes, b.retained_bytes);
  EXPECT_EQ(a.param_bytes, b.param_bytes);
  EXPECT_EQ(a.grad_bytes, b.grad_bytes);
  EXPECT_EQ(a.optimizer_bytes, b.optimizer_bytes);
  EXPECT_EQ(a.send_bytes, b.send_bytes);
  EXPECT_EQ(a.forward_work_bytes, b.forward_work_bytes);
  EXPECT_EQ(a.p1_work_bytes, b.p1_work_bytes);
  EXPECT_EQ(a.p2_work_bytes, b.p2_work_bytes);
}

void expect_same_profile(const Profile& a, const Profile& b) {
  EXPECT_EQ(model_to_json(a.model), model_to_json(b.model));
  EXPECT_EQ(a.gpu, b.gpu);
  EXPECT_EQ(a.seq, b.seq);
  EXPECT_EQ(a.attention, b.attention);
  EXPECT_EQ(a.provenance.source, b.provenance.source);
  EXPECT_EQ(a.provenance.gpu, b.provenance.gpu);
  EXPECT_EQ(a.provenance.date, b.provenance.date);
  EXPECT_EQ(a.provenance.command, b.provenance.command);
  EXPECT_EQ(a.provenance.notes, b.provenance.notes);
  EXPECT_EQ(a.p2p.latency_us, b.p2p.latency_us);
  EXPECT_EQ(a.p2p.bandwidth_GBps, b.p2p.bandwidth_GBps);
  EXPECT_EQ(a.contention.slowdown, b.contention.slowdown);
  EXPECT_EQ(a.contention.by_op, b.contention.by_op);
  EXPECT_EQ(a.contention.sustained, b.contention.sustained);
  EXPECT_EQ(a.contention.source, b.contention.source);
  ASSERT_EQ(a.layers.size(), b.layers.size());
  for (const auto& [kind, by_mbs] : a.layers) {
    ASSERT_EQ(b.layers.count(kind), 1u) << kind;
    ASSERT_EQ(by_mbs.size(), b.layers.at(kind).size()) << kind;
    for (const auto& [mbs, cost] : by_mbs) {
      SCOPED_TRACE(kind + " mbs " + std::to_string(mbs));
      expect_same_cost(cost, b.layers.at(kind).at(mbs));
    }
  }
}

TEST(Profile, SaveLoadRoundTripKeepsEveryField) {
  const Profile p = sample_profile();
  const fs::path path =
      fs::temp_directory_path() / ("pipeplan_profile_" + std::to_string(::getpid()) + ".json");
  save_profile(p, path);
  EXPECT_FALSE(fs::exists(path.string() + ".tmp"));  // atomic write leaves no temporary
  const std::string text = read_text_file(path);
  EXPECT_NE(text.find("\n  \"attention\": \"materialized\""), std::string::npos);  // 2 spaces
  expect_same_profile(load_profile(path), p);
  fs::remove(path);
}

TEST(Profile, WrongFormatOrVersionIsRejected) {
  json j = profile_to_json(sample_profile());
  j["version"] = 2;
  EXPECT_EQ(error_of([&] { profile_from_json(j, "p.json"); }),
            "p.json: field 'version' is 2, this pipeplan reads version 1");
  j["version"] = 1;
  j["format"] = "pipeplan-plan";
  EXPECT_NE(error_of([&] { profile_from_json(j, "p.json"); }).find("'format'"), std::string::npos);
}

TEST(Profile, InvalidTimesNameTheJsonPath) {
  json j = profile_to_json(sample_profile());
  j["layers"]["block"]["1"]["forward_us"] = -3.0;
  EXPECT_EQ(error_of([&] { profile_from_json(j, "p.json"); }),
            "p.json: field 'layers.block.1.forward_us' must not be negative");
  j = profile_to_json(sample_profile());
  j["layers"]["head"]["2"]["p1_us"] = 0.0;
  EXPECT_EQ(error_of([&] { profile_from_json(j, "p.json"); }),
            "p.json: field 'layers.head.2.p1_us' must be positive");
  j = profile_to_json(sample_profile());
  j["layers"]["block"]["1"]["p2_concat_us"]["2"] = "fast";
  EXPECT_EQ(error_of([&] { profile_from_json(j, "p.json"); }),
            "p.json: field 'layers.block.1.p2_concat_us.2' must be a finite number");
  j = profile_to_json(sample_profile());
  j["layers"]["embedding"]["1"]["p2_us"] = 0.0;  // parameter-free kinds may have no p2
  j["layers"]["embedding"]["1"]["p2_concat_us"]["1"] = 0.0;
  EXPECT_EQ(profile_from_json(j, "p.json").cost(LayerKind::embedding, 1).p2_us, 0.0);
}

// A layer's weights are the model's shape: costs of another model (its `model` edited, a wider
// block's times under a narrower model) are refused naming the layer, the field and both values.
TEST(Profile, ParamBytesAreTheWeightsOfTheModelsLayers) {
  json j = profile_to_json(sample_profile());
  j["model"]["hidden"] = 128;  // 131,840 parameters a block, not the costs' 49,536
  EXPECT_EQ(error_of([&] { profile_from_json(j, "p.json"); }),
            "p.json: field 'layers.block.1.param_bytes' (99072) does not fit field 'model', whose "
            "block has 131840 parameters: 263680 bytes in bf16 (527360 in f32, 1054720 in f64); "
            "the costs are of another model");
  j = profile_to_json(sample_profile());
  j["model"]["vocab"] = 512;
  EXPECT_NE(error_of([&] {
              profile_from_json(j, "p.json");
            }).find("field 'layers.embedding.1.param_bytes' (32768) does not fit"),
            std::string::npos);
  // A tied head keeps its own copy of the table (as the analytic model writes it): the same bytes.
  j = profile_to_json(sample_profile());
  j["model"]["tied_embeddings"] = true;
  EXPECT_EQ(profile_from_json(j, "p.json").cost(LayerKind::head, 1).param_bytes, 2 * 16'448);
  // The CPU backend's weights are f32 (or f64): the same parameters, 4 (8) bytes each.
  for (const int bytes : {4, 8}) {
    j = profile_to_json(sample_profile());
    for (auto& [kind, by_mbs] : j["layers"].items()) {
      for (auto& [mbs, cost] : by_mbs.items())
        cost["param_bytes"] = bytes * parameters_of(model_preset("tiny"), kind);
    }
    EXPECT_EQ(profile_from_json(j, "p.json").cost(LayerKind::block, 1).param_bytes, bytes * 49'536);
  }
}

TEST(Profile, InvalidStructureNamesTheJsonPath) {
  json j = profile_to_json(sample_profile());
  j["layers"]["block"]["1"].erase("stash_bytes");
  EXPECT_EQ(error_of([&] { profile_from_json(j, "p.json"); }),
            "p.json: field 'layers.block.1.stash_bytes' is missing");
  j = profile_to_json(sample_profile());
  j["layers"]["block"]["1"]["send_bytes"] = 1.5;
  EXPECT_EQ(error_of([&] { profile_from_json(j, "p.json"); }),
            "p.json: field 'layers.block.1.send_bytes' must be an integer number of bytes");
  j = profile_to_json(sample_profile());
  j["layers"]["block"]["x"] = j["layers"]["block"]["1"];
  EXPECT_NE(error_of([&] { profile_from_json(j, "p.json"); }).find("'layers.block.x'"),
            std::string::npos);
  j = profile_to_json(sample_profile());
  j["layers"]["mlp"] = j["layers"]["block"];
  EXPECT_NE(error_of([&] { profile_from_json(j, "p.json"); }).find("'layers.mlp'"),
            std::string::npos);
  j = profile_to_json(sample_profile());
  j["layers"].erase("head");
  EXPECT_EQ(error_of([&] { profile_from_json(j, "p.json"); }),
            "p.json: field 'layers.head' is missing");
  j = profile_to_json(sample_profile());
  j["model"]["hidden"] = 0;
  EXPECT_EQ(error_of([&] { profile_from_json(j, "p.json"); }),
            "p.json: field 'model.hidden' must be a positive integer");
  j = profile_to_json(sample_profile());
  j["p2p"]["latency_us"] = -1;
  EXPECT_EQ(error_of([&] { profile_from_json(j, "p.json"); }),
            "p.json: field 'p2p.latency_us' must not be negative");
  j = profile_to_json(sample_profile());
  j["attention"] = "sparse";
  EXPECT_NE(error_of([&] { profile_from_json(j, "p.json"); }).find("'attention'"),
            std::string::npos);
}

TEST(Profile, MisspeltFieldsAreRefusedWithTheNearestName) {
  // An optional field under another name would otherwise read as its default.
  const auto refused = [](const std::function<void(json&)>& edit) {
    json j = profile_to_json(sample_profile());
    edit(j);
    return error_of([&] { profile_from_json(j, "p.json"); });
  };
  EXPECT_EQ(refused([](json& j) { j["contnetion"] = j["contention"]; }),
            "p.json: field 'contnetion' is not a field of a profile (did you mean 'contention'?)");
  EXPECT_EQ(refused([](json& j) { j["model"]["slidng_window"] = 4096; }),
            "p.json: field 'model.slidng_window' is not a field of a model (did you mean "
            "'sliding_window'?)");
  EXPECT_EQ(refused([](json& j) { j["p2p"]["bandwith_GBps"] = 1; }),
            "p.json: field 'p2p.bandwith_GBps' is not a field of a profile's link (did you mean "
            "'bandwidth_GBps'?)");
  EXPECT_EQ(refused([](json& j) { j["provenance"]["host"] = "node7"; }),
            "p.json: field 'provenance.host' is not a field of a profile's provenance");
  EXPECT_EQ(refused([](json& j) { j["contention"]["slowdwn"] = json::array({2.0}); }),
            "p.json: field 'contention.slowdwn' is not a field of a contention model (did you "
            "mean 'slowdown'?)");
  EXPECT_EQ(refused([](json& j) {
              j["overlap"] = {{"efficiency", 0.5}, {"eficiency", 1}};
            }),
            "p.json: field 'overlap.eficiency' is not a field of an overlap model (did you mean "
            "'efficiency'?)");
  EXPECT_EQ(refused([](json& j) { j["layers"]["block"]["1"]["optimiser_us"] = 5; }),
            "p.json: field 'layers.block.1.optimiser_us' is not a field of a layer cost (did you "
            "mean 'optimizer_us'?)");
}

TEST(Profile, TheOneMicroBatchP2EntryIsP2Itself) {
  json j = profile_to_json(sample_profile());
  j["layers"]["block"]["1"]["p2_concat_us"]["1"] = 50 * 150.125;
  EXPECT_EQ(error_of([&] { profile_from_json(j, "p.json"); }),
            "p.json: field 'layers.block.1.p2_concat_us.1' (7506.25) differs from p2_us "
            "(150.125), which it repeats");
  j["layers"]["block"]["1"]["p2_concat_us"].erase("1");  // absent: p2_us
  EXPECT_EQ(profile_from_json(j, "p.json").cost(LayerKind::block, 1).p2_time_us(1), 150.125);
}

TEST(Profile, AModelProfileNamesItsGpuAndASeqItsPositionsHold) {
  json j = profile_to_json(sample_profile());
  j["gpu"] = "";
  EXPECT_EQ(error_of([&] { profile_from_json(j, "p.json"); }),
            "p.json: field 'gpu' is empty; only a uniform model's profile has no GPU");
  j = profile_to_json(sample_profile());
  j["model"] = model_to_json(model_preset("gpt-1.5b"));
  j["seq"] = 4096;
  EXPECT_EQ(error_of([&] { profile_from_json(j, "p.json"); }),
            "p.json: field 'seq' (4096) is above the 1024 learned positions of gpt-1.5b");
}

TEST(Profile, SustainedLoadIsOptionalAndChecked) {
  json j = profile_to_json(sample_profile());
  j["contention"].erase("sustained");
  EXPECT_FALSE(profile_from_json(j, "p.json").contention.sustained.has_value());
  j["contention"]["sustained"] = {{"factor", 0.5}};
  EXPECT_EQ(error_of([&] { profile_from_json(j, "p.json"); }),
            "p.json: field 'contention.sustained.time_constant_us' is missing");
  j["contention"]["sustained"]["time_constant_us"] = 0;
  EXPECT_EQ(error_of([&] { profile_from_json(j, "p.json"); }),
            "p.json: field 'contention.sustained.time_constant_us' must be a number in (0, "
            "1000000000]");
  j["contention"]["sustained"] = {{"factor", -0.1}, {"time_constant_us", 50000}};
  EXPECT_EQ(error_of([&] { profile_from_json(j, "p.json"); }),
            "p.json: field 'contention.sustained.factor' must be a number in [0, 100]");
  j["contention"]["sustained"] = {{"factor", "high"}, {"time_constant_us", 50000}};
  EXPECT_EQ(error_of([&] { profile_from_json(j, "p.json"); }),
            "p.json: field 'contention.sustained.factor' must be a number in [0, 100]");
  j["contention"]["sustained"] = {{"factor", 0.5}, {"time_constant_us", 50000}, {"tau", 1}};
  EXPECT_EQ(error_of([&] { profile_from_json(j, "p.json"); }),
            "p.json: field 'contention.sustained.tau' is not a field of contention.sustained "
            "(its keys: factor and time_constant_us)");
  // A near miss is named, as at every other level of a profile.
  j["contention"]["sustained"] = {{"factr", 0.5}, {"time_constant_us", 50000}};
  EXPECT_EQ(error_of([&] { profile_from_json(j, "p.json"); }),
            "p.json: field 'contention.sustained.factr' is not a field of contention.sustained "
            "(its keys: factor and time_constant_us) (did you mean 'factor'?)");
  j["contention"]["sustained"] = 3;
  EXPECT_EQ(error_of([&] { profile_from_json(j, "p.json"); }),
            "p.json: field 'contention.sustained' must be an object");
  j["contention"]["sustained"] = {{"factor", 0.5}, {"time_constant_us", 50000}};
  const Profile with = profile_from_json(j, "p.json");
  EXPECT_EQ(with.contention.sustained, (SustainedLoad{.factor = 0.5, .time_constant_us = 50000}));
  EXPECT_EQ(profile_from_json(profile_to_json(with), "q.json").contention.sustained,
            with.contention.sustained);
}

TEST(Profile, ContentionIsOptionalAndChecked) {
  json j = profile_to_json(sample_profile());
  j.erase("contention");
  EXPECT_TRUE(profile_from_json(j, "p.json").contention.empty());
  j["contention"] = {{"slowdown", {1.0, "slow"}}};
  EXPECT_EQ(error_of([&] { profile_from_json(j, "p.json"); }),
            "p.json: field 'contention.slowdown' must hold numbers in (0, 100]");
  j["contention"] = {{"source", "no curve"}};
  EXPECT_EQ(error_of([&] { profile_from_json(j, "p.json"); }),
            "p.json: field 'contention.slowdown' must be an array of 1 to 1024 numbers");
  j["contention"] = {{"slowdown", {1.0}}, {"by_op", {{"P2", {0.0}}}}};
  EXPECT_EQ(error_of([&] { profile_from_json(j, "p.json"); }),
            "p.json: field 'contention.by_op.P2' must hold numbers in (0, 100]");
  // The copy slowdown: both factors, each in (0, 100], no other key; round trip.
  j["contention"] = {{"slowdown", {1.0}}, {"copy", {{"sender_idle", 1.3}}}};
  EXPECT_EQ(error_of([&] { profile_from_json(j, "p.json"); }),
            "p.json: field 'contention.copy.sender_computing' is missing");
  j["contention"]["copy"]["sender_computing"] = 0;
  EXPECT_EQ(error_of([&] { profile_from_json(j, "p.json"); }),
            "p.json: field 'contention.copy.sender_computing' must be a number in (0, 100]");
  j["contention"]["copy"] = {{"sender_idle", 1.3}, {"sender_computing", 20.5}, {"receiver", 2}};
  EXPECT_EQ(error_of([&] { profile_from_json(j, "p.json"); }),
            "p.json: field 'contention.copy.receiver' is not a field of contention.copy (its "
            "keys: sender_idle and sender_computing)");
  j["contention"]["copy"] = 2;
  EXPECT_EQ(error_of([&] { profile_from_json(j, "p.json"); }),
            "p.json: field 'contention.copy' must be an object");
  j["contention"]["copy"] = {{"sender_idle", 1.3}, {"sender_computing", 20.5}};
  const Profile with_copy = profile_from_json(j, "p.json");
  ASSERT_TRUE(with_copy.contention.copy.has_value());
  EXPECT_EQ(*with_copy.contention.copy,
            (CopySlowdown{.sender_idle = 1.3, .sender_computing = 20.5}));
  EXPECT_EQ(profile_from_json(profile_to_json(with_copy), "q.json").contention.copy,
            with_copy.contention.copy);
  // Beyond its last entry a curve keeps its last factor; an op without a curve takes slowdown.
  const Contention c = profile_from_json(profile_to_json(sample_profile()), "p.json").contention;
  EXPECT_FALSE(c.copy.has_value());
  EXPECT_EQ(Contention::factor(c.curve("P1"), 5), 1.5);
  EXPECT_EQ(Contention::factor(c.curve("F"), 2), 1.125);
  EXPECT_EQ(Contention::factor(c.slowdown, 9), 1.25);
}

TEST(Profile, P2TimeUsesEntriesThenLinearExtension) {
  const LayerCost c = sample_cost(1.0);  // entries k = 1, 2, 4
  EXPECT_EQ(c.p2_time_us(1), 150.125);
  EXPECT_EQ(c.p2_time_us(2), 280.0);
  EXPECT_DOUBLE_EQ(c.p2_time_us(3), 280.0 / 2 * 3);  // from k = 2's per-micro-batch time
  EXPECT_DOUBLE_EQ(c.p2_time_us(8), 530.5 / 4 * 8);
  LayerCost bare;
  bare.p2_us = 10;
  EXPECT_DOUBLE_EQ(bare.p2_time_us(1), 10);
  EXPECT_DOUBLE_EQ(bare.p2_time_us(5), 50);
  EXPECT_THROW(bare.p2_time_us(0), Error);
}

// Working memory is optional (profiles measured before it have none: 0), checked like any byte
// count, and extended past its table like the p2 times.
TEST(Profile, WorkingMemoryIsOptionalCheckedAndExtended) {
  const Profile p = sample_profile();
  const LayerCost& block = p.cost(LayerKind::block, 1);
  EXPECT_EQ(block.p2_work(2), 167'772'160);
  EXPECT_EQ(block.p2_work(3), 251'658'240);  // 167772160 / 2 * 3
  EXPECT_EQ(block.p2_work(8), 301'989'888 / 4 * 8);
  EXPECT_EQ(p.cost(LayerKind::head, 1).p2_work(3), 0);  // none measured
  json j = profile_to_json(p);
  EXPECT_FALSE(j["layers"]["head"]["1"].contains("forward_work_bytes"));
  EXPECT_EQ(j["layers"]["block"]["1"]["p2_work_bytes"]["4"], 301'989'888);
  j["layers"]["block"]["1"]["p1_work_bytes"] = -1;
  EXPECT_EQ(error_of([&] { profile_from_json(j, "p.json"); }),
            "p.json: field 'layers.block.1.p1_work_bytes' must not be negative");
  j = profile_to_json(p);
  j["layers"]["block"]["1"]["p2_work_bytes"]["0"] = 5;
  EXPECT_NE(error_of([&] {
              profile_from_json(j, "p.json");
            }).find("field 'layers.block.1.p2_work_bytes.0'"),
            std::string::npos);
  j = profile_to_json(p);
  j["layers"]["block"]["1"]["p2_work_bytes"] = 7;
  EXPECT_EQ(error_of([&] { profile_from_json(j, "p.json"); }),
            "p.json: field 'layers.block.1.p2_work_bytes' must be an object");
}

TEST(Profile, CostLookupAndMicroBatchSizes) {
  const Profile p = sample_profile();
  EXPECT_EQ(p.cost(LayerKind::block, 2).forward_us, 101.25 * 1.9);
  EXPECT_EQ(p.micro_batch_sizes(), (std::vector<int>{1, 2}));  // 4 only for the embedding
  const std::string message = error_of([&] { p.cost(LayerKind::head, 4); });
  EXPECT_NE(message.find("'head'"), std::string::npos) << message;
  EXPECT_NE(message.find("size 4"), std::string::npos) << message;
}

TEST(Profile, AttentionNames) {
  for (Attention a : {Attention::materialized, Attention::recompute, Attention::flash}) {
    EXPECT_EQ(attention_from_string(to_string(a)), a);
  }
  EXPECT_THROW(attention_from_string("sdpa"), Error);
}

}  // namespace
}  // namespace pipeplan
