// Column passes: reductions (and element-wise passes) down the columns of a [len, cols] block
// whose columns are adjacent in memory. A block of kColThreads threads takes a tile of 32 * V
// adjacent columns (V per lane, one 16-byte access when V > 1) and one chunk of rows; its warps
// take every kColGroups-th row, so each warp reads whole 32 * V-column row segments (coalesced).
// When the tiles alone cannot fill the GPU, the rows are split into chunks (blockIdx.y) whose
// partial results a second kernel merges.
#pragma once

#include <algorithm>

#include "cuda/common.cuh"

namespace opforge::cuda {

constexpr int kColThreads = 256;
constexpr int kColGroups = kColThreads / 32;  // row groups (warps) of a block
constexpr int kColUnroll = 4;                 // rows in flight per thread
constexpr int64_t kMinChunkRows = kColGroups * kColUnroll * 2;

// The grid of a column pass (host side): tiles of 32 * V columns by chunks of chunk_rows rows.
struct ColumnGrid {
  int64_t tiles = 1, chunks = 1, chunk_rows = 1;
};

// Enough chunks for about 16 blocks per SM (a few waves, so the tail stays short), none shorter
// than kMinChunkRows unless the column is.
inline ColumnGrid column_grid(int64_t cols, int64_t len, int v, const DeviceInfo& dev) {
  ColumnGrid g;
  g.tiles = ceil_div(cols, 32 * v);
  const int64_t wanted = static_cast<int64_t>(dev.sms) * 16;
  int64_t chunks = std::max<int64_t>(1, ceil_div(wanted, g.tiles));
  chunks = std::min<int64_t>(chunks, std::max<int64_t>(1, len / kMinChunkRows));
  g.chunk_rows = ceil_div(std::max<int64_t>(len, 1), chunks);
  g.chunks = ceil_div(std::max<int64_t>(len, 1), g.chunk_rows);
  return g;
}

// The chunk this block handles; `reversed` walks the chunks from the last, so a pass that follows
// a reduction over the same data starts on the rows the reduction read last (still in L2).
__device__ __forceinline__ int64_t column_chunk(bool reversed) {
  return reversed ? gridDim.y - 1 - blockIdx.y : blockIdx.y;
}

// First of the V columns of this thread (>= cols: the thread has none).
template <int V>
__device__ __forceinline__ int64_t column_of_thread() {
  return (static_cast<int64_t>(blockIdx.x) * 32 + (threadIdx.x & 31)) * V;
}

// Visits this thread's rows of [begin, end) in increasing order, kColUnroll loads in flight:
// load(l, u) fills slot u with row l, then use(l, u) consumes it.
template <class Load, class Use>
__device__ __forceinline__ void for_column_rows(int64_t begin, int64_t end, Load&& load,
                                                Use&& use) {
  const int group = threadIdx.x >> 5;
  for (int64_t l = begin + group; l < end; l += kColGroups * kColUnroll) {
#pragma unroll
    for (int u = 0; u < kColUnroll; ++u) {
      const int64_t r = l + static_cast<int64_t>(u) * kColGroups;
      if (r < end) load(r, u);
    }
#pragma unroll
    for (int u = 0; u < kColUnroll; ++u) {
      const int64_t r = l + static_cast<int64_t>(u) * kColGroups;
      if (r < end) use(r, u);
    }
  }
}

// Merges the row groups' states of each of the tile's 32 * V columns (in group order, so the
// result does not depend on timing) and calls emit(c, state) once per tile column c. Every
// thread of the block must call it; `shared` holds kColGroups * 32 * V states.
template <int V, class S, class Merge, class Emit>
__device__ __forceinline__ void merge_column_groups(const S (&state)[V], S* shared, Merge&& merge,
                                                    Emit&& emit) {
  const int lane = threadIdx.x & 31, group = threadIdx.x >> 5;
#pragma unroll
  for (int j = 0; j < V; ++j) shared[group * 32 * V + lane * V + j] = state[j];
  __syncthreads();
  for (int c = threadIdx.x; c < 32 * V; c += kColThreads) {
    S acc = shared[c];
    for (int g = 1; g < kColGroups; ++g) acc = merge(acc, shared[g * 32 * V + c]);
    emit(c, acc);
  }
}

}  // namespace opforge::cuda
