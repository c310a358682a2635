// Sizes above planner/base/limits.h are refused where they come in, naming the field: model
// files, profiles, the analytic and uniform models, tensor parallelism.
#include <cstdint>
#include <functional>
#include <limits>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "planner/base/error.h"
#include "planner/base/limits.h"
#include "profiles/analytic.h"
#include "profiles/gpu.h"
#include "profiles/model.h"
#include "profiles/profile.h"
#include "profiles/tensor_parallel.h"
#include "tests/error_support.h"

namespace pipeplan {
namespace {

using nlohmann::json;

using testing::error_of;

json llama_config(std::int64_t layers) {
  return {{"model_type", "llama"},        {"num_hidden_layers", layers}, {"hidden_size", 64},
          {"num_attention_heads", 4},     {"intermediate_size", 172},    {"vocab_size", 256},
          {"max_position_embeddings", 32}};
}

TEST(ModelLimits, HfConfigWithABillionLayersNamesFileAndField) {
  EXPECT_EQ(error_of([] { hf_config_from_json(llama_config(1'000'000'000), "c.json", "m"); }),
            "c.json: field 'num_hidden_layers' (1000000000) is above the limit of 1024 "
            "(docs/reference/limits.md)");
  EXPECT_EQ(hf_config_from_json(llama_config(limits::kMaxLayers), "c.json", "m").layers,
            limits::kMaxLayers);
  // A number beyond int64 is above the limit too, not "not an integer".
  json huge = llama_config(1);
  huge["num_hidden_layers"] = std::numeric_limits<std::uint64_t>::max();
  EXPECT_EQ(error_of([&] { hf_config_from_json(huge, "c.json", "m"); }),
            "c.json: field 'num_hidden_layers' (18446744073709551615) is above the limit of 1024 "
            "(docs/reference/limits.md)");
  huge["num_hidden_layers"] = json::parse("99999999999999999999");  // beyond uint64: a double
  EXPECT_EQ(error_of([&] { hf_config_from_json(huge, "c.json", "m"); }),
            "c.json: field 'num_hidden_layers' (1e+20) is above the limit of 1024 "
            "(docs/reference/limits.md)");
  huge["num_hidden_layers"] = 2.5;  // not whole, and below the limit: not an integer
  EXPECT_NE(error_of([&] { hf_config_from_json(huge, "c.json", "m"); }).find("positive integer"),
            std::string::npos);
}

// A rotary model's max_position_embeddings is its context capacity, only the default --seq: one
// above the sequence limit is read as the limit (it used to refuse the config even with --seq).
TEST(ModelLimits, AContextCapacityAboveTheSequenceLimitIsReadAsTheLimit) {
  json config = llama_config(2);
  config["max_position_embeddings"] = 4194304;
  EXPECT_EQ(hf_config_from_json(config, "c.json", "m").seq, limits::kMaxSeq);
  config["max_position_embeddings"] = 0;
  EXPECT_NE(error_of([&] {
              hf_config_from_json(config, "c.json", "m");
            }).find("c.json: field 'max_position_embeddings'"),
            std::string::npos);
}

TEST(ModelLimits, ModelJsonFieldsAreBounded) {
  for (const auto& [field, value] :
       std::vector<std::pair<std::string, std::int64_t>>{{"layers", 1025},
                                                         {"hidden", std::int64_t{1} << 21},
                                                         {"heads", 5000},
                                                         {"vocab", std::int64_t{1} << 25},
                                                         {"seq", std::int64_t{1} << 21},
                                                         {"layers", std::int64_t{1} << 40}}) {
    json j = model_to_json(model_preset("tiny"));
    j[field] = value;
    const std::string message = error_of([&] { model_from_json(j, "p.json", "model"); });
    EXPECT_NE(message.find("field 'model." + field + "'"), std::string::npos) << message;
    EXPECT_NE(message.find("above the limit"), std::string::npos) << message;
  }
}

TEST(ModelLimits, CheckModelLimitsNamesTheModelField) {
  ModelConfig m = model_preset("tiny");
  m.layers = 2000;
  EXPECT_EQ(error_of([&] { check_model_limits(m); }),
            "model: layers (2000) is above the limit of 1024 (docs/reference/limits.md)");
}

json tiny_profile() {
  AnalyticOptions options;
  options.micro_batch_sizes = {1};
  return profile_to_json(analytic_profile(model_preset("tiny"), find_gpu("h100"), options));
}

TEST(ProfileLimits, AbsurdTimesStashSizesAndUnknownGpusAreRefused) {
  json j = tiny_profile();
  j["layers"]["block"]["1"]["forward_us"] = 1e300;
  EXPECT_EQ(error_of([&] { profile_from_json(j, "p.json"); }),
            "p.json: field 'layers.block.1.forward_us' (1e+300) is above the limit of 1000000000 "
            "us (docs/reference/limits.md)");
  j = tiny_profile();
  j["layers"]["head"]["1"]["stash_bytes"] = std::int64_t{1} << 50;
  EXPECT_NE(error_of([&] {
              profile_from_json(j, "p.json");
            }).find("field 'layers.head.1.stash_bytes' (1125899906842624) is above the limit"),
            std::string::npos);
  j = tiny_profile();
  j["layers"]["block"]["1"]["p2_concat_us"]["100000"] = 1.0;
  EXPECT_NE(error_of([&] {
              profile_from_json(j, "p.json");
            }).find("field 'layers.block.1.p2_concat_us.100000' the key is above the limit"),
            std::string::npos);
  j = tiny_profile();
  j["gpu"] = "h999";
  EXPECT_NE(error_of([&] {
              profile_from_json(j, "p.json");
            }).find("p.json: field 'gpu' names unknown GPU 'h999'"),
            std::string::npos);
  j = tiny_profile();
  j["seq"] = std::int64_t{1} << 30;
  EXPECT_NE(error_of([&] { profile_from_json(j, "p.json"); }).find("field 'seq'"),
            std::string::npos);
  EXPECT_NO_THROW(profile_from_json(tiny_profile(), "p.json"));
}

TEST(AnalyticLimits, ConcatTokensAndLayerSizesAreBounded) {
  const GpuSpec gpu = find_gpu("h100");
  AnalyticOptions options;
  options.max_p2_concat = 100'000'000;
  EXPECT_EQ(error_of([&] { analytic_profile(model_preset("tiny"), gpu, options); }),
            "max_p2_concat: 100000000 is above the limit of 65536 (docs/reference/limits.md)");
  options = {};
  options.seq = 1 << 20;
  options.micro_batch_sizes = {64};
  EXPECT_NE(error_of([&] {
              analytic_profile(model_preset("llama-7b"), gpu, options);
            }).find("micro_batch_sizes: micro-batch size 64 x sequence 1048576"),
            std::string::npos);
  options.micro_batch_sizes = {1};
  options.attention = Attention::materialized;  // s x s scores of a million tokens
  EXPECT_NE(error_of([&] {
              analytic_profile(model_preset("llama-7b"), gpu, options);
            }).find("one block's memory is above the limit of 1099511627776 bytes"),
            std::string::npos);
}

TEST(UniformLimits, TimesAndMemoryAreFiniteAndBounded) {
  EXPECT_EQ(error_of([] { parse_uniform("1e308:1:1:0", ""); }),
            "uniform_times: 1e+308 ms is above the limit of 1000000 ms (docs/reference/limits.md)");
  // Just above the limit: the value quoted with the digits that tell it from the limit.
  EXPECT_EQ(
      error_of([] { parse_uniform("1000001:1:1:0", ""); }),
      "uniform_times: 1000001 ms is above the limit of 1000000 ms (docs/reference/limits.md)");
  EXPECT_EQ(limits::general_number_beside(1000000.5, 1e6), "1000000.5");
  EXPECT_EQ(limits::general_number_beside(2.5e6, 1e6), "2.5e+06");
  EXPECT_NE(error_of([] { parse_uniform("nan:1:1:0", ""); }).find("'nan' is not a number"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_uniform("1:1:1:0", "4096:-4096:0"); }).find("GiB"),
            std::string::npos);
}

TEST(TensorParallelLimits, DegreeMustDivideTheHeads) {
  AnalyticOptions options;
  const Profile tiny = analytic_profile(model_preset("tiny"), find_gpu("h100"), options);
  EXPECT_EQ(error_of([&] { tensor_parallel_profile(tiny, 3, P2pLink{}); }),
            "tensor_parallel: 3 does not divide the 4 attention heads of tiny");
  EXPECT_NE(
      error_of([&] { tensor_parallel_profile(tiny, 4096, P2pLink{}); }).find("above the limit"),
      std::string::npos);
  EXPECT_NO_THROW(tensor_parallel_profile(tiny, 2, P2pLink{}));
}

}  // namespace
}  // namespace pipeplan
