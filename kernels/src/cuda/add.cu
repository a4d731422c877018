// add on CUDA: out = a + alpha * b, a and b broadcast against each other; the paths (flat,
// scalar, periodic bias, any strides) are elementwise.cuh's.
#include "cuda/elementwise.cuh"
#include "ops_args.hpp"

namespace opforge::cuda {
namespace {

struct AddOp {
  static constexpr int kInputs = 2;
  float alpha;
  __device__ float operator()(float a, float b) const { return a + alpha * b; }
};

}  // namespace

opforge_status add(const ops::Add& args, void* stream) {
  return kit::elementwise("opforge_add", *args.out, *args.a, args.b,
                          AddOp{static_cast<float>(args.alpha)}, stream);
}

}  // namespace opforge::cuda
