// cuDNN SDPA through cudnn-frontend (sdpa.h). Built without the frontend's headers
// (PIPEPLAN_HAVE_CUDNN_FRONTEND unset, runtime/cuda/CMakeLists.txt), this file only says why
// fused attention is unavailable, and the backend refuses `flash` with that reason.
#include "runtime/cuda/sdpa.h"

#include <cmath>
#include <string>

#include "runtime/cuda/cuda_check.h"

#ifdef PIPEPLAN_HAVE_CUDNN_FRONTEND
// cuDNN is dlopened on first use (no link-time dependency); the frontend's JSON serialisation is
// not used, and its bundled nlohmann::json would meet the project's own.
#define NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING
#define CUDNN_FRONTEND_SKIP_JSON_LIB
#include <dlfcn.h>

#include <cstdlib>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <unordered_map>
#include <vector>

#include <cudnn_frontend.h>

// The library every cuDNN symbol of the frontend is looked up in (set by cudnn_library()).
namespace cudnn_frontend {
void* cudnn_dlhandle = nullptr;  // NOLINT: the frontend declares it extern, non-const
}  // namespace cudnn_frontend
#endif

namespace pipeplan::cuda {

bool fused_attention_built() {
#ifdef PIPEPLAN_HAVE_CUDNN_FRONTEND
  return true;
#else
  return false;
#endif
}

void check_attention_available(Attention attention) {
  if (attention != Attention::flash) return;
  const std::string why = fused_attention_unavailable();
  if (why.empty()) return;
  throw FieldError("attention", "flash (cuDNN's fused attention) is unavailable: " + why +
                                    "; plan and profile with " + field_name("attention") +
                                    " recompute to run the unfused path");
}

#ifndef PIPEPLAN_HAVE_CUDNN_FRONTEND

std::string fused_attention_unavailable() {
  return "this CUDA module was built without the cudnn-frontend headers (bash "
         "tools/dev/fetch_cudnn_frontend.sh, then configure and build again)";
}

std::string fused_attention_description() {
  return "";
}

void sdpa_forward(DeviceContext&, bf16*, float*, const bf16*, const AttentionDims&) {
  throw Error("attention flash: " + fused_attention_unavailable());
}

void sdpa_backward(DeviceContext&, bf16*, const bf16*, const bf16*, const bf16*, const float*,
                   const AttentionDims&) {
  throw Error("attention flash: " + fused_attention_unavailable());
}

#else

namespace fe = cudnn_frontend;

namespace {

constexpr std::size_t kMinimumCudnn = 90000;  // 9.0.0: SDPA forward and backward, bf16, GQA

// cuDNN 9 numbers its versions major·10000 + minor·100 + patch, cuDNN 8 major·1000 + minor·100 +
// patch (8907 is 8.9.7).
std::string version_string(std::size_t version) {
  const std::size_t major_unit = version < 90000 ? 1000 : 10000;
  return std::to_string(version / major_unit) + "." +
         std::to_string(version / 100 % (major_unit / 100)) + "." + std::to_string(version % 100);
}

struct CudnnLibrary {
  std::string error;        // empty once loaded
  std::size_t version = 0;  // cudnnGetVersion()
};

// Loads cuDNN once per process and hands it to the frontend.
const CudnnLibrary& cudnn_library() {
  static const CudnnLibrary library = [] {
    CudnnLibrary result;
    const char* env = std::getenv("PIPEPLAN_CUDNN_LIBRARY");
    const std::string name = env != nullptr && *env != '\0' ? env : "libcudnn.so.9";
    dlerror();
    void* handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* why = dlerror();
      result.error = "cannot load " + name + ": " + (why != nullptr ? why : "unknown error") +
                     " (put cuDNN 9 on LD_LIBRARY_PATH, or name it in PIPEPLAN_CUDNN_LIBRARY)";
      return result;
    }
    using GetVersion = std::size_t (*)();
    const auto get_version = reinterpret_cast<GetVersion>(dlsym(handle, "cudnnGetVersion"));
    if (get_version == nullptr) {
      result.error = name + " has no cudnnGetVersion: not a cuDNN library";
      return result;
    }
    result.version = get_version();
    if (result.version < kMinimumCudnn) {
      result.error = name + " is cuDNN " + version_string(result.version) +
                     "; fused attention needs cuDNN 9.0 or newer";
      return result;
    }
    fe::cudnn_dlhandle = handle;
    // The frontend dlopens the CUDA runtime too, trying libcudart.so.12 before .13 and keeping
    // the first it finds; a PyTorch install may put both on the search path. Point it at the
    // runtime this module links (the same library, already loaded), unless the user chose one.
    const std::string cudart = "libcudart.so." + std::to_string(CUDART_VERSION / 1000);
    setenv("CUDNN_FRONTEND_CUDART_LIB_NAME", cudart.c_str(), 0);  // 0: keep the user's
    return result;
  }();
  return library;
}

enum Uid : fe::graph::Tensor_attributes::uid_t { kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV };

// One graph per direction and shape; the pointers change per call, the shape does not.
struct GraphKey {
  std::int64_t batch = 0, seq = 0, heads = 0, kv_heads = 0, head_dim = 0;
  bool backward = false;
  auto tuple() const { return std::tie(batch, seq, heads, kv_heads, head_dim, backward); }
  bool operator<(const GraphKey& other) const { return tuple() < other.tuple(); }

  std::string describe() const {
    return "(B, H, KV, T, D) = (" + std::to_string(batch) + ", " + std::to_string(heads) + ", " +
           std::to_string(kv_heads) + ", " + std::to_string(seq) + ", " + std::to_string(head_dim) +
           ")";
  }
};

struct Layout {
  std::vector<std::int64_t> dim, stride;
};

// `count` heads of D columns inside rows of `row_width` elements, T rows per sequence:
// (B, count, T, D) with strides (T·row_width, D, row_width, 1). Q, K and V inside qkv; O and dO.
Layout heads_in_rows(const GraphKey& key, std::int64_t count, std::int64_t row_width) {
  return {{key.batch, count, key.seq, key.head_dim},
          {key.seq * row_width, key.head_dim, row_width, 1}};
}

// The statistic (B, H, T, 1) fp32, contiguous: the stash's (B, H, T).
Layout stats_layout(const GraphKey& key) {
  return {{key.batch, key.heads, key.seq, 1}, {key.heads * key.seq, key.seq, 1, 1}};
}

struct BuiltGraph {
  std::shared_ptr<fe::graph::Graph> graph;
  std::int64_t workspace_bytes = 0;
};

// One line: cuDNN's and the frontend's messages may span several.
std::string one_line(std::string text) {
  for (char& ch : text) {
    if (ch == '\n' || ch == '\r') ch = ' ';
  }
  while (!text.empty() && text.back() == ' ')
    text.pop_back();
  return text;
}

[[noreturn]] void fail(const GraphKey& key, const std::string& what, const std::string& why) {
  throw Error("attention flash: cuDNN SDPA " + std::string(key.backward ? "backward" : "forward") +
              " " + what + " for " + key.describe() + ": " + one_line(why));
}

void check(fe::error_t status, const GraphKey& key, const char* what) {
  if (status.is_bad()) fail(key, what, status.get_message());
}

void check_cudnn(cudnnStatus_t status, const char* call) {
  if (status != CUDNN_STATUS_SUCCESS) {
    throw Error(std::string("attention flash: ") + call +
                " failed: " + fe::detail::get_error_string(status));
  }
}

std::shared_ptr<fe::graph::Graph> describe_graph(const GraphKey& key) {
  auto graph = std::make_shared<fe::graph::Graph>();
  graph->set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  const std::int64_t width = (key.heads + 2 * key.kv_heads) * key.head_dim;  // qkv row
  const std::int64_t channels = key.heads * key.head_dim;                    // out row
  const auto tensor = [&](const char* name, Uid uid, const Layout& layout) {
    return graph->tensor(fe::graph::Tensor_attributes()
                             .set_name(name)
                             .set_uid(uid)
                             .set_dim(layout.dim)
                             .set_stride(layout.stride));
  };
  const auto output = [](const std::shared_ptr<fe::graph::Tensor_attributes>& t, Uid uid,
                         const Layout& layout) {
    t->set_output(true).set_uid(uid).set_dim(layout.dim).set_stride(layout.stride);
  };
  const Layout q = heads_in_rows(key, key.heads, width);
  const Layout kv = heads_in_rows(key, key.kv_heads, width);
  const Layout o = heads_in_rows(key, key.heads, channels);
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(key.head_dim)));
  const auto q_t = tensor("Q", kQ, q);
  const auto k_t = tensor("K", kK, kv);
  const auto v_t = tensor("V", kV, kv);
  if (!key.backward) {
    auto options = fe::graph::SDPA_attributes()
                       .set_name("pipeplan_flash_forward")
                       .set_generate_stats(true)
                       .set_attn_scale(scale)
                       .set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
                       .set_diagonal_band_right_bound(0);  // causal: key j ≤ query i
    auto [o_t, stats_t] = graph->sdpa(q_t, k_t, v_t, options);
    output(o_t, kO, o);
    output(stats_t, kStats, stats_layout(key));
    stats_t->set_data_type(fe::DataType_t::FLOAT);
    return graph;
  }
  const auto o_t = tensor("O", kO, o);
  const auto do_t = tensor("dO", kDO, o);
  const auto stats_t = tensor("Stats", kStats, stats_layout(key));
  stats_t->set_data_type(fe::DataType_t::FLOAT);
  auto options = fe::graph::SDPA_backward_attributes()
                     .set_name("pipeplan_flash_backward")
                     .set_attn_scale(scale)
                     .set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
                     .set_diagonal_band_right_bound(0);
  auto [dq_t, dk_t, dv_t] = graph->sdpa_backward(q_t, k_t, v_t, o_t, do_t, stats_t, options);
  output(dq_t, kDQ, q);
  output(dk_t, kDK, kv);
  output(dv_t, kDV, kv);
  return graph;
}

// A stage's cuDNN handle (bound to its stream, made with its context current) and graphs.
class SdpaState final : public DeviceContext::Extension {
 public:
  explicit SdpaState(cudaStream_t stream) {
    try {  // the frontend throws std::runtime_error for a symbol libcudnn lacks
      check_cudnn(fe::detail::create_handle(&handle_), "cudnnCreate");
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      throw Error(std::string("attention flash: cudnnCreate: ") + e.what());
    }
    const cudnnStatus_t bound = fe::detail::set_stream(handle_, stream);
    if (bound != CUDNN_STATUS_SUCCESS) {  // a throwing constructor runs no destructor
      (void)fe::detail::destroy_handle(handle_);
      handle_ = nullptr;
      check_cudnn(bound, "cudnnSetStream");
    }
  }
  ~SdpaState() override {
    graphs_.clear();  // the execution plans refer to the handle: they go first
    if (handle_ != nullptr) (void)fe::detail::destroy_handle(handle_);  // never throws out
  }
  SdpaState(const SdpaState&) = delete;
  SdpaState& operator=(const SdpaState&) = delete;

  cudnnHandle_t handle() const { return handle_; }

  const BuiltGraph& graph(const GraphKey& key) {
    const std::lock_guard lock(mutex_);
    const auto found = graphs_.find(key);
    if (found != graphs_.end()) return found->second;
    BuiltGraph built;
    try {
      built.graph = describe_graph(key);
      check(built.graph->build(handle_, {fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK}), key,
            "graph build (no engine supports it)");
      check(built.graph->get_workspace_size(built.workspace_bytes), key, "workspace size");
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {  // the frontend throws for a missing symbol, say
      fail(key, "graph build", e.what());
    }
    return graphs_.emplace(key, std::move(built)).first->second;
  }

 private:
  cudnnHandle_t handle_ = nullptr;
  std::mutex mutex_;
  std::map<GraphKey, BuiltGraph> graphs_;
};

SdpaState& state_of(DeviceContext& ctx) {
  const std::string why = fused_attention_unavailable();
  if (!why.empty()) throw Error("attention flash: " + why);
  std::unique_ptr<DeviceContext::Extension>& slot = ctx.attention_state();
  if (!slot) slot = std::make_unique<SdpaState>(ctx.stream());
  return static_cast<SdpaState&>(*slot);
}

GraphKey key_of(const AttentionDims& dims, bool backward) {
  return {dims.batch, dims.seq, dims.heads, dims.kv_heads, dims.head_dim(), backward};
}

void execute(DeviceContext& ctx, const GraphKey& key,
             std::unordered_map<fe::graph::Tensor_attributes::uid_t, void*> pack) {
  SdpaState& state = state_of(ctx);
  const BuiltGraph& built = state.graph(key);
  void* workspace = ctx.workspace();
  Tensor scratch;  // when the cuBLAS workspace is too small; freed (stream-ordered) on return
  if (static_cast<std::size_t>(built.workspace_bytes) > ctx.workspace_bytes()) {
    scratch = ctx.empty({(built.workspace_bytes + 3) / 4}, DType::i32);
    workspace = scratch.data();
  }
  try {
    check(built.graph->execute(state.handle(), pack, workspace), key, "execution");
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    fail(key, "execution", e.what());
  }
}

void* mutable_ptr(const void* pointer) {
  return const_cast<void*>(pointer);  // cuDNN's variant pack takes void* for inputs too
}

}  // namespace

std::string fused_attention_unavailable() {
  return cudnn_library().error;
}

std::string fused_attention_description() {
  const CudnnLibrary& library = cudnn_library();
  if (!library.error.empty()) return "";
  return "cuDNN SDPA, cuDNN " + version_string(library.version) + ", cudnn-frontend " +
         std::to_string(CUDNN_FRONTEND_MAJOR_VERSION) + "." +
         std::to_string(CUDNN_FRONTEND_MINOR_VERSION) + "." +
         std::to_string(CUDNN_FRONTEND_PATCH_VERSION);
}

void sdpa_forward(DeviceContext& ctx, bf16* out, float* lse, const bf16* qkv,
                  const AttentionDims& dims) {
  const std::int64_t d = dims.head_dim();
  execute(ctx, key_of(dims, false),
          {{kQ, mutable_ptr(qkv)},
           {kK, mutable_ptr(qkv + dims.heads * d)},
           {kV, mutable_ptr(qkv + (dims.heads + dims.kv_heads) * d)},
           {kO, out},
           {kStats, lse}});
}

void sdpa_backward(DeviceContext& ctx, bf16* dqkv, const bf16* dout, const bf16* qkv,
                   const bf16* out, const float* lse, const AttentionDims& dims) {
  const std::int64_t d = dims.head_dim();
  const std::int64_t k_offset = dims.heads * d, v_offset = (dims.heads + dims.kv_heads) * d;
  execute(ctx, key_of(dims, true),
          {{kQ, mutable_ptr(qkv)},
           {kK, mutable_ptr(qkv + k_offset)},
           {kV, mutable_ptr(qkv + v_offset)},
           {kO, mutable_ptr(out)},
           {kDO, mutable_ptr(dout)},
           {kStats, mutable_ptr(lse)},
           {kDQ, dqkv},
           {kDK, dqkv + k_offset},
           {kDV, dqkv + v_offset}});
}

#endif  // PIPEPLAN_HAVE_CUDNN_FRONTEND

}  // namespace pipeplan::cuda
