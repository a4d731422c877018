// The implementations behind the C ABI, one namespace per device. Arguments arrive validated.
#pragma once

#include "tensor.hpp"

namespace opforge {
namespace cpu {
void add(const Tensor& a, const Tensor& b, double alpha, Tensor& out);
}  // namespace cpu

#ifdef OPFORGE_HAVE_CUDA
namespace cuda {
// Returns OPFORGE_OK or a failure already recorded with fail().
opforge_status add(const Tensor& a, const Tensor& b, double alpha, Tensor& out, void* stream);
}  // namespace cuda
#endif
}  // namespace opforge
