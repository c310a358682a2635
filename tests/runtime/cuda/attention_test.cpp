// The attention core's p1 with grouped-query heads (runtime/cuda/attention.h): a kv head's dK
// and dV are sums over the G query heads that read it. The sum must be taken in fp32 and
// rounded to bf16 once, as one head's product is; adding G bf16-rounded partial sums rounds G
// times and, at LLaMA-70B's G = 8, moves most elements by one or more bf16 steps.
//
// The check needs no reference implementation: G query heads that all hold the same Q and the
// same dout see the same probabilities and dS, so each head's dQ equals the dQ of one head alone
// (H = KV = 1) on that Q, K, V and dout, and the kv head's dK and dV equal G times that head's
// dK and dV. G = 8 is a power of two, so G times a bf16 value is exact, and the fp32 sum of G
// equal addends differs from G times one of them by a few fp32 steps: after rounding to bf16 it
// is the same value except where that value lies within a few fp32 steps of a rounding boundary
// (no element of the 1,024 on the CPU stand-in; a GPU's GEMM may order its sums otherwise). The
// test allows 1 % of the elements one bf16 step off; the bf16 sums left 40 % off.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/cuda/attention.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda/layers.h"
#include "runtime/random.h"
#include "tests/runtime/cuda/gpu_test_support.h"

namespace pipeplan {
namespace {

using Vec = std::vector<double>;

constexpr std::int64_t kSeq = 64;
constexpr std::int64_t kHeadDim = 16;
constexpr std::int64_t kGroup = 8;  // query heads per kv head (LLaMA-2/3-70B)
constexpr double kAllowedOffShare = 0.01;

AttentionDims dims_of(std::int64_t heads) {
  return AttentionDims{
      .batch = 1, .seq = kSeq, .channels = heads * kHeadDim, .heads = heads, .kv_heads = 1};
}

Vec normal(std::int64_t count, std::uint64_t seed) {
  Vec values(static_cast<std::size_t>(count));
  fill_normal(values, 1.0, seed);
  return values;
}

// Row t of a (T, width) tensor, columns [from, from + kHeadDim).
Vec head_slice(const Vec& rows, std::int64_t width, std::int64_t from) {
  Vec out;
  for (std::int64_t t = 0; t < kSeq; ++t) {
    const auto begin = rows.begin() + t * width + from;
    out.insert(out.end(), begin, begin + kHeadDim);
  }
  return out;
}

struct Counts {
  std::int64_t off = 0;      // elements that differ
  std::int64_t far_off = 0;  // ... by more than one bf16 step
  std::int64_t nonzero = 0;  // elements of the expected value that are not zero
  std::int64_t total = 0;
};

// got against `scale` times want, element by element; one bf16 step is 2⁻⁷ relative at most.
Counts compare(const Vec& got, const Vec& want, double scale) {
  Counts c;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double expected = scale * want[i];
    ++c.total;
    if (expected != 0) ++c.nonzero;
    if (got[i] == expected) continue;
    ++c.off;
    if (std::abs(got[i] - expected) > std::ldexp(std::abs(expected), -7)) ++c.far_off;
  }
  return c;
}

class CudaAttentionCore : public ::testing::Test {
 protected:
  void SetUp() override {
    PIPEPLAN_REQUIRE_GPU();
    backend_ = std::make_unique<cuda::CudaBackend>(cuda::CudaBackendOptions{Attention::recompute});
  }
  // dqkv of p1 (probabilities recomputed) for this qkv and dout, each (T, width) as doubles.
  Vec backward_p1(const AttentionDims& dims, const Vec& qkv, const Vec& dout) {
    cuda::DeviceContext& ctx = backend_->context();
    const Tensor qkv_d = backend_->upload(qkv, {kSeq, dims.qkv_width()});
    const Tensor dout_d = backend_->upload(dout, {kSeq, dims.channels});
    const Tensor dqkv = ctx.empty({kSeq, dims.qkv_width()}, DType::bf16);
    cuda::attention_core_backward_p1(ctx, cuda::bf16_ptr(dqkv), cuda::bf16_ptr(dout_d),
                                     cuda::bf16_ptr(qkv_d), nullptr, dims);
    return backend_->download(dqkv);
  }
  // Values as the GPU holds them (rounded to bf16).
  Vec rounded(const Vec& values) {
    return backend_->download(backend_->upload(values, {static_cast<std::int64_t>(values.size())}));
  }

 private:
  std::unique_ptr<cuda::CudaBackend> backend_;
};

TEST_F(CudaAttentionCore, GroupedQueryGradientsAreSummedInFp32AndRoundedOnce) {
  const AttentionDims one = dims_of(1), group = dims_of(kGroup);
  const std::int64_t w1 = one.qkv_width(), wg = group.qkv_width();
  const Vec q = rounded(normal(kSeq * kHeadDim, 1)), k = rounded(normal(kSeq * kHeadDim, 2));
  const Vec v = rounded(normal(kSeq * kHeadDim, 3)), dout = rounded(normal(kSeq * kHeadDim, 4));

  // One head: rows [q | k | v]; G heads: rows [q … q | k | v], dout [dout … dout].
  Vec qkv1, qkvg, doutg;
  for (std::int64_t t = 0; t < kSeq; ++t) {
    const auto row = [&](const Vec& x) { return x.begin() + t * kHeadDim; };
    for (const Vec* part : {&q, &k, &v})
      qkv1.insert(qkv1.end(), row(*part), row(*part) + kHeadDim);
    for (std::int64_t g = 0; g < kGroup; ++g) {
      qkvg.insert(qkvg.end(), row(q), row(q) + kHeadDim);
      doutg.insert(doutg.end(), row(dout), row(dout) + kHeadDim);
    }
    qkvg.insert(qkvg.end(), row(k), row(k) + kHeadDim);
    qkvg.insert(qkvg.end(), row(v), row(v) + kHeadDim);
  }
  const Vec d1 = backward_p1(one, qkv1, dout);
  const Vec dg = backward_p1(group, qkvg, doutg);

  const auto check = [&](const std::string& what, std::int64_t from_g, std::int64_t from_1,
                         double scale) {
    const Counts c = compare(head_slice(dg, wg, from_g), head_slice(d1, w1, from_1), scale);
    ASSERT_GT(c.nonzero, c.total / 2) << what << ": the one-head gradient is mostly zero";
    EXPECT_EQ(c.far_off, 0) << what << ": elements more than one bf16 step off";
    EXPECT_LE(static_cast<double>(c.off), kAllowedOffShare * static_cast<double>(c.total))
        << what << ": " << c.off << " of " << c.total
        << " elements differ from the fp32 sum rounded once";
  };
  for (std::int64_t g = 0; g < kGroup; ++g)
    check("dQ of query head " + std::to_string(g), g * kHeadDim, 0, 1.0);
  check("dK", kGroup * kHeadDim, kHeadDim, double(kGroup));
  check("dV", (kGroup + 1) * kHeadDim, 2 * kHeadDim, double(kGroup));
}

}  // namespace
}  // namespace pipeplan
