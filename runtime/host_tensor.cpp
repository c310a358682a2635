#include "runtime/host_tensor.h"

#include <cstdlib>
#include <cstring>
#include <string>

namespace pipeplan {

namespace {
constexpr std::size_t kAlignment = 64;  // one cache line; also the widest SIMD register
}  // namespace

Tensor host_zeros(const Shape& shape, DType dtype) {
  for (const std::int64_t extent : shape) {
    if (extent < 0) throw Error("negative extent in shape " + shape_string(shape));
  }
  const auto bytes = static_cast<std::size_t>(shape_numel(shape) * dtype_bytes(dtype));
  // aligned_alloc wants a multiple of the alignment; never ask for 0 bytes (a null handle would
  // read as "undefined").
  const std::size_t padded = (bytes / kAlignment + 1) * kAlignment;
  void* storage = std::aligned_alloc(kAlignment, padded);
  if (storage == nullptr) throw Error("out of host memory allocating " + std::to_string(bytes));
  std::memset(storage, 0, padded);
  return Tensor(std::shared_ptr<void>(storage, std::free), shape, dtype, Device::cpu);
}

Tensor host_copy(const Tensor& tensor) {
  Tensor copy = host_zeros(tensor.shape(), tensor.dtype());
  std::memcpy(copy.data(), tensor.data(), static_cast<std::size_t>(tensor.bytes()));
  return copy;
}

void check_tensor(const Tensor& tensor, const Shape& shape, DType dtype, std::string_view what) {
  if (!tensor.defined()) throw Error(std::string(what) + " is undefined");
  if (tensor.device() != Device::cpu) throw Error(std::string(what) + " is not in host memory");
  if (tensor.shape() != shape || tensor.dtype() != dtype) {
    throw Error(std::string(what) + " is " + shape_string(tensor.shape()) + " " +
                std::string(to_string(tensor.dtype())) + ", expected " + shape_string(shape) + " " +
                std::string(to_string(dtype)));
  }
}

}  // namespace pipeplan
