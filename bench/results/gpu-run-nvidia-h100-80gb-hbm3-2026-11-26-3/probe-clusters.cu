// Probe: resident clusters of a kernel shaped like the norm backward's, and the host cost of the
// occupancy queries a call makes.
#include <cstdio>
#include <chrono>
#include <cuda_runtime.h>
__global__ void k(float* p) { extern __shared__ float s[]; if (p) p[threadIdx.x] = s[threadIdx.x]; }
int main() {
  int dev = 0, optin = 0, sms = 0;
  cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  printf("sms %d smem_optin %d\n", sms, optin);
  cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, optin);
  cudaFuncSetAttribute(k, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  struct { int threads; int smem; } shapes[] = {{512, 131072 + 4096}, {1024, 196608}, {1024, 98304}, {256, 65536}};
  for (auto sh : shapes) {
    int per_sm = 0;
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k, sh.threads, sh.smem);
    printf("threads %d smem %d: blocks/SM %d;", sh.threads, sh.smem, per_sm);
    for (int c : {1, 2, 4, 8, 16}) {
      cudaLaunchConfig_t cfg{};
      cfg.gridDim = dim3(132 * 2); cfg.blockDim = dim3(sh.threads); cfg.dynamicSmemBytes = sh.smem;
      cudaLaunchAttribute a; a.id = cudaLaunchAttributeClusterDimension; a.val.clusterDim.x = c; a.val.clusterDim.y = 1; a.val.clusterDim.z = 1;
      cfg.attrs = &a; cfg.numAttrs = 1;
      int n = 0; cudaError_t e = cudaOccupancyMaxActiveClusters(&n, k, &cfg);
      printf("  C=%d: %d clusters (%d blocks)%s", c, n, n * c, e ? cudaGetErrorString(e) : "");
    }
    printf("\n");
  }
  cudaLaunchConfig_t cfg{}; cfg.gridDim = dim3(132); cfg.blockDim = dim3(512); cfg.dynamicSmemBytes = 131072;
  cudaLaunchAttribute a; a.id = cudaLaunchAttributeClusterDimension; a.val.clusterDim.x = 2; a.val.clusterDim.y = 1; a.val.clusterDim.z = 1;
  cfg.attrs = &a; cfg.numAttrs = 1;
  const int N = 2000; int n = 0, per_sm = 0, v = 0;
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < N; ++i) cudaOccupancyMaxActiveClusters(&n, k, &cfg);
  auto t1 = std::chrono::steady_clock::now();
  for (int i = 0; i < N; ++i) cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k, 512, 131072);
  auto t2 = std::chrono::steady_clock::now();
  for (int i = 0; i < N; ++i) cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, optin);
  auto t3 = std::chrono::steady_clock::now();
  for (int i = 0; i < N; ++i) cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev);
  auto t4 = std::chrono::steady_clock::now();
  cudaFuncAttributes fa; for (int i = 0; i < N; ++i) cudaFuncGetAttributes(&fa, k);
  auto t5 = std::chrono::steady_clock::now();
  auto us = [&](auto a, auto b) { return std::chrono::duration<double, std::micro>(b - a).count() / N; };
  printf("host us per call: MaxActiveClusters %.2f, MaxActiveBlocksPerSM %.2f, FuncSetAttribute %.2f, DeviceGetAttribute %.3f, FuncGetAttributes %.2f\n",
         us(t0, t1), us(t1, t2), us(t2, t3), us(t3, t4), us(t4, t5));
  return 0;
}
