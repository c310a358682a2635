#include "runtime/cuda/nccl_transport.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "planner/base/error.h"
#include "planner/base/io.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/env_query.h"
#include "runtime/cuda/green_context.h"

namespace pipeplan::cuda {

namespace {

using Clock = std::chrono::steady_clock;

std::string link_name(int from, int to, Channel channel) {
  return std::string(to_string(channel)) + " link " + std::to_string(from) + "->" +
         std::to_string(to);
}

DType dtype_from_string(const std::string& text) {
  for (const DType dtype : {DType::f32, DType::f64, DType::bf16, DType::i32}) {
    if (to_string(dtype) == text) return dtype;
  }
  throw Error("NCCL transport: header names unknown dtype '" + text + "'");
}

// The header: an 8-byte length, then the JSON descriptor, in a fixed kHeaderBytes buffer.
std::vector<char> encode_header(const Message& message) {
  nlohmann::json tensors = nlohmann::json::array();
  for (const auto& [name, tensor] : message.tensors) {
    tensors.push_back({name, std::string(to_string(tensor.dtype())), tensor.shape()});
  }
  const std::string text =
      nlohmann::json{{"tag", message.tag}, {"bytes", message.bytes}, {"tensors", tensors}}.dump();
  const auto length = static_cast<std::uint64_t>(text.size());
  if (length + sizeof(length) > static_cast<std::uint64_t>(NcclTransport::kHeaderBytes)) {
    throw Error("NCCL transport: message '" + message.tag + "' needs a header of " +
                std::to_string(length) + " bytes, above the " +
                std::to_string(NcclTransport::kHeaderBytes) + " the transport sends");
  }
  std::vector<char> header(static_cast<std::size_t>(NcclTransport::kHeaderBytes), 0);
  std::memcpy(header.data(), &length, sizeof(length));
  std::memcpy(header.data() + sizeof(length), text.data(), text.size());
  return header;
}

Message decode_header(const char* header, const std::string& where) {
  std::uint64_t length = 0;
  std::memcpy(&length, header, sizeof(length));
  if (length == 0 ||
      length + sizeof(length) > static_cast<std::uint64_t>(NcclTransport::kHeaderBytes)) {
    throw Error(where + ": received a corrupted header (length " + std::to_string(length) + ")");
  }
  Message message;
  try {
    const auto j = nlohmann::json::parse(header + sizeof(length), header + sizeof(length) + length);
    message.tag = j.at("tag").get<std::string>();
    message.bytes = j.at("bytes").get<std::int64_t>();
    for (const auto& entry : j.at("tensors")) {
      const Shape shape = entry.at(2).get<Shape>();
      message.tensors.emplace_back(
          entry.at(0).get<std::string>(),
          Tensor(nullptr, shape, dtype_from_string(entry.at(1).get<std::string>()), Device::cuda));
    }
  } catch (const nlohmann::json::exception& e) {
    throw Error(where + ": received a corrupted header (" + e.what() + ")");
  }
  return message;
}

// The context an endpoint's work is queued under: its green context, or the GPU's primary one
// (null: none pushed, cudaSetDevice made it current).
CUcontext context_of(const StageEndpoint& endpoint) {
  return endpoint.green != nullptr ? endpoint.green->context() : nullptr;
}

// Every communicator is nonblocking: its calls return at once (ncclInProgress while NCCL still
// works on them) and are polled with a deadline.
ncclConfig_t nonblocking_config() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  return config;
}

std::string ms_text(std::chrono::milliseconds timeout) {
  return std::to_string(timeout.count()) + " ms";
}

}  // namespace

std::string multi_rank_gpu_refusal() {
  int version = 0;
  if (ncclGetVersion(&version) != ncclSuccess) return "the loaded NCCL does not say its version";
  const std::string text = loaded_nccl().version;
  if (version < NCCL_VERSION(2, 30, 0)) {
    return "NCCL " + text +
           " is loaded, and several ranks on one GPU need NCCL 2.30 or later (bash "
           "tools/dev/fetch_nccl.sh, or LD_LIBRARY_PATH to a newer libnccl.so.2)";
  }
  const char* enabled = std::getenv("NCCL_MULTI_RANK_GPU_ENABLE");
  if (enabled == nullptr || std::string(enabled) != "1") {
    return "several ranks on one GPU need NCCL_MULTI_RANK_GPU_ENABLE=1 in the environment (NCCL " +
           text + " is loaded)";
  }
  return "";
}

// One side (sender or receiver) of one link: its communicator, stream, header buffers, events.
struct NcclTransport::Side {
  int device = 0;  // plan device
  TransportLink link;
  ncclComm_t comm = nullptr;
  int peer_rank = 0;  // in the two-rank link communicator
  cudaStream_t stream = nullptr;
  bool owns_stream = false;
  void* header_device = nullptr;
  char* header_host = nullptr;  // pinned
  cudaEvent_t ready = nullptr;  // the sender's compute tail (when no producer event is known)
  cudaEvent_t receiver_tail = nullptr;
  cudaEvent_t header_done = nullptr;
  cudaEvent_t done = nullptr;
  // Sends NCCL has not finished reading: the message keeps its tensors alive until then, and its
  // pinned header staging buffer (a copy from pageable memory would stage it through the
  // driver's pool, which can block the host, holding this GPU's lock, behind queued sends).
  struct Pending {
    cudaEvent_t done = nullptr;
    Message message;
    char* header = nullptr;
  };
  // The three below are shared with the threads of the device's other links, which release the
  // finished sends of every link of theirs (reap_finished).
  std::mutex pending_mutex;
  std::deque<Pending> in_flight;
  std::vector<cudaEvent_t> spare_events;
  std::vector<char*> spare_headers;  // pinned, kHeaderBytes each, free for the next send
  std::vector<char*> headers;        // every one made (freed with the side)
};

std::string unique_id_hex(const ncclUniqueId& id) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex;
  for (const char byte : id.internal) {
    const auto value = static_cast<unsigned char>(byte);
    hex += kDigits[value >> 4U];
    hex += kDigits[value & 15U];
  }
  return hex;
}

ncclUniqueId unique_id_from_hex(const std::string& hex) {
  ncclUniqueId id{};
  if (hex.size() != 2 * sizeof(id.internal)) {
    throw Error("NCCL unique id: expected " + std::to_string(2 * sizeof(id.internal)) +
                " hex digits, got " + std::to_string(hex.size()));
  }
  for (std::size_t i = 0; i < sizeof(id.internal); ++i) {
    unsigned value = 0;
    std::istringstream digits(hex.substr(2 * i, 2));
    if (!(digits >> std::hex >> value)) throw Error("NCCL unique id: not hex: '" + hex + "'");
    id.internal[i] = static_cast<char>(value);
  }
  return id;
}

ncclUniqueId exchange_unique_id(int rank, const std::filesystem::path& path,
                                std::chrono::milliseconds timeout) {
  if (const char* env = std::getenv("PIPEPLAN_NCCL_ID"); env != nullptr && *env != '\0') {
    return unique_id_from_hex(env);
  }
  if (rank == 0) {
    ncclUniqueId id{};
    NCCL_CHECK(ncclGetUniqueId(&id));
    write_file_atomic(path, unique_id_hex(id) + "\n");  // readers never see a partial id
    return id;
  }
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    std::error_code missing;
    if (std::filesystem::exists(path, missing)) {
      std::string hex = read_text_file(path);
      while (!hex.empty() && (hex.back() == '\n' || hex.back() == '\r'))
        hex.pop_back();
      return unique_id_from_hex(hex);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  throw Error(path.string() + ": no NCCL unique id from rank 0 after " +
              std::to_string(timeout.count()) + " ms");
}

NcclTransport::NcclTransport(std::vector<StageEndpoint> endpoints, StepEvents* events,
                             std::chrono::milliseconds send_timeout)
    : endpoints_(std::move(endpoints)), events_(events), send_timeout_(send_timeout) {
  for (const StageEndpoint& endpoint : endpoints_) {
    if (endpoint.cuda_device >= 0 && !device_mutexes_.contains(endpoint.cuda_device)) {
      device_mutexes_.emplace(endpoint.cuda_device, std::make_unique<std::mutex>());
    }
  }
}

std::unique_ptr<NcclTransport> NcclTransport::single_process(
    std::vector<StageEndpoint> endpoints, const std::vector<TransportLink>& links,
    StepEvents* events, std::chrono::milliseconds timeout) {
  std::map<int, int> plan_device_of_gpu;
  for (std::size_t d = 0; d < endpoints.size(); ++d) {
    const auto [it, inserted] =
        plan_device_of_gpu.emplace(endpoints[d].cuda_device, static_cast<int>(d));
    if (!inserted) {
      if (const std::string refusal = multi_rank_gpu_refusal(); !refusal.empty()) {
        throw Error("NCCL transport: plan devices " + std::to_string(it->second) + " and " +
                    std::to_string(d) + " are both on GPU " + std::to_string(it->first) + ": " +
                    refusal);
      }
    }
  }
  std::unique_ptr<NcclTransport> transport(
      new NcclTransport(std::move(endpoints), events, timeout));
  for (const TransportLink& link : links) {
    // Rank 0 sends, rank 1 receives; each made with its stage's GPU and context current, in one
    // group (ncclCommInitAll does the same with the GPUs' primary contexts).
    ncclUniqueId id{};
    NCCL_CHECK(ncclGetUniqueId(&id));
    ncclComm_t comms[2] = {nullptr, nullptr};
    ncclConfig_t configs[2] = {nonblocking_config(), nonblocking_config()};
    NCCL_CHECK(ncclGroupStart());
    ncclResult_t status = ncclSuccess;
    for (int r = 0; r < 2 && status == ncclSuccess; ++r) {
      const int device = r == 0 ? link.from : link.to;
      CUDA_CHECK(cudaSetDevice(transport->endpoint_gpu(device)));
      const ScopedContext current(
          context_of(transport->endpoints_[static_cast<std::size_t>(device)]));
      status = ncclCommInitRankConfig(&comms[r], 2, id, r, &configs[r]);
    }
    const ncclResult_t ended = ncclGroupEnd();
    if (status == ncclSuccess) status = ended;
    const std::string what = "making the communicator of the " +
                             link_name(link.from, link.to, link.channel) + " (plan devices " +
                             std::to_string(link.from) + " and " + std::to_string(link.to) + ")";
    if (const std::string why = transport->settle({comms[0], comms[1]}, status, timeout);
        !why.empty()) {
      transport->fail_setup(what, why, {comms[0], comms[1]});
    }
    transport->add_side(link.from, link, comms[0]);
    transport->add_side(link.to, link, comms[1]);
  }
  transport->connect();
  return transport;
}

std::unique_ptr<NcclTransport> NcclTransport::multi_process(int rank, int world,
                                                            const ncclUniqueId& id,
                                                            StageEndpoint local,
                                                            const std::vector<TransportLink>& links,
                                                            StepEvents* events,
                                                            std::chrono::milliseconds timeout) {
  if (rank < 0 || rank >= world) {
    throw Error("NCCL transport: rank " + std::to_string(rank) + " outside a world of " +
                std::to_string(world));
  }
  std::vector<StageEndpoint> endpoints(static_cast<std::size_t>(world));
  for (StageEndpoint& other : endpoints)
    other.cuda_device = -1;  // driven by another process
  endpoints[static_cast<std::size_t>(rank)] = local;
  std::unique_ptr<NcclTransport> transport(
      new NcclTransport(std::move(endpoints), events, timeout));
  CUDA_CHECK(cudaSetDevice(local.cuda_device));
  const std::string who = "rank " + std::to_string(rank) + " of " + std::to_string(world);
  {
    const ScopedContext current(context_of(local));  // a rank sharing its GPU: its green context
    ncclConfig_t config = nonblocking_config();
    ncclComm_t world_comm = nullptr;
    const ncclResult_t status = ncclCommInitRankConfig(&world_comm, world, id, rank, &config);
    transport->world_.push_back(world_comm);  // aborted with the rest on a failure
    if (const std::string why = transport->settle({world_comm}, status, timeout); !why.empty()) {
      transport->fail_setup(
          who + " joining the world communicator",
          why + (why.find("timed out") != std::string::npos
                     ? " (a rank did not join: it failed, hung or has another unique id)"
                     : ""));
    }
    // ncclCommSplit is collective over the world: every rank splits once per link, in the same
    // (sorted) order, members with the link's color, the rest with NCCL_SPLIT_NOCOLOR; each split
    // settles before the next call on the world communicator.
    for (std::size_t l = 0; l < links.size(); ++l) {
      const TransportLink& link = links[l];
      const bool member = rank == link.from || rank == link.to;
      ncclComm_t comm = nullptr;
      const ncclResult_t split =
          ncclCommSplit(world_comm, member ? static_cast<int>(l) : NCCL_SPLIT_NOCOLOR,
                        rank == link.from ? 0 : 1, &comm, &config);
      if (const std::string why = transport->settle({world_comm, comm}, split, timeout);
          !why.empty()) {
        transport->fail_setup(who + " splitting the " +
                                  link_name(link.from, link.to, link.channel) +
                                  " off the world communicator",
                              why + (why.find("timed out") != std::string::npos
                                         ? " (a rank did not split: it failed or hung)"
                                         : ""),
                              {comm});
      }
      if (member) transport->add_side(rank, link, comm);
    }
  }
  transport->connect();
  return transport;
}

std::string NcclTransport::settle(std::initializer_list<ncclComm_t> comms, ncclResult_t status,
                                  std::chrono::milliseconds timeout) {
  if (status == ncclSuccess) return "";
  if (status != ncclInProgress) {
    return std::string("NCCL error '") + ncclGetErrorString(status) +
           "': " + ncclGetLastError(nullptr);
  }
  const auto start = Clock::now();
  const auto deadline = start + timeout;
  for (;;) {
    bool busy = false;
    for (ncclComm_t comm : comms) {
      if (comm == nullptr) continue;
      ncclResult_t state = ncclSuccess;
      const ncclResult_t asked = ncclCommGetAsyncError(comm, &state);
      if (asked != ncclSuccess) state = asked;
      if (state == ncclInProgress) {
        busy = true;
      } else if (state != ncclSuccess) {
        return std::string("NCCL error '") + ncclGetErrorString(state) +
               "': " + ncclGetLastError(comm);
      }
    }
    if (!busy) return "";
    if (cancelled_) return "cancelled (another worker failed)";
    const auto now = Clock::now();
    if (now > deadline) return "timed out after " + ms_text(timeout);
    if (now - start < std::chrono::milliseconds(1)) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

void NcclTransport::fail_setup(const std::string& what, const std::string& why,
                               std::initializer_list<ncclComm_t> also) {
  const std::string message = "NCCL transport: " + what + ": " + why;
  for (ncclComm_t comm : also) {
    if (comm != nullptr) ncclCommAbort(comm);  // result ignored: already failing
  }
  abort_all(message);
  throw Error(message);
}

int NcclTransport::endpoint_gpu(int device) const {
  if (device < 0 || device >= static_cast<int>(endpoints_.size()) ||
      endpoints_[static_cast<std::size_t>(device)].cuda_device < 0) {
    throw Error("NCCL transport: plan device " + std::to_string(device) +
                " is not driven by this process");
  }
  return endpoints_[static_cast<std::size_t>(device)].cuda_device;
}

void NcclTransport::add_side(int device, const TransportLink& link, ncclComm_t comm) {
  auto side = std::make_unique<Side>();
  side->device = device;
  side->link = link;
  side->comm = comm;
  side->peer_rank = device == link.from ? 1 : 0;
  const StageEndpoint& endpoint = endpoints_[static_cast<std::size_t>(device)];
  // The endpoint's GPU made current unless it is already: a rank sharing its GPU has its green
  // context pushed, which a cudaSetDevice would replace with the primary context for the splits
  // that follow.
  int current = -1;
  CUDA_CHECK(cudaGetDevice(&current));
  if (current != endpoint.cuda_device) CUDA_CHECK(cudaSetDevice(endpoint.cuda_device));
  if (endpoint.green != nullptr) {
    side->stream = endpoint.green->create_stream();
  } else {
    CUDA_CHECK(cudaStreamCreateWithFlags(&side->stream, cudaStreamNonBlocking));
    side->owns_stream = true;
  }
  CUDA_CHECK(cudaMalloc(&side->header_device, static_cast<std::size_t>(kHeaderBytes)));
  CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&side->header_host),
                            static_cast<std::size_t>(kHeaderBytes)));
  // Recorded on this device's compute stream or on the side's stream: one (green) context.
  for (cudaEvent_t* event : {&side->ready, &side->receiver_tail, &side->header_done, &side->done}) {
    *event = create_event_for(side->stream, cudaEventDisableTiming);
  }
  // Completion events of sends in flight, made here (set-up, one thread) rather than on the send
  // thread, which would have to push the stage's green context while its compute thread has it.
  constexpr int kSpareEvents = 16;
  for (int i = 0; i < kSpareEvents; ++i)
    side->spare_events.push_back(create_event_for(side->stream, cudaEventDisableTiming));
  sides_[LinkSide{device, link.from, link.to, link.channel}] = std::move(side);
}

void NcclTransport::connect() {
  // Both sides of every link this process holds in one group: NCCL sets up the connections
  // without one side blocking on the other (grouped where both must progress).
  NCCL_CHECK(ncclGroupStart());
  for (auto& [key, side] : sides_) {
    CUDA_CHECK(cudaSetDevice(endpoint_gpu(side->device)));
    const ScopedContext current(context_of(endpoints_[static_cast<std::size_t>(side->device)]));
    if (side->device == side->link.from) {
      NCCL_CHECK(
          ncclSend(side->header_device, 1, ncclUint8, side->peer_rank, side->comm, side->stream));
    } else {
      NCCL_CHECK(
          ncclRecv(side->header_device, 1, ncclUint8, side->peer_rank, side->comm, side->stream));
    }
  }
  const ncclResult_t ended = ncclGroupEnd();
  // Each side's connection needs its peer's side: a peer that never connects is a timeout
  // naming the first link still waiting.
  for (auto& [key, side] : sides_) {
    if (const std::string why = settle({side->comm}, ended, send_timeout_); !why.empty()) {
      fail(*side, "connection setup", why);
    }
  }
  for (auto& [key, side] : sides_) {
    {
      const ScopedContext current(context_of(endpoints_[static_cast<std::size_t>(side->device)]));
      CUDA_CHECK(cudaEventRecord(side->done, side->stream));
    }
    wait(*side, side->done, send_timeout_, "connection setup");
  }
}

std::string NcclTransport::name() const {
  return "nccl (" + loaded_nccl_text() + ")";
}

NcclTransport::~NcclTransport() {
  // No throwing from a destructor. A transport not closed is closed here within the send timeout;
  // one that could not be has aborted every communicator, whose kernels then end, so the streams
  // below are idle or soon are.
  if (!closed_ && !aborted_) {
    try {
      close(send_timeout_);
    } catch (const std::exception&) {  // NOLINT(bugprone-empty-catch): aborted inside close()
    }
  }
  for (auto& [key, side] : sides_) {
    if (side->stream != nullptr) cudaStreamSynchronize(side->stream);
    if (side->owns_stream) cudaStreamDestroy(side->stream);
    if (side->header_device != nullptr) cudaFree(side->header_device);
    if (side->header_host != nullptr) cudaFreeHost(side->header_host);
    for (cudaEvent_t event : {side->ready, side->receiver_tail, side->header_done, side->done}) {
      if (event != nullptr) cudaEventDestroy(event);
    }
    for (const Side::Pending& pending : side->in_flight)
      cudaEventDestroy(pending.done);
    for (cudaEvent_t event : side->spare_events)
      cudaEventDestroy(event);
    for (char* header : side->headers)
      cudaFreeHost(header);
  }
}

void NcclTransport::close(std::chrono::milliseconds timeout) {
  if (closed_) return;
  if (aborted_) {
    const std::lock_guard lock(abort_mutex_);
    throw Error("NCCL transport aborted (" + abort_reason_ + "); nothing to close");
  }
  // Every send received, then each link's stream idle: nothing of this process is left in NCCL.
  for (auto& [key, side] : sides_)
    reap(*side, true, timeout);
  for (auto& [key, side] : sides_) {
    {
      const std::lock_guard lock(device_mutex(side->device));
      CUDA_CHECK(cudaSetDevice(endpoint_gpu(side->device)));
      const ScopedContext current(context_of(endpoints_[static_cast<std::size_t>(side->device)]));
      CUDA_CHECK(cudaEventRecord(side->done, side->stream));
    }
    wait(*side, side->done, timeout, "closing");
  }
  // Finalize every communicator first, then poll them all: NCCL finishes their work and their
  // teardown asynchronously, once every rank of a communicator has finalized it (globally
  // quiescent: both ranks of a link in this process, or this rank and another process's), after
  // which ncclCommDestroy does not block.
  const auto finalize = [&](int device, ncclComm_t comm) {
    const std::lock_guard lock(device_mutex(device));
    CUDA_CHECK(cudaSetDevice(endpoint_gpu(device)));
    const ScopedContext current(context_of(endpoints_[static_cast<std::size_t>(device)]));
    return ncclCommFinalize(comm);
  };
  const int local = [&] {
    for (std::size_t d = 0; d < endpoints_.size(); ++d) {
      if (endpoints_[d].cuda_device >= 0) return static_cast<int>(d);
    }
    return -1;
  }();
  std::vector<ncclResult_t> finalized;
  for (auto& [key, side] : sides_)
    finalized.push_back(finalize(side->device, side->comm));
  for (ncclComm_t comm : world_)
    finalized.push_back(comm != nullptr ? finalize(local, comm) : ncclSuccess);
  std::size_t next = 0;
  for (auto& [key, side] : sides_) {
    if (const std::string why = settle({side->comm}, finalized[next++], timeout); !why.empty()) {
      fail(*side, "closing (ncclCommFinalize)", why);
    }
  }
  for (ncclComm_t comm : world_) {
    if (const std::string why = settle({comm}, finalized[next++], timeout); !why.empty()) {
      const std::string message = "NCCL transport: closing the world communicator: " + why;
      abort_all(message);
      throw Error(message);
    }
  }
  for (auto& [key, side] : sides_) {
    ncclCommDestroy(side->comm);  // finalized: returns at once
    side->comm = nullptr;
  }
  for (ncclComm_t& comm : world_) {
    if (comm != nullptr) ncclCommDestroy(comm);
    comm = nullptr;
  }
  closed_ = true;
}

std::mutex& NcclTransport::device_mutex(int device) {
  return *device_mutexes_.at(endpoint_gpu(device));
}

NcclTransport::Side& NcclTransport::side(int device, int from, int to, Channel channel,
                                         std::string_view tag) {
  if (aborted_) {
    const std::lock_guard lock(abort_mutex_);
    throw Error("NCCL transport aborted (" + abort_reason_ + "); '" + std::string(tag) +
                "' cannot be transferred");
  }
  if (closed_) {
    throw Error("NCCL transport closed after the last step; '" + std::string(tag) +
                "' cannot be transferred");
  }
  const auto it = sides_.find(LinkSide{device, from, to, channel});
  if (it == sides_.end()) {
    throw Error("NCCL transport has no " + link_name(from, to, channel) + " on device " +
                std::to_string(device) + " (the plan's links are made at start)");
  }
  return *it->second;
}

void NcclTransport::abort_all(const std::string& reason) {
  const std::lock_guard abort_lock(abort_mutex_);
  if (aborted_) return;
  abort_reason_ = reason;
  // Every NCCL call holds its GPU's mutex: take them all so nothing is inside NCCL now.
  std::vector<std::unique_lock<std::mutex>> locks;
  for (auto& [gpu, mutex] : device_mutexes_)
    locks.emplace_back(*mutex);
  for (auto& [key, side] : sides_) {
    if (side->comm != nullptr) ncclCommAbort(side->comm);  // result ignored: already failing
    side->comm = nullptr;
  }
  for (ncclComm_t& comm : world_) {
    if (comm != nullptr) ncclCommAbort(comm);
    comm = nullptr;
  }
  aborted_ = true;
}

void NcclTransport::fail(Side& side, const std::string& what, const std::string& why) {
  const std::string message = "NCCL transport: " + what + " on the " +
                              link_name(side.link.from, side.link.to, side.link.channel) +
                              " (device " + std::to_string(side.device) + "): " + why;
  abort_all(message);
  throw Error(message);
}

void NcclTransport::wait(Side& side, cudaEvent_t done, std::chrono::milliseconds timeout,
                         const std::string& what) {
  const auto start = Clock::now();
  const auto deadline = start + timeout;
  for (int polls = 0;; ++polls) {
    const cudaError_t status = cudaEventQuery(done);
    if (status == cudaSuccess) return;
    if (status != cudaErrorNotReady) {
      fail(side, what, std::string("CUDA error '") + cudaGetErrorString(status) + "'");
    }
    if (cancelled_) fail(side, what, "cancelled (another worker failed)");
    if (aborted_) fail(side, what, "the transport was aborted");
    if (polls % 64 == 0) {
      ncclResult_t async = ncclSuccess;
      {
        const std::lock_guard lock(device_mutex(side.device));
        if (side.comm != nullptr) NCCL_CHECK(ncclCommGetAsyncError(side.comm, &async));
      }
      if (async != ncclSuccess && async != ncclInProgress) {
        fail(side, what,
             std::string("NCCL error '") + ncclGetErrorString(async) +
                 "': " + ncclGetLastError(side.comm));
      }
    }
    const auto now = Clock::now();
    if (now > deadline) {
      fail(side, what, "timed out after " + std::to_string(timeout.count()) + " ms");
    }
    // Spin for the first millisecond (transfer latency is µs), then poll gently.
    if (now - start < std::chrono::milliseconds(1)) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

void NcclTransport::send(int from, int to, Channel channel, Message message) {
  Side& s = side(from, from, to, channel, message.tag);
  const StageEndpoint& sender = endpoints_[static_cast<std::size_t>(from)];
  const std::vector<char> header = encode_header(message);
  for (const auto& [name, tensor] : message.tensors) {
    if (!tensor.defined() || tensor.device() != Device::cuda || tensor.bytes() <= 0) {
      throw Error("NCCL transport: tensor '" + name + "' of message '" + message.tag +
                  "' is not a non-empty CUDA tensor");
    }
  }
  reap_finished(from);
  std::string problem;
  [&] {
    const std::lock_guard pending_lock(s.pending_mutex);
    const std::lock_guard lock(device_mutex(from));
    CUDA_CHECK(cudaSetDevice(sender.cuda_device));
    const ScopedContext current(context_of(sender));
    cudaEvent_t ready =
        events_ != nullptr ? events_->payload_ready(from, from, to, channel) : nullptr;
    if (ready == nullptr) {
      CUDA_CHECK(cudaEventRecord(s.ready, sender.compute));
      ready = s.ready;
    }
    CUDA_CHECK(cudaStreamWaitEvent(s.stream, ready, 0));
    // From a pinned buffer of this send's own (returned to the side once the send has ended):
    // the copy never waits on the host. The device buffer is reused in stream order after the
    // last ncclSend read it.
    char* staging = nullptr;
    if (s.spare_headers.empty()) {
      CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&staging),
                                static_cast<std::size_t>(kHeaderBytes)));
      s.headers.push_back(staging);
    } else {
      staging = s.spare_headers.back();
      s.spare_headers.pop_back();
    }
    std::memcpy(staging, header.data(), header.size());
    CUDA_CHECK(
        cudaMemcpyAsync(s.header_device, staging, header.size(), cudaMemcpyHostToDevice, s.stream));
    const auto [begin, end] = events_ != nullptr ? events_->transfer_marks(from, from, to, channel)
                                                 : std::pair<cudaEvent_t, cudaEvent_t>{};
    if (begin != nullptr) CUDA_CHECK(cudaEventRecord(begin, s.stream));
    NCCL_CHECK(ncclGroupStart());
    NCCL_CHECK(ncclSend(s.header_device, header.size(), ncclUint8, s.peer_rank, s.comm, s.stream));
    for (const auto& entry : message.tensors) {
      NCCL_CHECK(ncclSend(entry.second.data(), static_cast<std::size_t>(entry.second.bytes()),
                          ncclUint8, s.peer_rank, s.comm, s.stream));
    }
    problem = settle({s.comm}, ncclGroupEnd(), send_timeout_);
    if (!problem.empty()) return;  // fails below, without this GPU's lock
    if (end != nullptr) CUDA_CHECK(cudaEventRecord(end, s.stream));
    Side::Pending pending;
    if (s.spare_events.empty()) {
      pending.done = create_event_for(s.stream, cudaEventDisableTiming);
    } else {
      pending.done = s.spare_events.back();
      s.spare_events.pop_back();
    }
    CUDA_CHECK(cudaEventRecord(pending.done, s.stream));
    pending.message = std::move(message);
    pending.header = staging;
    s.in_flight.push_back(std::move(pending));
  }();
  if (!problem.empty()) fail(s, "send '" + message.tag + "'", problem);
}

void NcclTransport::flush(int from, int to, Channel channel, std::chrono::milliseconds timeout) {
  reap(side(from, from, to, channel, "flush"), true, timeout);
}

void NcclTransport::reap(Side& side, bool wait_all, std::chrono::milliseconds timeout) {
  const std::lock_guard lock(side.pending_mutex);
  reap_locked(side, wait_all, timeout);
}

void NcclTransport::reap_finished(int device) {
  for (auto& [key, side] : sides_) {
    if (side->device != device || side->link.from != device) continue;
    const std::unique_lock lock(side->pending_mutex, std::try_to_lock);
    if (lock.owns_lock()) reap_locked(*side, false, {});  // else its own thread is at it
  }
}

void NcclTransport::reap_locked(Side& side, bool wait_all, std::chrono::milliseconds timeout) {
  while (!side.in_flight.empty()) {
    Side::Pending& oldest = side.in_flight.front();
    if (wait_all) {
      wait(side, oldest.done, timeout, "send '" + oldest.message.tag + "'");
    } else {
      const cudaError_t status = cudaEventQuery(oldest.done);
      if (status == cudaErrorNotReady) return;
      if (status != cudaSuccess) {
        fail(side, "send '" + oldest.message.tag + "'",
             std::string("CUDA error '") + cudaGetErrorString(status) + "'");
      }
    }
    side.spare_events.push_back(oldest.done);
    side.spare_headers.push_back(oldest.header);
    side.in_flight.pop_front();  // NCCL has read the tensors: they may go back to the cache
  }
}

Message NcclTransport::recv(int to, int from, Channel channel, std::string_view expected_tag,
                            std::chrono::milliseconds timeout) {
  Side& s = side(to, from, to, channel, expected_tag);
  const StageEndpoint& receiver = endpoints_[static_cast<std::size_t>(to)];
  const std::string what = "recv '" + std::string(expected_tag) + "'";
  std::pair<cudaEvent_t, cudaEvent_t> marks{};
  std::string problem;
  [&] {
    const std::lock_guard lock(device_mutex(to));
    CUDA_CHECK(cudaSetDevice(receiver.cuda_device));
    const ScopedContext current(context_of(receiver));
    if (events_ != nullptr) marks = events_->transfer_marks(to, from, to, channel);
    if (marks.first != nullptr) CUDA_CHECK(cudaEventRecord(marks.first, s.stream));
    problem = settle({s.comm},
                     ncclRecv(s.header_device, static_cast<std::size_t>(kHeaderBytes), ncclUint8,
                              s.peer_rank, s.comm, s.stream),
                     timeout);
    if (!problem.empty()) return;  // fails below, without this GPU's lock
    CUDA_CHECK(cudaMemcpyAsync(s.header_host, s.header_device,
                               static_cast<std::size_t>(kHeaderBytes), cudaMemcpyDeviceToHost,
                               s.stream));
    CUDA_CHECK(cudaEventRecord(s.header_done, s.stream));
  }();
  if (!problem.empty()) fail(s, what + " (header)", problem);
  wait(s, s.header_done, timeout, what + " (header)");
  Message message = decode_header(s.header_host, what);
  // The buffers before this GPU's NCCL lock: an allocation that has to release the cache first
  // (cudaFree waits for the whole device) must not hold the lock that the receives other stages'
  // spinning NCCL kernels wait for need.
  CUDA_CHECK(cudaSetDevice(receiver.cuda_device));
  std::int64_t freed_at = DeviceAllocator::kNeverUsed;  // the latest free among the blocks
  for (auto& entry : message.tensors) {
    Tensor& tensor = entry.second;
    DeviceAllocator::FencedBlock block = receiver.allocator->allocate_fenced(tensor.bytes());
    freed_at = std::max(freed_at, block.freed_at);
    tensor = Tensor(std::move(block.data), tensor.shape(), tensor.dtype(), Device::cuda);
  }
  [&] {
    const std::lock_guard lock(device_mutex(to));
    CUDA_CHECK(cudaSetDevice(receiver.cuda_device));
    const ScopedContext current(context_of(receiver));
    // Buffers from the receiver's cache may be read by kernels still queued on its stream (freed
    // by another of its threads after queueing them): the receive waits for the first event the
    // receiver recorded after the latest of those frees (its fence), as the device-local copy
    // does, not for everything queued there, which can be many ops ahead of the GPU (and the
    // sender's kernel would spin on its SMs meanwhile). Without a recorded fence it waits for
    // what is queued there once the buffers are taken, so that record comes after the
    // allocations. Fresh buffers need no wait.
    if (freed_at != DeviceAllocator::kNeverUsed) {
      cudaEvent_t last_use = events_ != nullptr ? events_->fence_after(to, freed_at) : nullptr;
      if (last_use == nullptr) {
        CUDA_CHECK(cudaEventRecord(s.receiver_tail, receiver.compute));
        last_use = s.receiver_tail;
      }
      CUDA_CHECK(cudaStreamWaitEvent(s.stream, last_use, 0));
    }
    NCCL_CHECK(ncclGroupStart());
    for (const auto& entry : message.tensors) {
      NCCL_CHECK(ncclRecv(entry.second.data(), static_cast<std::size_t>(entry.second.bytes()),
                          ncclUint8, s.peer_rank, s.comm, s.stream));
    }
    problem = settle({s.comm}, ncclGroupEnd(), timeout);
    if (!problem.empty()) return;  // fails below, without this GPU's lock
    if (marks.second != nullptr) CUDA_CHECK(cudaEventRecord(marks.second, s.stream));
    CUDA_CHECK(cudaEventRecord(s.done, s.stream));
  }();
  if (!problem.empty()) fail(s, what, problem);
  wait(s, s.done, timeout, what);
  // The device's finished sends go back now rather than at its links' next sends: a link that
  // sends rarely (a BPipe partner's stash) would hold the last one until then.
  reap_finished(to);
  return message;
}

void NcclTransport::cancel() {
  cancelled_ = true;
  abort_all("cancelled: another worker failed");
}

void NcclTransport::reset() {
  if (aborted_) {
    const std::lock_guard lock(abort_mutex_);
    throw Error("NCCL transport aborted (" + abort_reason_ + "); make a new one");
  }
  cancelled_ = false;
  // Between steps no thread sends: every send of the last step must have been received.
  for (auto& [key, side] : sides_)
    reap(*side, true, send_timeout_);
}

}  // namespace pipeplan::cuda
