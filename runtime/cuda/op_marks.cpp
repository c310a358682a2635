#include "runtime/cuda/op_marks.h"

#include <utility>

#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/green_context.h"

namespace pipeplan::cuda {

OpMarks::~OpMarks() {
  for (const Record& record : records_) {  // no throwing from a destructor
    if (record.start != nullptr) cudaEventDestroy(record.start);
    if (record.stop != nullptr) cudaEventDestroy(record.stop);
  }
}

std::size_t OpMarks::begin(std::string label, double flops, double bytes, cudaStream_t stream) {
  if (used_ == records_.size()) {
    // In the stream's context (a green context's streams are not the primary's); kept in
    // records_ at once, so the destructor frees them whatever fails next.
    records_.emplace_back();
    records_.back().start = create_event_for(stream, cudaEventDefault);
    records_.back().stop = create_event_for(stream, cudaEventDefault);
  }
  Record& record = records_[used_];
  record.label = std::move(label);
  record.flops = flops;
  record.bytes = bytes;
  CUDA_CHECK(cudaEventRecord(record.start, stream));
  return used_++;
}

cudaError_t OpMarks::end(std::size_t index, cudaStream_t stream) noexcept {
  if (index >= records_.size()) return cudaErrorInvalidValue;
  return cudaEventRecord(records_[index].stop, stream);
}

std::vector<OpMarks::Timing> OpMarks::collect() {
  std::vector<Timing> timings;
  const std::size_t used = std::exchange(used_, 0);  // forgotten even if a check below throws
  if (used == 0) return timings;
  CUDA_CHECK(cudaEventSynchronize(records_[used - 1].stop));
  for (std::size_t i = 0; i < used; ++i) {
    const Record& record = records_[i];
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, record.start, record.stop));
    timings.push_back({record.label, record.flops, record.bytes, static_cast<double>(ms)});
  }
  return timings;
}

}  // namespace pipeplan::cuda
