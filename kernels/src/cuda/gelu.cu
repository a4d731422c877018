// gelu and gelu_backward on CUDA: PyTorch's formulas in float32 (erff and tanhf at full accuracy;
// the normal density's exp as one MUFU.EX2: 2 ulp, plus the rounding of its argument, which
// grows with |x| (about 8 ulp at |x| = 4); 0 below FLT_MIN), through
// elementwise.cuh's paths.
#include "cuda/elementwise.cuh"
#include "ops_args.hpp"

namespace opforge::cuda {
namespace {

constexpr float kSqrtHalf = 0.70710678118654752440f;    // 1/sqrt(2)
constexpr float kInvSqrt2Pi = 0.39894228040143267794f;  // 1/sqrt(2*pi)
constexpr float kBeta = 0.79788456080286535588f;        // sqrt(2/pi)
constexpr float kKappa = 0.044715f;

template <bool kTanh>
struct Gelu {
  static constexpr int kInputs = 1;
  __device__ float operator()(float x) const {
    if constexpr (kTanh) {
      return 0.5f * x * (1.0f + tanhf(kBeta * (x + kKappa * x * x * x)));
    } else {
      return x * 0.5f * (1.0f + erff(x * kSqrtHalf));
    }
  }
};

template <bool kTanh>
struct GeluBackward {
  static constexpr int kInputs = 2;
  __device__ float operator()(float dy, float x) const {
    if constexpr (kTanh) {
      const float t = tanhf(kBeta * (x + kKappa * x * x * x));
      const float dinner = kBeta * (1.0f + 3.0f * kKappa * x * x);
      return dy * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * dinner);
    } else {
      const float cdf = 0.5f * (1.0f + erff(x * kSqrtHalf));
      const float pdf = ex2_ftz(x * x * (-0.5f * kLog2e)) * kInvSqrt2Pi;
      return dy * (cdf + x * pdf);
    }
  }
};

}  // namespace

opforge_status gelu(const ops::Gelu& args, void* stream) {
  if (args.approximate == OPFORGE_GELU_APPROXIMATE_TANH) {
    return kit::elementwise("opforge_gelu", *args.y, *args.x, nullptr, Gelu<true>{}, stream);
  }
  return kit::elementwise("opforge_gelu", *args.y, *args.x, nullptr, Gelu<false>{}, stream);
}

opforge_status gelu_backward(const ops::GeluBackward& args, void* stream) {
  if (args.approximate == OPFORGE_GELU_BACKWARD_APPROXIMATE_TANH) {
    return kit::elementwise("opforge_gelu_backward", *args.dx, *args.dy, args.x,
                            GeluBackward<true>{}, stream);
  }
  return kit::elementwise("opforge_gelu_backward", *args.dx, *args.dy, args.x,
                          GeluBackward<false>{}, stream);
}

}  // namespace opforge::cuda
