// The micro-batches an action or a task-graph node covers: one, except a concatenated P2.
// A small vector with room for three inline, so that lowering a 48k-node plan does not make a
// heap allocation per node (it made two: the action's copy and the node's). Spills to the heap
// beyond three. Converts to and from std::vector<int> for code that wants one.
#pragma once

#include <algorithm>
#include <array>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
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
    if (other.heap_) {
      append(other.begin(), other.end());
    } else {
      // The common case (one micro-batch): a fixed-size copy, no memmove call.
      inline_ = other.inline_;
      size_ = other.size_;
    }
  }
  MicroBatches(MicroBatches&& other) noexcept { take(other); }
  MicroBatches& operator=(const MicroBatches& other) {
    if (this != &other) {
      size_ = 0;
      append(other.begin(), other.end());
    }
    return *this;
  }
  MicroBatches& operator=(MicroBatches&& other) noexcept {
    if (this != &other) take(other);
    return *this;
  }
  ~MicroBatches() = default;
  // NOLINTNEXTLINE(google-explicit-constructor): a drop-in for std::vector<int>
  operator std::vector<int>() const { return {begin(), end()}; }

  int* data() noexcept { return heap_ ? heap_.get() : inline_.data(); }
  const int* data() const noexcept { return heap_ ? heap_.get() : inline_.data(); }
  iterator begin() noexcept { return data(); }
  iterator end() noexcept { return data() + size_; }
  const_iterator begin() const noexcept { return data(); }
  const_iterator end() const noexcept { return data() + size_; }
  std::size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  int& operator[](std::size_t i) noexcept { return data()[i]; }
  int operator[](std::size_t i) const noexcept { return data()[i]; }
  int front() const noexcept { return data()[0]; }
  int back() const noexcept { return data()[size_ - 1]; }
  void clear() noexcept { size_ = 0; }
  void push_back(int value) {
    if (size_ == capacity_) grow(2 * static_cast<std::size_t>(capacity_));
    data()[size_++] = value;
  }

  friend bool operator==(const MicroBatches& a, const MicroBatches& b) noexcept {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
  }
  friend std::strong_ordering operator<=>(const MicroBatches& a, const MicroBatches& b) noexcept {
    return std::lexicographical_compare_three_way(a.begin(), a.end(), b.begin(), b.end());
  }

 private:
  static constexpr std::uint32_t kInline = 3;

  void append(const int* first, const int* last) {
    const auto count = static_cast<std::size_t>(last - first);
    if (size_ + count > capacity_) grow(size_ + count);
    std::copy(first, last, data() + size_);
    size_ += static_cast<std::uint32_t>(count);
  }
  void grow(std::size_t capacity) {
    auto bigger = std::make_unique<int[]>(capacity);
    std::copy(begin(), end(), bigger.get());
    heap_ = std::move(bigger);
    capacity_ = static_cast<std::uint32_t>(capacity);
  }
  void take(MicroBatches& other) noexcept {
    inline_ = other.inline_;
    heap_ = std::move(other.heap_);
    size_ = other.size_;
    capacity_ = other.capacity_;
    other.size_ = 0;
    other.capacity_ = kInline;
  }

  std::array<int, kInline> inline_{};
  std::unique_ptr<int[]> heap_;
  std::uint32_t size_ = 0;
  std::uint32_t capacity_ = kInline;
};

}  // namespace pipeplan
