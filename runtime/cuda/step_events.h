// The executor's NodeTimer on CUDA events. Every compute node is bracketed by two events on its
// stage's stream; send and recv nodes by events the CUDA transports record around the transfer
// itself (transfer_marks), so a node's time is the device's, not the host's enqueue time. A recv
// whose transport recorded nothing (device-local: the copy is one operation) takes its matching
// send's times, as the simulator's rendezvous does. Times are µs since an event recorded on each
// device's first stage stream when the step began (devices idle then, so GPU clocks line up with
// the host's to within a launch latency).
//
// The transports also ask payload_ready(): the end event of the compute node that produced a
// send's payload, so the transfer waits for exactly that node and not for whatever the compute
// thread queued after it (a wait on the stream's tail would delay every activation by up to one
// op).
//
// With the stages' fence clocks (DeviceAllocator::fence_clock), each compute node's end event is
// also a fence: fence_after() says which event a copy into a block the stage freed must wait for,
// so that the copy waits for the block's last reader and not for everything queued on the stage.
//
// An overlapped pair's second op runs on its stage's side stream (CudaBackend::begin_second):
// its two events go there, so its time is its own. Its end is no fence: a block freed while it
// was queued may still be read by the pair's first op on the stage's stream, and the next
// compute node's end (after the stage's stream joined the side stream) follows both.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <utility>
#include <vector>

#include <cuda.h>
#include <cuda_runtime.h>

#include "runtime/cuda/allocator.h"
#include "runtime/node_timer.h"
#include "runtime/transport.h"

namespace pipeplan::cuda {

class StepEvents final : public NodeTimer {
 public:
  // Per plan device: the CUDA device it runs on and the stream its backend queues on.
  // `fence_clocks` (empty, or one per plan device): advanced after each compute node's end event.
  // `side_streams` (empty, or one per plan device, null where the device runs no pairs): where
  // the backend runs an overlapped pair's second op (CudaBackendOptions::side_stream).
  StepEvents(std::vector<int> cuda_devices, std::vector<cudaStream_t> compute_streams,
             std::vector<std::shared_ptr<FenceClock>> fence_clocks = {},
             std::vector<cudaStream_t> side_streams = {});
  ~StepEvents() override;
  StepEvents(const StepEvents&) = delete;
  StepEvents& operator=(const StepEvents&) = delete;

  void begin_step(const TaskGraph& plan) override;
  void begin_node(const TaskGraph& plan, int id) override;
  void end_node(const TaskGraph& plan, int id) override;
  void end_step(const TaskGraph& plan, std::vector<NodeTime>& times) override;
  void align_host_times(const TaskGraph& plan, std::chrono::steady_clock::time_point start,
                        std::vector<NodeTime>& host_times) const override;

  // On the thread running a send node of link (from -> to, channel) on plan device `device`:
  // the end event of the compute node that produced its payload; null when the payload was not
  // made by a compute node on this step (a held BPipe stash: already complete on the host).
  cudaEvent_t payload_ready(int device, int from, int to, Channel channel) const;
  // Events to record on the link's stream right before and right after the transfer; both null
  // when no node of that link side is running (a transport used outside the executor).
  std::pair<cudaEvent_t, cudaEvent_t> transfer_marks(int device, int from, int to, Channel channel);
  // The event that follows every kernel queued on plan device `device`'s stream before a block
  // was freed at fence count `freed_at` (DeviceAllocator::FencedBlock): the end event of the
  // compute node recorded first after the free, or the step's start event when that was in an
  // earlier step. Null when no such event is recorded yet (or the device has no fence clock):
  // the caller then records the stream's tail itself.
  cudaEvent_t fence_after(int device, std::int64_t freed_at) const;

 private:
  using LinkSide = std::tuple<int, int, int, Channel>;  // (device, from, to, channel)
  LinkSide link_side(const TaskGraph& plan, int id) const;
  void prepare(const TaskGraph& plan);

  // The stream node `id`'s events go on: its device's compute stream, or its side stream for
  // the second op of an overlapped pair.
  cudaStream_t stream_of(int id, std::size_t device) const;

  std::vector<int> cuda_devices_;
  std::vector<cudaStream_t> compute_streams_;
  std::vector<cudaStream_t> side_streams_;  // per plan device, or empty
  std::vector<CUcontext> contexts_;         // per plan device: its stream's (ScopedContext)
  std::vector<cudaEvent_t> step_start_;     // per plan device
  // Per plan device: the host's clock when its step_start_ was queued. The device is idle then,
  // so the event completes a launch latency later: the zero of the device's times, on the host.
  std::vector<std::chrono::steady_clock::time_point> host_origin_;
  std::vector<cudaEvent_t> begin_, end_;  // per node
  std::vector<int> producer_;             // per send node: its payload's compute node, or -1
  std::vector<char> recorded_;            // per node
  std::vector<char> second_;              // per node: the second op of an overlapped pair
  mutable std::mutex mutex_;
  std::map<LinkSide, int> running_;  // send/recv node running on each link side
  std::vector<std::shared_ptr<FenceClock>> fence_clocks_;  // per plan device, or empty
  std::vector<std::int64_t> fence_base_;                   // per device: its clock at step start
  std::vector<std::vector<int>> fence_nodes_;  // per device: compute nodes ended, in order
};

}  // namespace pipeplan::cuda
