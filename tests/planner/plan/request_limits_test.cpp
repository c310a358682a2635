// Request sizes above planner/base/limits.h are refused before anything is built for them.
#include <cmath>
#include <functional>
#include <string>

#include <gtest/gtest.h>

#include "planner/base/error.h"
#include "planner/plan/make_plan.h"
#include "planner/search/search.h"
#include "tests/planner/plan_fixtures.h"

namespace pipeplan {
namespace {

std::string field_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const FieldError& e) {
    return e.field() + ": " + e.detail();
  } catch (const Error& e) {
    return std::string("not a field error: ") + e.what();
  }
  return "<no error>";
}

TEST(RequestLimits, EverySizeNamesItsField) {
  const auto with = [](const std::function<void(PlanRequest&)>& change) {
    PlanRequest r = testing::uniform_request({});
    change(r);
    return field_error([&] { check_plan_request(r); });
  };
  EXPECT_EQ(with([](PlanRequest& r) { r.microbatches = 1'000'000'000; }),
            "microbatches: 1000000000 is above the limit of 65536 (docs/reference/limits.md)");
  EXPECT_EQ(with([](PlanRequest& r) { r.devices = 5000; }),
            "devices: 5000 is above the limit of 1024 (docs/reference/limits.md)");
  EXPECT_EQ(with([](PlanRequest& r) { r.chunks = 100; }),
            "chunks: 100 is above the limit of 64 (docs/reference/limits.md)");
  EXPECT_EQ(with([](PlanRequest& r) {
              r.devices = 512;
              r.chunks = 4;
            }),
            "chunks: 512 devices x 4 chunks = 2048 stages is above the limit of 1024 "
            "(docs/reference/limits.md)");
  EXPECT_EQ(with([](PlanRequest& r) {
              r.devices = 64;
              r.microbatches = 65536;
            }),
            "microbatches: 64 stages x 65536 micro-batches = 4194304 stage micro-batches is "
            "above the limit of 262144 (docs/reference/limits.md)");
  EXPECT_EQ(with([](PlanRequest& r) { r.mbs = 1 << 20; }),
            "mbs: 1048576 is above the limit of 65536 (docs/reference/limits.md)");
  EXPECT_EQ(with([](PlanRequest& r) { r.p2_concat = 1 << 20; }),
            "p2_concat: 1048576 is above the limit of 65536 (docs/reference/limits.md)");
  EXPECT_NE(with([](PlanRequest& r) { r.memory_limit_bytes = 1e30; }).find("memory_limit_bytes"),
            std::string::npos);
  EXPECT_EQ(with([](PlanRequest& r) { r.memory_limit_bytes = std::nan(""); }),
            "memory_limit_bytes: must not be negative");
  EXPECT_EQ(with([](PlanRequest&) {}), "<no error>");
}

// make_plan checks the request before it builds anything: the limit's error, not one from
// building a billion micro-batches.
TEST(RequestLimits, MakePlanRefusesAHugeRequestByItsLimit) {
  PlanRequest r = testing::uniform_request({});
  r.microbatches = 1'000'000'000;
  EXPECT_EQ(field_error([&] { make_plan(r); }),
            "microbatches: 1000000000 is above the limit of 65536 (docs/reference/limits.md)");
}

TEST(RequestLimits, GlobalBatchSplitsStayWithinTheMicroBatchLimit) {
  EXPECT_EQ(field_error([] {
              global_batch_splits(2147483647, {1, 2, 4, 8});
            }),
            "global_batch: 2147483647 is above the limit of 16777216 (docs/reference/limits.md)");
  EXPECT_NE(field_error([] {
              global_batch_splits(1 << 24, {1, 2, 4, 8});
            }).find("need more than 65536 micro-batches at every candidate"),
            std::string::npos);
  EXPECT_EQ(field_error([] {
              global_batch_splits(9, {2, 4});
            }),
            "global_batch: 9 is divisible by no candidate micro-batch size (2, 4)");
  // Only the sizes that keep m within the limit remain.
  const auto splits = global_batch_splits(1 << 20, {1, 16, 32});
  ASSERT_EQ(splits.size(), 2u);
  EXPECT_EQ(splits[0], std::make_pair(16, 65536));
  EXPECT_EQ(splits[1], std::make_pair(32, 32768));
}

}  // namespace
}  // namespace pipeplan
