// Elementwise ops of one or two inputs with broadcasting (add, mul, gelu, gelu_backward): out =
// f(in0[, in1]) in float32, stored in the tensors' dtype. The launcher picks, in order:
// - flat: output and inputs contiguous with the output's shape: 16-byte accesses when aligned;
// - scalar: one input a single element, the other flat: the same, with the scalar in a register;
// - period: one input repeats with period C along a contiguous output (a (C,) bias on (N, C)):
//   each thread keeps its slice of that input in registers and walks down the rows;
// - strided: anything else (any strides: transposed, sliced, negative, zero), 32-bit index
//   arithmetic where the extents allow.
// An op is a functor with `static constexpr int kInputs` (1 or 2) and
// `__device__ float operator()(float[, float]) const`.
#pragma once

#include <array>
#include <vector>

#include "common/broadcast.hpp"
#include "cuda/kit.cuh"
#include "cuda/strided.cuh"

namespace opforge::cuda::kit {

constexpr int kEwThreads = 256;
// 16-byte loads in flight per thread and input. 2, not 4: with 4, the fewer threads of the
// compute-heavy bfloat16 gelu_backward fell behind the memory (H100: 94% of the copy rate, 0.94x
// torch; with 2, 98-99%, 0.97-1.00x over three runs).
constexpr int kEwUnroll = 2;

template <class F>
__device__ __forceinline__ float apply(const F& f, float a, float b) {
  if constexpr (F::kInputs == 1) {
    (void)b;
    return f(a);
  } else {
    return f(a, b);
  }
}

// kScalar: -1 none, 0 or 1: that input is one element read once. Every other tensor is flat
// (element i at i), `count` elements, moved in packs of N (all pointers 16-byte aligned when
// N > 1; the launcher handles the tail with N = 1).
template <class T, class F, int N, int kScalar>
__global__ void __launch_bounds__(kEwThreads)
    flat_kernel(T* __restrict__ out, const T* __restrict__ in0, const T* __restrict__ in1,
                int64_t packs, F f) {
  using P = Pack<T, N>;
  float scalar = 0.0f;
  if constexpr (kScalar == 0) scalar = to_f(in0[0]);
  if constexpr (kScalar == 1) scalar = to_f(in1[0]);
  constexpr bool kLoad0 = kScalar != 0;
  constexpr bool kLoad1 = F::kInputs == 2 && kScalar != 1;
  const int64_t step = static_cast<int64_t>(gridDim.x) * kEwThreads * kEwUnroll;
  for (int64_t first = static_cast<int64_t>(blockIdx.x) * kEwThreads * kEwUnroll + threadIdx.x;
       first < packs; first += step) {
    P a[kEwUnroll], b[kEwUnroll];
#pragma unroll
    for (int u = 0; u < kEwUnroll; ++u) {
      const int64_t i = first + u * kEwThreads;
      if (i < packs) {
        if constexpr (kLoad0) a[u] = reinterpret_cast<const P*>(in0)[i];
        if constexpr (kLoad1) b[u] = reinterpret_cast<const P*>(in1)[i];
      }
    }
#pragma unroll
    for (int u = 0; u < kEwUnroll; ++u) {
      const int64_t i = first + u * kEwThreads;
      if (i < packs) {
        float r[N];
#pragma unroll
        for (int k = 0; k < N; ++k) {
          const float x0 = kLoad0 ? to_f(a[u].v[k]) : scalar;
          const float x1 = kLoad1 ? to_f(b[u].v[k]) : scalar;
          r[k] = apply(f, x0, x1);
        }
        store_global(out + i * N, to_pack<T, N>(r));
      }
    }
  }
}

// Input kPeriodic repeats every `cpacks` packs along the flat output; the other input is flat.
// blockDim.x threads cover a slice of one period, blockDim.y rows; grid.y strides over rows.
template <class T, class F, int N, int kPeriodic>
__global__ void __launch_bounds__(kEwThreads)
    period_kernel(T* __restrict__ out, const T* __restrict__ in0, const T* __restrict__ in1,
                  int64_t rows, int64_t cpacks, F f) {
  using P = Pack<T, N>;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cpacks) return;  // no barrier follows
  const P* full = reinterpret_cast<const P*>(kPeriodic == 0 ? in1 : in0);
  const P period = reinterpret_cast<const P*>(kPeriodic == 0 ? in0 : in1)[c];
  float pv[N];
#pragma unroll
  for (int k = 0; k < N; ++k) pv[k] = to_f(period.v[k]);
  const int64_t rstep = static_cast<int64_t>(gridDim.y) * blockDim.y;
  for (int64_t r0 = static_cast<int64_t>(blockIdx.y) * blockDim.y + threadIdx.y; r0 < rows;
       r0 += rstep * kEwUnroll) {
    P v[kEwUnroll];
#pragma unroll
    for (int u = 0; u < kEwUnroll; ++u) {
      const int64_t r = r0 + u * rstep;
      if (r < rows) v[u] = full[r * cpacks + c];
    }
#pragma unroll
    for (int u = 0; u < kEwUnroll; ++u) {
      const int64_t r = r0 + u * rstep;
      if (r < rows) {
        P o;
#pragma unroll
        for (int k = 0; k < N; ++k) {
          const float x = to_f(v[u].v[k]);
          o.v[k] = from_f<T>(kPeriodic == 0 ? apply(f, pv[k], x) : apply(f, x, pv[k]));
        }
        store_global(out + (r * cpacks + c) * N, o);
      }
    }
  }
}

// Any strides: element i of the walk of `s` (tensor 0 the output, then the inputs).
template <class T, class F, class I, class O>
__global__ void __launch_bounds__(kEwThreads)
    strided_kernel(Strided<1 + F::kInputs> s, T* __restrict__ out, const T* __restrict__ in0,
                   const T* __restrict__ in1, I count, F f) {
  constexpr int K = 1 + F::kInputs;
  const I step = static_cast<I>(gridDim.x) * kEwThreads;
  for (I i = static_cast<I>(blockIdx.x) * kEwThreads + threadIdx.x; i < count; i += step) {
    O off[K];
    offsets_of<K, I, O>(s, i, off);
    float x1 = 0.0f;
    if constexpr (K == 3) x1 = to_f(in1[off[2]]);
    out[off[0]] = from_f<T>(apply(f, to_f(in0[off[1]]), x1));
  }
}

// Elements per period of `t` read against a contiguous output of `shape`: t's trailing dims
// equal the output's and are contiguous, every leading dim of t has size 1 (or is missing),
// and C < count. 0 when t is not read that way.
inline int64_t period_of(const Tensor& t, const std::vector<int64_t>& shape) {
  const std::vector<int64_t> strides = broadcast_strides(t, shape);
  int64_t period = 1;
  size_t d = shape.size();
  for (; d > 0 && (strides[d - 1] != 0 || shape[d - 1] == 1); --d) {
    if (shape[d - 1] != 1 && strides[d - 1] != period) return 0;
    period *= shape[d - 1];
  }
  for (; d > 0; --d) {
    if (strides[d - 1] != 0 && shape[d - 1] != 1) return 0;
  }
  int64_t count = 1;
  for (const int64_t s : shape) count *= s;
  return period < count ? period : 0;
}

template <class T, class F, int N, int kScalar>
void launch_flat(T* out, const T* in0, const T* in1, int64_t packs, const F& f, cudaStream_t s) {
  if (packs == 0) return;
  flat_kernel<T, F, N, kScalar><<<grid_for(packs, kEwThreads * kEwUnroll), kEwThreads, 0, s>>>(
      out, in0, in1, packs, f);
}

// The flat case: vector packs where every pointer streamed is 16-byte aligned, then the tail.
template <class T, class F, int kScalar>
void flat(T* out, const T* in0, const T* in1, int64_t count, const F& f, cudaStream_t s) {
  constexpr int N = kVec<T>;
  const bool vector = aligned16(out) && (kScalar == 0 || aligned16(in0)) &&
                      (F::kInputs == 1 || kScalar == 1 || aligned16(in1));
  if (!vector) {
    launch_flat<T, F, 1, kScalar>(out, in0, in1, count, f, s);
    return;
  }
  const int64_t packs = count / N, done = packs * N;
  launch_flat<T, F, N, kScalar>(out, in0, in1, packs, f, s);
  const T* tail0 = kScalar == 0 ? in0 : in0 + done;
  const T* tail1 = F::kInputs == 1 || kScalar == 1 ? in1 : in1 + done;
  launch_flat<T, F, 1, kScalar>(out + done, tail0, tail1, count - done, f, s);
}

template <class T, class F, int N, int kPeriodic>
void launch_period(T* out, const T* in0, const T* in1, int64_t rows, int64_t cpacks, const F& f,
                   cudaStream_t s) {
  int bx = 32;
  while (bx < kEwThreads && bx < cpacks) bx *= 2;
  const dim3 block(bx, kEwThreads / bx);
  const dim3 grid(grid_for(cpacks, bx), grid_for(rows, int64_t{block.y} * kEwUnroll, 65535));
  period_kernel<T, F, N, kPeriodic><<<grid, block, 0, s>>>(out, in0, in1, rows, cpacks, f);
}

// The period case, or false when the period is too short for a row of threads (then the
// strided kernel serves better).
template <class T, class F, int kPeriodic>
bool period(T* out, const T* in0, const T* in1, int64_t count, int64_t c, const F& f,
            cudaStream_t s) {
  constexpr int N = kVec<T>;
  const bool vector = c % N == 0 && aligned16(out) && aligned16(in0) && aligned16(in1);
  const int64_t cpacks = vector ? c / N : c;
  if (cpacks < 32) return false;
  if (vector) {
    launch_period<T, F, N, kPeriodic>(out, in0, in1, count / c, cpacks, f, s);
  } else {
    launch_period<T, F, 1, kPeriodic>(out, in0, in1, count / c, cpacks, f, s);
  }
  return true;
}

template <class T, class F>
void strided(T* out, const Tensor& tout, const T* in0, const Tensor& t0, const T* in1,
             const Tensor* t1, const F& f, cudaStream_t s) {
  constexpr int K = 1 + F::kInputs;
  const std::vector<int64_t> s0 = broadcast_strides(t0, tout.shape);
  const std::vector<int64_t> s1 = t1 != nullptr ? broadcast_strides(*t1, tout.shape) : s0;
  std::array<const std::vector<int64_t>*, K> all;
  all[0] = &tout.strides;
  all[1] = &s0;
  if constexpr (K == 3) all[2] = &s1;
  const Strided<K> layout = coalesce<K>(tout.shape, all);
  const int64_t count = tout.numel();
  const unsigned blocks = grid_for(count, kEwThreads);
  if (fits_int32(layout, count)) {
    strided_kernel<T, F, uint32_t, int32_t><<<blocks, kEwThreads, 0, s>>>(
        layout, out, in0, in1, static_cast<uint32_t>(count), f);
  } else {
    strided_kernel<T, F, uint64_t, int64_t><<<blocks, kEwThreads, 0, s>>>(
        layout, out, in0, in1, static_cast<uint64_t>(count), f);
  }
}

// out = f(in0[, in1]) with in0 and in1 broadcast against out (checked by the API layer).
template <class F>
opforge_status elementwise(const char* op, Tensor& out, const Tensor& in0, const Tensor* in1,
                           const F& f, void* stream) {
  static_assert(F::kInputs == 1 || F::kInputs == 2, "one or two inputs");
  const int64_t count = out.numel();
  if (count == 0) return OPFORGE_OK;
  DeviceGuard guard(out.device.device_id);
  if (guard.status() != cudaSuccess) return cuda_failure(op, "cudaSetDevice", guard.status());
  auto s = static_cast<cudaStream_t>(stream);
  return by_dtype(out.dtype, [&](auto tag) {
    using T = decltype(tag);
    T* po = out.ptr<T>();
    const T* p0 = in0.ptr<T>();
    const T* p1 = in1 != nullptr ? in1->ptr<T>() : nullptr;
    const bool flat_out = out.contiguous();
    const bool flat0 = in0.numel() == count && in0.contiguous();
    const bool flat1 = in1 == nullptr || (in1->numel() == count && in1->contiguous());
    bool done = false;
    if (flat_out && flat0 && flat1) {
      flat<T, F, -1>(po, p0, p1, count, f, s);
      done = true;
    } else if constexpr (F::kInputs == 2) {
      if (flat_out && flat0 && in1->numel() == 1) {
        flat<T, F, 1>(po, p0, p1, count, f, s);
        done = true;
      } else if (flat_out && flat1 && in0.numel() == 1) {
        flat<T, F, 0>(po, p0, p1, count, f, s);
        done = true;
      } else if (flat_out && flat0) {
        const int64_t c = period_of(*in1, out.shape);
        done = c > 0 && period<T, F, 1>(po, p0, p1, count, c, f, s);
      } else if (flat_out && flat1) {
        const int64_t c = period_of(in0, out.shape);
        done = c > 0 && period<T, F, 0>(po, p0, p1, count, c, f, s);
      }
    }
    if (!done) strided<T, F>(po, out, p0, in0, p1, in1, f, s);
    return check_launch(op);
  });
}

}  // namespace opforge::cuda::kit
