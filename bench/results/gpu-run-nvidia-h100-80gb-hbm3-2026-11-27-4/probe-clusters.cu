// Resident clusters of the column-tile kernels' shapes (256 threads), clusters up to 16.
#include <cstdio>
#include <cuda_runtime.h>
__global__ void k(float* p) { extern __shared__ float s[]; if (p) p[threadIdx.x] = s[threadIdx.x]; }
int main() {
  int optin = 0, sms = 0;
  cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  printf("sms %d smem_optin %d\n", sms, optin);
  cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, optin);
  cudaFuncSetAttribute(k, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  for (int smem : {32768, 49152, 65536, 98304, 131072}) {
    int per_sm = 0;
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k, 256, smem);
    printf("threads 256 smem %d: blocks/SM %d (%d slots);", smem, per_sm, per_sm * sms);
    for (int c : {1, 2, 4, 8, 12, 16}) {
      cudaLaunchConfig_t cfg{};
      cfg.gridDim = dim3(c * 256); cfg.blockDim = dim3(256); cfg.dynamicSmemBytes = smem;
      cudaLaunchAttribute a; a.id = cudaLaunchAttributeClusterDimension; a.val.clusterDim.x = c; a.val.clusterDim.y = 1; a.val.clusterDim.z = 1;
      cfg.attrs = &a; cfg.numAttrs = 1;
      int n = 0; cudaError_t e = cudaOccupancyMaxActiveClusters(&n, k, &cfg);
      printf("  C=%d: %d (%d blocks)%s", c, n, n * c, e ? cudaGetErrorString(e) : "");
    }
    printf("\n");
  }
  return 0;
}
