#include "backends.hpp"
#include "cpu/dispatch.hpp"

namespace opforge::cpu {

opforge_status add(const ops::Add& args) {
  const Tensor& a = *args.a;
  const Tensor& b = *args.b;
  Tensor& out = *args.out;
  const double alpha = args.alpha;
  if (out.dtype == DType::kFloat32 && a.contiguous() && b.contiguous() && out.contiguous()) {
    // The common case as a plain loop the compiler vectorises; float arithmetic stays within
    // one rounding of the float64 result.
    const float* pa = a.ptr<float>();
    const float* pb = b.ptr<float>();
    float* po = out.ptr<float>();
    const float al = static_cast<float>(alpha);
    const int64_t n = out.numel();
    for (int64_t i = 0; i < n; ++i) po[i] = pa[i] + al * pb[i];
    return OPFORGE_OK;
  }
  by_dtype(out.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* pa = a.ptr<T>();
    const T* pb = b.ptr<T>();
    T* po = out.ptr<T>();
    for_each_index<3>(out.shape, -1, {&a.strides, &b.strides, &out.strides}, [&](const auto& o) {
      const double value = double(to_float(pa[o[0]])) + alpha * double(to_float(pb[o[1]]));
      po[o[2]] = from_float<T>(static_cast<float>(value));
    });
  });
  return OPFORGE_OK;
}

}  // namespace opforge::cpu
