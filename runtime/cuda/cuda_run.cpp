#include "runtime/cuda/cuda_run.h"

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <string>

#include "planner/base/error.h"
#include "profiles/gpu.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/device_local_transport.h"
#include "runtime/emulate.h"
#include "runtime/launch.h"
#ifdef PIPEPLAN_HAVE_NCCL
#include "runtime/cuda/nccl_transport.h"
#endif

namespace pipeplan::cuda {

namespace {

// A stage's backend whose every call runs with the stage's context current, and only during the
// call. An emulated stage's is its green context: the driver does not synchronise threads sharing
// one, and the executor calls one stage from its compute thread, the step's main thread and the
// optimizer. A whole GPU's is the GPU's primary context: the executor's threads are its own, and
// a thread's current device is GPU 0 until set, so without it a stage on GPU 3 would allocate,
// and make its cuBLAS handles, on GPU 0.
class StageBackend final : public Backend {
 public:
  // `label`: what name() adds to the inner backend's (" (green context)" or nothing).
  StageBackend(std::unique_ptr<CudaBackend> inner, CUcontext context, std::string label = {})
      : inner_(std::move(inner)), context_(context), label_(std::move(label)) {}
  // The stage's handles (cuBLAS, cuDNN) go with the context they were made in current.
  ~StageBackend() override {
    try {
      const ScopedContext current(context_);
      inner_.reset();
    } catch (const Error&) {  // the push failed: tear down in whatever context is current
      inner_.reset();
    }
  }
  StageBackend(const StageBackend&) = delete;
  StageBackend& operator=(const StageBackend&) = delete;

  CudaBackend& inner() { return *inner_; }
  std::string name() const override { return inner_->name() + label_; }
  DType compute_dtype() const override { return inner_->compute_dtype(); }
  Tensor upload(std::span<const double> values, const Shape& shape) override {
    const ScopedContext current(context_);
    return inner_->upload(values, shape);
  }
  Tensor upload_loss_gradient(double value) override {
    const ScopedContext current(context_);
    return inner_->upload_loss_gradient(value);
  }
  Tensor upload_tokens(std::span<const std::int32_t> tokens, const Shape& shape) override {
    const ScopedContext current(context_);
    return inner_->upload_tokens(tokens, shape);
  }
  std::vector<double> download(const Tensor& tensor) override {
    const ScopedContext current(context_);
    return inner_->download(tensor);
  }
  std::vector<std::int32_t> download_tokens(const Tensor& tensor) override {
    const ScopedContext current(context_);
    return inner_->download_tokens(tensor);
  }
  LayerParams init_layer(const ModelConfig& model, LayerKind kind, int layer_index,
                         std::uint64_t seed) override {
    const ScopedContext current(context_);
    return inner_->init_layer(model, kind, layer_index, seed);
  }
  TokenBatch synthetic_batch(int batch, int seq, int vocab, std::uint64_t seed) override {
    const ScopedContext current(context_);
    return inner_->synthetic_batch(batch, seq, vocab, seed);
  }
  ForwardResult forward(const LayerParams& layer, const Tensor& input,
                        const Tensor& targets) override {
    const ScopedContext current(context_);
    return inner_->forward(layer, input, targets);
  }
  BackwardP1Result backward_p1(const LayerParams& layer, Stash stash, const Tensor& dy) override {
    const ScopedContext current(context_);
    return inner_->backward_p1(layer, std::move(stash), dy);
  }
  void backward_p2(LayerParams& layer, std::span<const Retained* const> retained) override {
    const ScopedContext current(context_);
    inner_->backward_p2(layer, retained);
  }
  void zero_grads(LayerParams& layer) override {
    const ScopedContext current(context_);
    inner_->zero_grads(layer);
  }
  void add_grads(LayerParams& layer, std::span<const Tensor> grads) override {
    const ScopedContext current(context_);
    inner_->add_grads(layer, grads);
  }
  void adamw_step(LayerParams& layer, const AdamWConfig& config, int step) override {
    const ScopedContext current(context_);
    inner_->adamw_step(layer, config, step);
  }
  std::int64_t optimizer_bytes(const LayerParams& layer) const override {
    return inner_->optimizer_bytes(layer);  // host-side bookkeeping: no CUDA call
  }
  void synchronize() override {
    const ScopedContext current(context_);
    inner_->synchronize();
  }
  void begin_pair() override {
    const ScopedContext current(context_);
    inner_->begin_pair();
  }
  void begin_second() override {
    const ScopedContext current(context_);
    inner_->begin_second();
  }
  void end_pair() override {
    const ScopedContext current(context_);
    inner_->end_pair();
  }

 private:
  std::unique_ptr<CudaBackend> inner_;
  CUcontext context_;
  std::string label_;
};

constexpr const char* kWorkQueuesEnv = "CUDA_DEVICE_MAX_CONNECTIONS";
constexpr int kDefaultWorkQueues = 8;  // the driver's default
constexpr int kMaxWorkQueues = 32;     // the most the driver gives

MeasuredHardware describe_hardware(const GpuRunOptions& options, int plan_devices, int gpu = 0) {
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, gpu));
  MeasuredHardware hw;
  hw.work_queues = work_queues();
  hw.device_name = prop.name;
  hw.total_sms = prop.multiProcessorCount;
  hw.gpus = options.emulate > 0 ? 1 : plan_devices;
  if (options.emulate > 0) {
    hw.emulated_stages = options.emulate;
    hw.sm_per_stage = emulated_sm_share(hw.total_sms, options.emulate);
  }
  try {
    const GpuSpec spec = gpu_for_device(hw.device_name, options.gpu);
    hw.gpu = spec.name;
    hw.peak_flops = spec.peak_bf16_tflops * 1e12;
  } catch (const Error&) {
    if (!options.gpu.empty()) throw;  // a wrong --gpu is the user's error
    hw.peak_flops = 0;                // unknown device: the report says so, no MFU
  }
  return hw;
}

}  // namespace

int work_queues() {
  const char* value = std::getenv(kWorkQueuesEnv);
  if (value == nullptr || *value == '\0') return kDefaultWorkQueues;
  char* end = nullptr;
  const long queues = std::strtol(value, &end, 10);
  if (*end != '\0' || queues < 1) return kDefaultWorkQueues;
  return static_cast<int>(std::min<long>(queues, kMaxWorkQueues));
}

int prefer_many_work_queues() {
  setenv(kWorkQueuesEnv, std::to_string(kMaxWorkQueues).c_str(), 0);  // 0: keep the user's
  return work_queues();
}

GpuShare gpu_share(int local_rank, int local_size, int gpus) {
  if (gpus < 1) throw Error("no CUDA device found");
  if (local_size > 0 && local_rank >= local_size) {
    throw Error("local rank " + std::to_string(local_rank) + " is not below the node's " +
                std::to_string(local_size) + " ranks");
  }
  GpuShare share;
  share.gpu = local_rank % gpus;
  share.index = local_rank / gpus;
  if (local_size > 0) {
    share.ranks = local_size > share.gpu ? (local_size - 1 - share.gpu) / gpus + 1 : 1;
  } else if (local_rank >= gpus) {
    throw Error("local rank " + std::to_string(local_rank) + " shares GPU " +
                std::to_string(share.gpu) + " (" + std::to_string(gpus) +
                " visible), and the launcher does not say how many ranks run on this node "
                "(LOCAL_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_SIZE or MPI_LOCALNRANKS)");
  }
  return share;
}

CudaRun::CudaRun(const TaskGraph& plan, const GpuRunOptions& options,
                 std::optional<int> local_ranks) {
  if (options.group != nullptr) {
    prepare_rank(plan, options, local_ranks);
    return;
  }
  const int devices = plan.meta.devices;
  const int gpus = cuda_device_count();
  if (gpus == 0) throw Error("no CUDA device found");
  hardware_ = describe_hardware(options, devices);
  std::vector<StageEndpoint> endpoints(static_cast<std::size_t>(devices));
  std::vector<int> cuda_devices;
  std::vector<cudaStream_t> streams;
  std::vector<cudaStream_t> side_streams(static_cast<std::size_t>(devices), nullptr);
  // A plan with overlapped pairs runs their second ops on a side stream of each stage.
  const bool pairs = !overlap_pairs(plan).empty();
  if (options.emulate > 0) {
    green_ = GreenContext::partition(0, options.emulate, hardware_.sm_per_stage);
    // The driver may round a share up to its granularity: report what each stage really has.
    hardware_.sm_per_stage = green_.front()->sm_count();
    for (int d = 0; d < devices; ++d) {
      GreenContext& green = *green_[static_cast<std::size_t>(d)];
      std::unique_ptr<CudaBackend> backend;
      {
        const ScopedContext current(green.context());
        if (pairs) side_streams[static_cast<std::size_t>(d)] = green.create_stream();
        backend = std::make_unique<CudaBackend>(
            CudaBackendOptions{plan.meta.attention, green.stream(), options.gemm_candidates,
                               side_streams[static_cast<std::size_t>(d)]});
      }
      backends_.push_back(backend.get());
      endpoints[static_cast<std::size_t>(d)] = {0, green.stream(), &backend->context().allocator(),
                                                &green};
      pending_.push_back(
          std::make_unique<StageBackend>(std::move(backend), green.context(), " (green context)"));
      cuda_devices.push_back(0);
      streams.push_back(green.stream());
    }
  } else {
    const bool one_gpu = devices > gpus;
    if (one_gpu && devices > 1) {
      throw Error("plan: " + std::to_string(devices) + " devices but " + std::to_string(gpus) +
                  " GPU(s) visible; run it on one GPU with " + field_name("emulate") + " " +
                  std::to_string(devices));
    }
    for (int d = 0; d < devices; ++d) {
      CUDA_CHECK(cudaSetDevice(d));
      const cudaStream_t stream = own_stream();
      const cudaStream_t side = pairs ? own_stream() : nullptr;
      side_streams[static_cast<std::size_t>(d)] = side;
      auto backend = std::make_unique<CudaBackend>(
          CudaBackendOptions{plan.meta.attention, stream, options.gemm_candidates, side});
      backends_.push_back(backend.get());
      endpoints[static_cast<std::size_t>(d)] = {d, stream, &backend->context().allocator(),
                                                nullptr};
      pending_.push_back(std::make_unique<StageBackend>(std::move(backend), context_of(stream)));
      cuda_devices.push_back(d);
      streams.push_back(stream);
    }
  }
  // Each stage's allocator counts the fences its compute stream records: a device-local copy into
  // a freed block waits for that block's last reader only (DeviceLocalTransport::send).
  std::vector<std::shared_ptr<FenceClock>> fence_clocks;
  fence_clocks.reserve(endpoints.size());
  for (const StageEndpoint& endpoint : endpoints)
    fence_clocks.push_back(endpoint.allocator->fence_clock());
  events_ = std::make_shared<StepEvents>(cuda_devices, streams, std::move(fence_clocks),
                                         std::move(side_streams));
  const bool one_gpu = options.emulate > 0 || devices == 1;
  if (!one_gpu && options.transport == GpuTransport::device_local) {
    throw FieldError("transport", "device-local copies join stages on one GPU; this run has " +
                                      std::to_string(devices) + " GPUs");
  }
  if (one_gpu && options.transport != GpuTransport::nccl) {
    auto local = std::make_unique<DeviceLocalTransport>(std::move(endpoints), events_.get());
    local->open_links(transport_links(plan));  // before any executor thread runs
    transport_ = std::move(local);
  } else {
#ifdef PIPEPLAN_HAVE_NCCL
    for (const StageEndpoint& endpoint : endpoints)
      endpoint.allocator->set_trim_on_oom(false);  // allocator.h: NCCL kernels wait on the device
    transport_ = NcclTransport::single_process(std::move(endpoints), transport_links(plan),
                                               events_.get(), options.timeout);
#else
    throw Error(
        one_gpu ? field_name("transport") + ": nccl, and this CUDA module was built without NCCL"
                : "plan: " + std::to_string(devices) +
                      " GPUs need the NCCL transport, and this CUDA module was built "
                      "without NCCL (use " +
                      field_name("emulate") + " " + std::to_string(devices) + " on one GPU)");
#endif
  }
  transport_name_ = transport_->name();
}

void CudaRun::prepare_rank(const TaskGraph& plan, const GpuRunOptions& options,
                           std::optional<int> local_ranks) {
  ProcessGroup& group = *options.group;
  const int devices = plan.meta.devices;
  const int rank = group.rank();
  // Everything that can fail on one rank alone happens before the agreement, so no rank waits
  // in the NCCL set-up for one that has already given up.
  std::optional<std::string> error;
  std::string id_hex;
  int gpu = 0;
  cudaStream_t stream = nullptr;
  cudaStream_t side = nullptr;
  CudaBackend* local = nullptr;
  try {
    if (options.emulate > 0) {
      throw FieldError("emulate", "not with one process per GPU: each rank has a GPU of its own");
    }
    if (options.transport == GpuTransport::device_local) {
      throw FieldError("transport",
                       "device-local copies join stages in one process; ranks "
                       "talk over NCCL");
    }
    if (devices != group.size()) {
      throw Error("plan: " + std::to_string(devices) + " devices, but " +
                  std::to_string(group.size()) + (group.size() == 1 ? " rank was" : " ranks were") +
                  " started (one rank per plan device)");
    }
    const int gpus = cuda_device_count();
    if (gpus == 0) throw Error("no CUDA device found");
    const GpuShare share = gpu_share(
        group.local_rank(), local_ranks ? *local_ranks : local_ranks_from_environment(), gpus);
    gpu = share.gpu;
    hardware_ = describe_hardware(options, devices, gpu);
    CUDA_CHECK(cudaSetDevice(gpu));
    const bool pairs = !overlap_pairs(plan).empty();
    std::string placement = "one process per GPU";
    if (share.ranks > 1) {
      // Ranks sharing a GPU: NCCL must allow it; each rank computes in a green context of its
      // share of the SMs where the driver has them (without MPS the processes still take turns
      // on the GPU), else on the whole GPU.
#ifdef PIPEPLAN_HAVE_NCCL
      if (const std::string refusal = multi_rank_gpu_refusal(); !refusal.empty()) {
        throw Error("GPU " + std::to_string(gpu) + " is shared by " + std::to_string(share.ranks) +
                    " ranks: " + refusal);
      }
#endif
      placement = std::to_string(share.ranks) + " processes on GPU " + std::to_string(gpu);
      hardware_.gpus = (devices + share.ranks - 1) / share.ranks;  // MFU per GPU, not per rank
      try {
        auto parts = GreenContext::partition(gpu, share.ranks,
                                             emulated_sm_share(hardware_.total_sms, share.ranks));
        green_.push_back(std::move(parts[static_cast<std::size_t>(share.index)]));
      } catch (const Error& e) {
        placement += ", each on the whole GPU (no green contexts: " + std::string(e.what()) + ")";
      }
    }
    GreenContext* green = green_.empty() ? nullptr : green_.front().get();
    if (green != nullptr) {
      hardware_.emulated_stages = share.ranks;
      hardware_.sm_per_stage = green->sm_count();
      placement += ", each in a green context of " + std::to_string(green->sm_count()) + " SMs";
      stream = green->stream();
      if (pairs) side = green->create_stream();
    } else {
      stream = own_stream();
      if (pairs) side = own_stream();
    }
    const CUcontext context = green != nullptr ? green->context() : context_of(stream);
    std::unique_ptr<CudaBackend> backend;
    {
      const ScopedContext current(green != nullptr ? context : nullptr);
      backend = std::make_unique<CudaBackend>(
          CudaBackendOptions{plan.meta.attention, stream, options.gemm_candidates, side});
    }
    local = backend.get();
    pending_.resize(static_cast<std::size_t>(devices));
    backends_.assign(static_cast<std::size_t>(devices), nullptr);
    pending_[static_cast<std::size_t>(rank)] = std::make_unique<StageBackend>(
        std::move(backend), context, green != nullptr ? " (green context)" : "");
    backends_[static_cast<std::size_t>(rank)] = local;
    placement_ = placement;
#ifdef PIPEPLAN_HAVE_NCCL
    if (rank == 0) {
      ncclUniqueId id{};
      NCCL_CHECK(ncclGetUniqueId(&id));
      id_hex = unique_id_hex(id);
    }
#else
    throw Error(
        "plan: one process per GPU needs the NCCL transport, and this CUDA module was built "
        "without NCCL");
#endif
  } catch (const Error& e) {
    error = e.what();
  }
  group.agree(error, "preparing the GPUs", options.timeout);
#ifdef PIPEPLAN_HAVE_NCCL
  id_hex = group.broadcast(id_hex, "the NCCL unique id", options.timeout);
  // Every plan device's events on this rank's GPU and stream: only its own nodes record any. Its
  // own device's fence clock is its allocator's, so that a receive into a block it freed waits
  // for the node that last read it rather than for everything queued on its stream; the others'
  // clocks never advance here.
  const auto count = static_cast<std::size_t>(devices);
  std::vector<std::shared_ptr<FenceClock>> fence_clocks(count);
  for (std::size_t d = 0; d < count; ++d) {
    fence_clocks[d] = d == static_cast<std::size_t>(rank)
                          ? local->context().allocator().fence_clock()
                          : std::make_shared<FenceClock>();
  }
  events_ = std::make_shared<StepEvents>(
      std::vector<int>(count, gpu), std::vector<cudaStream_t>(count, stream),
      std::move(fence_clocks), std::vector<cudaStream_t>(count, side));
  local->context().allocator().set_trim_on_oom(false);  // allocator.h: NCCL kernels wait
  transport_ =
      NcclTransport::multi_process(rank, devices, unique_id_from_hex(id_hex),
                                   StageEndpoint{gpu, stream, &local->context().allocator(),
                                                 green_.empty() ? nullptr : green_.front().get()},
                                   transport_links(plan), events_.get(), options.timeout);
  transport_name_ = transport_->name() + " (" + placement_ + ")";
#endif
}

cudaStream_t CudaRun::own_stream() {
  cudaStream_t stream = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  own_streams_.push_back(stream);
  return stream;
}

CudaRun::~CudaRun() {
  // Backends the executor never took go first; the streams they queue on go after.
  pending_.clear();
  for (cudaStream_t stream : own_streams_) {
    if (stream != nullptr) cudaStreamDestroy(stream);  // no throwing from a destructor
  }
}

BackendFactory CudaRun::backend_factory() {
  return [this](int device) -> std::unique_ptr<Backend> {
    if (device < 0 || device >= static_cast<int>(pending_.size()) ||
        !pending_[static_cast<std::size_t>(device)]) {
      throw Error("CUDA run: no prepared backend for device " + std::to_string(device));
    }
    return std::move(pending_[static_cast<std::size_t>(device)]);
  };
}

std::unique_ptr<Transport> CudaRun::take_transport() {
  if (!transport_) throw Error("CUDA run: the transport was already taken");
  return std::move(transport_);
}

CudaBackend& CudaRun::backend(int device) const {
  CudaBackend* backend = backends_.at(static_cast<std::size_t>(device));
  if (backend == nullptr) {
    throw Error("CUDA run: plan device " + std::to_string(device) + " runs in another process");
  }
  return *backend;
}

std::string CudaRun::backend_name() const {
  for (CudaBackend* backend : backends_) {
    if (backend != nullptr) return backend->name() + " (" + backend->note() + ")";
  }
  return "cuda";
}

std::vector<std::int64_t> CudaRun::allocator_peak_bytes() const {
  std::vector<std::int64_t> peaks;
  for (CudaBackend* backend : backends_)
    peaks.push_back(backend != nullptr ? backend->context().allocator().stats().peak_bytes : 0);
  return peaks;
}

void CudaRun::reset_peaks() {
  for (CudaBackend* backend : backends_) {
    if (backend != nullptr) backend->context().allocator().reset_peak();
  }
}

}  // namespace pipeplan::cuda
