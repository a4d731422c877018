// What a column tile's merge costs a plain copy, by how the blocks of a tile meet: the copy rate
// of a [8192, 8192] float32 matrix copied tile by tile through shared memory (softmax over
// dim 0's access pattern, kernels/src/cuda/softmax.cu), each block also summing its part of every
// column of the tile and merging the sums with the tile's other blocks before it writes:
//   plain      one tile part a block, no merge (bench/column_tile_ceiling.cu's pattern)
//   cluster    the tile's blocks a cluster (16 of 64 KB for 128-byte tiles), merged through
//              distributed shared memory after a cluster barrier (what softmax does today)
//   exchange   every block resident (a cooperative launch, no clusters), a tile's blocks a
//              group that merges through global memory behind a counter; each block loops
//              over tiles, copying its next tile's rows in as it writes this one's
// Prints ms and % of the device-to-device copy rate (bytes read plus written).
//
//   nvcc -O3 -std=c++17 -arch=sm_90 -o /tmp/probe probe-exchange.cu && /tmp/probe
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

namespace cg = cooperative_groups;

namespace {

constexpr int64_t kLen = 8192, kInner = 8192;
constexpr int kThreads = 256;

__device__ __forceinline__ void copy16_async(void* smem, const void* gmem) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(gmem) : "memory");
}
__device__ __forceinline__ void commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
__device__ __forceinline__ void wait_all() { asm volatile("cp.async.wait_group 0;" ::: "memory"); }

// This thread's column sums of the block's rows in shared memory, merged over the block into
// part[0, W) (threads < W), in the pattern of softmax's statistics.
template <int W>
__device__ float4 block_column_sums(const float* sm, int64_t rows, float* part) {
  constexpr int kLanes = W / 4, R = kThreads / kLanes;
  __shared__ float4 warp_parts[kThreads / 32][kLanes];
  const int cw = (threadIdx.x % kLanes) * 4, slot = threadIdx.x / kLanes;
  float4 acc = make_float4(0, 0, 0, 0);
  for (int64_t r = slot; r < rows; r += R) {
    const float4 v = *reinterpret_cast<const float4*>(sm + r * W + cw);
    acc.x += v.x, acc.y += v.y, acc.z += v.z, acc.w += v.w;
  }
  for (int off = 16; off >= kLanes; off >>= 1) {
    acc.x += __shfl_xor_sync(~0u, acc.x, off), acc.y += __shfl_xor_sync(~0u, acc.y, off);
    acc.z += __shfl_xor_sync(~0u, acc.z, off), acc.w += __shfl_xor_sync(~0u, acc.w, off);
  }
  if ((threadIdx.x & 31) < kLanes) warp_parts[threadIdx.x >> 5][threadIdx.x & 31] = acc;
  __syncthreads();
  if (threadIdx.x < kLanes) {
    float4 t = warp_parts[0][threadIdx.x];
    for (int w = 1; w < kThreads / 32; ++w) {
      const float4 u = warp_parts[w][threadIdx.x];
      t.x += u.x, t.y += u.y, t.z += u.z, t.w += u.w;
    }
    *reinterpret_cast<float4*>(part + threadIdx.x * 4) = t;
  }
  return acc;
}

// plain (kCluster false) and cluster: one tile part a block.
template <int kWidth, bool kCluster>
__global__ void __launch_bounds__(kThreads) tile_copy(const float* in, float* out, int64_t rows) {
  constexpr int W = kWidth / 4, kLanes = W / 4, R = kThreads / kLanes;
  extern __shared__ __align__(16) float sm[];
  __shared__ float part[W], total[W];
  const int64_t parts = kLen / rows;
  const int64_t tile = blockIdx.x / parts, rank = blockIdx.x % parts;
  const int cw = (threadIdx.x % kLanes) * 4, slot = threadIdx.x / kLanes;
  const float* src = in + rank * rows * kInner + tile * W + cw;
  float* dst = out + rank * rows * kInner + tile * W + cw;
  for (int64_t r = slot; r < rows; r += R) copy16_async(sm + r * W + cw, src + r * kInner);
  commit();
  wait_all();
  block_column_sums<W>(sm, rows, part);
  if constexpr (kCluster) {
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();
    if (threadIdx.x < W) {
      float t = 0;
      for (unsigned b = 0; b < cluster.num_blocks(); ++b) t += *cluster.map_shared_rank(part + threadIdx.x, b);
      total[threadIdx.x] = t;
    }
    __syncthreads();
    cluster.sync();  // no block's part goes while another reads it
  } else {
    __syncthreads();
    if (threadIdx.x < W) total[threadIdx.x] = part[threadIdx.x];
    __syncthreads();
  }
  const float keep = total[cw] == 1234.5f ? 1.0f : 0.0f;  // the merge feeds the writes
  for (int64_t r = slot; r < rows; r += R) {
    float4 v = *reinterpret_cast<const float4*>(sm + r * W + cw);
    v.x += keep;
    *reinterpret_cast<float4*>(dst + r * kInner) = v;
  }
}

// exchange: kGroup resident blocks a tile; groups of them loop over the tiles.
template <int kWidth, int kGroup>
__global__ void __launch_bounds__(kThreads)
    exchange_copy(const float* in, float* out, int groups, unsigned launch, unsigned* counters,
                  float* partials) {
  constexpr int W = kWidth / 4, kLanes = W / 4, R = kThreads / kLanes;
  constexpr int64_t kTiles = kInner / W, kRows = kLen / kGroup;
  extern __shared__ __align__(16) float sm[];
  __shared__ float part[W], total[W];
  const int group = blockIdx.x / kGroup, rank = blockIdx.x % kGroup;
  const int cw = (threadIdx.x % kLanes) * 4, slot = threadIdx.x / kLanes;
  const int64_t my_tiles = (kTiles - group + groups - 1) / groups;
  auto src_of = [&](int64_t tile) { return in + rank * kRows * kInner + tile * W + cw; };
  for (int64_t r = slot; r < kRows; r += R) copy16_async(sm + r * W + cw, src_of(group) + r * kInner);
  commit();
  unsigned round = 0;
  for (int64_t tile = group; tile < kTiles; tile += groups, ++round) {
    wait_all();
    block_column_sums<W>(sm, kRows, part);
    __syncthreads();
    float* mine = partials + ((round & 1) * gridDim.x + blockIdx.x) * W;
    if (threadIdx.x < W) {
      mine[threadIdx.x] = part[threadIdx.x];
      __threadfence();  // the part is visible before the count that says it is there
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      atomicAdd(counters + group, 1u);
      const unsigned target = kGroup * (launch * my_tiles + round + 1);
      unsigned seen;
      do {
        asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(counters + group));
      } while (static_cast<int>(seen - target) < 0);
    }
    __syncthreads();
    if (threadIdx.x < W) {
      float t = 0;
      const float* theirs = partials + ((round & 1) * gridDim.x + group * kGroup) * W;
      for (int b = 0; b < kGroup; ++b) t += __ldcg(theirs + b * W + threadIdx.x);
      total[threadIdx.x] = t;
    }
    __syncthreads();
    const float keep = total[cw] == 1234.5f ? 1.0f : 0.0f;
    const int64_t next = tile + groups;
    float* dst = out + rank * kRows * kInner + tile * W + cw;
    for (int64_t r = slot; r < kRows; r += R) {
      float4 v = *reinterpret_cast<const float4*>(sm + r * W + cw);
      v.x += keep;
      *reinterpret_cast<float4*>(dst + r * kInner) = v;
      if (next < kTiles) copy16_async(sm + r * W + cw, src_of(next) + r * kInner);
    }
    commit();
  }
}

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

double copy_tbps = 0;

void report(const char* what, float ms) {
  const cudaError_t e = cudaGetLastError();
  printf("%-58s %.4f ms %5.1f%% of copy%s%s\n", what, ms,
         2.0 * kLen * kInner * 4 / (ms * 1e-3) / (copy_tbps * 1e12) * 100,
         e == cudaSuccess ? "" : "  ", e == cudaSuccess ? "" : cudaGetErrorString(e));
}

template <int kWidth, bool kCluster>
void run_tiles(const float* in, float* out, int blocks_per_tile) {
  auto kernel = tile_copy<kWidth, kCluster>;
  const int64_t rows = kLen / blocks_per_tile, smem = rows * kWidth;
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  if (blocks_per_tile > 8) cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  const int64_t blocks = kInner / (kWidth / 4) * blocks_per_tile;
  cudaLaunchConfig_t cfg{};
  cudaLaunchAttribute attr{};
  cfg.gridDim = dim3(static_cast<unsigned>(blocks));
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = smem;
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = kCluster ? blocks_per_tile : 1;
  attr.val.clusterDim.y = attr.val.clusterDim.z = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  const float ms = time_ms([&] { cudaLaunchKernelEx(&cfg, kernel, in, out, rows); });
  char what[128];
  snprintf(what, sizeof what, "%s width %d B, %d blocks of %lld KB a tile", kCluster ? "cluster " : "plain   ",
           kWidth, blocks_per_tile, static_cast<long long>(smem >> 10));
  report(what, ms);
}

template <int kWidth, int kGroup>
void run_exchange(const float* in, float* out, unsigned* counters, float* partials) {
  auto kernel = exchange_copy<kWidth, kGroup>;
  const int64_t smem = kLen / kGroup * kWidth;
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  int per_sm = 0, sms = 0;
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, smem);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  int groups = per_sm * sms / kGroup;
  cudaMemset(counters, 0, 4096 * sizeof(unsigned));
  unsigned launch = 0;
  const float ms = time_ms([&] {
    unsigned l = launch++;
    void* args[] = {&in, &out, &groups, &l, &counters, &partials};
    cudaLaunchCooperativeKernel(reinterpret_cast<void*>(kernel), dim3(groups * kGroup), dim3(kThreads),
                                args, smem, 0);
  });
  char what[128];
  snprintf(what, sizeof what, "exchange width %d B, %d blocks of %lld KB a tile, %d groups", kWidth,
           kGroup, static_cast<long long>(smem >> 10), groups);
  report(what, ms);
}

}  // namespace

int main() {
  const int64_t n = int64_t{1} << 28;
  float *s = nullptr, *d = nullptr, *partials = nullptr;
  unsigned* counters = nullptr;
  if (cudaMalloc(&s, n * 4) != cudaSuccess || cudaMalloc(&d, n * 4) != cudaSuccess ||
      cudaMalloc(&partials, 2 * 4096 * 128 * 4) != cudaSuccess ||
      cudaMalloc(&counters, 4096 * sizeof(unsigned)) != cudaSuccess) {
    fprintf(stderr, "probe-exchange: no CUDA device with 2 GiB free\n");
    return 2;
  }
  cudaMemset(s, 0, n * 4);
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  const float ms = time_ms([&] { cudaMemcpyAsync(d, s, n * 4, cudaMemcpyDeviceToDevice); });
  copy_tbps = 2.0 * n * 4 / (ms * 1e-3) / 1e12;
  printf("%s: device-to-device copy %.3f TB/s; [%lld, %lld] float32, column tiles\n", prop.name,
         copy_tbps, static_cast<long long>(kLen), static_cast<long long>(kInner));
  for (int round = 0; round < 2; ++round) {
    run_tiles<128, false>(s, d, 16);
    run_tiles<128, true>(s, d, 16);
    run_tiles<256, false>(s, d, 32);
    run_exchange<128, 16>(s, d, counters, partials);
    run_exchange<256, 32>(s, d, counters, partials);
    run_exchange<256, 16>(s, d, counters, partials);
  }
  return 0;
}
