// How an input of a broadcasting op is read against the output's shape (NumPy's rule): the
// CPU loops and the CUDA launchers both index inputs through these strides.
#pragma once

#include <cstdint>
#include <vector>

#include "common/tensor.hpp"

namespace opforge {

// The strides of `t` seen with `out_shape`: `t`'s dims aligned to the right, stride 0 along the
// dims `t` lacks or has with size 1 (those are repeated). The API layer has checked that `t`
// broadcasts to `out_shape`.
inline std::vector<int64_t> broadcast_strides(const Tensor& t, const std::vector<int64_t>& out_shape) {
  const size_t n = out_shape.size(), lead = n - t.shape.size();
  std::vector<int64_t> strides(n, 0);
  for (size_t d = lead; d < n; ++d) {
    if (t.shape[d - lead] != 1) strides[d] = t.strides[d - lead];
  }
  return strides;
}

}  // namespace opforge
