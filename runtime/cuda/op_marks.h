// Optional GPU timing of the ops inside a layer pass (bench_block --breakdown): CUDA events
// around each GEMM (forward, p1, p2 and p2's row gather), the attention core and the memory-bound
// kernels (norms, RoPE, SwiGLU), recorded on the context's stream while a DeviceContext has an
// OpMarks set (DeviceContext::set_op_marks). Nothing is recorded otherwise: the default path pays
// one null check per op. What the marks do not cover (launch gaps, event overhead) is the pass's
// time minus their sum.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "runtime/cuda/context.h"

namespace pipeplan::cuda {

class OpMarks {
 public:
  OpMarks() = default;
  ~OpMarks();
  OpMarks(const OpMarks&) = delete;
  OpMarks& operator=(const OpMarks&) = delete;

  // A new mark: records its start on `stream`; returns its index for end().
  std::size_t begin(std::string label, double flops, double bytes, cudaStream_t stream);
  // Records the mark's end; returns the status instead of throwing (it runs in destructors).
  cudaError_t end(std::size_t index, cudaStream_t stream) noexcept;

  struct Timing {
    std::string label;
    double flops = 0;  // model FLOPs of the op (0: not a FLOP count, e.g. a copy)
    double bytes = 0;  // HBM bytes a memory-bound op must read and write at least (0: not given)
    double ms = 0;
  };
  // The marks recorded since the last collect(), in recording order, once the last has
  // completed (waits for it); the events are kept for the next marks.
  std::vector<Timing> collect();

 private:
  struct Record {
    std::string label;
    double flops = 0, bytes = 0;
    cudaEvent_t start = nullptr, stop = nullptr;
  };
  std::vector<Record> records_;
  std::size_t used_ = 0;
};

// Marks one op for its scope when the context has marks set; does nothing otherwise (`label`, a
// callable returning the op's name, is then not called: no string is built on the default path).
class OpMark {
 public:
  template <typename Label>
  OpMark(DeviceContext& ctx, Label&& label, double flops, double bytes = 0)
      : marks_(ctx.op_marks()) {
    if (marks_ != nullptr) {
      stream_ = ctx.stream();
      index_ = marks_->begin(label(), flops, bytes, stream_);
    }
  }
  ~OpMark() {
    if (marks_ != nullptr) (void)marks_->end(index_, stream_);  // a failure shows in collect()
  }
  OpMark(const OpMark&) = delete;
  OpMark& operator=(const OpMark&) = delete;

 private:
  OpMarks* marks_ = nullptr;
  cudaStream_t stream_ = nullptr;
  std::size_t index_ = 0;
};

}  // namespace pipeplan::cuda
