#include "runtime/cuda/op_marks.h"

#include "runtime/cuda/context.h"
#include "runtime/cuda/cuda_check.h"

namespace pipeplan::cuda {

OpMarks::~OpMarks() {
  for (const Record& record : records_) {  // no throwing from a destructor
    if (record.start != nullptr) cudaEventDestroy(record.start);
    if (record.stop != nullptr) cudaEventDestroy(record.stop);
  }
}

std::size_t OpMarks::begin(std::string label, double flops, cudaStream_t stream) {
  if (used_ == records_.size()) {
    Record record;
    CUDA_CHECK(cudaEventCreate(&record.start));
    CUDA_CHECK(cudaEventCreate(&record.stop));
    records_.push_back(record);
  }
  Record& record = records_[used_];
  record.label = std::move(label);
  record.flops = flops;
  CUDA_CHECK(cudaEventRecord(record.start, stream));
  return used_++;
}

cudaError_t OpMarks::end(std::size_t index, cudaStream_t stream) noexcept {
  if (index >= records_.size()) return cudaErrorInvalidValue;
  return cudaEventRecord(records_[index].stop, stream);
}

std::vector<OpMarks::Timing> OpMarks::collect() {
  std::vector<Timing> timings;
  if (used_ == 0) return timings;
  CUDA_CHECK(cudaEventSynchronize(records_[used_ - 1].stop));
  for (std::size_t i = 0; i < used_; ++i) {
    const Record& record = records_[i];
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, record.start, record.stop));
    timings.push_back({record.label, record.flops, static_cast<double>(ms)});
  }
  used_ = 0;
  return timings;
}

OpMarks* op_marks_of(DeviceContext& ctx) {
  return ctx.op_marks();
}
cudaStream_t stream_of(DeviceContext& ctx) {
  return ctx.stream();
}

}  // namespace pipeplan::cuda
