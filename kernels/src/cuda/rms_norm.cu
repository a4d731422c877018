// rms_norm and rms_norm_backward on CUDA: row_norm.cuh without centering.
#include "cuda/row_norm.cuh"
#include "ops_args.hpp"

namespace opforge::cuda {

opforge_status rms_norm(const ops::RmsNorm& args, void* stream) {
  return kit::norm_forward<false>("opforge_rms_norm", *args.x, args.normalized_shape.size(),
                                  args.weight, nullptr, args.eps, *args.y, nullptr, *args.rstd,
                                  stream);
}

opforge_status rms_norm_backward(const ops::RmsNormBackward& args, void* stream) {
  return kit::norm_backward<false>("opforge_rms_norm_backward", *args.dy, *args.x,
                                   args.normalized_shape.size(), nullptr, *args.rstd,
                                   args.weight, *args.dx, *args.dweight, nullptr, stream);
}

}  // namespace opforge::cuda
