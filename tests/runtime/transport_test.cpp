// The in-process transport and the receiver's message check.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <string>
#include <thread>

#include "runtime/faulty_transport.h"
#include "runtime/host_tensor.h"
#include "runtime/transport.h"

namespace pipeplan {
namespace {

using std::chrono::milliseconds;

Message message(const std::string& tag, std::int64_t floats) {
  Message m;
  m.tag = tag;
  m.tensors.emplace_back("x", host_zeros({floats}, DType::f32));
  m.bytes = m.payload_bytes();
  return m;
}

TEST(InProcessTransport, DeliversInOrderPerLinkAndChannel) {
  InProcessTransport t;
  t.send(0, 1, Channel::pipeline, message("a", 1));
  t.send(0, 1, Channel::transfer, message("evict a", 2));
  t.send(0, 1, Channel::pipeline, message("b", 3));
  t.send(1, 0, Channel::pipeline, message("c", 4));
  EXPECT_EQ(t.recv(1, 0, Channel::transfer, "evict a", milliseconds(100)).tag, "evict a");
  EXPECT_EQ(t.recv(1, 0, Channel::pipeline, "a", milliseconds(100)).tag, "a");
  EXPECT_EQ(t.recv(1, 0, Channel::pipeline, "b", milliseconds(100)).bytes, 12);
  EXPECT_EQ(t.recv(0, 1, Channel::pipeline, "c", milliseconds(100)).bytes, 16);
}

TEST(InProcessTransport, CopiesThePayload) {
  InProcessTransport t;
  Message m = message("a", 4);
  const void* sent = m.tensors.front().second.data();
  t.send(0, 1, Channel::pipeline, std::move(m));
  const Message got = t.recv(1, 0, Channel::pipeline, "a", milliseconds(100));
  EXPECT_NE(got.tensors.front().second.data(), sent);
  EXPECT_EQ(got.tensors.front().first, "x");
}

TEST(InProcessTransport, RecvTimesOutNamingTheLinkAndTag) {
  InProcessTransport t;
  std::string error;
  const auto start = std::chrono::steady_clock::now();
  try {
    t.recv(2, 1, Channel::pipeline, "1F3", milliseconds(50));
  } catch (const Error& e) {
    error = e.what();
  }
  EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(50));
  EXPECT_EQ(error, "timed out after 50 ms waiting for '1F3' on the pipeline link 1->2");
}

TEST(InProcessTransport, CancelWakesWaitersAndResetClears) {
  InProcessTransport t;
  auto waiter = std::async(std::launch::async, [&] {
    return t.recv(1, 0, Channel::pipeline, "a", milliseconds(10000));
  });
  std::this_thread::sleep_for(milliseconds(20));
  t.cancel();
  EXPECT_THROW(waiter.get(), Error);
  t.send(0, 1, Channel::pipeline, message("stale", 1));
  t.reset();
  t.send(0, 1, Channel::pipeline, message("fresh", 1));
  EXPECT_EQ(t.recv(1, 0, Channel::pipeline, "fresh", milliseconds(100)).tag, "fresh");
}

TEST(CheckMessage, ChecksTagDeclaredSizeAndExpectedSize) {
  const Message good = message("0F1", 8);
  EXPECT_NO_THROW(check_message(good, "0F1", 32));
  EXPECT_NO_THROW(check_message(good, "0F1", -1));
  EXPECT_THROW(check_message(good, "0F2", 32), Error);
  EXPECT_THROW(check_message(good, "0F1", 36), Error);
  Message corrupt = good;
  corrupt.bytes += 4;
  try {
    check_message(corrupt, "0F1", -1);
    FAIL() << "corruption unnoticed";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "message '0F1' declares 36 bytes but carries 32 (corrupted)");
  }
}

TEST(FaultyTransport, TampersWithTheChosenMessageOnly) {
  FaultPlan plan;
  plan.corrupt_tag = 1;
  plan.corrupt_size = 2;
  plan.drop = 3;
  FaultyTransport t(std::make_unique<InProcessTransport>(), plan);
  for (const char* tag : {"a", "b", "c", "d", "e"})
    t.send(0, 1, Channel::pipeline, message(tag, 1));
  auto next = [&] { return t.recv(1, 0, Channel::pipeline, "?", milliseconds(100)); };
  EXPECT_EQ(next().tag, "a");
  EXPECT_EQ(next().tag, "b#corrupted");
  const Message c = next();
  EXPECT_NE(c.bytes, c.payload_bytes());
  EXPECT_EQ(next().tag, "e");  // "d" was dropped
}

}  // namespace
}  // namespace pipeplan
