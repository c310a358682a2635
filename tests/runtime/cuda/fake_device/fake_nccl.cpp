// NCCL's point-to-point calls of runtime/cuda/nccl_transport.cpp, on the CPU (fake_device.h):
// communicators in one process, whose sends and receives are deferred work on their streams.
//
// The ranks of one communicator form a clique: those of one unique id (ncclCommInitRank,
// ncclCommInitRankConfig), of one ncclCommInitAll, or of one colour of one ncclCommSplit. Every
// rank is on the stand-in's one GPU, so a clique of two or more ranks needs what NCCL needs for
// several ranks on one GPU. Between two ranks of a clique, messages go in the order they were
// sent: the k-th ncclRecv from a peer takes the k-th ncclSend to it, which must carry the same
// number of bytes. A send is blocking for the GPU (nccl.h): it runs only once its receive is
// posted, so work behind it on its stream waits for the receiver.
//
// A blocking communicator (the default) is ready when its call returns. A nonblocking one
// (ncclConfig_t::blocking = 0) is in progress (ncclCommGetAsyncError: ncclInProgress) until
// every rank of its unique id has joined, or until every rank of the parent has made the split
// that made it (the parent too), and, after its first call to a peer, until that peer has called
// it back (NCCL connects the two on their first point-to-point calls); the call that leaves it in
// progress returns ncclInProgress (in a group: ncclGroupEnd). Calling NCCL on it again before it
// settles breaks a rule (NCCL: query the state until ncclSuccess before the next call).
//
// ncclCommFinalize takes no new calls on the communicator from then on; a nonblocking one is in
// progress until every call queued on it has run and every rank of its clique has finalized
// (NCCL: the state becomes ncclSuccess once the communicator is globally quiescent).
// ncclCommDestroy of a communicator neither aborted nor finalized, with calls queued on it that
// have not run, breaks a rule: NCCL's destroy would wait for them, without bound (finalize and poll
// first, or abort).
#include <nccl.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "tests/runtime/cuda/fake_device/fake_state.h"

namespace pipeplan::fake_cuda {

namespace {

constexpr int kDefaultVersion = NCCL_VERSION(2, 31, 2);
constexpr int kMultiRankVersion = NCCL_VERSION(2, 30, 0);
std::atomic<int> version_code = 0;  // 0: kDefaultVersion

int version() {
  const int code = version_code.load();
  return code != 0 ? code : kDefaultVersion;
}

std::string dotted(int code) {  // NCCL 2.9 and later: major·10000 + minor·100 + patch
  return std::to_string(code / 10000) + "." + std::to_string(code / 100 % 100) + "." +
         std::to_string(code % 100);
}

// One send on a channel: where it is queued (its stream, and its number there once queue()
// returned; 0 until then) and, once it has run, the bytes it read.
struct Sent {
  cudaStream_t stream = nullptr;
  std::int64_t number = 0;
  bool ran = false;
  std::vector<unsigned char> bytes;
};

// The messages from one rank of a clique to another, by the order they were sent in.
struct Channel {
  std::int64_t sends = 0;               // issued so far
  std::int64_t receives = 0;            // issued so far
  std::map<std::int64_t, Sent> queued;  // sends not yet received
};

struct Clique {
  int nranks = 0;                                   // 0 for a split's until every rank split
  int colour = 0;                                   // a split's
  std::set<int> ranks;                              // those that joined
  std::map<std::pair<int, int>, Channel> channels;  // by (from, to)
  std::set<std::pair<int, int>> called;             // (rank, peer): rank has called peer
  int finalized = 0;                                // ranks that called ncclCommFinalize
};

// One split of a parent clique: how many of its ranks made it so far, and the colours' cliques.
struct SplitRound {
  int expected = 0;  // the parent's ranks
  int arrived = 0;
  std::vector<std::shared_ptr<Clique>> children;
};

// One rank's side of a communicator. Deferred work holds it, so it outlives ncclCommDestroy.
struct Member {
  std::shared_ptr<Clique> clique;
  int rank = 0;
  int splits = 0;  // ncclCommSplit calls made on it so far
  std::atomic<bool> aborted = false;
  // The asynchronous error and its text (under the lock); whether it was counted as a rule.
  ncclResult_t error = ncclSuccess;
  std::string error_text;
  bool error_counted = false;
  // Nonblocking (ncclConfig_t::blocking = 0), and what keeps it in progress (under the lock): a
  // split of it not every rank has made yet; peers it called that have not called it back.
  bool blocking = true;
  std::shared_ptr<SplitRound> split;
  std::set<int> connecting;
  // Sends and receives issued on it, those that have run (under the lock), and ncclCommFinalize.
  std::int64_t issued = 0;
  std::int64_t completed = 0;
  bool finalized = false;
};

struct State {
  std::mutex mutex;  // never held while a stream's lock is taken
  std::int64_t ids = 0;
  std::map<std::string, std::shared_ptr<Clique>> by_id;
  std::map<std::pair<const Clique*, int>, std::shared_ptr<SplitRound>> splits;
  std::set<ncclComm_t> aborted;  // kept until destroyed (callers may drop an aborted one)
  NcclCounts counts;
};

State& state() {
  static State* s = new State();  // never destroyed, like the runtime's
  return *s;
}

// A send or a receive, as called.
struct Call {
  bool send = false;
  void* buffer = nullptr;
  std::size_t bytes = 0;
  int peer = 0;
  std::shared_ptr<Member> member;
  cudaStream_t stream = nullptr;
};
// This thread's last error (ncclGetLastError) and its group: depth, the calls it holds and the
// communicators made in it.
thread_local std::string last_error;
thread_local int group_depth = 0;
thread_local std::vector<Call> grouped;
thread_local std::vector<std::shared_ptr<Member>> grouped_members;

ncclResult_t refuse(ncclResult_t code, const std::string& text) {
  last_error = text;
  return code;
}

// A rule of the stand-in (fake_device.h): counted, and named by ncclGetErrorString too.
ncclResult_t refuse_rule(ncclResult_t code, const std::string& text) {
  last_error = break_rule(text, code);
  return code;
}

// By ncclDataType_t: int8 (char), uint8, int32, uint32, int64, uint64, float16, float32, float64,
// bfloat16; 0: not modelled (the 8-bit floats, which not every NCCL has).
std::size_t size_of(ncclDataType_t type) {
  constexpr std::size_t kSizes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};
  const auto index = static_cast<std::size_t>(type);
  return index < std::size(kSizes) ? kSizes[index] : 0;
}

// NCCL refuses a GPU taken by two ranks of one communicator, except, from 2.30, with
// NCCL_MULTI_RANK_GPU_ENABLE=1.
ncclResult_t check_ranks_on_one_gpu(int ranks, const char* call) {
  if (ranks < 2) return ncclSuccess;
  const char* enable = std::getenv("NCCL_MULTI_RANK_GPU_ENABLE");
  const bool enabled = enable != nullptr && std::string(enable) == "1";
  if (enabled && version() >= kMultiRankVersion) return ncclSuccess;
  return refuse_rule(
      ncclInvalidUsage,
      std::string(call) + ": " + std::to_string(ranks) +
          " ranks on GPU 0 (the only one); several ranks on one GPU need NCCL 2.30+ and "
          "NCCL_MULTI_RANK_GPU_ENABLE=1 (NCCL " +
          dotted(version()) + " here, NCCL_MULTI_RANK_GPU_ENABLE " +
          (enable != nullptr ? "is '" + std::string(enable) + "'" : std::string("unset")) + ")");
}

}  // namespace
}  // namespace pipeplan::fake_cuda

struct ncclComm {
  std::shared_ptr<pipeplan::fake_cuda::Member> member;
};

namespace pipeplan::fake_cuda {

void set_nccl_version(int code) {
  version_code.store(code);
}

namespace {

ncclComm_t join(std::shared_ptr<Clique> clique, int rank, bool blocking = true) {
  auto member = std::make_shared<Member>();
  member->clique = std::move(clique);
  member->rank = rank;
  member->blocking = blocking;
  return new ncclComm{std::move(member)};
}

// Whether a nonblocking member is still in progress (under the state's lock): not every rank has
// joined its clique, a split of it waits for the parent's other ranks, or a peer it called has
// not called it back. Settled peers are forgotten.
bool in_progress(Member& me) {
  if (me.blocking) return false;
  if (me.finalized) return me.completed < me.issued || me.clique->finalized < me.clique->nranks;
  const Clique& clique = *me.clique;
  if (clique.nranks == 0 || static_cast<int>(clique.ranks.size()) < clique.nranks) return true;
  if (me.split != nullptr) {
    if (me.split->arrived < me.split->expected) return true;
    me.split = nullptr;
  }
  std::erase_if(me.connecting, [&](int peer) { return clique.called.contains({peer, me.rank}); });
  return !me.connecting.empty();
}

bool in_progress_now(Member& me) {
  const std::lock_guard lock(state().mutex);
  return in_progress(me);
}

ncclResult_t check_usable(ncclComm_t comm, const char* call) {
  if (comm == nullptr)
    return refuse(ncclInvalidArgument, std::string(call) + ": null communicator");
  if (comm->member->aborted.load()) {
    return refuse(ncclInvalidUsage, std::string(call) + ": the communicator was aborted");
  }
  return ncclSuccess;
}

// A call on a nonblocking communicator that has not settled breaks NCCL's rule.
ncclResult_t check_settled(ncclComm_t comm, const char* call) {
  if (!in_progress_now(*comm->member)) return ncclSuccess;
  return refuse_rule(ncclInvalidUsage,
                     std::string(call) +
                         " on a nonblocking communicator still in progress (NCCL: "
                         "poll ncclCommGetAsyncError until it leaves "
                         "ncclInProgress before the next call)");
}

// The config NCCL_CONFIG_INITIALIZER made: whether the communicator blocks (NCCL's default).
ncclResult_t read_config(const ncclConfig_t* config, const char* call, bool& blocking) {
  blocking = true;
  if (config == nullptr) return ncclSuccess;
  if (config->magic != 0xcafebeef ||
      config->size < offsetof(ncclConfig_t, blocking) + sizeof(int)) {
    return refuse(ncclInvalidArgument,
                  std::string(call) + ": the config was not set from NCCL_CONFIG_INITIALIZER");
  }
  if (config->blocking != NCCL_CONFIG_UNDEF_INT && config->blocking != 0 && config->blocking != 1) {
    return refuse(ncclInvalidArgument, std::string(call) + ": config.blocking is " +
                                           std::to_string(config->blocking) + " (0 or 1)");
  }
  blocking = config->blocking != 0;
  return ncclSuccess;
}

// A send, when it runs: not ready until its receive is posted (a send is blocking for the GPU);
// then reads its bytes into the channel (an aborted communicator's: none).
bool run_send(const Call& call, std::int64_t k) {
  const bool aborted = call.member->aborted.load();
  if (!aborted) {
    const std::lock_guard lock(state().mutex);
    if (call.member->clique->channels[{call.member->rank, call.peer}].receives <= k) return false;
  }
  std::vector<unsigned char> bytes;
  if (!aborted && call.bytes > 0) {
    const auto* from = static_cast<const unsigned char*>(call.buffer);
    bytes.assign(from, from + call.bytes);
  }
  const std::lock_guard lock(state().mutex);
  Channel& channel = call.member->clique->channels[{call.member->rank, call.peer}];
  if (aborted) {
    channel.queued.erase(k);
  } else {
    Sent& sent = channel.queued[k];
    sent.ran = true;
    sent.bytes = std::move(bytes);
  }
  ++call.member->completed;
  return true;
}

// A receive, when it runs: takes the k-th message from the peer, first running the peer's stream
// up to the send that carries it when that send is queued and has not run. Not ready while that
// send is not queued (or cannot run yet), or while its byte count differs (an asynchronous error:
// on a GPU the kernel would wait for bytes that never come). Once aborted, done at once.
bool run_receive(const Call& call, std::int64_t k) {
  Member& me = *call.member;
  std::unique_lock lock(state().mutex);
  if (me.aborted.load()) {
    ++me.completed;
    return true;
  }
  Channel& channel = me.clique->channels[{call.peer, me.rank}];  // stays where it is in the map
  auto it = channel.queued.find(k);
  if (it == channel.queued.end()) return false;
  if (!it->second.ran) {
    const cudaStream_t stream = it->second.stream;
    const std::int64_t number = it->second.number;
    lock.unlock();
    if (number == 0 || !run_deferred_from_work(stream, number)) return false;
    lock.lock();
    it = channel.queued.find(k);
    if (it == channel.queued.end() || !it->second.ran) return false;
  }
  if (it->second.bytes.size() != call.bytes) {
    if (me.error == ncclSuccess) {
      me.error = ncclInvalidUsage;
      me.error_text = "ncclRecv of " + std::to_string(call.bytes) + " bytes from rank " +
                      std::to_string(call.peer) + " met an ncclSend of " +
                      std::to_string(it->second.bytes.size()) +
                      " bytes (the byte counts of a send and its receive must match)";
    }
    return false;
  }
  const std::vector<unsigned char> bytes = std::move(it->second.bytes);
  channel.queued.erase(it);
  ++me.completed;
  lock.unlock();
  if (!bytes.empty()) std::memcpy(call.buffer, bytes.data(), bytes.size());
  return true;
}

// The first call of a rank to a peer opens their connection, made once the peer calls back.
void open_connection(Member& me, int peer) {
  me.clique->called.insert({me.rank, peer});
  if (!me.blocking && !me.clique->called.contains({peer, me.rank})) me.connecting.insert(peer);
}

// Queues a call on its stream, numbered in its channel's order.
void issue(const Call& call) {
  Member& me = *call.member;
  if (!call.send) {
    std::int64_t k = 0;
    {
      const std::lock_guard lock(state().mutex);
      open_connection(me, call.peer);
      ++me.issued;
      k = me.clique->channels[{call.peer, me.rank}].receives++;
    }
    queue(call.stream, [call, k] { return run_receive(call, k); });
    return;
  }
  std::int64_t k = 0;
  {
    const std::lock_guard lock(state().mutex);
    open_connection(me, call.peer);
    ++me.issued;
    Channel& channel = me.clique->channels[{me.rank, call.peer}];
    k = channel.sends++;
    channel.queued[k].stream = call.stream;
  }
  // Numbered once queued: a receive that finds no number yet is not ready, and tries again.
  const std::int64_t number = queue(call.stream, [call, k] { return run_send(call, k); });
  const std::lock_guard lock(state().mutex);
  Channel& channel = me.clique->channels[{me.rank, call.peer}];
  if (const auto it = channel.queued.find(k); it != channel.queued.end()) {
    it->second.number = number;
  }
}

ncclResult_t point_to_point(bool send, const void* buffer, std::size_t count, ncclDataType_t type,
                            int peer, ncclComm_t comm, cudaStream_t stream) {
  const char* name = send ? "ncclSend" : "ncclRecv";
  if (const ncclResult_t status = check_usable(comm, name); status != ncclSuccess) return status;
  const std::size_t size = size_of(type);
  if (size == 0) {
    return refuse(ncclInvalidArgument,
                  std::string(name) + ": datatype " + std::to_string(type) + " is not modelled");
  }
  const int nranks = comm->member->clique->nranks;
  if (peer < 0 || (nranks > 0 && peer >= nranks)) {
    return refuse(ncclInvalidArgument, std::string(name) + ": peer " + std::to_string(peer) +
                                           " outside a communicator of " + std::to_string(nranks) +
                                           " ranks");
  }
  if (stream == nullptr) {
    return refuse(ncclInvalidArgument,
                  std::string(name) + ": the stand-in runs NCCL on created streams only");
  }
  if (count > 0 && buffer == nullptr) {
    return refuse(ncclInvalidArgument, std::string(name) + ": null buffer");
  }
  if (const ncclResult_t status = check_settled(comm, name); status != ncclSuccess) return status;
  if (comm->member->finalized) {
    return refuse(ncclInvalidUsage, std::string(name) + ": the communicator was finalized");
  }
  // NCCL launches a kernel on the stream: the rule kernels obey (fake_device.h).
  if (const std::string broken = check_launch_stream(stream, name, ncclInvalidUsage);
      !broken.empty()) {
    last_error = broken;
    return ncclInvalidUsage;
  }
  Call call{send, const_cast<void*>(buffer), count * size, peer, comm->member, stream};
  if (group_depth > 0) {
    grouped.push_back(std::move(call));
    return ncclSuccess;
  }
  issue(call);
  return in_progress_now(*comm->member) ? ncclInProgress : ncclSuccess;
}

// Joins the clique of `id` at once (on a GPU, a blocking communicator waits for every rank).
ncclResult_t init_rank(ncclComm_t* comm, int nranks, const ncclUniqueId& id, int rank,
                       bool blocking, const char* call) {
  if (comm == nullptr || nranks < 1 || rank < 0 || rank >= nranks) {
    return refuse(ncclInvalidArgument, std::string(call) + ": rank " + std::to_string(rank) +
                                           " of " + std::to_string(nranks));
  }
  *comm = nullptr;
  if (const ncclResult_t status = check_ranks_on_one_gpu(nranks, call); status != ncclSuccess) {
    return status;
  }
  std::shared_ptr<Clique> clique;
  bool joined = false;
  {
    const std::lock_guard lock(state().mutex);
    std::shared_ptr<Clique>& known = state().by_id[std::string(id.internal, sizeof(id.internal))];
    if (known == nullptr) {
      known = std::make_shared<Clique>();
      known->nranks = nranks;
    }
    clique = known;
    joined = clique->nranks == nranks && clique->ranks.insert(rank).second;
  }
  if (!joined) {
    return refuse(ncclInvalidArgument, std::string(call) + ": rank " + std::to_string(rank) +
                                           " of " + std::to_string(nranks) +
                                           " is taken, or the id's communicator has " +
                                           std::to_string(clique->nranks) + " ranks");
  }
  *comm = join(std::move(clique), rank, blocking);
  if (group_depth > 0) {
    grouped_members.push_back((*comm)->member);
    return ncclSuccess;
  }
  return in_progress_now(*(*comm)->member) ? ncclInProgress : ncclSuccess;
}

}  // namespace
}  // namespace pipeplan::fake_cuda

using namespace pipeplan::fake_cuda;  // NOLINT(google-build-using-namespace): the C API below

ncclResult_t ncclGetVersion(int* code) {
  if (code == nullptr) return refuse(ncclInvalidArgument, "ncclGetVersion: null pointer");
  *code = version();
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (id == nullptr) return refuse(ncclInvalidArgument, "ncclGetUniqueId: null pointer");
  std::int64_t number = 0;
  {
    const std::lock_guard lock(state().mutex);
    number = ++state().ids;
  }
  *id = ncclUniqueId{};
  const std::string text = "fake_nccl id " + std::to_string(number);
  std::memcpy(id->internal, text.data(), text.size());
  return ncclSuccess;
}

// Joins the clique of `id` at once (on a GPU, from several threads or within one group).
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  return init_rank(comm, nranks, id, rank, true, "ncclCommInitRank");
}

// As ncclCommInitRank; a nonblocking one (config->blocking = 0) returns ncclInProgress (outside
// a group) until every rank has joined, and is in progress until then.
ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank,
                                    ncclConfig_t* config) {
  bool blocking = true;
  if (const ncclResult_t status = read_config(config, "ncclCommInitRankConfig", blocking);
      status != ncclSuccess) {
    return status;
  }
  return init_rank(comm, nranks, id, rank, blocking, "ncclCommInitRankConfig");
}

// A null `devlist` means devices 0 to ndev - 1, as in NCCL; only device 0 exists here.
ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  if (comms == nullptr || ndev < 1) {
    return refuse(ncclInvalidArgument, "ncclCommInitAll: " + std::to_string(ndev) + " devices");
  }
  for (int i = 0; i < ndev; ++i) {
    const int device = devlist != nullptr ? devlist[i] : i;
    if (device != 0) {
      return refuse(ncclInvalidArgument, "ncclCommInitAll: device " + std::to_string(device) +
                                             " does not exist (the stand-in has GPU 0 only)");
    }
  }
  if (const ncclResult_t status = check_ranks_on_one_gpu(ndev, "ncclCommInitAll");
      status != ncclSuccess) {
    return status;
  }
  auto clique = std::make_shared<Clique>();
  clique->nranks = ndev;
  for (int rank = 0; rank < ndev; ++rank)
    clique->ranks.insert(rank);
  for (int rank = 0; rank < ndev; ++rank)
    comms[rank] = join(clique, rank);
  return ncclSuccess;
}

// NCCL ranks a colour's members by key, then by their old rank. Here the key is the new rank
// itself, so each colour's keys must be 0, 1, ... (distinct); the clique is that of the parent's
// split with the same count (the k-th split of each member) and colour. Once every rank of the
// parent has made that split, each colour's clique has its members' count of ranks. The new
// communicator inherits the parent's blocking unless `config` says; a nonblocking split (a
// nonblocking parent, or child) leaves both in progress until every rank of the parent made it.
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                           ncclConfig_t* config) {
  if (const ncclResult_t status = check_usable(comm, "ncclCommSplit"); status != ncclSuccess) {
    return status;
  }
  if (newcomm == nullptr || (color != NCCL_SPLIT_NOCOLOR && (color < 0 || key < 0))) {
    return refuse(ncclInvalidArgument, "ncclCommSplit: colour " + std::to_string(color) + ", key " +
                                           std::to_string(key));
  }
  bool blocking = comm->member->blocking;
  if (config != nullptr) {
    if (const ncclResult_t status = read_config(config, "ncclCommSplit", blocking);
        status != ncclSuccess) {
      return status;
    }
    if (config->blocking == NCCL_CONFIG_UNDEF_INT) blocking = comm->member->blocking;
  }
  if (const ncclResult_t status = check_settled(comm, "ncclCommSplit"); status != ncclSuccess) {
    return status;
  }
  *newcomm = nullptr;
  Member& me = *comm->member;
  std::shared_ptr<Clique> clique;
  std::shared_ptr<SplitRound> round;
  {
    const std::lock_guard lock(state().mutex);
    const int split = me.splits++;
    std::shared_ptr<SplitRound>& known = state().splits[{me.clique.get(), split}];
    if (known == nullptr) {
      known = std::make_shared<SplitRound>();
      known->expected =
          me.clique->nranks > 0 ? me.clique->nranks : static_cast<int>(me.clique->ranks.size());
    }
    round = known;
    if (color != NCCL_SPLIT_NOCOLOR) {
      const auto it = std::find_if(round->children.begin(), round->children.end(),
                                   [&](const auto& child) { return child->colour == color; });
      std::shared_ptr<Clique> child;
      if (it != round->children.end()) {
        child = *it;
      } else {
        child = std::make_shared<Clique>();
        child->colour = color;
        round->children.push_back(child);
      }
      if (child->ranks.insert(key).second) clique = child;
    }
    if (color == NCCL_SPLIT_NOCOLOR || clique != nullptr) {
      if (++round->arrived == round->expected) {
        for (const auto& child : round->children)
          child->nranks = static_cast<int>(child->ranks.size());
      }
      if (!me.blocking) me.split = round;
    }
  }
  if (color != NCCL_SPLIT_NOCOLOR && clique == nullptr) {
    return refuse(ncclInvalidArgument, "ncclCommSplit: key " + std::to_string(key) +
                                           " taken twice in colour " + std::to_string(color) +
                                           " (the stand-in makes each key its member's rank)");
  }
  if (clique != nullptr) *newcomm = join(std::move(clique), key, blocking);
  const bool busy =
      in_progress_now(me) || (*newcomm != nullptr && in_progress_now(*(*newcomm)->member));
  return busy ? ncclInProgress : ncclSuccess;
}

ncclResult_t ncclGroupStart() {
  ++group_depth;
  return ncclSuccess;
}

// The outermost end issues the group's calls: its sends first, then its receives, each in call
// order. On a GPU a group is one kernel whose calls progress together; here sends never wait, so
// issuing them first lets a group that receives before it sends complete as it does there.
ncclResult_t ncclGroupEnd() {
  if (group_depth == 0) return refuse(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
  if (--group_depth > 0) return ncclSuccess;
  std::vector<Call> calls = std::move(grouped);
  grouped.clear();
  std::vector<std::shared_ptr<Member>> members = std::move(grouped_members);
  grouped_members.clear();
  std::stable_partition(calls.begin(), calls.end(), [](const Call& call) { return call.send; });
  for (const Call& call : calls) {
    issue(call);
    members.push_back(call.member);
  }
  // A nonblocking communicator of the group not settled yet: the group is in progress.
  const bool busy = std::any_of(members.begin(), members.end(),
                                [](const auto& member) { return in_progress_now(*member); });
  return busy ? ncclInProgress : ncclSuccess;
}

ncclResult_t ncclSend(const void* buffer, size_t count, ncclDataType_t type, int peer,
                      ncclComm_t comm, cudaStream_t stream) {
  return point_to_point(true, buffer, count, type, peer, comm, stream);
}

ncclResult_t ncclRecv(void* buffer, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  return point_to_point(false, buffer, count, type, peer, comm, stream);
}

// The error is counted as a broken rule when it is first asked about (deferred work, which found
// it, never takes the runtime's lock).
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* error) {
  if (const ncclResult_t status = check_usable(comm, "ncclCommGetAsyncError");
      status != ncclSuccess) {
    return status;
  }
  if (error == nullptr) return refuse(ncclInvalidArgument, "ncclCommGetAsyncError: null pointer");
  Member& me = *comm->member;
  std::string first;
  {
    const std::lock_guard lock(state().mutex);
    *error = me.error;
    if (me.error == ncclSuccess && in_progress(me)) *error = ncclInProgress;
    if (me.error != ncclSuccess && !me.error_counted) {
      me.error_counted = true;
      first = me.error_text;
    }
  }
  if (!first.empty()) break_rule(first, *error);
  return ncclSuccess;
}

// Its queued sends and receives complete without moving data; later calls on it are refused.
ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  comm->member->aborted.store(true);
  const std::lock_guard lock(state().mutex);
  state().aborted.insert(comm);
  ++state().counts.aborted;
  return ncclSuccess;
}

// No new calls from now on; a nonblocking communicator is in progress until every call queued on
// it has run. A blocking one whose calls have not all run would block here: a broken rule.
ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  if (const ncclResult_t status = check_usable(comm, "ncclCommFinalize"); status != ncclSuccess) {
    return status;
  }
  if (const ncclResult_t status = check_settled(comm, "ncclCommFinalize"); status != ncclSuccess) {
    return status;
  }
  Member& me = *comm->member;
  std::int64_t pending = 0;  // its own calls not run yet
  bool others = false;       // ranks of its clique that have not finalized it
  {
    const std::lock_guard lock(state().mutex);
    if (me.finalized) {
      return refuse(ncclInvalidUsage, "ncclCommFinalize: the communicator was finalized already");
    }
    me.finalized = true;
    ++me.clique->finalized;
    ++state().counts.finalized;
    pending = me.issued - me.completed;
    others = me.clique->finalized < me.clique->nranks;
  }
  if (pending == 0 && !others) return ncclSuccess;
  if (me.blocking) {
    return refuse_rule(ncclInvalidUsage,
                       "ncclCommFinalize of a blocking communicator " +
                           (pending > 0 ? "with " + std::to_string(pending) + " calls not run"
                                        : std::string("whose other ranks have not finalized")) +
                           ": it blocks until they end (make it nonblocking and poll "
                           "ncclCommGetAsyncError)");
  }
  return ncclInProgress;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  std::int64_t pending = 0;
  {
    const std::lock_guard lock(state().mutex);
    const Member& me = *comm->member;
    if (!me.aborted.load() && !me.finalized) pending = me.issued - me.completed;
    state().aborted.erase(comm);
    ++state().counts.destroyed;
  }
  delete comm;
  if (pending > 0) {
    return refuse_rule(ncclInvalidUsage,
                       "ncclCommDestroy of a communicator with " + std::to_string(pending) +
                           " calls not run, neither finalized nor aborted: it waits for them "
                           "without bound (ncclCommFinalize and poll first, or ncclCommAbort)");
  }
  return ncclSuccess;
}

NcclCounts pipeplan::fake_cuda::nccl_counts() {
  const std::lock_guard lock(state().mutex);
  return state().counts;
}

const char* ncclGetErrorString(ncclResult_t code) {
  if (const char* rule = rule_message_for(code)) return rule;
  static constexpr const char* kTexts[] = {"no error",
                                           "unhandled cuda error",
                                           "unhandled system error",
                                           "internal error",
                                           "invalid argument",
                                           "invalid usage",
                                           "remote process exited or there was a network error",
                                           "NCCL operation in progress"};
  const auto index = static_cast<std::size_t>(code);
  return index < std::size(kTexts) ? kTexts[index] : "unknown result code";
}

// This thread's last refused call; for a communicator with an asynchronous error, that error.
const char* ncclGetLastError(ncclComm_t comm) {
  if (comm != nullptr) {
    const std::lock_guard lock(state().mutex);
    if (comm->member->error != ncclSuccess) last_error = comm->member->error_text;
  }
  return last_error.c_str();
}
