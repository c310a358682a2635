// How the command line's plan options become a request: the micro-batch sizes --uniform costs
// hold.
#include "tools/plan_options.h"

#include <gtest/gtest.h>

#include <string>

#include "planner/base/error.h"

namespace pipeplan {
namespace {

// The message `make` throws, or "" when it throws none.
template <typename Make>
std::string error_of(Make make) {
  try {
    make();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

PlanOptions uniform_options() {
  PlanOptions o;
  o.uniform = "1:1:1:0";
  o.stages = 4;
  o.microbatches = 8;
  o.microbatches_given = true;
  return o;
}

// --uniform's costs are one micro-batch's: --mbs 2 is refused naming --mbs, as a --profile that
// lacks the size is, not by the profile's lookup naming no option.
TEST(PlanOptions, UniformCostsRefuseAnotherMicroBatchSize) {
  PlanOptions o = uniform_options();
  EXPECT_EQ(make_request(o).mbs, 1);
  o.mbs = 2;
  EXPECT_EQ(error_of([&] { make_request(o); }),
            "--mbs: --uniform has no cost at micro-batch size 2 (its costs are at micro-batch size "
            "1 only)");
  EXPECT_EQ(error_of([&] { make_search_request(o, 0, "", "--search-mbs"); }),
            "--mbs: --uniform has no cost at micro-batch size 2 (its costs are at micro-batch size "
            "1 only)");
}

// A --search-mbs list beside --uniform: a size the costs do not hold is refused, not planned at
// micro-batch size 1 in its place; without a list the search tries 1.
TEST(PlanOptions, UniformCostsRefuseSearchSizesTheyDoNotHold) {
  PlanOptions o = uniform_options();
  o.microbatches = 0;
  o.microbatches_given = false;
  EXPECT_EQ(error_of([&] { make_search_request(o, 8, "2,4", "--search-mbs"); }),
            "--search-mbs: --uniform has no cost at micro-batch sizes 2, 4 (its costs are at "
            "micro-batch size 1 only)");
  EXPECT_EQ(error_of([&] { make_search_request(o, 8, "1,2", "--search-mbs"); }),
            "--search-mbs: --uniform has no cost at micro-batch size 2 (its costs are at "
            "micro-batch size 1 only)");
  EXPECT_EQ(make_search_request(o, 8, "1", "--search-mbs").mbs_candidates, std::vector<int>{1});
  EXPECT_EQ(make_search_request(o, 8, "", "--search-mbs").mbs_candidates, std::vector<int>{1});
}

}  // namespace
}  // namespace pipeplan
