// Shared by the GPU tests: skip (so ctest reports "skipped") when no GPU is present, the same for
// fused attention, and a relative-error measure for comparing the bf16 CUDA backend with the
// fp32 CPU reference.
#pragma once

#include <cmath>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/cuda/context.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda/sdpa.h"
#include "runtime/gpu_plugin.h"
#include "tests/runtime/models.h"

#define PIPEPLAN_REQUIRE_GPU()                                                            \
  do {                                                                                    \
    if (::pipeplan::cuda::cuda_device_count() == 0) {                                     \
      GTEST_SKIP() << "no CUDA device: cudaGetDeviceCount found none (run on a GPU, see " \
                      "docs/design/cuda-backend.md)";                                     \
    }                                                                                     \
  } while (0)

// Fused attention (cuDNN SDPA, runtime/cuda/sdpa.h): skipped where the module was built without
// the cudnn-frontend headers (the build said so); FAILS where it was built with them but cuDNN
// does not load here, so a GPU run of a build with fused attention cannot skip its flash tests
// unnoticed.
#define PIPEPLAN_REQUIRE_FUSED_ATTENTION()                                                   \
  do {                                                                                       \
    if (!::pipeplan::cuda::fused_attention_built()) {                                        \
      GTEST_SKIP()                                                                           \
          << "built without the cudnn-frontend headers (tools/dev/fetch_cudnn_frontend.sh)"; \
    }                                                                                        \
    const std::string pipeplan_why_ = ::pipeplan::cuda::fused_attention_unavailable();       \
    ASSERT_TRUE(pipeplan_why_.empty()) << "fused attention unavailable: " << pipeplan_why_;  \
  } while (0)

// NCCL cannot run the test here (`why`, a string): skipped, or FAILED where PIPEPLAN_REQUIRE_NCCL=1
// (the GPU suite sets it), so a GPU run cannot skip its NCCL tests unnoticed. Returns from the
// calling function, which must return void.
#define PIPEPLAN_NCCL_UNAVAILABLE(why)                                                       \
  do {                                                                                       \
    const std::string& pipeplan_nccl_why_ = (why);                                           \
    if (::pipeplan::testing::nccl_required()) {                                              \
      FAIL() << "PIPEPLAN_REQUIRE_NCCL=1, and NCCL cannot run here: " << pipeplan_nccl_why_; \
    }                                                                                        \
    GTEST_SKIP() << pipeplan_nccl_why_;                                                      \
  } while (0)

namespace pipeplan::testing {

// PIPEPLAN_REQUIRE_NCCL=1: the NCCL tests must run (PIPEPLAN_NCCL_UNAVAILABLE fails them).
inline bool nccl_required() {
  const char* value = std::getenv("PIPEPLAN_REQUIRE_NCCL");
  return value != nullptr && std::string(value) == "1";
}

// Sets an environment variable (nullptr: unsets it) for a scope, then restores what was there.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* before = std::getenv(name)) saved_ = before;
    if (value != nullptr) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (saved_) {
      setenv(name_.c_str(), saved_->c_str(), 1);
    } else {
      unsetenv(name_.c_str());
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> saved_;
};

// A message of one bf16 tensor that no receiver takes: on a GPU big enough (512 MiB) that NCCL
// cannot finish sending it into its own buffers before the receiver posts.
inline Message unreceived(cuda::CudaBackend& backend, const std::string& tag) {
#ifdef PIPEPLAN_FAKE_DEVICE
  constexpr std::int64_t kBytes = std::int64_t{1} << 16;
#else
  constexpr std::int64_t kBytes = std::int64_t{1} << 29;
#endif
  Message m;
  m.tag = tag;
  m.tensors.emplace_back("a", Tensor(backend.context().allocator().allocate(kBytes), {kBytes / 2},
                                     DType::bf16, Device::cuda));
  m.bytes = m.payload_bytes();
  return m;
}

// The attention mode of GPU tests that are not about attention: flash where this build has the
// fused kernel (so every GPU run covers it), else recompute (flash would be refused).
inline Attention gpu_test_attention() {
  return cuda::fused_attention_built() ? Attention::flash : Attention::recompute;
}

// The same as a `pipeplan plan` argument ("" where the default, flash, runs).
inline std::string gpu_test_attention_flag() {
  return cuda::fused_attention_built() ? "" : " --attention recompute";
}

// A quick profile of the tiny model: p2 over one micro-batch only, few runs per pass.
inline GpuProfileOptions quick_profile_options(Attention attention, int warmup, int repetitions) {
  GpuProfileOptions options;
  options.model = tiny_model();
  options.attention = attention;
  options.max_concat = 1;
  options.warmup = warmup;
  options.repetitions = repetitions;
  options.sustain_seconds = 0;  // no load run: tests that want one ask for it
  return options;
}

// bf16 against the fp64 CPU reference, as relative_error: a layer's (or fused attention's)
// forward output, and its input and weight gradients (two bf16 GEMMs deep, so looser).
inline constexpr double kForwardTolerance = 2e-2;
inline constexpr double kGradientTolerance = 4e-2;

// ‖a − b‖ / ‖b‖ (b the reference); infinite on a size mismatch or NaN.
inline double relative_error(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return INFINITY;
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i])) return INFINITY;
    diff += (a[i] - b[i]) * (a[i] - b[i]);
    norm += b[i] * b[i];
  }
  return std::sqrt(diff) / std::max(std::sqrt(norm), 1e-30);
}

}  // namespace pipeplan::testing
