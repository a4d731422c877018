// The copy rate a column-tile access pattern allows on this GPU: what softmax over a non-last
// dim (kernels/src/cuda/softmax.cu, softmax_column_tiles) can reach at most for a tile width.
//
// A [8192, 8192] float32 matrix is copied tile by tile: a block takes `width` bytes of adjacent
// columns over rows_per_block rows, either through shared memory (cp.async in, then stores: the
// softmax tiles' pattern) or through registers. Prints ms and % of the device-to-device copy
// rate (cudaMemcpyAsync of 1 GiB, bytes read plus written) per width and block height.
//
//   nvcc -O3 -std=c++17 -arch=sm_90 -o /tmp/ceiling bench/column_tile_ceiling.cu && /tmp/ceiling
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

namespace {

constexpr int64_t kLen = 8192, kInner = 8192;

__device__ __forceinline__ void copy16_async(void* smem, const void* gmem) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(gmem) : "memory");
}

template <int kWidth, int kThreads, bool kSmem>
__global__ void __launch_bounds__(kThreads)
    tile_copy(const float* in, float* out, int64_t rows_per_block) {
  constexpr int W = kWidth / 4, kLanes = W / 4, R = kThreads / kLanes;
  extern __shared__ __align__(16) float sm[];
  const int64_t parts = (kLen + rows_per_block - 1) / rows_per_block;
  const int64_t tile = blockIdx.x / parts, part = blockIdx.x % parts;
  const int cw = (threadIdx.x % kLanes) * 4, slot = threadIdx.x / kLanes;
  const int64_t begin = part * rows_per_block;
  const int64_t rows = (begin + rows_per_block < kLen ? begin + rows_per_block : kLen) - begin;
  const float* src = in + begin * kInner + tile * W + cw;
  float* dst = out + begin * kInner + tile * W + cw;
  if constexpr (kSmem) {
    for (int64_t r = slot; r < rows; r += R) copy16_async(sm + r * W + cw, src + r * kInner);
    asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;" ::: "memory");
    for (int64_t r = slot; r < rows; r += R) {
      *reinterpret_cast<float4*>(dst + r * kInner) =
          *reinterpret_cast<const float4*>(sm + r * W + cw);
    }
  } else {
    for (int64_t r = slot; r < rows; r += 4 * R) {
      float4 v[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        if (r + u * R < rows) v[u] = *reinterpret_cast<const float4*>(src + (r + u * R) * kInner);
      }
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        if (r + u * R < rows) *reinterpret_cast<float4*>(dst + (r + u * R) * kInner) = v[u];
      }
    }
  }
}

// Median ms per call over 5 runs of 20 calls, after 3 warm-up calls.
template <class F>
float time_ms(F f) {
  for (int i = 0; i < 3; ++i) f();
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  std::vector<float> v;
  for (int rep = 0; rep < 5; ++rep) {
    cudaEventRecord(a);
    for (int i = 0; i < 20; ++i) f();
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    v.push_back(ms / 20);
  }
  std::sort(v.begin(), v.end());
  return v[2];
}

template <int kWidth, int kThreads, bool kSmem>
void run(const float* in, float* out, int64_t rows_per_block, double copy_tbps) {
  auto kernel = tile_copy<kWidth, kThreads, kSmem>;
  const int64_t smem = kSmem ? rows_per_block * kWidth : 0;
  int limit = 0;
  cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0);
  if (smem > limit) return;  // this height does not fit one block's shared memory
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, limit);
  const int64_t blocks = (kInner / (kWidth / 4)) * ((kLen + rows_per_block - 1) / rows_per_block);
  const float ms = time_ms([&] { kernel<<<blocks, kThreads, smem>>>(in, out, rows_per_block); });
  const cudaError_t e = cudaGetLastError();
  printf("width %3d B, %s, %4lld rows a block: %.4f ms, %5.1f%% of copy%s%s\n", kWidth,
         kSmem ? "via shared memory" : "via registers    ", static_cast<long long>(rows_per_block),
         ms, 2.0 * kLen * kInner * 4 / (ms * 1e-3) / (copy_tbps * 1e12) * 100,
         e == cudaSuccess ? "" : ", ", e == cudaSuccess ? "" : cudaGetErrorString(e));
}

}  // namespace

int main() {
  const int64_t n = int64_t{1} << 28;
  float *s = nullptr, *d = nullptr;
  if (cudaMalloc(&s, n * 4) != cudaSuccess || cudaMalloc(&d, n * 4) != cudaSuccess) {
    fprintf(stderr, "column_tile_ceiling: no CUDA device with 2 GiB free\n");
    return 2;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  const float ms = time_ms([&] { cudaMemcpyAsync(d, s, n * 4, cudaMemcpyDeviceToDevice); });
  const double copy_tbps = 2.0 * n * 4 / (ms * 1e-3) / 1e12;
  printf("%s: device-to-device copy %.3f TB/s; [%lld, %lld] float32, column tiles\n", prop.name,
         copy_tbps, static_cast<long long>(kLen), static_cast<long long>(kInner));
  for (int64_t rows : {256, 512, 1024, 2048}) {
    run<64, 256, true>(s, d, rows, copy_tbps);
    run<128, 256, true>(s, d, rows, copy_tbps);
    run<256, 256, true>(s, d, rows, copy_tbps);
    run<512, 512, true>(s, d, rows, copy_tbps);
    run<64, 256, false>(s, d, rows, copy_tbps);
    run<128, 256, false>(s, d, rows, copy_tbps);
    run<256, 256, false>(s, d, rows, copy_tbps);
    run<512, 512, false>(s, d, rows, copy_tbps);
  }
  return 0;
}
