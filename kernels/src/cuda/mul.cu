// mul on CUDA: out = a * b, a and b broadcast against each other; the paths (flat, scalar,
// periodic bias, any strides) are elementwise.cuh's.
#include "cuda/elementwise.cuh"
#include "ops_args.hpp"

namespace opforge::cuda {
namespace {

struct MulOp {
  static constexpr int kInputs = 2;
  __device__ float operator()(float a, float b) const { return a * b; }
};

}  // namespace

opforge_status mul(const ops::Mul& args, void* stream) {
  return kit::elementwise("opforge_mul", *args.out, *args.a, args.b, MulOp{}, stream);
}

}  // namespace opforge::cuda
