// out = a + alpha * b on contiguous tensors: 16-byte accesses, several in flight per thread.
#include "backends.hpp"
#include "cuda/common.cuh"

namespace opforge::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kUnroll = 4;

template <class T, int N>
__global__ void __launch_bounds__(kThreads)
    add_kernel(const T* __restrict__ a, const T* __restrict__ b, float alpha, T* __restrict__ out,
               int64_t packs) {
  using P = Pack<T, N>;
  const P* pa = reinterpret_cast<const P*>(a);
  const P* pb = reinterpret_cast<const P*>(b);
  P* po = reinterpret_cast<P*>(out);
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kThreads * kUnroll + threadIdx.x;
  P va[kUnroll], vb[kUnroll];
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int64_t i = first + u * kThreads;
    if (i < packs) {
      va[u] = pa[i];
      vb[u] = pb[i];
    }
  }
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int64_t i = first + u * kThreads;
    if (i < packs) {
      P r;
#pragma unroll
      for (int k = 0; k < N; ++k) r.v[k] = from_f<T>(to_f(va[u].v[k]) + alpha * to_f(vb[u].v[k]));
      po[i] = r;
    }
  }
}

template <class T, int N>
void launch(const T* a, const T* b, float alpha, T* out, int64_t packs, cudaStream_t stream) {
  if (packs == 0) return;
  const int64_t blocks = (packs + kThreads * kUnroll - 1) / (kThreads * kUnroll);
  add_kernel<T, N><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(a, b, alpha, out, packs);
}

}  // namespace

opforge_status add(const Tensor& a, const Tensor& b, double alpha, Tensor& out, void* stream) {
  const int64_t n = out.numel();
  if (n == 0) return OPFORGE_OK;
  DeviceGuard guard(out.device.device_id);
  if (guard.status() != cudaSuccess) return cuda_failure("opforge_add", "cudaSetDevice", guard.status());
  auto s = static_cast<cudaStream_t>(stream);
  return by_dtype(out.dtype, [&](auto tag) {
    using T = decltype(tag);
    constexpr int N = kVec<T>;
    const T* pa = a.ptr<T>();
    const T* pb = b.ptr<T>();
    T* po = out.ptr<T>();
    const float al = static_cast<float>(alpha);
    if (aligned16(pa) && aligned16(pb) && aligned16(po)) {
      const int64_t packs = n / N, done = packs * N;
      launch<T, N>(pa, pb, al, po, packs, s);
      launch<T, 1>(pa + done, pb + done, al, po + done, n - done, s);
    } else {
      launch<T, 1>(pa, pb, al, po, n, s);
    }
    return check_launch("opforge_add");
  });
}

}  // namespace opforge::cuda
