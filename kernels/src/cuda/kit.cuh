// What the elementwise and normalisation kernels (add, mul, gelu, layer_norm, rms_norm) add to
// common.cuh: packs of any width read and written as floats, and grid sizes for grid-stride
// loops.
#pragma once

#include <cstdint>

#include "cuda/common.cuh"

namespace opforge::cuda::kit {

// V consecutive elements at p as floats, read in accesses of at most 16 bytes (p must be
// aligned to min(16, V * sizeof(T)) bytes).
template <class T, int V>
__device__ __forceinline__ void load_floats(const T* p, float (&out)[V]) {
  constexpr int kChunk = V < kVec<T> ? V : kVec<T>;
  using P = Pack<T, kChunk>;
#pragma unroll
  for (int c = 0; c < V / kChunk; ++c) {
    const P pack = reinterpret_cast<const P*>(p)[c];
#pragma unroll
    for (int j = 0; j < kChunk; ++j) out[c * kChunk + j] = pack_f(pack, j);
  }
}

// Stores V floats as T at p, in accesses of at most 16 bytes (alignment as load_floats).
template <class T, int V>
__device__ __forceinline__ void store_floats(T* p, const float (&in)[V]) {
  constexpr int kChunk = V < kVec<T> ? V : kVec<T>;
#pragma unroll
  for (int c = 0; c < V / kChunk; ++c) {
    float chunk[kChunk];
#pragma unroll
    for (int j = 0; j < kChunk; ++j) chunk[j] = in[c * kChunk + j];
    store_global(p + c * kChunk, to_pack<T, kChunk>(chunk));
  }
}

// Blocks of a grid-stride launch: enough to cover `work` items of `per_block`, at most `cap`.
inline unsigned grid_for(int64_t work, int64_t per_block, int64_t cap = INT32_MAX) {
  const int64_t blocks = ceil_div(work, per_block);
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > cap ? cap : blocks));
}

}  // namespace opforge::cuda::kit
