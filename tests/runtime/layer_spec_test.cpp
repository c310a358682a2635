// The layer spec (runtime/layer_spec.h) is what both backends build from: the CPU reference's
// parameters, stash and retained sets must be exactly the spec's (names, order, shapes, bytes),
// its initial weights the spec's values, and fill_retained must refuse a p1 that strays from it.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "profiles/analytic.h"
#include "profiles/gpu.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/host_tensor.h"
#include "runtime/layer_spec.h"
#include "tests/error_support.h"
#include "tests/runtime/gradcheck.h"
#include "tests/runtime/models.h"

namespace pipeplan {
namespace {

using pipeplan::testing::error_of;

using testing::random_values;

const std::vector<LayerKind> kKinds = {LayerKind::embedding, LayerKind::block, LayerKind::head};

std::vector<std::string> names_of(const TensorSet& set) {
  std::vector<std::string> names;
  for (const auto& [name, tensor] : set.entries())
    names.push_back(name);
  return names;
}

// Runs F and p1 of one layer on the f32 CPU backend (B = 2) and checks both sets against the
// spec.
void expect_sets_follow_the_spec(const ModelConfig& m, LayerKind kind) {
  cpu::CpuBackend backend;
  const std::int64_t b = 2, n = b * m.seq * m.hidden;
  const LayerParams layer = backend.init_layer(m, kind, 1, 3);
  const TokenBatch batch = backend.synthetic_batch(2, m.seq, m.vocab, 4);
  const Tensor x = backend.upload(random_values(n, 5), {b, m.seq, m.hidden});
  const Tensor input = kind == LayerKind::embedding ? batch.inputs : x;
  const Tensor dy = kind == LayerKind::head ? backend.upload(std::vector<double>{1.0}, {1}) : x;
  ForwardResult forward = backend.forward(layer, input, batch.targets);
  const std::string where(to_string(kind));

  std::vector<std::string> stash_names;
  for (const TensorSpec& spec : stash_specs(m, kind, b, m.seq)) {
    stash_names.push_back(spec.name);
    EXPECT_EQ(forward.stash.at(spec.name).shape(), spec.shape) << where << " " << spec.name;
  }
  if (kind == LayerKind::embedding) stash_names.emplace_back("tokens");  // its input, kept
  if (kind == LayerKind::head) stash_names.emplace_back("targets");
  EXPECT_EQ(names_of(forward.stash), stash_names) << where;

  const Retained retained = backend.backward_p1(layer, std::move(forward.stash), dy).retained;
  std::vector<std::string> retained_names;
  std::int64_t spec_bytes = 0;
  for (const TensorSpec& spec : retained_specs(m, kind, b, m.seq)) {
    retained_names.push_back(spec.name);
    const Tensor& tensor = retained.at(spec.name);
    EXPECT_EQ(tensor.shape(), spec.shape) << where << " " << spec.name;
    EXPECT_EQ(tensor.dtype(), spec.role == TensorRole::tokens ? DType::i32 : DType::f32)
        << where << " " << spec.name;
    spec_bytes += shape_numel(spec.shape) * 4;  // f32 and i32 alike
  }
  EXPECT_EQ(names_of(retained), retained_names) << where;
  EXPECT_EQ(retained.bytes(), spec_bytes) << where << ": no retained tensor aliases another";
}

TEST(LayerSpec, CpuStashAndRetainedSetsAreTheSpecs) {
  for (const LayerKind kind : kKinds) {
    expect_sets_follow_the_spec(testing::tiny_model(), kind);
    expect_sets_follow_the_spec(testing::gradcheck_model(), kind);  // grouped-query widths
  }
}

// The attention mode changes one stash entry only: materialized keeps the probabilities
// (B, H, T, T), flash the rows' logsumexp (B, H, T) as a statistic, recompute neither.
TEST(LayerSpec, AttentionModesDifferInOneStashEntry) {
  const ModelConfig m = testing::tiny_model();
  const std::vector<TensorSpec> none =
      stash_specs(m, LayerKind::block, 2, m.seq, Attention::recompute);
  const auto without = [&](std::vector<TensorSpec> specs, const std::string& name) {
    const auto it = std::find_if(specs.begin(), specs.end(),
                                 [&](const TensorSpec& spec) { return spec.name == name; });
    EXPECT_NE(it, specs.end()) << name;
    if (it == specs.end()) return std::pair{TensorSpec{}, specs};
    const TensorSpec found = *it;
    specs.erase(it);
    return std::pair{found, specs};
  };
  const auto [probs, rest_materialized] =
      without(stash_specs(m, LayerKind::block, 2, m.seq, Attention::materialized), "attn.probs");
  EXPECT_EQ(probs.shape, (Shape{2, m.heads, m.seq, m.seq}));
  EXPECT_EQ(probs.role, TensorRole::activation);
  const auto [lse, rest_flash] =
      without(stash_specs(m, LayerKind::block, 2, m.seq, Attention::flash), "attn.lse");
  EXPECT_EQ(lse.shape, (Shape{2, m.heads, m.seq}));
  EXPECT_EQ(lse.role, TensorRole::statistic);
  for (const std::vector<TensorSpec>* rest : {&rest_materialized, &rest_flash}) {
    ASSERT_EQ(rest->size(), none.size());
    for (std::size_t i = 0; i < none.size(); ++i)
      EXPECT_EQ((*rest)[i].name, none[i].name);
  }
  // The default is the CPU reference's: materialized.
  EXPECT_EQ(stash_specs(m, LayerKind::block, 2, m.seq).size(), none.size() + 1);
}

// The analytic model's retained bytes (profiles/analytic.cpp) count what this spec keeps from p1
// to p2: the linear ops' X and dY and each norm's x̂ and dY for its gain (bf16), the embedding's
// token ids (int32).
TEST(LayerSpec, TheAnalyticModelRetainsWhatTheSpecRetains) {
  ModelConfig grouped = model_preset("llama-7b");
  grouped.kv_heads = 8;
  for (const ModelConfig& m : {model_preset("llama-7b"), grouped, testing::tiny_model()}) {
    AnalyticOptions options;
    options.seq = 512;
    options.micro_batch_sizes = {2};
    const Profile profile = analytic_profile(m, find_gpu("h100-sxm"), options);
    for (const LayerKind kind : {LayerKind::embedding, LayerKind::block, LayerKind::head}) {
      std::int64_t bytes = 0;
      for (const TensorSpec& spec : retained_specs(m, kind, 2, 512))
        bytes += shape_numel(spec.shape) * (spec.role == TensorRole::activation ? 2 : 4);
      EXPECT_EQ(profile.cost(kind, 2).retained_bytes, bytes) << m.name << " " << to_string(kind);
    }
    // The embedding's stash is its token ids alone.
    EXPECT_TRUE(stash_specs(m, LayerKind::embedding, 2, 512).empty());
    EXPECT_EQ(profile.cost(LayerKind::embedding, 2).stash_bytes, 4 * 2 * 512) << m.name;
  }
}

TEST(LayerSpec, CpuWeightsAreTheSpecsInitialValuesInOrder) {
  cpu::CpuBackend backend(DType::f64);  // f64: the values arrive unrounded
  const ModelConfig m = testing::gradcheck_model();
  for (const LayerKind kind : kKinds) {
    const LayerParams layer = backend.init_layer(m, kind, 2, 11);
    const std::vector<ParamSpec> specs = param_specs(m, kind);
    ASSERT_EQ(layer.params.size(), specs.size());
    for (std::size_t p = 0; p < specs.size(); ++p) {
      const Parameter& param = layer.params[p];
      EXPECT_EQ(param.name, specs[p].name);
      EXPECT_EQ(param.weight.shape(), specs[p].shape);
      EXPECT_EQ(param.weight_decay, !specs[p].is_gain);
      EXPECT_EQ(backend.download(param.weight), initial_values(specs[p], 11, 2, p)) << param.name;
    }
  }
  // Position and layer index key the streams: no two matrices start alike.
  const ParamSpec wo = param_specs(m, LayerKind::block)[2];
  EXPECT_NE(initial_values(wo, 11, 2, 2), initial_values(wo, 11, 3, 2));
  EXPECT_NE(initial_values(wo, 11, 2, 2), initial_values(wo, 11, 2, 4));
  EXPECT_EQ(initial_values(param_specs(m, LayerKind::block)[0], 11, 2, 0),
            std::vector<double>(static_cast<std::size_t>(m.hidden), 1.0));
}

TEST(LayerSpec, FillRetainedRefusesWhatStraysFromTheSpec) {
  const ModelConfig m = testing::tiny_model();
  const std::vector<TensorSpec> specs = retained_specs(m, LayerKind::head, 1, 4);
  const auto stash = [&] {
    Stash set;
    for (const TensorSpec& spec : stash_specs(m, LayerKind::head, 1, 4))
      set.put(spec.name, host_zeros(spec.shape, DType::f32));
    return set;
  };
  const Tensor dxn = host_zeros({1, 4, m.hidden}, DType::f32);
  Stash ok = stash();
  Retained retained;
  fill_retained(specs, ok, {{"norm.dy", dxn}}, retained);
  EXPECT_EQ(names_of(retained),
            (std::vector<std::string>{"norm.xhat", "norm.dy", "lm_head.x", "lm_head.dy"}));
  EXPECT_TRUE(ok.contains("norm.rstd"));  // what p2 does not need stays behind
  EXPECT_FALSE(ok.contains("lm_head.probs"));

  EXPECT_NE(error_of([&] {
              Stash s = stash();
              Retained r;
              fill_retained(specs, s, {}, r);
            }).find("'norm.dy'"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              Stash s = stash();
              Retained r;
              fill_retained(specs, s, {{"norm.dy", dxn}, {"extra", dxn}}, r);
            }).find("2 retained tensors"),
            std::string::npos);
  const std::string shape = error_of([&] {
    Stash s = stash();
    Retained r;
    fill_retained(specs, s, {{"norm.dy", host_zeros({1, 3, m.hidden}, DType::f32)}}, r);
  });
  EXPECT_NE(shape.find("retained 'norm.dy' is (1, 3, 64)"), std::string::npos) << shape;
}

TEST(LayerSpec, UnsupportedModelsAreRefusedNamingTheField) {
  ModelConfig gelu = testing::tiny_model();
  gelu.mlp = MlpKind::gelu;
  EXPECT_EQ(error_of([&] { check_model_supported(gelu, "backend x"); }),
            "model 'tiny': backend x needs mlp = swiglu");
  ModelConfig odd = testing::tiny_model();
  odd.kv_heads = 3;
  EXPECT_NE(error_of([&] { check_model_supported(odd, "backend x"); }).find("kv_heads"),
            std::string::npos);
  // Qwen2's Q, K, V biases, Qwen3's Q/K norms and head width are planned, not run.
  ModelConfig qwen2 = testing::tiny_model();
  qwen2.qkv_bias = true;
  EXPECT_EQ(error_of([&] { check_model_supported(qwen2, "backend x"); }),
            "model 'tiny': backend x needs attention without Q, K and V biases (qkv_bias is "
            "planned only)");
  ModelConfig qwen3 = testing::tiny_model();
  qwen3.qk_norm = true;
  EXPECT_NE(error_of([&] { check_model_supported(qwen3, "backend x"); }).find("qk_norm"),
            std::string::npos);
  ModelConfig wide = testing::tiny_model();
  wide.explicit_head_dim = 2 * wide.head_dim();
  EXPECT_EQ(error_of([&] { check_model_supported(wide, "backend x"); }),
            "model 'tiny': backend x needs head_dim = hidden / heads");
  ModelConfig moe = testing::tiny_model();
  moe.experts = 4;
  moe.experts_per_token = 2;
  EXPECT_EQ(error_of([&] { check_model_supported(moe, "backend x"); }),
            "model 'tiny': backend x needs a dense MLP (mixture-of-experts blocks are planned "
            "only)");
  EXPECT_EQ(error_of([&] { check_model_supported(testing::tiny_model(), "backend x"); }),
            "<no error>");
}

}  // namespace
}  // namespace pipeplan
