// Shared device-side helpers: dtype conversion, 16-byte packs, reductions, launch checks.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

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

// 2^x as one MUFU.EX2; results below FLT_MIN are 0 (.ftz). Where the libm calls' handling of
// subnormal results costs three more instructions per element (__expf) or ten (expf), kernels
// short of issue slots pay for it: softmax over columns and the bfloat16 gelu backward
// (bench/results/kernel-variants-*-2026-11-24.txt).
__device__ __forceinline__ float ex2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

constexpr float kLog2e = 1.4426950408889634f;

// e^x, as ex2_ftz: 0 below FLT_MIN (x < -87.3), as the CPU reference gives it.
__device__ __forceinline__ float exp_ftz(float x) { return ex2_ftz(x * kLog2e); }

// N consecutive elements moved as one 16-byte (or N*sizeof(T)-byte) access.
template <class T, int N>
struct alignas(sizeof(T) * N) Pack {
  T v[N];
};

// V floats rounded to T; 2-byte types two at a time (one conversion instruction a pair).
template <class T, int V>
__device__ __forceinline__ Pack<T, V> to_pack(const float (&f)[V]) {
  Pack<T, V> p;
  if constexpr (V % 2 == 0 && std::is_same_v<T, __nv_bfloat16>) {
#pragma unroll
    for (int j = 0; j < V; j += 2) {
      const __nv_bfloat162 h = __floats2bfloat162_rn(f[j], f[j + 1]);
      p.v[j] = h.x;
      p.v[j + 1] = h.y;
    }
  } else if constexpr (V % 2 == 0 && std::is_same_v<T, __half>) {
#pragma unroll
    for (int j = 0; j < V; j += 2) {
      const __half2 h = __floats2half2_rn(f[j], f[j + 1]);
      p.v[j] = h.x;
      p.v[j + 1] = h.y;
    }
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) p.v[j] = from_f<T>(f[j]);
  }
  return p;
}

// Element j of a pack as a float. A bfloat16 is the upper half of a float: either element of
// a 32-bit pair is one shift or mask of the pair, where converting it alone takes two
// instructions for the upper one (the norm backward converts four elements per element).
template <class T, int V>
__device__ __forceinline__ float pack_f(const Pack<T, V>& p, int j) {
  if constexpr (std::is_same_v<T, __nv_bfloat16> && V % 2 == 0) {
    uint32_t pair;
    memcpy(&pair, &p.v[j & ~1], sizeof(pair));
    return __uint_as_float(j % 2 == 0 ? pair << 16 : pair & 0xffff0000u);
  } else {
    return to_f(p.v[j]);
  }
}

// Elements of T in one 16-byte access.
template <class T>
constexpr int kVec = 16 / sizeof(T);

// A pack stored to global memory with one 16-byte access (when it is 16 bytes). A plain store
// of the struct may be split into scalar stores by the compiler once it loses track of the
// address's alignment; __stwb (the default write-back policy) keeps it one instruction.
template <class T, int N>
__device__ __forceinline__ void store_global(T* p, const Pack<T, N>& v) {
  if constexpr (sizeof(Pack<T, N>) == 16) {
    uint4 u;
    memcpy(&u, &v, 16);
    __stwb(reinterpret_cast<uint4*>(p), u);
  } else {
    *reinterpret_cast<Pack<T, N>*>(p) = v;
  }
}

// kBytes (4, 8 or 16) from global to shared memory without a register on the way (cp.async,
// sm_80 and later; 16-byte copies leave L1 alone, as the data is read once). Both addresses
// aligned to kBytes. Other sizes (a single 2-byte element) are copied through a register.
// kPrefetch (0, 128 or 256) also brings the rest of the kPrefetch-byte block around the address
// into L2, for readers of its other parts that come soon after (adjacent column tiles): the DRAM
// then serves whole blocks, not pieces of them.
template <int kBytes, int kPrefetch = 0>
__device__ __forceinline__ void copy_async(void* smem, const void* gmem) {
  static_assert(kPrefetch == 0 || kPrefetch == 128 || kPrefetch == 256, "an L2 prefetch size");
  if constexpr (kBytes == 16 || kBytes == 8 || kBytes == 4) {
    const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    if constexpr (kBytes == 16 && kPrefetch == 128) {
      asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16;" ::"r"(dst), "l"(gmem)
                   : "memory");
    } else if constexpr (kBytes == 16 && kPrefetch == 256) {
      asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16;" ::"r"(dst), "l"(gmem)
                   : "memory");
    } else if constexpr (kBytes == 16) {
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(gmem) : "memory");
    } else if constexpr (kPrefetch == 128) {
      asm volatile("cp.async.ca.shared.global.L2::128B [%0], [%1], %2;" ::"r"(dst), "l"(gmem),
                   "n"(kBytes)
                   : "memory");
    } else if constexpr (kPrefetch == 256) {
      asm volatile("cp.async.ca.shared.global.L2::256B [%0], [%1], %2;" ::"r"(dst), "l"(gmem),
                   "n"(kBytes)
                   : "memory");
    } else {
      asm volatile("cp.async.ca.shared.global [%0], [%1], %2;" ::"r"(dst), "l"(gmem), "n"(kBytes)
                   : "memory");
    }
  } else {
    memcpy(smem, gmem, kBytes);
  }
}
__device__ __forceinline__ void async_commit() {
  asm volatile("cp.async.commit_group;" ::: "memory");
}
// Waits until at most N of this thread's committed groups of copies are still in flight.
template <int N>
__device__ __forceinline__ void async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}
// async_wait<n> for an n known only at run time, 0 <= n <= kMax.
template <int kMax>
__device__ __forceinline__ void async_wait_for(int n) {
  if (n >= kMax) {
    async_wait<kMax>();
  } else if constexpr (kMax > 0) {
    async_wait_for<kMax - 1>(n);
  }
}

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
  return fail(OPFORGE_ERROR_CUDA, std::string(op) + ": " + what + ": " + cudaGetErrorString(err));
}

// After a launch: the launch error, if any, as a status with a message.
inline opforge_status check_launch(const char* op) {
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? OPFORGE_OK : cuda_failure(op, "kernel launch", err);
}

inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

__host__ __device__ constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// What the launch heuristics need to know about the current device.
struct DeviceInfo {
  int sms = 1;         // streaming multiprocessors
  int major = 0;       // compute capability major (9: Hopper, thread-block clusters)
  int smem_optin = 0;  // dynamic shared memory one block may opt in to, in bytes
};

inline cudaError_t device_info(int device, DeviceInfo* out) {
  cudaError_t e = cudaDeviceGetAttribute(&out->sms, cudaDevAttrMultiProcessorCount, device);
  if (e == cudaSuccess)
    e = cudaDeviceGetAttribute(&out->major, cudaDevAttrComputeCapabilityMajor, device);
  if (e == cudaSuccess) {
    e = cudaDeviceGetAttribute(&out->smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  }
  return e;
}

// Programmatic dependent launch (compute capability 9.0 on): a kernel started by
// `launch_overlapped` is set up while the kernel before it on the stream drains, instead of after
// it, which hides most of the gap between them (about 2 us on an H100). Such a kernel must call
// `wait_for_prior_grid` before its first access to global memory: that returns once the kernel
// before it has completed and its writes are visible. Launched plainly, the wait does nothing.
// The wait exists only in code generated for compute capability 9.0 on: a build without sm_90
// (OPFORGE_CUDA_HAS_SM90, set by CMake) would run Hopper from older PTX, without it, so there
// every kernel is launched plainly.
__device__ __forceinline__ void wait_for_prior_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Lets the kernel launched after this one by `launch_overlapped` start now rather than when
// this one's blocks exit: it takes a place on an SM and waits in `wait_for_prior_grid`, so
// neither its launch nor its blocks' start is left for after this kernel. For a kernel whose
// successor is small (a merge of partial results) and whose blocks fill the GPU in waves.
__device__ __forceinline__ void allow_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Whether this build's sm_90 code runs on this device: what programmatic dependent launches and
// thread-block clusters need. A build without it (OPFORGE_CUDA_HAS_SM90, set by CMake) runs
// Hopper from older PTX, which has neither.
inline bool sm90_code_runs(const DeviceInfo& dev) {
#ifdef OPFORGE_CUDA_HAS_SM90
  return dev.major >= 9;
#else
  (void)dev;
  return false;
#endif
}

template <class Kernel, class... Args>
opforge_status launch_overlapped(const char* op, const DeviceInfo& dev, Kernel kernel, dim3 grid,
                                 dim3 block, size_t smem, cudaStream_t s, Args... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cudaLaunchAttribute attr;
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = sm90_code_runs(dev) ? 1 : 0;
  const cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, args...);
  if (e == cudaSuccess) return OPFORGE_OK;
  cudaGetLastError();  // reported here, not again by the next op's launch check
  return cuda_failure(op, "kernel launch", e);
}

// Stream-ordered device scratch memory, released on the stream when this goes out of scope (so
// kernels enqueued before then may still use it).
class Scratch {
 public:
  explicit Scratch(cudaStream_t stream) : stream_(stream) {}
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch() {
    for (void* p : blocks_) cudaFreeAsync(p, stream_);
  }

  // `count` elements of T (at least one, so the pointer is never null), or the allocation error.
  template <class T>
  cudaError_t alloc(int64_t count, T** out) {
    void* p = nullptr;
    const size_t bytes = static_cast<size_t>(count > 0 ? count : 1) * sizeof(T);
    const cudaError_t e = cudaMallocAsync(&p, bytes, stream_);
    if (e != cudaSuccess) return e;
    blocks_.push_back(p);
    *out = static_cast<T*>(p);
    return cudaSuccess;
  }

 private:
  cudaStream_t stream_;
  std::vector<void*> blocks_;
};

}  // namespace opforge::cuda
