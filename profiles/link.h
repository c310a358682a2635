// The point-to-point link between two pipeline devices and the one formula for a transfer's
// time over it. The planner (lowering, BPipe, bounds, auto) and the simulator all use these, so a
// predicted transfer costs the same wherever it is estimated.
#pragma once

#include <cstdint>

namespace pipeplan {

struct P2pLink {
  double latency_us = 0;
  double bandwidth_GBps = 0;  // 0 means infinite (pure latency, as in Zero Bubble's T_comm)
};

// How long `bytes` hold the link: the bandwidth part only. The latency is pipelined (the
// simulator lets the next transfer start while this one's latency runs), so it is not here.
inline double link_occupancy_us(const P2pLink& link, std::int64_t bytes) {
  return link.bandwidth_GBps > 0 ? static_cast<double>(bytes) / (link.bandwidth_GBps * 1e3) : 0.0;
}

// latency + bytes / bandwidth (GB/s = 1e3 bytes/µs).
inline double transfer_time_us(const P2pLink& link, std::int64_t bytes) {
  return link.latency_us + link_occupancy_us(link, bytes);
}

// One all-gather or reduce-scatter of a `bytes` buffer over `ranks` GPUs on a ring: each GPU
// sends and receives (ranks - 1)/ranks of it at the link's bandwidth per direction, after one
// latency (an all-reduce is a reduce-scatter and an all-gather: twice this). The collectives of
// tensor and data parallelism (profiles/tensor_parallel.h, profiles/data_parallel.h) use it.
inline double ring_collective_us(const P2pLink& link, double bytes, int ranks) {
  const double share = static_cast<double>(ranks - 1) / ranks;
  return link.latency_us +
         (link.bandwidth_GBps > 0 ? share * bytes / (link.bandwidth_GBps * 1e3) : 0.0);
}

}  // namespace pipeplan
