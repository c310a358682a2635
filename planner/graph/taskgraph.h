// The task graph: the one lowered form of a plan that the validator, the simulator, the
// visualisers and the runtime all consume. Nodes are compute ops and point-to-point
// send/recv halves; each node runs on one stream of one device, streams execute in order, and
// edges carry data dependencies (stream order is implied by each stream's node list).
// Saved as versioned JSON (docs/reference/plan-format.md) and exported to Graphviz DOT.
//
// Every send/recv says what it carries in `transfer`, never in its label: a forward's output
// (activation) or a backward's input gradient (gradient) on the send/recv streams, or a BPipe
// stash on `transfer` streams (one per device and peer, carrying both directions in one order
// that the peer's transfer stream mirrors): evict (evictor -> acceptor, right after the forward)
// or load (acceptor -> evictor, before the backward that needs the stash). For a stash move, op,
// stage and microbatches are those of the forward whose stash moves, and alloc/free bytes record
// the memory that leaves one device and arrives on the other. With two copies of the model
// (Schedule::replicas), each stage's weight gradients go to the device holding its other copy
// on the send/recv streams (grads), after the stage's last weight gradient; op, stage and
// microbatches are that op's, and the receiver adds them into its own copy's in its optimizer
// step (which waits for the recv and for its own grads send), or after the step's graph when
// the plan has none. Labels are for people (and the transport's tag check); nothing reads meaning
// from them.
#pragma once

#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <boost/graph/compressed_sparse_row_graph.hpp>
#include <nlohmann/json_fwd.hpp>

#include "profiles/data_parallel.h"
#include "profiles/model.h"
#include "profiles/partition.h"
#include "profiles/profile.h"
#include "profiles/recompute.h"
#include "schedules/schedule.h"

namespace pipeplan {

enum class NodeKind : std::uint8_t { compute, send, recv };
enum class StreamRole : std::uint8_t { compute, send, recv, transfer };
enum class EdgeKind : std::uint8_t { data, order };
// What a send/recv pair moves; none for compute nodes. grads: a stage's weight gradients, sent to
// the device holding the other copy of the stage (Schedule::replicas) before the optimizer step.
enum class Transfer : std::uint8_t { none, activation, gradient, evict, load, grads };
std::string_view to_string(NodeKind kind);
std::string_view to_string(StreamRole role);
std::string_view to_string(Transfer transfer);
inline bool is_stash_move(Transfer t) {
  return t == Transfer::evict || t == Transfer::load;
}

struct Stream {
  int device = 0;
  StreamRole role = StreamRole::compute;
  int peer = -1;             // send/recv: the other device
  std::string name() const;  // "compute", "send>1", "recv<0", "transfer:3"
};

// A node's label when it is not the one its fields spell (a plan file or a test gave another):
// the text on the heap, 8 bytes in the node; empty for every node lowering makes.
class CustomLabel {
 public:
  CustomLabel() noexcept = default;
  CustomLabel(const CustomLabel& other)
      : text_(other.text_ ? std::make_unique<std::string>(*other.text_) : nullptr) {}
  CustomLabel(CustomLabel&&) noexcept = default;
  CustomLabel& operator=(const CustomLabel& other) {
    if (this != &other) text_ = other.text_ ? std::make_unique<std::string>(*other.text_) : nullptr;
    return *this;
  }
  CustomLabel& operator=(CustomLabel&&) noexcept = default;
  ~CustomLabel() = default;
  const std::string* get() const noexcept { return text_.get(); }
  void set(std::string text) { text_ = std::make_unique<std::string>(std::move(text)); }
  void reset() noexcept { text_.reset(); }

 private:
  std::unique_ptr<std::string> text_;
};

struct Node {
  NodeKind kind = NodeKind::compute;
  OpType op = OpType::F;  // compute nodes; for send/recv, the op that produced the payload
  Transfer transfer = Transfer::none;  // send/recv: what the payload is
  // Compute: starts together with the next node of its stream, and the two end together (an
  // overlapped pair, schedules/schedule.h; the simulator gives the pair the profile's
  // overlapped time, overlapped_time_us).
  bool overlaps_next = false;
  int device = 0;
  int stream = 0;                // index into TaskGraph::streams()
  int stage = 0;                 // virtual stage of the op (for send/recv: of the producer)
  MicroBatches microbatches;     // one, except a concatenated P2
  double duration_us = 0;        // compute time; for send/recv, latency + bytes / bandwidth
  std::int64_t alloc_bytes = 0;  // allocated when the node starts
  std::int64_t free_bytes = 0;   // released when the node ends
  std::int64_t work_bytes = 0;   // held only while the node runs (its temporaries), on top
  std::int64_t bytes = 0;        // send/recv payload
  int peer = -1;                 // send/recv: the other device
  int match = -1;                // send/recv: id of the matching recv/send
  // The label (node_label): compute, its action ("0F3"); send/recv, the payload tag, equal on
  // both halves ("0F3", "evict 0F3"), which the transport checks and nothing parses. Spelt from
  // op, stage, micro-batches and transfer when it is needed, not stored (lowering a 39k-node
  // plan spent a third of its time writing and copying labels), unless set_label gave a text
  // those fields do not spell.
  CustomLabel custom_label;
};

// The label: the custom text if there is one, else the one the fields spell: the action
// ("0F3", "0P2_4+5"), after "evict " / "load " for a stash move.
std::string node_label(const Node& node);
// Gives the node this label: kept only when it differs from the one its fields spell (set the
// fields first).
void set_label(Node& node, std::string label);
// node_label(a) == node_label(b), without spelling the labels when neither is custom.
bool same_label(const Node& a, const Node& b);

struct PlanMeta {
  ModelConfig model;
  std::string gpu;  // gpus.json key
  int devices = 0;
  int chunks = 1;
  int microbatches = 0;
  int mbs = 1;
  int seq = 0;
  std::string schedule;  // family name
  BackwardMode backward = BackwardMode::fused;
  int p2_concat = 0;  // the largest P2 group (0: any number; validate checks it)
  Attention attention = Attention::flash;
  std::vector<StageLayers> stage_layers;   // per virtual stage
  std::vector<double> memory_limit_bytes;  // per device; 0 = unlimited
  std::vector<std::int64_t> static_bytes;  // per device: params, grads, optimizer
  double flops_per_token = 0;              // PaLM model FLOPs; 0 when unknown
  double peak_flops_per_device = 0;        // dense bf16 FLOP/s (of all its GPUs)
  // GPUs per device: tensor parallelism makes each pipeline device a group of T GPUs that split
  // every layer (profiles/tensor_parallel.h); the profile's times and bytes are then per GPU.
  int tensor_parallel = 1;
  // Copies of the whole pipeline (profiles/data_parallel.h): each device's optimizer step already
  // holds its gradients' reduction across them; tokens per step and GPUs count every replica.
  DataParallel data_parallel;
  // Activation recomputation (profiles/recompute.h): which blocks of each stage keep only their
  // input and re-run their forward in p1 (the nodes' times and bytes hold it). Never automatic.
  Recompute recompute;
  P2pLink link;                // every device pair
  std::string profile_source;  // provenance summary of the profile used
  Contention contention;       // stages sharing one GPU (emulation): the simulator's slowdowns
  OverlapModel overlap;        // an overlapped pair's time (profiles/overlap.h)

  // Whether some device has a memory limit (memory_limit_bytes above 0).
  [[nodiscard]] bool memory_limited() const;
};

class GraphBuilder;
class TaskGraph;

// The overlapped pairs: each flagged compute node (Node::overlaps_next) and the next node of its
// stream, by stream; a flagged node that ends its stream, or follows a flagged node as its
// pair's second member, starts none (the validator names it). Linear in nodes.
struct OverlapPair {
  int first;
  int second;
};
std::vector<OverlapPair> overlap_pairs(const TaskGraph& graph);

class TaskGraph {
 public:
  // Boost.Graph view of the DAG (every data and stream-order edge; vertex v is node v). A
  // compressed-sparse-row graph, built on first use after a change: building the plan appends to
  // plain vectors, which keeps lowering a 48k-node plan allocation-light. Out-edges only (every
  // hot walk follows edges forward; a bidirectional view took twice as long to build): the rare
  // walks against edge direction use predecessors() below.
  using Graph = boost::compressed_sparse_row_graph<boost::directedS, boost::no_property, EdgeKind>;

  PlanMeta meta;
  Schedule schedule;

  // Streams are unique per (device, role, peer); returns the existing index if present.
  int stream(int device, StreamRole role, int peer = -1);
  // Appends the node to the end of its stream (an order edge from the stream's previous node).
  int add_node(const Node& node);
  int add_node(Node&& node);
  void add_data_edge(int from, int to);
  // A point-to-point message: appends `send` and `recv` to their streams, makes each the other's
  // match and joins them with a data edge. Returns {send id, recv id}.
  std::pair<int, int> add_message(Node&& send, Node&& recv);
  void reserve(std::size_t nodes, std::size_t edges);  // capacity hint
  // Adds the node without placing it in its stream's order: for loaders, which then give each
  // stream its order with set_stream_order.
  int add_node_unordered(const Node& node);
  int add_node_unordered(Node&& node);
  // Replaces a stream's order (used by loaders and by tests that plant faults).
  void set_stream_order(int stream, std::vector<int> order);

  const Graph& graph() const;  // invalidated by any change to the graph
  int node_count() const { return static_cast<int>(nodes_.size()); }
  const Node& node(int id) const { return nodes_[static_cast<std::size_t>(id)]; }
  Node& node(int id) { return nodes_[static_cast<std::size_t>(id)]; }
  std::span<const Node> nodes() const { return nodes_; }  // by id, for one pass over them all
  // Every edge as added (the Boost.Graph view's edges, in no particular order): for one pass
  // over them all that needs no adjacency, before or without building the view.
  struct EdgeRecord {
    int from;
    int to;
    EdgeKind kind;
  };
  std::span<const EdgeRecord> edge_records() const { return edges_; }
  const std::vector<Stream>& streams() const { return streams_; }
  const std::vector<int>& stream_order(int stream) const {
    return stream_order_[static_cast<std::size_t>(stream)];
  }
  std::string node_name(int id) const;  // "node 12 (0F3 on device 0 compute)"

 private:
  friend class GraphBuilder;  // lowering (taskgraph.cpp) builds nodes in place
  // The built view; shared (and immutable) between copies, dropped on every change.
  struct GraphCache {
    std::shared_ptr<const Graph> graph;
    std::shared_ptr<std::mutex> lock = std::make_shared<std::mutex>();
  };
  void add_edge(int from, int to, EdgeKind kind);
  void changed() { cache_.graph.reset(); }

  std::vector<Node> nodes_;
  std::vector<EdgeRecord> edges_;
  mutable GraphCache cache_;
  std::unordered_map<std::uint64_t, int> stream_index_;  // (device, role, peer) -> stream
  std::vector<Stream> streams_;
  std::vector<std::vector<int>> stream_order_;
};

// Per node, its predecessors and the kind of each edge from them, in edge order: for walks against
// edge direction (a cycle's report, BPipe's transfer checks), which are rare enough to build this
// when needed.
std::vector<std::vector<std::pair<int, EdgeKind>>> predecessors(const TaskGraph& graph);

// Lowers a checked schedule: compute nodes with the stage costs, a send/recv pair for every
// activation and gradient that crosses devices (sends in the producer's order, receives in the
// same order per peer pair), memory effects (F allocates the stash; P1 turns the stash into the
// retained X/dY, charging the net change at its start if it grows and at its end if it shrinks;
// P2 frees the retained bytes; a fused B frees the stash), and with two copies of the model the
// weight-gradient exchange between the devices holding a stage's two copies (a grads send/recv
// each way, each send after its end's last weight gradient of the stage; each end's optimizer
// step waits for its recv and its send).
// The working memory an op of a stage holds while it runs (StageCost::forward_work_bytes; P2 over
// k micro-batches).
std::int64_t op_work_bytes(const StageCost& cost, OpType op, int k);
// What an op of a stage over k micro-batches does to its device's memory, as lowering charges it
// and the validator, schedule_sim and the schedulers count it: `alloc` at its start, `release` at
// its end, `work` (op_work_bytes) while it runs. F allocates the stash; a fused B releases it; a
// P1 turns the stash into the retained X/dY layer by layer, so only the net change is charged,
// at its start if it grows and at its end if it shrinks (Zero Bubble's M_B / M_W accounting); a
// P2 releases k retained sets; the optimizer step, none.
struct OpMemory {
  std::int64_t alloc = 0, release = 0, work = 0;
};
OpMemory op_memory(const StageCost& cost, OpType op, int k);

TaskGraph lower(const Schedule& schedule, const std::vector<StageCost>& costs, PlanMeta meta);
// The same, keeping the schedule in the graph without copying it.
TaskGraph lower(Schedule&& taken, const std::vector<StageCost>& costs, PlanMeta meta);
// lower()'s graph of `schedule`, which it reads and does not keep: the graph's `schedule` is left
// empty for the caller to move that very order into (make_plan lowers a search's candidate while
// the search is still evaluating it).
TaskGraph lower_detached(const Schedule& schedule, const std::vector<StageCost>& costs,
                         PlanMeta meta);
// Schedules with at least this many actions have work beside their lowering done on the helper
// thread (lower_and_check, make_plan's prepared candidate); below it the helper's wake-up costs
// more than that work.
inline constexpr std::size_t kConcurrentActions = 2048;
// lower() of a schedule nobody has checked yet, with check_schedule run on it at the same time
// (run_beside: the check on the helper thread, on large schedules): lowering itself only needs
// the bounds it checks. The check's error, if any, is the one thrown.
TaskGraph lower_and_check(Schedule&& taken, const std::vector<StageCost>& costs, PlanMeta meta);

// meta's stage-to-layers cut and sizes against the schedule, as running the plan needs them: one
// meta.stage_layers entry per virtual stage; the first copy's stages tile the model's layer list
// in order (each starting where the one before ended, together every layer) and every other
// copy (Schedule::replicas) repeats that cut; meta.mbs, meta.seq and meta.microbatches positive.
// Throws Error naming `source` and the field. The plan reader and the executor both run it.
void check_stage_layers(const TaskGraph& plan, std::string_view source);

// The plan file (docs/reference/plan-format.md): version 3, nodes as columns, written and read
// without a JSON value per node. plan_from_text reads every version (1 and 2 through
// plan_from_json); every error is one line naming `source`.
std::string plan_to_text(const TaskGraph& graph);
TaskGraph plan_from_text(std::string_view text, std::string_view source);
// Version 2, one JSON object per node: what tests and tools edit node by node (plan_from_json
// reads versions 1 and 2; plan_from_text reads it back too).
nlohmann::json plan_to_json(const TaskGraph& graph);
TaskGraph plan_from_json(const nlohmann::json& json, std::string_view source);
// meta.stage_layers as a plan file holds it (and a trace's metadata repeats it):
// [[first_layer, layer_count], ...].
nlohmann::json stage_layers_json(const std::vector<StageLayers>& stages);
TaskGraph load_plan(const std::filesystem::path& path);
void save_plan(const TaskGraph& graph, const std::filesystem::path& path);  // atomic, version 3
void write_dot(const TaskGraph& graph, std::ostream& out);

}  // namespace pipeplan
