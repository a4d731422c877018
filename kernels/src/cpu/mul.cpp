#include "backends.hpp"
#include "cpu/binary.hpp"

namespace opforge::cpu {

// The float64 product of two float32 values is exact, so each result is the correctly rounded
// float product, as PyTorch computes it.
opforge_status mul(const ops::Mul& args) {
  broadcast_binary(*args.a, *args.b, *args.out, [](double x, double y) { return x * y; });
  return OPFORGE_OK;
}

}  // namespace opforge::cpu
