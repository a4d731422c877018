// Device-side basics of the elementwise and normalisation kernels (add, mul, gelu, layer_norm,
// rms_norm): dtype conversion, 16-byte packs, block reductions, launch checks and the device
// guard. Their own namespace keeps them apart from common.cuh's helpers of the other ops.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "common/status.hpp"
#include "common/tensor.hpp"

namespace opforge::cuda::kit {

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

// N consecutive elements moved as one access of N * sizeof(T) bytes.
template <class T, int N>
struct alignas(sizeof(T) * N) Pack {
  T v[N];
};

// Elements of T in one 16-byte access.
template <class T>
constexpr int kVec = 16 / static_cast<int>(sizeof(T));

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
    for (int j = 0; j < kChunk; ++j) out[c * kChunk + j] = to_f(pack.v[j]);
  }
}

// Stores V floats as T at p, in accesses of at most 16 bytes (alignment as load_floats).
template <class T, int V>
__device__ __forceinline__ void store_floats(T* p, const float (&in)[V]) {
  constexpr int kChunk = V < kVec<T> ? V : kVec<T>;
  using P = Pack<T, kChunk>;
#pragma unroll
  for (int c = 0; c < V / kChunk; ++c) {
    P pack;
#pragma unroll
    for (int j = 0; j < kChunk; ++j) pack.v[j] = from_f<T>(in[c * kChunk + j]);
    reinterpret_cast<P*>(p)[c] = pack;
  }
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Block-wide sums of two floats (blockDim.x a multiple of 32); every thread gets both. Starts
// with a barrier, so `scratch` (32 float2) may be reused by consecutive calls.
__device__ __forceinline__ float2 block_sum2(float a, float b, float2* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  a = warp_sum(a);
  b = warp_sum(b);
  __syncthreads();
  if (lane == 0) scratch[warp] = make_float2(a, b);
  __syncthreads();
  const float2 v = lane < warps ? scratch[lane] : make_float2(0.0f, 0.0f);
  return make_float2(warp_sum(v.x), warp_sum(v.y));
}

__device__ __forceinline__ float block_sum(float a, float2* scratch) {
  return block_sum2(a, 0.0f, scratch).x;
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

inline opforge_status cuda_failure(const char* op, const char* what, cudaError_t err) {
  return fail(OPFORGE_ERROR_CUDA, std::string(op) + ": " + what + ": " + cudaGetErrorString(err));
}

// After a launch: the launch error, if any, as a status with a message.
inline opforge_status check_launch(const char* op) {
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? OPFORGE_OK : cuda_failure(op, "kernel launch", err);
}

inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

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
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
  cudaError_t status() const { return status_; }

 private:
  int previous_ = 0;
  bool switched_ = false;
  cudaError_t status_ = cudaSuccess;
};

// Blocks of a grid-stride launch: enough to cover `work` items of `per_block`, at most `cap`.
inline unsigned grid_for(int64_t work, int64_t per_block, int64_t cap = INT32_MAX) {
  const int64_t blocks = (work + per_block - 1) / per_block;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > cap ? cap : blocks));
}

}  // namespace opforge::cuda::kit
