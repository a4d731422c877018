// softmax forward and backward on contiguous tensors.
//
// Viewed as [outer, len, inner] around `dim`:
// - inner == 1 and the row fits in registers: each row is read once and written once
//   (forward: max, sum of exp, write; backward: dot(y, dy), write). A warp handles a short row,
//   a block a long one.
// - inner == 1 and a longer row: online max/sum in one read, then read again and write.
// - inner > 1: one thread per (outer, inner) column, reading along the strided dim.
#include "backends.hpp"
#include "cuda/common.cuh"

namespace opforge::cuda {
namespace {

constexpr int kMaxPacks = 8;      // packs of a row each thread keeps in registers
constexpr int kWarpRowsPerBlock = 4;
constexpr int kLongRowThreads = 512;

// Running (max, sum of exp(x - max)) of a stream of values; -inf values add nothing.
struct Online {
  float max = -INFINITY;
  float sum = 0.0f;
  bool nan = false;

  __device__ __forceinline__ void add(float v) {
    if (v != v) {
      nan = true;
    } else if (v > max) {
      sum = sum * __expf(max - v) + 1.0f;
      max = v;
    } else if (v != -INFINITY) {
      sum += __expf(v - max);
    }
  }

  __device__ __forceinline__ void merge(const Online& o) {
    nan = nan || o.nan;
    const float m = fmaxf(max, o.max);
    if (m == -INFINITY) return;
    sum = (max == -INFINITY ? 0.0f : sum * __expf(max - m)) +
          (o.max == -INFINITY ? 0.0f : o.sum * __expf(o.max - m));
    max = m;
  }

  // The max to subtract: NaN when the row held a NaN, so every output becomes NaN.
  __device__ __forceinline__ float shift() const { return nan ? NAN : max; }
};

template <int TPR>
__device__ __forceinline__ float row_max(float v, float* scratch) {
  return TPR == 32 ? warp_max(v) : block_reduce<true>(v, scratch);
}

template <int TPR>
__device__ __forceinline__ float row_sum(float v, float* scratch) {
  return TPR == 32 ? warp_sum(v) : block_reduce<false>(v, scratch);
}

// One row per TPR threads (a warp when TPR == 32, else the whole block), held in registers.
// Forward: in = x, out = y. Backward: in = y, grad = dy, out = dx.
template <class T, int N, int TPR, bool kBackward>
__global__ void __launch_bounds__(TPR == 32 ? 32 * kWarpRowsPerBlock : TPR)
    softmax_rows(const T* __restrict__ in, const T* __restrict__ grad, T* __restrict__ out,
                 int64_t rows, int64_t len) {
  __shared__ float scratch[32];
  using P = Pack<T, N>;
  const int lane = TPR == 32 ? (threadIdx.x & 31) : threadIdx.x;
  const int64_t row = TPR == 32 ? static_cast<int64_t>(blockIdx.x) * kWarpRowsPerBlock + (threadIdx.x >> 5)
                                : blockIdx.x;
  if (TPR == 32 && row >= rows) return;  // whole warps leave; no block-wide barrier follows
  const int64_t packs = len / N;
  const P* pin = reinterpret_cast<const P*>(in + row * len);
  const P* pgrad = reinterpret_cast<const P*>(grad + row * len);
  P* pout = reinterpret_cast<P*>(out + row * len);

  P v[kMaxPacks];
  P g[kBackward ? kMaxPacks : 1];
#pragma unroll
  for (int k = 0; k < kMaxPacks; ++k) {
    const int64_t p = lane + static_cast<int64_t>(k) * TPR;
    if (p < packs) {
      v[k] = pin[p];
      if constexpr (kBackward) g[k] = pgrad[p];
    }
  }

  if constexpr (kBackward) {
    float dot = 0.0f;
#pragma unroll
    for (int k = 0; k < kMaxPacks; ++k) {
      if (lane + static_cast<int64_t>(k) * TPR < packs) {
#pragma unroll
        for (int j = 0; j < N; ++j) dot += to_f(v[k].v[j]) * to_f(g[k].v[j]);
      }
    }
    dot = row_sum<TPR>(dot, scratch);
#pragma unroll
    for (int k = 0; k < kMaxPacks; ++k) {
      const int64_t p = lane + static_cast<int64_t>(k) * TPR;
      if (p < packs) {
        P r;
#pragma unroll
        for (int j = 0; j < N; ++j) r.v[j] = from_f<T>(to_f(v[k].v[j]) * (to_f(g[k].v[j]) - dot));
        pout[p] = r;
      }
    }
  } else {
    float m = -INFINITY;
#pragma unroll
    for (int k = 0; k < kMaxPacks; ++k) {
      if (lane + static_cast<int64_t>(k) * TPR < packs) {
#pragma unroll
        for (int j = 0; j < N; ++j) m = nan_max(m, to_f(v[k].v[j]));
      }
    }
    m = row_max<TPR>(m, scratch);
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < kMaxPacks; ++k) {
      if (lane + static_cast<int64_t>(k) * TPR < packs) {
#pragma unroll
        for (int j = 0; j < N; ++j) s += __expf(to_f(v[k].v[j]) - m);
      }
    }
    const float inv = 1.0f / row_sum<TPR>(s, scratch);
#pragma unroll
    for (int k = 0; k < kMaxPacks; ++k) {
      const int64_t p = lane + static_cast<int64_t>(k) * TPR;
      if (p < packs) {
        P r;
#pragma unroll
        for (int j = 0; j < N; ++j) r.v[j] = from_f<T>(__expf(to_f(v[k].v[j]) - m) * inv);
        pout[p] = r;
      }
    }
  }
}

// Rows too long for registers: one block per row, two reads and one write.
template <class T, bool kBackward>
__global__ void __launch_bounds__(kLongRowThreads)
    softmax_long_rows(const T* __restrict__ in, const T* __restrict__ grad, T* __restrict__ out,
                      int64_t len) {
  __shared__ float scratch[32];
  __shared__ Online parts[kLongRowThreads / 32];
  const int64_t base = static_cast<int64_t>(blockIdx.x) * len;
  if constexpr (kBackward) {
    float dot = 0.0f;
    for (int64_t i = threadIdx.x; i < len; i += blockDim.x) {
      dot += to_f(in[base + i]) * to_f(grad[base + i]);
    }
    dot = block_reduce<false>(dot, scratch);
    for (int64_t i = threadIdx.x; i < len; i += blockDim.x) {
      out[base + i] = from_f<T>(to_f(in[base + i]) * (to_f(grad[base + i]) - dot));
    }
  } else {
    Online acc;
    for (int64_t i = threadIdx.x; i < len; i += blockDim.x) acc.add(to_f(in[base + i]));
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      Online other;
      other.max = __shfl_xor_sync(0xffffffffu, acc.max, o);
      other.sum = __shfl_xor_sync(0xffffffffu, acc.sum, o);
      other.nan = __shfl_xor_sync(0xffffffffu, acc.nan, o);
      acc.merge(other);
    }
    if ((threadIdx.x & 31) == 0) parts[threadIdx.x >> 5] = acc;
    __syncthreads();
    Online total;
    for (int w = 0; w < static_cast<int>(blockDim.x >> 5); ++w) total.merge(parts[w]);
    const float m = total.shift();
    const float inv = 1.0f / total.sum;
    for (int64_t i = threadIdx.x; i < len; i += blockDim.x) {
      out[base + i] = from_f<T>(__expf(to_f(in[base + i]) - m) * inv);
    }
  }
}

// Softmax over a non-last dim: one thread per (outer, inner) column.
template <class T, bool kBackward>
__global__ void softmax_columns(const T* __restrict__ in, const T* __restrict__ grad,
                                T* __restrict__ out, int64_t outer, int64_t len, int64_t inner) {
  const int64_t column = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (column >= outer * inner) return;
  const int64_t base = (column / inner) * len * inner + column % inner;
  if constexpr (kBackward) {
    float dot = 0.0f;
    for (int64_t l = 0; l < len; ++l) dot += to_f(in[base + l * inner]) * to_f(grad[base + l * inner]);
    for (int64_t l = 0; l < len; ++l) {
      const int64_t i = base + l * inner;
      out[i] = from_f<T>(to_f(in[i]) * (to_f(grad[i]) - dot));
    }
  } else {
    Online acc;
    for (int64_t l = 0; l < len; ++l) acc.add(to_f(in[base + l * inner]));
    const float m = acc.shift();
    const float inv = 1.0f / acc.sum;
    for (int64_t l = 0; l < len; ++l) {
      const int64_t i = base + l * inner;
      out[i] = from_f<T>(__expf(to_f(in[i]) - m) * inv);
    }
  }
}

template <class T, int N, bool kBackward>
void launch_rows(const T* in, const T* grad, T* out, int64_t rows, int64_t len, cudaStream_t s) {
  const int64_t packs = len / N;
  if (packs <= 32 * kMaxPacks) {
    const int64_t blocks = (rows + kWarpRowsPerBlock - 1) / kWarpRowsPerBlock;
    softmax_rows<T, N, 32, kBackward><<<blocks, 32 * kWarpRowsPerBlock, 0, s>>>(in, grad, out, rows, len);
  } else if (packs <= 256 * kMaxPacks) {
    softmax_rows<T, N, 256, kBackward><<<rows, 256, 0, s>>>(in, grad, out, rows, len);
  } else if (packs <= kLongRowThreads * kMaxPacks) {
    softmax_rows<T, N, kLongRowThreads, kBackward><<<rows, kLongRowThreads, 0, s>>>(in, grad, out, rows, len);
  } else {
    softmax_long_rows<T, kBackward><<<rows, kLongRowThreads, 0, s>>>(in, grad, out, len);
  }
}

template <bool kBackward>
opforge_status softmax(const char* op, const Tensor& in, const Tensor* grad, int dim, Tensor& out,
                       void* stream) {
  const RowShape r = row_shape(in, dim);
  if (out.numel() == 0 || r.len == 0) return OPFORGE_OK;
  if (r.outer * r.inner > INT32_MAX) {
    return fail(OPFORGE_ERROR_INVALID_ARGUMENT, std::string(op) + ": more than 2^31-1 rows");
  }
  DeviceGuard guard(in.device.device_id);
  if (guard.status() != cudaSuccess) return cuda_failure(op, "cudaSetDevice", guard.status());
  auto s = static_cast<cudaStream_t>(stream);
  return by_dtype(in.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* pin = in.ptr<T>();
    const T* pgrad = grad ? grad->ptr<T>() : nullptr;
    T* pout = out.ptr<T>();
    if (r.inner == 1) {
      constexpr int N = kVec<T>;
      const bool vector = r.len % N == 0 && aligned16(pin) && aligned16(pout) &&
                          (pgrad == nullptr || aligned16(pgrad));
      if (vector) {
        launch_rows<T, N, kBackward>(pin, pgrad, pout, r.outer, r.len, s);
      } else {
        launch_rows<T, 1, kBackward>(pin, pgrad, pout, r.outer, r.len, s);
      }
    } else {
      const int64_t columns = r.outer * r.inner;
      softmax_columns<T, kBackward><<<(columns + 255) / 256, 256, 0, s>>>(pin, pgrad, pout, r.outer,
                                                                          r.len, r.inner);
    }
    return check_launch(op);
  });
}

}  // namespace

opforge_status softmax_forward(const Tensor& x, int dim, Tensor& y, void* stream) {
  return softmax<false>("opforge_softmax_forward", x, nullptr, dim, y, stream);
}

opforge_status softmax_backward(const Tensor& y, const Tensor& dy, int dim, Tensor& dx,
                                void* stream) {
  return softmax<true>("opforge_softmax_backward", y, &dy, dim, dx, stream);
}

}  // namespace opforge::cuda
