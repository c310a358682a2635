// The side file export writes beside a torch CSV (sched.csv.layers.json): what it holds, what a
// reader refuses, and its tie to the CSV it was written with (docs/reference/torch-csv.md).
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "planner/base/error.h"
#include "profiles/model.h"
#include "schedules/torch_csv.h"
#include "tests/error_support.h"

namespace pipeplan {
namespace {

using testing::error_of;

ModelConfig blocks_model(int layers) {
  ModelConfig model;
  model.name = "m";
  model.family = "llama";
  model.layers = layers;
  return model;
}

// 4 blocks with embedding and head: [0, 3] holds E t t, [3, 3] holds t t H.
TorchCsvLayers four_blocks(std::string_view csv) {
  TorchCsvLayers layers = torch_csv_layers(blocks_model(4), {{0, 3}, {3, 3}}, csv);
  layers.p2_concat = 2;
  return layers;
}

std::string from_json_error(const nlohmann::json& json) {
  return error_of([&] { torch_csv_layers_from_json(json, "s.json"); });
}

TEST(TorchCsvSideFile, HoldsTheSplitTheP2ConcatAndTheCsvItWasWrittenWith) {
  const TorchCsvLayers layers = four_blocks("0F0,0B0\n");
  EXPECT_EQ(layers.blocks_per_stage, (std::vector<int>{2, 2}));
  const nlohmann::json json = torch_csv_layers_to_json(layers);
  EXPECT_EQ(json["version"], 2);
  EXPECT_EQ(json["p2_concat"], 2);
  EXPECT_EQ(json["csv_bytes"], 8);
  // FNV-1a 64 of the CSV's bytes, as 16 hexadecimal digits.
  EXPECT_EQ(torch_csv_tie("").fnv1a64, 14695981039346656037ULL);
  EXPECT_EQ(torch_csv_tie("a").fnv1a64, 0xaf63dc4c8601ec8cULL);
  EXPECT_EQ(json["csv_fnv1a64"], "8d240efb8cd0821f");
  const TorchCsvLayers back = torch_csv_layers_from_json(json, "s.json");
  EXPECT_EQ(back.blocks_per_stage, layers.blocks_per_stage);
  EXPECT_EQ(back.p2_concat, 2);
  ASSERT_TRUE(back.csv.has_value());
  EXPECT_EQ(*back.csv, torch_csv_tie("0F0,0B0\n"));
  EXPECT_EQ(torch_csv_layers_to_json(back), json);
}

TEST(TorchCsvSideFile, UnknownFieldsAndBadStageLayersAreRefused) {
  nlohmann::json json = torch_csv_layers_to_json(four_blocks("x"));
  json["stage_layer"] = 1;
  EXPECT_EQ(from_json_error(json),
            "s.json: field 'stage_layer' is not a field of a pipeplan-torch-csv-layers file (did "
            "you mean 'stage_layers'?)");
  const std::string bad_layers =
      "s.json: field 'stage_layers' must be an array of 2 [first_layer, layer_count] pairs (one "
      "per stage of 'blocks_per_stage'), each stage starting where the one before ends";
  for (const nlohmann::json& stage_layers :
       {nlohmann::json("junk"), nlohmann::json::array({{0, 3}}),
        nlohmann::json::array({{0, 3}, {4, 3}}), nlohmann::json::array({{1, 2}, {3, 3}}),
        nlohmann::json::array({{0, 3}, {3, 0}}), nlohmann::json::array({{0, 3}, {3, "3"}}),
        nlohmann::json::array({{0, 3}, {3, 3, 1}}), nlohmann::json::array({{0, 3}, {3, 5000}})}) {
    json = torch_csv_layers_to_json(four_blocks("x"));
    json["stage_layers"] = stage_layers;
    EXPECT_EQ(from_json_error(json), bad_layers) << stage_layers;
  }
  json = torch_csv_layers_to_json(four_blocks("x"));
  json.erase("stage_layers");
  EXPECT_EQ(from_json_error(json), "s.json: missing field 'stage_layers'");
  json = torch_csv_layers_to_json(four_blocks("x"));
  json["csv_fnv1a64"] = "AF63DC4C8601EC8C";
  EXPECT_EQ(from_json_error(json),
            "s.json: field 'csv_fnv1a64' must be 16 lowercase hexadecimal digits");
  json = torch_csv_layers_to_json(four_blocks("x"));
  json["p2_concat"] = -1;
  EXPECT_EQ(from_json_error(json), "s.json: field 'p2_concat' must be 0 (all) to 65536");
}

// Version 1 (without p2_concat and the CSV) is read as before; its fields only.
TEST(TorchCsvSideFile, VersionOneHasNoTieAndIsRead) {
  nlohmann::json json = torch_csv_layers_to_json(four_blocks("x"));
  json["version"] = 1;
  EXPECT_EQ(from_json_error(json),
            "s.json: field 'csv_bytes' is not a field of a pipeplan-torch-csv-layers file");
  for (const char* key : {"p2_concat", "csv_bytes", "csv_fnv1a64"})
    json.erase(key);
  const TorchCsvLayers v1 = torch_csv_layers_from_json(json, "s.json");
  EXPECT_EQ(v1.version, 1);
  EXPECT_FALSE(v1.csv.has_value());
  EXPECT_EQ(v1.p2_concat, 0);
  EXPECT_EQ(v1.blocks_per_stage, (std::vector<int>{2, 2}));
}

class TorchCsvSideFileOnDisk : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("pipeplan_side_file_" +
            std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "_" +
            std::to_string(getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void write(const std::string& name, const std::string& text) const {
    std::ofstream(dir_ / name) << text;
  }
  std::filesystem::path dir_;
};

// A side file goes with the CSV it was written with: beside another, it is refused naming both.
TEST_F(TorchCsvSideFileOnDisk, ASideFileOfAnotherCsvIsRefusedNamingBoth) {
  const std::filesystem::path csv = dir_ / "s.csv";
  const std::filesystem::path side = torch_csv_layers_path(csv);
  EXPECT_FALSE(load_torch_csv_layers(csv, "0F0,0B0\n").has_value());
  write("s.csv.layers.json", torch_csv_layers_to_json(four_blocks("0F0,0B0\n")).dump());
  EXPECT_EQ(load_torch_csv_layers(csv, "0F0,0B0\n")->blocks_per_stage, (std::vector<int>{2, 2}));
  EXPECT_EQ(error_of([&] { load_torch_csv_layers(csv, "0F0,0F1,0B0,0B1\n"); }),
            side.string() + ": written with another " + csv.string() +
                " (8 bytes, FNV-1a 64 8d240efb8cd0821f; " + csv.string() +
                " now has 16 bytes, FNV-1a 64 " +
                torch_csv_layers_to_json(four_blocks("0F0,0F1,0B0,0B1\n"))["csv_fnv1a64"]
                    .get<std::string>() +
                "): export the plan again, or remove " + side.string());
  // Standard input has no side file.
  EXPECT_FALSE(load_torch_csv_layers("-", "0F0,0B0\n").has_value());
}

TEST_F(TorchCsvSideFileOnDisk, ADanglingLinkIsRefused) {
  const std::filesystem::path csv = dir_ / "s.csv";
  const std::filesystem::path side = torch_csv_layers_path(csv);
  std::filesystem::create_symlink(dir_ / "nonexistent", side);
  EXPECT_EQ(error_of([&] { load_torch_csv_layers(csv, "0F0,0B0\n"); }),
            side.string() + ": a symbolic link to '" + (dir_ / "nonexistent").string() +
                "', which does not exist (remove the link, or export the plan again)");
  // A link to a side file is read through.
  write("real.json", torch_csv_layers_to_json(four_blocks("0F0,0B0\n")).dump());
  std::filesystem::remove(side);
  std::filesystem::create_symlink(dir_ / "real.json", side);
  EXPECT_TRUE(load_torch_csv_layers(csv, "0F0,0B0\n").has_value());
}

}  // namespace
}  // namespace pipeplan
