// Any-stride indexing on the device: K tensors of one shape (tensor 0 the one written) walked
// in one order, with the shape reduced to as few dims as the strides allow.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <numeric>
#include <vector>

#include "opforge/opforge.h"

namespace opforge::cuda::kit {

constexpr int kMaxDims = OPFORGE_MAX_NDIM;

// A shape and the strides (in elements, any sign, 0 for repeated reads) of K tensors over it.
template <int K>
struct Strided {
  int ndim = 0;
  int64_t size[kMaxDims] = {};
  int64_t stride[K][kMaxDims] = {};
};

// `shape` with the strides of K tensors, reordered so that tensor 0's strides decrease (its
// writes then run through memory in order), size-1 dims dropped and neighbouring dims merged
// where every tensor steps through them as through one dim.
template <int K>
Strided<K> coalesce(const std::vector<int64_t>& shape,
                    const std::array<const std::vector<int64_t>*, K>& strides) {
  const std::vector<int64_t>& s0 = *strides[0];
  std::vector<int> dims;
  for (int d = 0; d < static_cast<int>(shape.size()); ++d) {
    if (shape[d] != 1) dims.push_back(d);
  }
  auto magnitude = [](int64_t v) { return v < 0 ? -v : v; };
  std::stable_sort(dims.begin(), dims.end(),
                   [&](int a, int b) { return magnitude(s0[a]) > magnitude(s0[b]); });
  Strided<K> out;
  for (const int d : dims) {
    if (out.ndim > 0) {
      const int last = out.ndim - 1;
      bool merge = true;
      for (int k = 0; k < K; ++k) merge = merge && out.stride[k][last] == (*strides[k])[d] * shape[d];
      if (merge) {
        out.size[last] *= shape[d];
        for (int k = 0; k < K; ++k) out.stride[k][last] = (*strides[k])[d];
        continue;
      }
    }
    out.size[out.ndim] = shape[d];
    for (int k = 0; k < K; ++k) out.stride[k][out.ndim] = (*strides[k])[d];
    ++out.ndim;
  }
  return out;
}

// Whether `count` elements and every tensor's farthest element fit 32-bit index arithmetic.
template <int K>
bool fits_int32(const Strided<K>& s, int64_t count) {
  if (count > INT32_MAX) return false;
  for (int k = 0; k < K; ++k) {
    int64_t reach = 0;
    for (int d = 0; d < s.ndim; ++d) {
      reach += (s.size[d] - 1) * (s.stride[k][d] < 0 ? -s.stride[k][d] : s.stride[k][d]);
    }
    if (reach > INT32_MAX) return false;
  }
  return true;
}

// Row-major strides of `shape`.
inline std::vector<int64_t> row_major(const std::vector<int64_t>& shape) {
  std::vector<int64_t> strides(shape.size());
  int64_t running = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    strides[d] = running;
    running *= shape[d];
  }
  return strides;
}

// Element offsets, in each of the K tensors, of element `i` of the walk (I: uint32_t or
// uint64_t; offsets in the signed type of the same width).
template <int K, class I, class O>
__device__ __forceinline__ void offsets_of(const Strided<K>& s, I i, O (&off)[K]) {
#pragma unroll
  for (int k = 0; k < K; ++k) off[k] = 0;
#pragma unroll
  for (int d = kMaxDims - 1; d >= 0; --d) {
    if (d < s.ndim) {
      const I size = static_cast<I>(s.size[d]);
      const O index = static_cast<O>(i % size);
      i /= size;
#pragma unroll
      for (int k = 0; k < K; ++k) off[k] += index * static_cast<O>(s.stride[k][d]);
    }
  }
}

}  // namespace opforge::cuda::kit
