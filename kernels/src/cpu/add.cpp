#include "backends.hpp"
#include "cpu/binary.hpp"

namespace opforge::cpu {

opforge_status add(const ops::Add& args) {
  const Tensor& a = *args.a;
  const Tensor& b = *args.b;
  Tensor& out = *args.out;
  const double alpha = args.alpha;
  const int64_t n = out.numel();
  if (out.dtype == DType::kFloat32 && a.numel() == n && b.numel() == n && a.contiguous() &&
      b.contiguous() && out.contiguous()) {
    // No broadcasting and one layout: a plain loop the compiler vectorises. The same float64
    // arithmetic as broadcast_binary, so that a result does not depend on its operands' layout
    // (float arithmetic here differed from it by an ulp where alpha != 1).
    const float* pa = a.ptr<float>();
    const float* pb = b.ptr<float>();
    float* po = out.ptr<float>();
    for (int64_t i = 0; i < n; ++i) {
      po[i] = static_cast<float>(static_cast<double>(pa[i]) + alpha * static_cast<double>(pb[i]));
    }
    return OPFORGE_OK;
  }
  broadcast_binary(a, b, out, [alpha](double x, double y) { return x + alpha * y; });
  return OPFORGE_OK;
}

}  // namespace opforge::cpu
