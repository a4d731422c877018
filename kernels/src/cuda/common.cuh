// Shared device-side helpers: dtype conversion, 16-byte packs, reductions, launch checks.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "common/status.hpp"
#include "common/tensor.hpp"

namespace opforge::cuda {

__device__ __forceinline__ float to_f(float v) { return v; }
__device__ __forceinline__ float to_f(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }

template <class T>
__device__ __forceinline__ T from_f(float v);
template <>
__device__ __forceinline__ float from_f<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half from_f<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// N consecutive elements moved as one 16-byte (or N*sizeof(T)-byte) access.
template <class T, int N>
struct alignas(sizeof(T) * N) Pack {
  T v[N];
};

// Elements of T in one 16-byte access.
template <class T>
constexpr int kVec = 16 / sizeof(T);

// max that lets NaN win, so a NaN anywhere in a row reaches the result.
__device__ __forceinline__ float nan_max(float a, float b) { return (a > b || a != a) ? a : b; }

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = nan_max(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Block-wide reduction of one float; every thread gets the result. `scratch` holds 32 floats.
template <bool kMax>
__device__ __forceinline__ float block_reduce(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int warps = (blockDim.x + 31) >> 5;
  v = kMax ? warp_max(v) : warp_sum(v);
  __syncthreads();  // scratch may still be read from a previous reduction
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : (kMax ? -INFINITY : 0.0f);
  return kMax ? warp_max(v) : warp_sum(v);
}

// Calls f(T{}) with T the device type of `dtype`.
template <class F>
opforge_status by_dtype(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kFloat32: return f(float{});
    case DType::kFloat16: return f(__half{});
    case DType::kBFloat16: return f(__nv_bfloat16{});
    default: return fail(OPFORGE_ERROR_INTERNAL, "unexpected dtype reached a CUDA kernel");
  }
}

// Makes `device` current for the scope of one call and restores the caller's device.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    cudaGetDevice(&previous_);
    if (previous_ != device) {
      status_ = cudaSetDevice(device);
      switched_ = status_ == cudaSuccess;
    }
  }
  ~DeviceGuard() {
    if (switched_) cudaSetDevice(previous_);
  }
  cudaError_t status() const { return status_; }

 private:
  int previous_ = 0;
  bool switched_ = false;
  cudaError_t status_ = cudaSuccess;
};

inline opforge_status cuda_failure(const char* op, const char* what, cudaError_t err) {
  return fail(OPFORGE_ERROR_CUDA,
              std::string(op) + ": " + what + ": " + cudaGetErrorString(err));
}

// After a launch: the launch error, if any, as a status with a message.
inline opforge_status check_launch(const char* op) {
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? OPFORGE_OK : cuda_failure(op, "kernel launch", err);
}

inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// A tensor of shape [outer, len, inner] around dim `dim` (contiguous layout).
struct RowShape {
  int64_t outer = 1, len = 1, inner = 1;
};

inline RowShape row_shape(const Tensor& t, int dim) {
  RowShape r;
  for (int d = 0; d < dim; ++d) r.outer *= t.shape[d];
  r.len = t.shape[dim];
  for (int d = dim + 1; d < t.ndim(); ++d) r.inner *= t.shape[d];
  return r;
}

}  // namespace opforge::cuda
