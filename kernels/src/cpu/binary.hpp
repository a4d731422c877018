// The CPU loop of the broadcasting binary ops (add, mul): any strides, float64 arithmetic.
#pragma once

#include "common/broadcast.hpp"
#include "cpu/dispatch.hpp"

namespace opforge::cpu {

// out = f(a, b) elementwise, a and b broadcast against out's shape; f takes and returns double.
template <class F>
void broadcast_binary(const Tensor& a, const Tensor& b, Tensor& out, F&& f) {
  const std::vector<int64_t> sa = broadcast_strides(a, out.shape);
  const std::vector<int64_t> sb = broadcast_strides(b, out.shape);
  by_dtype(out.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* pa = a.ptr<T>();
    const T* pb = b.ptr<T>();
    T* po = out.ptr<T>();
    for_each_index<3>(out.shape, -1, {&sa, &sb, &out.strides}, [&](const auto& o) {
      const double value = f(double(to_float(pa[o[0]])), double(to_float(pb[o[1]])));
      po[o[2]] = from_float<T>(static_cast<float>(value));
    });
  });
}

}  // namespace opforge::cpu
