// layer_norm and layer_norm_backward on CUDA: row_norm.cuh with the mean subtracted.
#include "cuda/row_norm.cuh"
#include "ops_args.hpp"

namespace opforge::cuda {

opforge_status layer_norm(const ops::LayerNorm& args, void* stream) {
  return kit::norm_forward<true>("opforge_layer_norm", *args.x, args.normalized_shape.size(),
                                 args.weight, args.bias, args.eps, *args.y, args.mean,
                                 *args.rstd, stream);
}

opforge_status layer_norm_backward(const ops::LayerNormBackward& args, void* stream) {
  return kit::norm_backward<true>("opforge_layer_norm_backward", *args.dy, *args.x,
                                  args.normalized_shape.size(), args.mean, *args.rstd,
                                  args.weight, *args.dx, *args.dweight, args.dbias, stream);
}

}  // namespace opforge::cuda
