// The micro-batches an action or a task-graph node covers: one, except a concatenated P2.
// A small vector in 16 bytes with room for three inline, so that lowering a 48k-node plan does
// not make a heap allocation per node (it made two: the action's copy and the node's), and a
// node stays small (every pass over a plan's nodes reads it). Spills to the heap beyond three:
// the heap block's address and capacity then live in the inline slots. Converts to and from
// std::vector<int> for code that wants one.
#pragma once

#include <algorithm>
#include <array>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <vector>

namespace pipeplan {

class MicroBatches {
 public:
  using value_type = int;
  using size_type = std::size_t;
  using iterator = int*;
  using const_iterator = const int*;

  MicroBatches() noexcept = default;
  MicroBatches(std::initializer_list<int> values) { append(values.begin(), values.end()); }
  // NOLINTNEXTLINE(google-explicit-constructor): a drop-in for std::vector<int>
  MicroBatches(const std::vector<int>& values) {
    append(values.data(), values.data() + values.size());
  }
  MicroBatches(const MicroBatches& other) {
    if (other.on_heap()) {
      append(other.begin(), other.end());
    } else {
      slots_ = other.slots_;  // the common case (one micro-batch): a fixed-size copy
      size_ = other.size_;
    }
  }
  MicroBatches(MicroBatches&& other) noexcept { take(other); }
  MicroBatches& operator=(const MicroBatches& other) {
    if (this == &other) return *this;
    if (!on_heap() && !other.on_heap()) {
      slots_ = other.slots_;  // both inline: a fixed-size copy (lowering copies one per node)
      size_ = other.size_;
    } else {
      clear();
      append(other.begin(), other.end());
    }
    return *this;
  }
  MicroBatches& operator=(MicroBatches&& other) noexcept {
    if (this != &other) {
      release();
      take(other);
    }
    return *this;
  }
  ~MicroBatches() { release(); }
  // NOLINTNEXTLINE(google-explicit-constructor): a drop-in for std::vector<int>
  operator std::vector<int>() const { return {begin(), end()}; }

  int* data() noexcept { return on_heap() ? heap() : slots_.data(); }
  const int* data() const noexcept { return on_heap() ? heap() : slots_.data(); }
  iterator begin() noexcept { return data(); }
  iterator end() noexcept { return data() + size(); }
  const_iterator begin() const noexcept { return data(); }
  const_iterator end() const noexcept { return data() + size(); }
  std::size_t size() const noexcept { return size_ & ~kHeapBit; }
  bool empty() const noexcept { return size() == 0; }
  int& operator[](std::size_t i) noexcept { return data()[i]; }
  int operator[](std::size_t i) const noexcept { return data()[i]; }
  int front() const noexcept { return data()[0]; }
  int back() const noexcept { return data()[size() - 1]; }
  void clear() noexcept { size_ &= kHeapBit; }  // keeps the heap block, as a vector would
  void push_back(int value) {
    if (size() == capacity()) grow(2 * capacity());
    data()[size()] = value;
    ++size_;
  }

  // A loop rather than std::equal, which calls memcmp: the validator compares every message's
  // two halves, nearly all of one micro-batch.
  friend bool operator==(const MicroBatches& a, const MicroBatches& b) noexcept {
    if (a.size() != b.size()) return false;
    const int* x = a.data();
    const int* y = b.data();
    for (std::size_t i = 0; i < a.size(); ++i) {
      if (x[i] != y[i]) return false;
    }
    return true;
  }
  friend std::strong_ordering operator<=>(const MicroBatches& a, const MicroBatches& b) noexcept {
    return std::lexicographical_compare_three_way(a.begin(), a.end(), b.begin(), b.end());
  }

 private:
  static constexpr std::size_t kInline = 3;
  static constexpr std::uint32_t kHeapBit = 0x80000000U;  // in size_: the values are on the heap
  static_assert(sizeof(int*) <= 2 * sizeof(int), "a heap address fits two inline slots");

  bool on_heap() const noexcept { return (size_ & kHeapBit) != 0; }
  // On the heap, slots 0-1 hold the block's address and slot 2 its capacity.
  int* heap() const noexcept {
    int* block = nullptr;
    std::memcpy(static_cast<void*>(&block), slots_.data(), sizeof block);
    return block;
  }
  std::size_t capacity() const noexcept {
    return on_heap() ? static_cast<std::size_t>(slots_[2]) : kInline;
  }
  void append(const int* first, const int* last) {
    const auto count = static_cast<std::size_t>(last - first);
    if (size() + count > capacity()) grow(std::max(size() + count, 2 * capacity()));
    std::copy(first, last, data() + size());
    size_ += static_cast<std::uint32_t>(count);
  }
  void grow(std::size_t capacity) {
    int* bigger = new int[capacity];  // NOLINT(cppcoreguidelines-owning-memory): owned by slots_
    std::copy(begin(), end(), bigger);
    release();
    std::memcpy(static_cast<void*>(slots_.data()), static_cast<const void*>(&bigger),
                sizeof bigger);
    slots_[2] = static_cast<int>(capacity);
    size_ |= kHeapBit;
  }
  void release() noexcept {
    if (on_heap()) delete[] heap();  // NOLINT(cppcoreguidelines-owning-memory)
    size_ &= ~kHeapBit;
  }
  void take(MicroBatches& other) noexcept {
    slots_ = other.slots_;
    size_ = other.size_;
    other.size_ = 0;  // the block, if any, is this one's now
  }

  std::array<int, kInline> slots_{};
  std::uint32_t size_ = 0;  // the count, and kHeapBit when the values are on the heap
};

static_assert(sizeof(MicroBatches) == 16);

}  // namespace pipeplan
