// The one transfer-time formula that lowering, BPipe, the bounds, auto and the simulator share.
#include "profiles/link.h"

#include <gtest/gtest.h>

namespace pipeplan {
namespace {

TEST(Link, TransferTimeIsLatencyPlusBytesOverBandwidth) {
  const P2pLink link{10.0, 450.0};  // 450 GB/s = 450e3 bytes per µs
  EXPECT_EQ(transfer_time_us(link, 900'000), 12.0);
  EXPECT_EQ(link_occupancy_us(link, 900'000), 2.0);
  EXPECT_EQ(transfer_time_us(link, 0), 10.0);
}

TEST(Link, ZeroBandwidthIsPureLatency) {
  const P2pLink link{25.0, 0.0};
  EXPECT_EQ(transfer_time_us(link, std::int64_t{1} << 40), 25.0);
  EXPECT_EQ(link_occupancy_us(link, std::int64_t{1} << 40), 0.0);
}

}  // namespace
}  // namespace pipeplan
