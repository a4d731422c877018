// Thread-block clusters (compute capability 9.0): launching them when they fit, and merging
// per-block partial results through distributed shared memory. The kernels that use them also
// run without (one block per cluster's work) on older devices.
#pragma once

#include <cooperative_groups.h>

#include <algorithm>

#include "cuda/common.cuh"

namespace opforge::cuda {

constexpr int kMaxCluster = 8;          // the portable cluster size limit
constexpr int kMaxNonPortableCluster = 16;  // Hopper's limit, for kernels that opt in

// Column tiles held in shared memory (softmax over a non-last dim, 2-D batch_norm): a block of
// kTileThreads threads holds rows of adjacent columns, kTileWidthBytes wide (softmax: 32 columns
// where that fits), for a run of the reduced dim; a cluster of blocks covers the whole dim, so
// it is read once.
constexpr int kTileThreads = 256;
constexpr int kTileWidthBytes = 64;
constexpr int64_t kTileBlockBytes = 64 << 10;  // shared memory a tile block aims for: 3 per SM
constexpr int kTileStages = 4;  // groups of a tile block's asynchronous copies in flight at once

// The work item (a row, a tile) of this block and its rank among the `blocks` blocks sharing it:
// with kCluster, its cluster's index in the grid and its rank in the cluster (read from the
// hardware, not inferred from blockIdx); without, blockIdx.x and 0 (one block per item).
struct Place {
  int64_t item;
  int rank;
};

template <bool kCluster>
__device__ __forceinline__ Place cluster_place() {
  if constexpr (kCluster) {
#if __CUDA_ARCH__ >= 900
    unsigned item, rank;
    asm("mov.u32 %0, %%clusterid.x;" : "=r"(item));
    asm("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
    return Place{item, static_cast<int>(rank)};
#else
    __trap();  // clusters are launched on compute capability 9.0 and later only
#endif
  }
  return Place{blockIdx.x, 0};
}

// Held from combine_blocks until the thread exits (on every path out): with kCluster, its
// destructor waits until every thread of the cluster is past combine_blocks, so no block's
// shared memory goes while another block may still read it. The wait is not .aligned: threads
// of one warp may leave at different points.
template <bool kCluster>
struct [[nodiscard]] ClusterLeave {
  __device__ ~ClusterLeave() {
    if constexpr (kCluster) {
#if __CUDA_ARCH__ >= 900
      asm volatile("barrier.cluster.wait;" ::: "memory");
#endif
    }
  }
};

// Merges part[0, n) of the `blocks` blocks of this block's cluster (in rank order, so every
// block gets the same) into result[0, n); without kCluster, result = part. Every thread calls
// it after this block's part is written; result is readable by every thread afterwards. The
// caller keeps the returned ClusterLeave until its threads exit: other blocks may still be
// reading this block's part, and waiting for them at exit instead of here (a second
// cluster-wide barrier) lets each block start its write pass as soon as its own merge is done.
template <bool kCluster, class S, class Merge>
__device__ __forceinline__ ClusterLeave<kCluster> combine_blocks(S* part, S* result, int n,
                                                                 int blocks, Merge&& merge) {
  if constexpr (kCluster) {
#if __CUDA_ARCH__ >= 900
    cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
    cluster.sync();  // every block's part is complete
    for (int t = threadIdx.x; t < n; t += blockDim.x) {
      S acc{};
      // Up to kMaxCluster remote reads in flight at once, merged in rank order.
      for (int first = 0; first < blocks; first += kMaxCluster) {
        S v[kMaxCluster];
#pragma unroll
        for (int r = 0; r < kMaxCluster; ++r) {
          if (first + r < blocks) v[r] = *cluster.map_shared_rank(part + t, first + r);
        }
#pragma unroll
        for (int r = 0; r < kMaxCluster; ++r) {
          if (first + r < blocks) acc = first + r == 0 ? v[r] : merge(acc, v[r]);
        }
      }
      result[t] = acc;
    }
    __syncthreads();  // result is complete
    // The owners of the memory read above wait for every arrival before they exit, so the reads
    // must be ordered before the arrivals. The block barrier orders every thread's reads before
    // what thread 0 does next; its cluster-scope fence then orders them before its own arrival,
    // and the others arrive relaxed: one fence a block instead of a release by every thread
    // (up to 1.5 points of the copy rate on the H100, bench/results/kernel-variants-*.txt).
    // CUDA 11's ptxas takes no .relaxed: there every thread arrives with release (the default).
#if defined(__CUDACC_VER_MAJOR__) && __CUDACC_VER_MAJOR__ >= 12
    if (threadIdx.x == 0) asm volatile("fence.acq_rel.cluster;" ::: "memory");
    asm volatile("barrier.cluster.arrive.relaxed;" ::: "memory");
#else
    asm volatile("barrier.cluster.arrive;" ::: "memory");
#endif
#else
    __trap();  // clusters are launched on compute capability 9.0 and later only
#endif
  } else {
    __syncthreads();
    for (int t = threadIdx.x; t < n; t += blockDim.x) result[t] = part[t];
    __syncthreads();
  }
  return {};
}

// Dynamic shared memory a kernel may use on this device, after its static shared memory.
template <class Kernel>
int64_t dynamic_smem_limit(Kernel kernel, const DeviceInfo& dev) {
  cudaFuncAttributes attr{};
  if (cudaFuncGetAttributes(&attr, kernel) != cudaSuccess) {
    cudaGetLastError();  // a failed query must not surface as a later launch's error
    return 0;
  }
  return static_cast<int64_t>(dev.smem_optin) - static_cast<int64_t>(attr.sharedSizeBytes);
}

template <class Kernel>
cudaLaunchConfig_t cluster_config(Kernel, int64_t grid, int threads, int64_t smem, int cluster,
                                  cudaStream_t s, cudaLaunchAttribute* attr) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(grid));
  cfg.blockDim = dim3(static_cast<unsigned>(threads));
  cfg.dynamicSmemBytes = static_cast<size_t>(smem);
  cfg.stream = s;
  attr->id = cudaLaunchAttributeClusterDimension;
  attr->val.clusterDim.x = static_cast<unsigned>(cluster);
  attr->val.clusterDim.y = 1;
  attr->val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cfg;
}

// Lets `kernel` use all the dynamic shared memory the device allows it. Always the device's limit,
// never a call's own size: the attribute is per kernel, so threads launching different sizes
// cannot shrink it under each other.
template <class Kernel>
cudaError_t allow_smem(Kernel kernel, const DeviceInfo& dev) {
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                              static_cast<int>(dynamic_smem_limit(kernel, dev)));
}

// Whether clusters of `cluster` blocks of `kernel` with `smem` bytes each can run at all here.
// Clusters above the portable size are allowed for the kernel first (the device may still
// refuse them: then they do not fit), and never where the build's sm_90 code does not run
// (older PTX on Hopper has no cluster registers: cluster_place would trap).
template <class Kernel>
bool cluster_fits(Kernel kernel, int64_t grid, int threads, int64_t smem, int cluster,
                  const DeviceInfo& dev, cudaStream_t s) {
  if (!sm90_code_runs(dev) || grid > INT32_MAX) return false;
  if (cluster > kMaxCluster &&
      cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) !=
          cudaSuccess) {
    cudaGetLastError();  // a failed query must not surface as a later launch's error
    return false;
  }
  if (allow_smem(kernel, dev) != cudaSuccess) {
    cudaGetLastError();  // a failed query must not surface as a later launch's error
    return false;
  }
  cudaLaunchAttribute attr;
  const cudaLaunchConfig_t cfg = cluster_config(kernel, grid, threads, smem, cluster, s, &attr);
  int clusters = 0;
  if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return clusters > 0;
}

// Launches `kernel` over clusters of `cluster` blocks (cluster_fits said they fit).
template <class Kernel, class... Args>
opforge_status launch_cluster(const char* op, Kernel kernel, int64_t grid, int threads,
                              int64_t smem, int cluster, cudaStream_t s, Args... args) {
  cudaLaunchAttribute attr;
  const cudaLaunchConfig_t cfg = cluster_config(kernel, grid, threads, smem, cluster, s, &attr);
  const cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, args...);
  if (e == cudaSuccess) return OPFORGE_OK;
  cudaGetLastError();  // reported here, not again by the next op's launch check
  return cuda_failure(op, "cluster launch", e);
}

// Launches `kernel` with `smem` bytes of dynamic shared memory per block (at most its limit).
template <class Kernel, class... Args>
opforge_status launch_with_smem(const char* op, Kernel kernel, int64_t grid, int threads,
                                int64_t smem, const DeviceInfo& dev, cudaStream_t s, Args... args) {
  const cudaError_t e = allow_smem(kernel, dev);
  if (e != cudaSuccess) return cuda_failure(op, "cudaFuncSetAttribute", e);
  kernel<<<static_cast<unsigned>(grid), threads, static_cast<size_t>(smem), s>>>(args...);
  return check_launch(op);
}

// How a tile kernel covers a dim of `len` rows of `row_bytes` each: `blocks` blocks (a cluster
// when more than one) of rows_per_block rows and `smem` bytes each; blocks == 0 when no launch
// fits (the caller falls back to passes that read twice).
struct TilePlan {
  int blocks = 0;
  int64_t rows_per_block = 0;
  int64_t smem = 0;
};

// Clusters of at most max_cluster blocks; when more than kMaxCluster do not fit (a device or a
// MIG slice without GPCs of 16 free SMs), fewer and larger blocks are tried before one block.
template <class Clustered, class Single>
TilePlan plan_tiles(Clustered clustered, Single single, int64_t tiles, int64_t len,
                    int64_t row_bytes, const DeviceInfo& dev, cudaStream_t s,
                    int max_cluster = kMaxCluster) {
  TilePlan plan;
  int blocks =
      static_cast<int>(std::min<int64_t>(max_cluster, ceil_div(len * row_bytes, kTileBlockBytes)));
  const int64_t rows = ceil_div(len, blocks);
  blocks = static_cast<int>(ceil_div(len, rows));
  if (blocks > 1 && rows * row_bytes <= dynamic_smem_limit(clustered, dev) &&
      cluster_fits(clustered, tiles * blocks, kTileThreads, rows * row_bytes, blocks, dev, s)) {
    return TilePlan{blocks, rows, rows * row_bytes};
  }
  if (max_cluster > kMaxCluster)
    return plan_tiles(clustered, single, tiles, len, row_bytes, dev, s, kMaxCluster);
  // One block per tile, if the whole dim fits its shared memory.
  if (len * row_bytes <= dynamic_smem_limit(single, dev) && tiles <= INT32_MAX) {
    return TilePlan{1, len, len * row_bytes};
  }
  return plan;
}

// Launches a tile kernel as planned: `clustered` over clusters of plan.blocks blocks, else
// `single`, one block per tile.
template <class Clustered, class Single, class... Args>
opforge_status launch_tiles(const char* op, const TilePlan& plan, Clustered clustered,
                            Single single, int64_t tiles, const DeviceInfo& dev, cudaStream_t s,
                            Args... args) {
  if (plan.blocks > 1) {
    return launch_cluster(op, clustered, tiles * plan.blocks, kTileThreads, plan.smem, plan.blocks,
                          s, args...);
  }
  return launch_with_smem(op, single, tiles, kTileThreads, plan.smem, dev, s, args...);
}

}  // namespace opforge::cuda
