#include "runtime/cuda/matmul.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/op_marks.h"
#include "runtime/cuda/op_timing.h"

namespace pipeplan::cuda {

namespace {

struct Operand {
  const void* data;
  cudaDataType_t type;
  std::int64_t ld;
};

// RAII for the cuBLASLt descriptors of one GEMM shape.
struct LtDescriptors {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t preference = nullptr;
  LtDescriptors() = default;
  LtDescriptors(const LtDescriptors&) = delete;
  LtDescriptors& operator=(const LtDescriptors&) = delete;
  ~LtDescriptors() {
    if (preference != nullptr) cublasLtMatmulPreferenceDestroy(preference);
    if (c != nullptr) cublasLtMatrixLayoutDestroy(c);
    if (b != nullptr) cublasLtMatrixLayoutDestroy(b);
    if (a != nullptr) cublasLtMatrixLayoutDestroy(a);
    if (op != nullptr) cublasLtMatmulDescDestroy(op);
  }
};

// Everything a GEMM's descriptors and algorithm depend on (alpha and beta are passed per call;
// pointers are allocation bases, 512-byte aligned, as the heuristic's default 256 assumes).
struct GemmKey {
  bool transa, transb;
  std::int64_t m, n, k, lda, ldb, ldd;
  cudaDataType_t a_type, b_type, d_type;
  // std::tie, not a defaulted <=> (which clang-tidy 14 misreads as a literal 0).
  auto fields() const {
    return std::tie(transa, transb, m, n, k, lda, ldb, ldd, a_type, b_type, d_type);
  }
  bool operator<(const GemmKey& other) const { return fields() < other.fields(); }
};

struct GemmPlan {
  LtDescriptors desc;
  cublasLtMatmulHeuristicResult_t heuristic{};
};

// A stage's GEMM plans: the descriptors and the heuristic's choice are made once per shape, not
// on every call (tens of µs of host time each, which a step's first GEMMs would otherwise add
// before the GPU has work).
class GemmPlans final : public DeviceContext::Extension {
 public:
  template <typename Make>
  const GemmPlan& get(const GemmKey& key, Make make) {
    const std::lock_guard lock(mutex_);
    auto& slot = plans_[key];
    if (!slot) {
      auto plan = std::make_unique<GemmPlan>();
      make(*plan);  // throws before anything is cached
      slot = std::move(plan);
    }
    return *slot;
  }

  int candidates = 1;               // heuristic answers timed per new shape (set_gemm_candidates)
  std::vector<GemmChoice> choices;  // one per shape whose answers were timed

 private:
  std::mutex mutex_;
  std::map<GemmKey, std::unique_ptr<GemmPlan>> plans_;
};

// The slot is made unsynchronised: a context's GEMMs come from its stage's one compute thread.
GemmPlans& gemm_plans(DeviceContext& ctx) {
  std::unique_ptr<DeviceContext::Extension>& slot = ctx.gemm_state();
  if (!slot) slot = std::make_unique<GemmPlans>();
  return static_cast<GemmPlans&>(*slot);
}

DType dtype_of(cudaDataType_t type) {
  return type == CUDA_R_32F ? DType::f32 : DType::bf16;
}

// Times each of the heuristic's answers on the call's own operands, writing a zeroed scratch D
// (also its C, so beta's read is timed too): one untimed run, then the median of three. Returns
// the index of the fastest; `us` gets every answer's median (infinity where it failed).
std::size_t fastest_answer(DeviceContext& ctx, const LtDescriptors& desc,
                           std::span<const cublasLtMatmulHeuristicResult_t> answers, float alpha,
                           const Operand& a, const Operand& b, float beta, const Operand& d,
                           std::int64_t n, std::vector<double>& us) {
  struct Failed {};  // this answer cannot run here after all
  const Tensor scratch = ctx.zeros({d.ld * n}, dtype_of(d.type));
  us.assign(answers.size(), std::numeric_limits<double>::infinity());
  for (std::size_t i = 0; i < answers.size(); ++i) {
    if (answers[i].state != CUBLAS_STATUS_SUCCESS ||
        answers[i].workspaceSize > ctx.workspace_bytes()) {
      continue;
    }
    try {
      us[i] = time_op(ctx.stream(), 1, 3, {}, [&] {
                if (cublasLtMatmul(ctx.lt(), desc.op, &alpha, a.data, desc.a, b.data, desc.b, &beta,
                                   scratch.data(), desc.c, scratch.data(), desc.c, &answers[i].algo,
                                   ctx.workspace(), ctx.workspace_bytes(),
                                   ctx.stream()) != CUBLAS_STATUS_SUCCESS) {
                  throw Failed{};
                }
              }).median_us;
    } catch (const Failed&) {
    }
  }
  const auto best = std::min_element(us.begin(), us.end());
  if (std::isinf(*best)) throw Error("cuBLASLt: none of its algorithms for a GEMM ran");
  return static_cast<std::size_t>(best - us.begin());
}

// Column-major D (m, n) = alpha · op(A) · op(B) + beta · C; C and D share a layout (and type).
void lt_gemm(DeviceContext& ctx, bool transa, bool transb, std::int64_t m, std::int64_t n,
             std::int64_t k, float alpha, Operand a, Operand b, float beta, const void* c,
             Operand d) {
  if (m == 0 || n == 0) return;
  const std::size_t workspace = ctx.workspace_bytes();
  const GemmKey key{transa, transb, m, n, k, a.ld, b.ld, d.ld, a.type, b.type, d.type};
  GemmPlans& plans = gemm_plans(ctx);
  const GemmPlan& plan = plans.get(key, [&](GemmPlan& made) {
    LtDescriptors& desc = made.desc;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t op_a = transa ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_b = transb ? CUBLAS_OP_T : CUBLAS_OP_N;
    CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
    CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));
    const auto u64 = [](std::int64_t value) { return static_cast<std::uint64_t>(value); };
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&desc.a, a.type, u64(transa ? k : m),
                                            u64(transa ? m : k), a.ld));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&desc.b, b.type, u64(transb ? n : k),
                                            u64(transb ? k : n), b.ld));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&desc.c, d.type, u64(m), u64(n), d.ld));
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&desc.preference));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        desc.preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof(workspace)));
    int found = 0;
    std::vector<cublasLtMatmulHeuristicResult_t> answers(
        static_cast<std::size_t>(plans.candidates));
    const cublasStatus_t asked = cublasLtMatmulAlgoGetHeuristic(
        ctx.lt(), desc.op, desc.a, desc.b, desc.c, desc.c, desc.preference,
        static_cast<int>(answers.size()), answers.data(), &found);
    const std::string shape = std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k);
    if (asked != CUBLAS_STATUS_SUCCESS || found == 0) {  // NOT_SUPPORTED when none fits
      throw Error("cuBLASLt has no algorithm for a " + shape + " GEMM");
    }
    answers.resize(static_cast<std::size_t>(found));
    if (answers.size() == 1) {
      made.heuristic = answers.front();
      return;
    }
    GemmChoice choice{(transa ? "T" : "N") + std::string(transb ? "T " : "N ") + shape,
                      static_cast<int>(answers.size()),
                      0,
                      {}};
    const std::size_t best =
        fastest_answer(ctx, desc, answers, alpha, a, b, beta, d, n, choice.answer_us);
    choice.chosen = static_cast<int>(best);
    made.heuristic = answers[best];
    plans.choices.push_back(std::move(choice));
  });
  CUBLAS_CHECK(cublasLtMatmul(ctx.lt(), plan.desc.op, &alpha, a.data, plan.desc.a, b.data,
                              plan.desc.b, &beta, c != nullptr ? c : d.data, plan.desc.c,
                              const_cast<void*>(d.data), plan.desc.c, &plan.heuristic.algo,
                              ctx.workspace(), workspace, ctx.stream()));
}

// Gathers the blocks' rows of one operand into `out` (rows·width, contiguous).
void gather_rows(DeviceContext& ctx, bf16* out, std::span<const MatmulRows> blocks, bool take_x,
                 std::int64_t width) {
  std::int64_t offset = 0;
  for (const MatmulRows& block : blocks) {
    const std::size_t bytes = static_cast<std::size_t>(block.rows * width) * sizeof(bf16);
    CUDA_CHECK(cudaMemcpyAsync(out + offset * width, take_x ? block.x : block.dy, bytes,
                               cudaMemcpyDeviceToDevice, ctx.stream()));
    offset += block.rows;
  }
}

std::string shape_label(const char* what, std::int64_t a, const char* sep, std::int64_t b) {
  return std::string(what) + " " + std::to_string(a) + sep + std::to_string(b);
}

double gemm_flops(std::int64_t rows, std::int64_t in, std::int64_t out) {
  return 2.0 * static_cast<double>(rows) * static_cast<double>(in) * static_cast<double>(out);
}

}  // namespace

void matmul_forward(DeviceContext& ctx, bf16* y, const bf16* x, const bf16* w, const bf16* residual,
                    std::int64_t n, std::int64_t in, std::int64_t out) {
  const OpMark mark(
      ctx, [&] { return shape_label("F gemm", in, "->", out); }, gemm_flops(n, in, out));
  // col-major Yᵀ (O, N) = Wᵀ-view (I, O)ᵀ · Xᵀ-view (I, N)
  lt_gemm(ctx, true, false, out, n, in, 1.0f, {w, CUDA_R_16BF, in}, {x, CUDA_R_16BF, in},
          residual != nullptr ? 1.0f : 0.0f, residual, {y, CUDA_R_16BF, out});
}

void matmul_backward_p1(DeviceContext& ctx, bf16* dx, const bf16* dy, const bf16* w, std::int64_t n,
                        std::int64_t in, std::int64_t out, bool accumulate) {
  const OpMark mark(
      ctx, [&] { return shape_label("p1 gemm", out, "->", in); }, gemm_flops(n, in, out));
  // col-major dXᵀ (I, N) = W-view (I, O) · dYᵀ-view (O, N)
  lt_gemm(ctx, false, false, in, n, out, 1.0f, {w, CUDA_R_16BF, in}, {dy, CUDA_R_16BF, out},
          accumulate ? 1.0f : 0.0f, nullptr, {dx, CUDA_R_16BF, in});
}

void matmul_backward_p2(DeviceContext& ctx, float* dw, std::span<const MatmulRows> blocks,
                        std::int64_t in, std::int64_t out) {
  if (blocks.empty()) return;
  std::int64_t rows = 0;
  for (const MatmulRows& block : blocks)
    rows += block.rows;
  const bf16* x = blocks[0].x;
  const bf16* dy = blocks[0].dy;
  Tensor x_all, dy_all;  // scratch, back in the allocator's cache when this returns
  if (blocks.size() > 1) {
    const OpMark mark(
        ctx, [&] { return shape_label("p2 gather", in, "x", out); }, 0);
    x_all = ctx.empty({rows, in}, DType::bf16);
    dy_all = ctx.empty({rows, out}, DType::bf16);
    gather_rows(ctx, static_cast<bf16*>(x_all.data()), blocks, true, in);
    gather_rows(ctx, static_cast<bf16*>(dy_all.data()), blocks, false, out);
    x = static_cast<const bf16*>(x_all.data());
    dy = static_cast<const bf16*>(dy_all.data());
  }
  // col-major dWᵀ (I, O) += Xᵀ-view (I, R) · dY (R, O) (the Oᵀ-view of dY, transposed)
  const OpMark mark(
      ctx, [&] { return shape_label("p2 gemm", in, "x", out); }, gemm_flops(rows, in, out));
  lt_gemm(ctx, false, true, in, out, rows, 1.0f, {x, CUDA_R_16BF, in}, {dy, CUDA_R_16BF, out}, 1.0f,
          nullptr, {dw, CUDA_R_32F, in});
}

void set_gemm_candidates(DeviceContext& ctx, int candidates) {
  if (candidates < 1) throw Error("GEMM candidates: must be at least 1");
  gemm_plans(ctx).candidates = candidates;
}

std::vector<GemmChoice> gemm_choices(DeviceContext& ctx) {
  return gemm_plans(ctx).choices;
}

namespace {

void batched_gemm_into(DeviceContext& ctx, bool transa, bool transb, std::int64_t m, std::int64_t n,
                       std::int64_t k, float alpha, BatchedOperand a, BatchedOperand b, float beta,
                       void* c, cudaDataType c_type, std::int64_t ldc, std::int64_t stride_c,
                       std::int64_t batch) {
  if (batch == 0 || m == 0 || n == 0) return;
  CUBLAS_CHECK(cublasGemmStridedBatchedEx_64(
      ctx.blas(), transa ? CUBLAS_OP_T : CUBLAS_OP_N, transb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k,
      &alpha, a.data, CUDA_R_16BF, a.ld, a.stride, b.data, CUDA_R_16BF, b.ld, b.stride, &beta, c,
      c_type, ldc, stride_c, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

}  // namespace

void batched_gemm(DeviceContext& ctx, bool transa, bool transb, std::int64_t m, std::int64_t n,
                  std::int64_t k, float alpha, BatchedOperand a, BatchedOperand b, float beta,
                  bf16* c, std::int64_t ldc, std::int64_t stride_c, std::int64_t batch) {
  batched_gemm_into(ctx, transa, transb, m, n, k, alpha, a, b, beta, c, CUDA_R_16BF, ldc, stride_c,
                    batch);
}

void batched_gemm(DeviceContext& ctx, bool transa, bool transb, std::int64_t m, std::int64_t n,
                  std::int64_t k, float alpha, BatchedOperand a, BatchedOperand b, float beta,
                  float* c, std::int64_t ldc, std::int64_t stride_c, std::int64_t batch) {
  batched_gemm_into(ctx, transa, transb, m, n, k, alpha, a, b, beta, c, CUDA_R_32F, ldc, stride_c,
                    batch);
}

}  // namespace pipeplan::cuda
