#include "backends.hpp"
#include "cpu/norm_rows.hpp"

namespace opforge::cpu {

opforge_status rms_norm(const ops::RmsNorm& args) {
  norm_forward<false>(*args.x, args.normalized_shape.size(), args.weight, nullptr, args.eps,
                      *args.y, nullptr, *args.rstd);
  return OPFORGE_OK;
}

opforge_status rms_norm_backward(const ops::RmsNormBackward& args) {
  norm_backward<false>(*args.dy, *args.x, args.normalized_shape.size(), nullptr, *args.rstd,
                       args.weight, *args.dx, *args.dweight, nullptr);
  return OPFORGE_OK;
}

}  // namespace opforge::cpu
