// cuBLAS and cuBLASLt as runtime/cuda calls them, on the CPU (fake_device.h): bf16 or fp32
// operands, fp32 accumulation and scaling, column-major with the transposes and leading
// dimensions the descriptors give. Anything else is refused with NOT_SUPPORTED.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "tests/runtime/cuda/fake_device/fake_state.h"

struct cublasContext {
  cudaStream_t stream = nullptr;
};

struct cublasLtContext {};

namespace pipeplan::fake_cuda {

namespace {

// What the opaque descriptors hold (stored in their data arrays).
struct MatmulDesc {
  cublasComputeType_t compute;
  cudaDataType_t scale;
  cublasOperation_t transa, transb;
};
struct Layout {
  cudaDataType_t type;
  std::uint64_t rows, cols;
  std::int64_t ld;
};
static_assert(sizeof(MatmulDesc) <= sizeof(cublasLtMatmulDescOpaque_t));
static_assert(sizeof(Layout) <= sizeof(cublasLtMatrixLayoutOpaque_t));
static_assert(std::is_trivially_copyable_v<MatmulDesc> && std::is_trivially_copyable_v<Layout>);

template <typename T, typename Opaque>
T read(const Opaque* opaque) {
  T value;
  std::memcpy(&value, opaque->data, sizeof(T));
  return value;
}

template <typename T, typename Opaque>
void write(Opaque* opaque, const T& value) {
  std::memcpy(opaque->data, &value, sizeof(T));
}

bool supported(cudaDataType_t type) {
  return type == CUDA_R_16BF || type == CUDA_R_32F;
}

float load(const void* base, cudaDataType_t type, std::int64_t index) {
  if (type == CUDA_R_16BF) return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[index]);
  return static_cast<const float*>(base)[index];
}

void store(void* base, cudaDataType_t type, std::int64_t index, float value) {
  if (type == CUDA_R_16BF) {
    static_cast<__nv_bfloat16*>(base)[index] = __float2bfloat16(value);
  } else {
    static_cast<float*>(base)[index] = value;
  }
}

struct Matrix {
  const void* data;
  cudaDataType_t type;
  std::int64_t ld;
  bool transposed;
};

// Rows [first, first + count) of op(A) (m × k), or columns of op(B) (k × n) when
// `along_columns`, into `out` (count × length floats, one row or column after another). op(A)(i,
// l) is A[i + l·ld] untransposed, A[l + i·ld] transposed; op(B)(l, j) is B[l + j·ld]
// untransposed, B[j + l·ld] transposed. The loop order reads the operand contiguously.
void gather(const Matrix& matrix, std::int64_t first, std::int64_t count, std::int64_t length,
            bool along_columns, float* out) {
  const bool contiguous = along_columns ? !matrix.transposed : matrix.transposed;
  if (contiguous) {  // element l of row/column r at r·ld + l
    for (std::int64_t r = 0; r < count; ++r) {
      for (std::int64_t l = 0; l < length; ++l)
        out[r * length + l] = load(matrix.data, matrix.type, (first + r) * matrix.ld + l);
    }
  } else {  // at r + l·ld: the rows of one l lie side by side
    for (std::int64_t l = 0; l < length; ++l) {
      for (std::int64_t r = 0; r < count; ++r)
        out[r * length + l] = load(matrix.data, matrix.type, first + r + l * matrix.ld);
    }
  }
}

// Σ a[l]·b[l] in fp32, as on the GPU, eight lanes at a time (vectorised without -ffast-math and
// at -O1). Reads only this file's own scratch buffers, so ASan's checks are left out here; the
// gathers above check every read of the caller's memory.
__attribute__((no_sanitize("address"))) float dot(const float* a, const float* b, std::int64_t n) {
  using Lanes = float __attribute__((vector_size(32)));
  Lanes sum0{}, sum1{};
  std::int64_t l = 0;
  for (; l + 16 <= n; l += 16) {
    Lanes a0, a1, b0, b1;
    std::memcpy(&a0, a + l, sizeof(Lanes));
    std::memcpy(&a1, a + l + 8, sizeof(Lanes));
    std::memcpy(&b0, b + l, sizeof(Lanes));
    std::memcpy(&b1, b + l + 8, sizeof(Lanes));
    sum0 += a0 * b0;
    sum1 += a1 * b1;
  }
  float sum = 0.0f;
  for (; l < n; ++l)
    sum += a[l] * b[l];
  const Lanes total = sum0 + sum1;
  for (int lane = 0; lane < 8; ++lane)
    sum += total[lane];
  return sum;
}

// D (m × n, column-major, ldd) = alpha · op(A) · op(B) + beta · C, with C at D's place (read
// before D is written). op(B) is gathered once; op(A) a panel of rows at a time.
void gemm(std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const Matrix& a,
          const Matrix& b, float beta, const void* c, void* d, cudaDataType_t d_type,
          std::int64_t ldd) {
  constexpr std::int64_t kPanel = 64;
  std::vector<float> columns(static_cast<std::size_t>(n * k));
  gather(b, 0, n, k, true, columns.data());
  std::vector<float> panel(static_cast<std::size_t>(std::min(m, kPanel) * k));
  for (std::int64_t i0 = 0; i0 < m; i0 += kPanel) {
    const std::int64_t rows = std::min(kPanel, m - i0);
    gather(a, i0, rows, k, false, panel.data());
    for (std::int64_t j = 0; j < n; ++j) {
      for (std::int64_t i = 0; i < rows; ++i) {
        const std::int64_t at = i0 + i + j * ldd;
        float value = alpha * dot(panel.data() + i * k, columns.data() + j * k, k);
        if (beta != 0.0f) value += beta * load(c, d_type, at);
        store(d, d_type, at, value);
      }
    }
  }
}

}  // namespace

}  // namespace pipeplan::fake_cuda

using namespace pipeplan::fake_cuda;  // NOLINT(google-build-using-namespace): the C API below

// ---- cuBLAS (the batched GEMMs of the unfused attention)

cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  *handle = new cublasContext();
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t /*handle*/, void* /*workspace*/,
                                     std::size_t /*bytes*/) {
  return CUBLAS_STATUS_SUCCESS;
}

const char* cublasGetStatusString(cublasStatus_t status) {
  if (const char* rule = rule_message_for(status)) return rule;
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    default:
      return "fake_device: cuBLAS error";
  }
}

// The versions of the headers it is built with (the backend reports which libraries it loaded).
cublasStatus_t cublasGetProperty(libraryPropertyType type, int* value) {
  switch (type) {
    case MAJOR_VERSION:
      *value = CUBLAS_VER_MAJOR;
      return CUBLAS_STATUS_SUCCESS;
    case MINOR_VERSION:
      *value = CUBLAS_VER_MINOR;
      return CUBLAS_STATUS_SUCCESS;
    case PATCH_LEVEL:
      *value = CUBLAS_VER_PATCH;
      return CUBLAS_STATUS_SUCCESS;
    default:
      return CUBLAS_STATUS_INVALID_VALUE;
  }
}

size_t cublasLtGetVersion() {
  return CUBLAS_VERSION;  // cuBLASLt ships with cuBLAS and numbers its versions the same way
}

cublasStatus_t cublasGemmStridedBatchedEx_64(
    cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, std::int64_t m,
    std::int64_t n, std::int64_t k, const void* alpha, const void* a, cudaDataType a_type,
    std::int64_t lda, long long stride_a, const void* b, cudaDataType b_type, std::int64_t ldb,
    long long stride_b, const void* beta, void* c, cudaDataType c_type, std::int64_t ldc,
    long long stride_c, std::int64_t batch, cublasComputeType_t compute,
    cublasGemmAlgo_t /*algo*/) {
  if (!check_launch_stream(handle->stream, "cublasGemmStridedBatchedEx",
                           CUBLAS_STATUS_EXECUTION_FAILED)
           .empty())
    return CUBLAS_STATUS_EXECUTION_FAILED;
  if (compute != CUBLAS_COMPUTE_32F || !supported(a_type) || !supported(b_type) ||
      !supported(c_type)) {
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  // alpha and beta are host scalars the caller may reuse once this returns: read now.
  const float alpha_value = *static_cast<const float*>(alpha);
  const float beta_value = *static_cast<const float*>(beta);
  const auto element = [](cudaDataType type) { return type == CUDA_R_16BF ? 2 : 4; };
  count_gemm();
  run_or_defer(handle->stream, [=] {
    for (std::int64_t i = 0; i < batch; ++i) {
      const Matrix am{static_cast<const char*>(a) + i * stride_a * element(a_type), a_type, lda,
                      transa != CUBLAS_OP_N};
      const Matrix bm{static_cast<const char*>(b) + i * stride_b * element(b_type), b_type, ldb,
                      transb != CUBLAS_OP_N};
      void* ci = static_cast<char*>(c) + i * stride_c * element(c_type);
      gemm(m, n, k, alpha_value, am, bm, beta_value, ci, ci, c_type, ldc);
    }
  });
  return CUBLAS_STATUS_SUCCESS;
}

// ---- cuBLASLt (the linear layers)

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  *handle = new cublasLtContext();
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute,
                                        cudaDataType_t scale) {
  *desc = new cublasLtMatmulDescOpaque_t{};
  write(*desc, MatmulDesc{compute, scale, CUBLAS_OP_N, CUBLAS_OP_N});
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                              cublasLtMatmulDescAttributes_t attribute,
                                              const void* buffer, std::size_t bytes) {
  auto value = read<MatmulDesc>(desc);
  cublasOperation_t op{};
  if (bytes != sizeof(op)) return CUBLAS_STATUS_INVALID_VALUE;
  std::memcpy(&op, buffer, sizeof(op));
  if (attribute == CUBLASLT_MATMUL_DESC_TRANSA) {
    value.transa = op;
  } else if (attribute == CUBLASLT_MATMUL_DESC_TRANSB) {
    value.transb = op;
  } else {
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  write(desc, value);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  delete desc;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type,
                                          std::uint64_t rows, std::uint64_t cols, std::int64_t ld) {
  if (ld < static_cast<std::int64_t>(std::max<std::uint64_t>(rows, 1)))
    return CUBLAS_STATUS_INVALID_VALUE;
  *layout = new cublasLtMatrixLayoutOpaque_t{};
  write(*layout, Layout{type, rows, cols, ld});
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  delete layout;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* preference) {
  *preference = new cublasLtMatmulPreferenceOpaque_t{};
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t /*preference*/,
                                                    cublasLtMatmulPreferenceAttributes_t attribute,
                                                    const void* /*buffer*/, std::size_t /*bytes*/) {
  return attribute == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES ? CUBLAS_STATUS_SUCCESS
                                                               : CUBLAS_STATUS_NOT_SUPPORTED;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t preference) {
  delete preference;
  return CUBLAS_STATUS_SUCCESS;
}

namespace {
// The shapes must agree as cuBLASLt checks them: op(A) m × k, op(B) k × n, C and D m × n.
bool shapes_agree(const MatmulDesc& op, const Layout& a, const Layout& b, const Layout& c,
                  const Layout& d) {
  const bool ta = op.transa != CUBLAS_OP_N, tb = op.transb != CUBLAS_OP_N;
  const std::uint64_t m = ta ? a.cols : a.rows, k = ta ? a.rows : a.cols;
  const std::uint64_t kb = tb ? b.cols : b.rows, n = tb ? b.rows : b.cols;
  return k == kb && c.rows == m && c.cols == n && d.rows == m && d.cols == n && c.type == d.type &&
         op.compute == CUBLAS_COMPUTE_32F && op.scale == CUDA_R_32F && supported(a.type) &&
         supported(b.type) && supported(d.type);
}
}  // namespace

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t /*handle*/, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a,
    cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
    cublasLtMatmulPreference_t /*preference*/, int requested,
    cublasLtMatmulHeuristicResult_t results[], int* returned) {
  *returned = 0;
  if (requested < 1) return CUBLAS_STATUS_INVALID_VALUE;
  if (!shapes_agree(read<MatmulDesc>(desc), read<Layout>(a), read<Layout>(b), read<Layout>(c),
                    read<Layout>(d))) {
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  // Up to three answers, told apart by the algorithm's first word (the stand-in runs every one
  // the same way), so that a caller timing several has several.
  const int answers = requested < 3 ? requested : 3;
  for (int i = 0; i < answers; ++i) {
    results[i] = cublasLtMatmulHeuristicResult_t{};
    results[i].algo.data[0] = static_cast<std::uint64_t>(i);
    results[i].state = CUBLAS_STATUS_SUCCESS;
    results[i].wavesCount = 1.0f;
  }
  *returned = answers;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t /*handle*/, cublasLtMatmulDesc_t desc,
                              const void* alpha, const void* a, cublasLtMatrixLayout_t a_desc,
                              const void* b, cublasLtMatrixLayout_t b_desc, const void* beta,
                              const void* c, cublasLtMatrixLayout_t c_desc, void* d,
                              cublasLtMatrixLayout_t d_desc, const cublasLtMatmulAlgo_t* /*algo*/,
                              void* /*workspace*/, std::size_t /*workspace_bytes*/,
                              cudaStream_t stream) {
  if (!check_launch_stream(stream, "cublasLtMatmul", CUBLAS_STATUS_EXECUTION_FAILED).empty())
    return CUBLAS_STATUS_EXECUTION_FAILED;
  const auto op = read<MatmulDesc>(desc);
  const auto al = read<Layout>(a_desc), bl = read<Layout>(b_desc), cl = read<Layout>(c_desc),
             dl = read<Layout>(d_desc);
  if (!shapes_agree(op, al, bl, cl, dl)) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (cl.ld != dl.ld && c != d) return CUBLAS_STATUS_NOT_SUPPORTED;  // not needed by the backend
  const bool ta = op.transa != CUBLAS_OP_N;
  const auto m = static_cast<std::int64_t>(dl.rows), n = static_cast<std::int64_t>(dl.cols);
  const auto k = static_cast<std::int64_t>(ta ? al.rows : al.cols);
  // alpha and beta are host scalars, the descriptors host objects: read now, as cuBLASLt does.
  const float alpha_value = *static_cast<const float*>(alpha);
  const float beta_value = *static_cast<const float*>(beta);
  const Matrix am{a, al.type, al.ld, ta};
  const Matrix bm{b, bl.type, bl.ld, op.transb != CUBLAS_OP_N};
  count_gemm();
  run_or_defer(stream, [=] {
    if (beta_value != 0.0f && c != d) {
      // D = alpha·AB + beta·C with C elsewhere: copy C into D first, then accumulate in place.
      const std::size_t bytes =
          (cl.type == CUDA_R_16BF ? 2 : 4) * static_cast<std::size_t>(cl.ld * (n - 1) + m);
      std::memmove(d, c, bytes);
    }
    gemm(m, n, k, alpha_value, am, bm, beta_value, d, d, dl.type, dl.ld);
  });
  return CUBLAS_STATUS_SUCCESS;
}
