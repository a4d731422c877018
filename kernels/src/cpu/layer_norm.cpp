#include "backends.hpp"
#include "cpu/norm_rows.hpp"

namespace opforge::cpu {

opforge_status layer_norm(const ops::LayerNorm& args) {
  norm_forward<true>(*args.x, args.normalized_shape.size(), args.weight, args.bias, args.eps,
                     *args.y, args.mean, *args.rstd);
  return OPFORGE_OK;
}

opforge_status layer_norm_backward(const ops::LayerNormBackward& args) {
  norm_backward<true>(*args.dy, *args.x, args.normalized_shape.size(), args.mean, *args.rstd,
                      args.weight, *args.dx, *args.dweight, args.dbias);
  return OPFORGE_OK;
}

}  // namespace opforge::cpu
