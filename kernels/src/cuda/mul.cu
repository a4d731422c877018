// mul on CUDA: out = a * b * scale, a and b broadcast against each other; the paths (flat,
// scalar, periodic bias, any strides) are elementwise.cuh's.
#include "cuda/elementwise.cuh"
#include "ops_args.hpp"

namespace opforge::cuda {
namespace {

struct MulOp {
  static constexpr int kInputs = 2;
  float scale;
  __device__ float operator()(float a, float b) const { return a * b * scale; }
};

}  // namespace

opforge_status mul(const ops::Mul& args, void* stream) {
  return kit::elementwise("opforge_mul", *args.out, *args.a, args.b,
                          MulOp{static_cast<float>(args.scale)}, stream);
}

}  // namespace opforge::cuda
