// gelu and its backward in float64, PyTorch's formulas (so inf and NaN inputs give what
// PyTorch gives: gelu(-inf) is NaN, as -inf * 0).
#include <cmath>

#include "backends.hpp"
#include "cpu/dispatch.hpp"

namespace opforge::cpu {
namespace {

constexpr double kSqrtHalf = 0.70710678118654752440;     // 1/sqrt(2)
constexpr double kInvSqrt2Pi = 0.39894228040143267794;   // 1/sqrt(2*pi)
constexpr double kBeta = 0.79788456080286535588;         // sqrt(2/pi)
constexpr double kKappa = 0.044715;

double gelu_value(double x, bool tanh_form) {
  if (tanh_form) return 0.5 * x * (1.0 + std::tanh(kBeta * (x + kKappa * x * x * x)));
  return x * 0.5 * (1.0 + std::erf(x * kSqrtHalf));
}

double gelu_derivative(double x, bool tanh_form) {
  if (tanh_form) {
    const double t = std::tanh(kBeta * (x + kKappa * x * x * x));
    const double dinner = kBeta * (1.0 + 3.0 * kKappa * x * x);
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * dinner;
  }
  const double cdf = 0.5 * (1.0 + std::erf(x * kSqrtHalf));
  const double pdf = std::exp(-0.5 * x * x) * kInvSqrt2Pi;
  return cdf + x * pdf;
}

}  // namespace

opforge_status gelu(const ops::Gelu& args) {
  const Tensor& x = *args.x;
  Tensor& y = *args.y;
  const bool tanh_form = args.approximate == OPFORGE_GELU_APPROXIMATE_TANH;
  by_dtype(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.ptr<T>();
    T* py = y.ptr<T>();
    for_each_index<2>(x.shape, -1, {&x.strides, &y.strides}, [&](const auto& o) {
      const double v = gelu_value(to_float(px[o[0]]), tanh_form);
      py[o[1]] = from_float<T>(static_cast<float>(v));
    });
  });
  return OPFORGE_OK;
}

opforge_status gelu_backward(const ops::GeluBackward& args) {
  const Tensor& dy = *args.dy;
  const Tensor& x = *args.x;
  Tensor& dx = *args.dx;
  const bool tanh_form = args.approximate == OPFORGE_GELU_BACKWARD_APPROXIMATE_TANH;
  by_dtype(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* pdy = dy.ptr<T>();
    const T* px = x.ptr<T>();
    T* pdx = dx.ptr<T>();
    for_each_index<3>(x.shape, -1, {&dy.strides, &x.strides, &dx.strides}, [&](const auto& o) {
      const double v = double(to_float(pdy[o[0]])) * gelu_derivative(to_float(px[o[1]]), tanh_form);
      pdx[o[2]] = from_float<T>(static_cast<float>(v));
    });
  });
  return OPFORGE_OK;
}

}  // namespace opforge::cpu
