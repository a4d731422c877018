// Calling a template once per storage dtype on the CPU.
#pragma once

#include "common/dtype.hpp"

namespace opforge::cpu {

// Calls f(T{}) with T the storage type of `dtype` (float, Half or BFloat16).
template <class F>
void by_dtype(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kFloat32: f(float{}); break;
    case DType::kFloat16: f(Half{}); break;
    case DType::kBFloat16: f(BFloat16{}); break;
    default: break;  // rejected by the API layer before any backend runs
  }
}

}  // namespace opforge::cpu
