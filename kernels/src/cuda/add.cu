#include <cuda_runtime.h>

#include <string>

#include "backends.hpp"
#include "status.hpp"

namespace opforge::cuda {
namespace {

constexpr int kThreads = 256;

// Grid-stride loop over float4 groups, then a scalar tail; inputs are contiguous.
__global__ void add_f32(const float* __restrict__ a, const float* __restrict__ b, float alpha,
                        float* __restrict__ out, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t vec = n / 4;
  const bool aligned = (reinterpret_cast<uintptr_t>(a) | reinterpret_cast<uintptr_t>(b) |
                        reinterpret_cast<uintptr_t>(out)) % 16 == 0;
  if (aligned) {
    auto* a4 = reinterpret_cast<const float4*>(a);
    auto* b4 = reinterpret_cast<const float4*>(b);
    auto* o4 = reinterpret_cast<float4*>(out);
    for (int64_t i = first; i < vec; i += stride) {
      const float4 x = a4[i], y = b4[i];
      o4[i] = make_float4(x.x + alpha * y.x, x.y + alpha * y.y, x.z + alpha * y.z,
                          x.w + alpha * y.w);
    }
    for (int64_t i = vec * 4 + first; i < n; i += stride) out[i] = a[i] + alpha * b[i];
  } else {
    for (int64_t i = first; i < n; i += stride) out[i] = a[i] + alpha * b[i];
  }
}

}  // namespace

opforge_status add(const Tensor& a, const Tensor& b, double alpha, Tensor& out, void* stream) {
  if (!(a.contiguous() && b.contiguous() && out.contiguous())) {
    return fail(OPFORGE_ERROR_UNSUPPORTED,
                "opforge_add: non-contiguous CUDA tensors are not supported yet; "
                "pass contiguous tensors");
  }
  const int64_t n = out.numel();
  if (n == 0) return OPFORGE_OK;
  cudaError_t err = cudaSetDevice(out.device.device_id);
  if (err != cudaSuccess) {
    return fail(OPFORGE_ERROR_CUDA, std::string("opforge_add: cudaSetDevice: ") +
                                        cudaGetErrorString(err));
  }
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, out.device.device_id);
  const int64_t wanted = (n / 4 + kThreads - 1) / kThreads;
  const int64_t cap = static_cast<int64_t>(sms > 0 ? sms : 1) * 8;
  const int blocks = static_cast<int>(wanted < 1 ? 1 : (wanted < cap ? wanted : cap));
  add_f32<<<blocks, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      reinterpret_cast<const float*>(a.data), reinterpret_cast<const float*>(b.data),
      static_cast<float>(alpha), reinterpret_cast<float*>(out.data), n);
  err = cudaGetLastError();
  if (err != cudaSuccess) {
    return fail(OPFORGE_ERROR_CUDA, std::string("opforge_add: kernel launch: ") +
                                        cudaGetErrorString(err));
  }
  return OPFORGE_OK;
}

}  // namespace opforge::cuda
