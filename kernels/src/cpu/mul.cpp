#include "backends.hpp"
#include "cpu/binary.hpp"

namespace opforge::cpu {

// The float64 product of two float32 values is exact, and so is its product with scale (a
// float32 value; 1, or a number operand with b then 1), so each result is the exact product
// rounded once to float32, then to the output's dtype: as PyTorch and MindSpore compute a * b,
// and x * number in float32 rounded to float16 or bfloat16.
opforge_status mul(const ops::Mul& args) {
  const double scale = static_cast<float>(args.scale);
  broadcast_binary(*args.a, *args.b, *args.out, [scale](double x, double y) {
    return static_cast<double>(static_cast<float>(x * y * scale));
  });
  return OPFORGE_OK;
}

}  // namespace opforge::cpu
