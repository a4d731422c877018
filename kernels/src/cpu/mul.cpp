#include "backends.hpp"
#include "cpu/binary.hpp"

namespace opforge::cpu {

// The float64 product of two float32 values is exact, so with scale 1 each result is the
// correctly rounded float product, as PyTorch computes it. scale is a number operand read in
// float32 (b is then 1): its product with a float32 value is exact in float64 too, and is
// rounded to float32 first, then to the output's dtype, as the frameworks' kernels compute
// x * number in float32 and round the float32 result to float16 or bfloat16.
opforge_status mul(const ops::Mul& args) {
  const double scale = static_cast<float>(args.scale);
  if (scale == 1.0) {
    broadcast_binary(*args.a, *args.b, *args.out, [](double x, double y) { return x * y; });
  } else {
    broadcast_binary(*args.a, *args.b, *args.out, [scale](double x, double y) {
      return static_cast<double>(static_cast<float>(x * y * scale));
    });
  }
  return OPFORGE_OK;
}

}  // namespace opforge::cpu
