// Host-memory tensors: the CPU reference backend's storage and the in-process transport's wire.
#pragma once

#include "runtime/backend.h"

namespace pipeplan {

// A zero-filled, 64-byte aligned host tensor.
Tensor host_zeros(const Shape& shape, DType dtype);
// A new host tensor with the same shape, dtype and contents.
Tensor host_copy(const Tensor& tensor);
// Throws Error naming `what` unless the tensor is a defined host tensor of this shape and dtype.
void check_tensor(const Tensor& tensor, const Shape& shape, DType dtype, std::string_view what);

}  // namespace pipeplan
