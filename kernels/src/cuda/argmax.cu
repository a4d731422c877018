// argmax along a dim of a contiguous tensor: first index of the maximum, NaN counting as the
// maximum (the first NaN wins). Rows (inner == 1) stream through a warp or a block with 16-byte
// loads, several in flight per thread; a non-last dim uses one thread per column.
#include <climits>

#include "backends.hpp"
#include "cuda/common.cuh"

namespace opforge::cuda {
namespace {

constexpr int kUnroll = 4;
constexpr int kWarpRowsPerBlock = 4;
constexpr int kBlockThreads = 512;

struct Best {
  float value;
  int64_t index;
};

// The better of two candidates: NaN beats numbers, larger beats smaller, then the lower index.
__device__ __forceinline__ Best better(Best a, Best b) {
  const bool a_nan = a.value != a.value, b_nan = b.value != b.value;
  if (a_nan || b_nan) {
    if (a_nan && b_nan) return a.index < b.index ? a : b;
    return a_nan ? a : b;
  }
  if (a.value > b.value) return a;
  if (b.value > a.value) return b;
  return a.index < b.index ? a : b;
}

__device__ __forceinline__ Best warp_best(Best b) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    Best other{__shfl_xor_sync(0xffffffffu, b.value, o),
               static_cast<int64_t>(__shfl_xor_sync(0xffffffffu, static_cast<long long>(b.index), o))};
    b = better(b, other);
  }
  return b;
}

template <class T, int N, int TPR>
__global__ void __launch_bounds__(TPR == 32 ? 32 * kWarpRowsPerBlock : TPR)
    argmax_rows(const T* __restrict__ x, int64_t* __restrict__ out, int64_t rows, int64_t len) {
  using P = Pack<T, N>;
  const int lane = TPR == 32 ? (threadIdx.x & 31) : threadIdx.x;
  const int64_t row = TPR == 32 ? static_cast<int64_t>(blockIdx.x) * kWarpRowsPerBlock + (threadIdx.x >> 5)
                                : blockIdx.x;
  if (TPR == 32 && row >= rows) return;
  const P* px = reinterpret_cast<const P*>(x + row * len);
  const int64_t packs = len / N;
  Best best{-INFINITY, LLONG_MAX};
  for (int64_t start = lane; start < packs; start += static_cast<int64_t>(TPR) * kUnroll) {
    P v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t p = start + static_cast<int64_t>(u) * TPR;
      if (p < packs) v[u] = px[p];
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t p = start + static_cast<int64_t>(u) * TPR;
      if (p < packs) {
#pragma unroll
        for (int j = 0; j < N; ++j) best = better(best, Best{to_f(v[u].v[j]), p * N + j});
      }
    }
  }
  best = warp_best(best);
  if constexpr (TPR > 32) {
    __shared__ float values[TPR / 32];
    __shared__ int64_t indices[TPR / 32];
    if ((threadIdx.x & 31) == 0) {
      values[threadIdx.x >> 5] = best.value;
      indices[threadIdx.x >> 5] = best.index;
    }
    __syncthreads();
    if (threadIdx.x < 32) {
      best = threadIdx.x < TPR / 32 ? Best{values[threadIdx.x], indices[threadIdx.x]}
                                    : Best{-INFINITY, LLONG_MAX};
      best = warp_best(best);
    }
  }
  if (lane == 0) out[row] = best.index;
}

template <class T>
__global__ void argmax_columns(const T* __restrict__ x, int64_t* __restrict__ out, int64_t outer,
                               int64_t len, int64_t inner) {
  const int64_t column = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (column >= outer * inner) return;
  const int64_t base = (column / inner) * len * inner + column % inner;
  Best best{-INFINITY, LLONG_MAX};
  for (int64_t l = 0; l < len; ++l) best = better(best, Best{to_f(x[base + l * inner]), l});
  out[column] = best.index;
}

template <class T, int N>
void launch_rows(const T* x, int64_t* out, int64_t rows, int64_t len, cudaStream_t s) {
  if (len / N <= 32 * kUnroll * 2) {
    const int64_t blocks = (rows + kWarpRowsPerBlock - 1) / kWarpRowsPerBlock;
    argmax_rows<T, N, 32><<<blocks, 32 * kWarpRowsPerBlock, 0, s>>>(x, out, rows, len);
  } else {
    argmax_rows<T, N, kBlockThreads><<<rows, kBlockThreads, 0, s>>>(x, out, rows, len);
  }
}

}  // namespace

opforge_status argmax(const Tensor& x, int dim, Tensor& out, void* stream) {
  const RowShape r = row_shape(x, dim);
  if (out.numel() == 0) return OPFORGE_OK;
  if (r.outer * r.inner > INT32_MAX) {
    return fail(OPFORGE_ERROR_INVALID_ARGUMENT, "opforge_argmax: more than 2^31-1 rows");
  }
  DeviceGuard guard(x.device.device_id);
  if (guard.status() != cudaSuccess) return cuda_failure("opforge_argmax", "cudaSetDevice", guard.status());
  auto s = static_cast<cudaStream_t>(stream);
  return by_dtype(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.ptr<T>();
    int64_t* po = out.ptr<int64_t>();
    if (r.inner == 1) {
      constexpr int N = kVec<T>;
      if (r.len % N == 0 && aligned16(px)) {
        launch_rows<T, N>(px, po, r.outer, r.len, s);
      } else {
        launch_rows<T, 1>(px, po, r.outer, r.len, s);
      }
    } else {
      const int64_t columns = r.outer * r.inner;
      argmax_columns<T><<<(columns + 255) / 256, 256, 0, s>>>(px, po, r.outer, r.len, r.inner);
    }
    return check_launch("opforge_argmax");
  });
}

}  // namespace opforge::cuda
