// Views the CPU and CUDA kernels share: how an op's checked arguments are seen by the loops.
#pragma once

#include "backends.hpp"

namespace opforge {

// A 0-d tensor seen as shape [1], so a reduction over "dim 0" has one element.
inline Tensor scalar_as_vector(const Tensor& t) {
  Tensor v = t;
  if (v.ndim() == 0) {
    v.shape = {1};
    v.strides = {1};
  }
  return v;
}

// A reduction's output seen with its input's rank: size 1 at `dim` (whose stride is never used).
inline Tensor with_reduced_dim(const Tensor& out, const Tensor& in, int dim) {
  Tensor v = out;
  if (v.ndim() != in.ndim()) {
    v.shape.insert(v.shape.begin() + dim, 1);
    v.strides.insert(v.strides.begin() + dim, 0);
  }
  return v;
}

// batch_norm's view of x: N×C×S (S the product of the spatial dims).
inline void set_batch_norm_shape(const Tensor& x, BatchNorm& bn) {
  bn.n = x.shape[0];
  bn.c = x.shape[1];
  bn.s = 1;
  for (int d = 2; d < x.ndim(); ++d) bn.s *= x.shape[d];
}

}  // namespace opforge
