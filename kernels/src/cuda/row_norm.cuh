// layer_norm (kCentered) and rms_norm on CUDA, forward and backward, float32 arithmetic. x is
// seen as `rows` contiguous rows of n elements: tensors of other layouts go through contiguous
// copies (layout.hpp's dense_like and copy_back).
//
// Forward: a row per block of 32 to 1024 threads at a time, held in registers (fwd_packs packs
// per thread): x read once, y written once; mean and variance in two passes over the registers.
// float32 rows (and rows of single elements) take one row per block, several blocks per SM
// overlapping one row's reductions with other rows' loads. Rows of 2-byte types, half the bytes
// per register, would leave the memory idle that way: their blocks, as many as fit at once, walk
// rows, with the next rows' x on its way into shared memory (cp.async stages) while a row is
// reduced and written.
//
// Backward: a block holds up to kMaxGroups row groups of G threads; each group walks rows on its
// own (its own named barrier) with the next rows' x and dy on their way into shared memory
// (cp.async stages) while it works on the current one, writes dx, and adds dy * xhat (and dy)
// into sums of its columns kept in registers: a thread owns the same columns in every row. Rows
// of 2-byte types that one pack per thread would spread over a whole block of 1024 threads take
// 512 threads of two packs each instead, where the shared memory holds their stages (an A100's
// or an H100's does): a block alone on its SM, whose threads may then hold 128 registers (the
// sums of two packs, unspilled), taking two rows per step and reducing them together. That
// halves the per-step overhead per element (on an H100 the 1024-thread block was bound by
// instruction issue, not memory). The grid is as many blocks as fit on the device at once; at
// the end each block writes one row of partial column sums, and `column_sums` adds the blocks'
// rows per column in a fixed order: dweight and dbias are deterministic, with no atomics. Rows
// of single elements, and GPUs with less shared memory than the stages need, keep the next row
// in registers instead and the sums in shared memory (backward_rows).
//
// Rows longer than the registers hold take the same steps reading rows from memory again, with
// the partial sums kept in the workspace.
#pragma once

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "cuda/kit.cuh"
#include "cuda/layout.hpp"

namespace opforge::cuda::kit {

constexpr int kFwdElems = 32;     // elements of a row per thread, forward (16-byte packs)
constexpr int kBwdElems = 8;      // elements of x and of dy per thread, backward (16-byte packs)
constexpr int kMaxThreads = 1024;
constexpr int kFwdStages = 3;     // rows of x staged per forward block: 1 worked on, 2 in flight
constexpr int kMaxGroups = 8;     // row groups of a backward block (named barriers 1..8)
constexpr int kLongThreads = 512;
constexpr int64_t kWorkspaceFloats = int64_t{1} << 25;  // partial sums of the long-row backward

// Packs of V elements per thread: 16-byte packs fill kFwdElems / kBwdElems; single elements
// fewer, as each takes a register of its own and must stay out of local memory.
template <int V>
constexpr int fwd_packs() {
  return V == 1 ? 8 : kFwdElems / V;
}
template <int V>
constexpr int bwd_packs() {
  return V == 1 ? 4 : kBwdElems / V;
}

// Barrier of the `threads` threads of one row group (`id` 0: the whole block).
__device__ __forceinline__ void group_barrier(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// Sums, in place, of N floats over a row group of `threads` threads (a multiple of 32, starting
// at a warp boundary); every thread of the group gets them. `scratch` holds 32 * N floats per
// group.
template <int N>
__device__ __forceinline__ void group_sum(float (&v)[N], float* scratch, int id, int threads) {
  const int lane = threadIdx.x & 31, warp = (threadIdx.x % threads) >> 5, warps = threads >> 5;
#pragma unroll
  for (int k = 0; k < N; ++k) v[k] = warp_sum(v[k]);
  if (warps == 1) return;
  group_barrier(id, threads);  // the previous call's readers are done with scratch
  if (lane == 0) {
#pragma unroll
    for (int k = 0; k < N; ++k) scratch[k * 32 + warp] = v[k];
  }
  group_barrier(id, threads);
#pragma unroll
  for (int k = 0; k < N; ++k) v[k] = warp_sum(lane < warps ? scratch[k * 32 + lane] : 0.0f);
}

__device__ __forceinline__ float group_sum1(float v, float* scratch, int id, int threads) {
  float s[1] = {v};
  group_sum<1>(s, scratch, id, threads);
  return s[0];
}

// Weight and bias of V columns starting at column `c` (1 and 0 when absent).
template <class W, int V>
__device__ __forceinline__ void load_param(const W* p, int64_t c, float fallback,
                                           float (&out)[V]) {
  if (p != nullptr) {
    load_floats<W, V>(p + c, out);
  } else {
#pragma unroll
    for (int k = 0; k < V; ++k) out[k] = fallback;
  }
}

template <class T, class W, class B, int V, bool kCentered>
__global__ void __launch_bounds__(kMaxThreads)
    forward_rows(const T* __restrict__ x, const W* __restrict__ weight, const B* __restrict__ bias,
                 T* __restrict__ y, float* __restrict__ mean, float* __restrict__ rstd,
                 int64_t rows, int n, float eps) {
  constexpr int P = fwd_packs<V>();
  __shared__ float scratch[32];
  const int threads = blockDim.x, packs = n / V;
  const float inv_n = 1.0f / static_cast<float>(n);
  wait_for_prior_grid();
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + row * n;
    float v[P][V];
    float sum = 0.0f;
#pragma unroll
    for (int p = 0; p < P; ++p) {
      const int q = p * threads + threadIdx.x;
      if (q < packs) {
        load_floats<T, V>(xr + static_cast<int64_t>(q) * V, v[p]);
#pragma unroll
        for (int k = 0; k < V; ++k) sum += v[p][k];
      }
    }
    const float mu = kCentered ? group_sum1(sum, scratch, 0, threads) * inv_n : 0.0f;
    float sq = 0.0f;
#pragma unroll
    for (int p = 0; p < P; ++p) {
      if (p * threads + static_cast<int>(threadIdx.x) < packs) {
#pragma unroll
        for (int k = 0; k < V; ++k) sq += (v[p][k] - mu) * (v[p][k] - mu);
      }
    }
    const float rs = rsqrtf(group_sum1(sq, scratch, 0, threads) * inv_n + eps);
    T* yr = y + row * n;
#pragma unroll
    for (int p = 0; p < P; ++p) {
      const int q = p * threads + threadIdx.x;
      if (q < packs) {
        const int64_t c = static_cast<int64_t>(q) * V;
        float w[V], b[V], o[V];
        load_param<W, V>(weight, c, 1.0f, w);
        load_param<B, V>(kCentered ? bias : nullptr, c, 0.0f, b);
#pragma unroll
        for (int k = 0; k < V; ++k) o[k] = (v[p][k] - mu) * rs * w[k] + b[k];
        store_floats<T, V>(yr + c, o);
      }
    }
    if (threadIdx.x == 0) {
      if (kCentered) mean[row] = mu;
      rstd[row] = rs;
    }
  }
}

// Forward of rows of 16-byte packs (2-byte types) on a grid of the blocks that fit at once: each
// block walks rows, with the next kFwdStages - 1 rows of x already on their way into shared
// memory while it works on the current one, so that loads keep flowing through the reductions
// and the stores. Each thread copies and later reads only its own packs: the stages need no
// barrier.
template <class T, class W, class B, bool kCentered>
__global__ void __launch_bounds__(kMaxThreads)
    forward_staged(const T* __restrict__ x, const W* __restrict__ weight,
                   const B* __restrict__ bias, T* __restrict__ y, float* __restrict__ mean,
                   float* __restrict__ rstd, int64_t rows, int n, float eps) {
  constexpr int V = kVec<T>, P = fwd_packs<V>();
  using Raw = Pack<T, V>;
  extern __shared__ uint4 staged[];  // [kFwdStages][P][threads] packs
  Raw* stage = reinterpret_cast<Raw*>(staged);
  __shared__ float scratch[32];
  const int threads = blockDim.x, t = threadIdx.x, packs = n / V;
  const float inv_n = 1.0f / static_cast<float>(n);
  auto fetch = [&](int64_t row, int s) {
    if (row < rows) {
      const Raw* xr = reinterpret_cast<const Raw*>(x + row * n);
#pragma unroll
      for (int p = 0; p < P; ++p) {
        const int q = p * threads + t;
        if (q < packs) copy_async<16>(&stage[(s * P + p) * threads + t], xr + q);
      }
    }
    async_commit();  // an empty group past the last row keeps the wait count below uniform
  };
  int64_t row = blockIdx.x;
  wait_for_prior_grid();
#pragma unroll
  for (int s = 0; s < kFwdStages - 1; ++s) fetch(row + s * static_cast<int64_t>(gridDim.x), s);
  for (int i = 0; row < rows; row += gridDim.x, ++i) {
    fetch(row + (kFwdStages - 1) * static_cast<int64_t>(gridDim.x),
          (i + kFwdStages - 1) % kFwdStages);
    async_wait<kFwdStages - 1>();
    const Raw* mine = stage + (i % kFwdStages) * P * threads + t;
    float v[P][V];
    float sum = 0.0f;
#pragma unroll
    for (int p = 0; p < P; ++p) {
      if (p * threads + t < packs) {
        const Raw r = mine[p * threads];
#pragma unroll
        for (int k = 0; k < V; ++k) {
          v[p][k] = pack_f(r, k);
          sum += v[p][k];
        }
      }
    }
    const float mu = kCentered ? group_sum1(sum, scratch, 0, threads) * inv_n : 0.0f;
    float sq = 0.0f;
#pragma unroll
    for (int p = 0; p < P; ++p) {
      if (p * threads + t < packs) {
#pragma unroll
        for (int k = 0; k < V; ++k) sq += (v[p][k] - mu) * (v[p][k] - mu);
      }
    }
    const float rs = rsqrtf(group_sum1(sq, scratch, 0, threads) * inv_n + eps);
    T* yr = y + row * n;
#pragma unroll
    for (int p = 0; p < P; ++p) {
      const int q = p * threads + t;
      if (q < packs) {
        const int64_t c = static_cast<int64_t>(q) * V;
        float w[V], b[V], o[V];
        load_param<W, V>(weight, c, 1.0f, w);
        load_param<B, V>(kCentered ? bias : nullptr, c, 0.0f, b);
#pragma unroll
        for (int k = 0; k < V; ++k) o[k] = (v[p][k] - mu) * rs * w[k] + b[k];
        store_floats<T, V>(yr + c, o);
      }
    }
    if (t == 0) {
      if (kCentered) mean[row] = mu;
      rstd[row] = rs;
    }
  }
}

template <class T, class W, class B, bool kCentered>
__global__ void __launch_bounds__(kLongThreads)
    forward_long(const T* __restrict__ x, const W* __restrict__ weight, const B* __restrict__ bias,
                 T* __restrict__ y, float* __restrict__ mean, float* __restrict__ rstd,
                 int64_t rows, int64_t n, float eps) {
  __shared__ float scratch[32];
  const int threads = blockDim.x;
  const float inv_n = 1.0f / static_cast<float>(n);
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + row * n;
    float sum = 0.0f;
    if (kCentered) {
      for (int64_t i = threadIdx.x; i < n; i += threads) sum += to_f(xr[i]);
    }
    const float mu = kCentered ? group_sum1(sum, scratch, 0, threads) * inv_n : 0.0f;
    float sq = 0.0f;
    for (int64_t i = threadIdx.x; i < n; i += threads) {
      const float d = to_f(xr[i]) - mu;
      sq += d * d;
    }
    const float rs = rsqrtf(group_sum1(sq, scratch, 0, threads) * inv_n + eps);
    T* yr = y + row * n;
    for (int64_t i = threadIdx.x; i < n; i += threads) {
      float v = (to_f(xr[i]) - mu) * rs;
      if (weight != nullptr) v *= to_f(weight[i]);
      if (kCentered && bias != nullptr) v += to_f(bias[i]);
      yr[i] = from_f<T>(v);
    }
    if (threadIdx.x == 0) {
      if (kCentered) mean[row] = mu;
      rstd[row] = rs;
    }
  }
}

// Rows with no element: mean 0 and rstd NaN (0/0), as PyTorch gives.
static __global__ void empty_row_stats(float* mean, float* rstd, int64_t rows) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < rows;
       i += step) {
    if (mean != nullptr) mean[i] = 0.0f;
    rstd[i] = NAN;
  }
}

// Backward, rows in registers, the next one loaded into registers too (rows of single elements,
// and GPUs without the shared memory of backward_staged). blockDim.x = groups * threads; dynamic
// shared memory holds blockDim.x * (kParts * P * V + 1) floats; `part` receives kParts rows of n
// per block.
template <class T, class W, int V, bool kCentered>
__global__ void __launch_bounds__(kMaxThreads)
    backward_rows(const T* __restrict__ dy, const T* __restrict__ x,
                  const float* __restrict__ mean, const float* __restrict__ rstd,
                  const W* __restrict__ weight, T* __restrict__ dx, float* __restrict__ part,
                  int64_t rows, int n, int threads) {
  constexpr int P = bwd_packs<V>();
  constexpr int kParts = kCentered ? 2 : 1;
  constexpr int kSlots = kParts * P * V;  // sums per thread
  constexpr int kStride = kSlots + 1;     // odd: threads' slots fall in different banks
  using Raw = Pack<T, V>;
  extern __shared__ float sums[];         // [groups][threads][kStride]
  __shared__ float scratch[kMaxGroups][32 * 2];
  const int groups = blockDim.x / threads, group = threadIdx.x / threads;
  const int t = threadIdx.x % threads, packs = n / V;
  const float inv_n = 1.0f / static_cast<float>(n);
  float* mine = sums + threadIdx.x * kStride;
#pragma unroll
  for (int s = 0; s < kSlots; ++s) mine[s] = 0.0f;
  wait_for_prior_grid();
  // This row's x, dy and statistics, and the next row's, loaded while this one is worked on.
  Raw cx[P], cg[P], nx[P], ng[P];
  float cm = 0.0f, cr = 0.0f, nm = 0.0f, nr = 0.0f;
  auto load = [&](int64_t row, Raw(&xs)[P], Raw(&gs)[P], float& m, float& r) {
    const Raw* xr = reinterpret_cast<const Raw*>(x + row * n);
    const Raw* gr = reinterpret_cast<const Raw*>(dy + row * n);
#pragma unroll
    for (int p = 0; p < P; ++p) {
      const int q = p * threads + t;
      if (q < packs) {
        xs[p] = xr[q];
        gs[p] = gr[q];
      }
    }
    m = kCentered ? mean[row] : 0.0f;
    r = rstd[row];
  };
  const int64_t step = static_cast<int64_t>(gridDim.x) * groups;
  int64_t row = static_cast<int64_t>(blockIdx.x) * groups + group;
  if (row < rows) load(row, cx, cg, cm, cr);
  for (; row < rows; row += step) {
    if (row + step < rows) load(row + step, nx, ng, nm, nr);
    // xhat and g are recomputed after the reduction rather than kept: fewer live registers.
    float sum_g = 0.0f, sum_gx = 0.0f;
#pragma unroll
    for (int p = 0; p < P; ++p) {
      const int q = p * threads + t;
      if (q < packs) {
        float w[V];
        load_param<W, V>(weight, static_cast<int64_t>(q) * V, 1.0f, w);
#pragma unroll
        for (int k = 0; k < V; ++k) {
          const float d = pack_f(cg[p], k), xhat = (pack_f(cx[p], k) - cm) * cr, g = d * w[k];
          mine[p * V + k] += d * xhat;
          if (kCentered) mine[P * V + p * V + k] += d;
          sum_g += g;
          sum_gx += g * xhat;
        }
      }
    }
    float s[2] = {sum_g, sum_gx};
    group_sum<2>(s, scratch[group], 1 + group, threads);
    const float c1 = kCentered ? s[0] * inv_n : 0.0f, c2 = s[1] * inv_n;
    T* dxr = dx + row * n;
#pragma unroll
    for (int p = 0; p < P; ++p) {
      const int q = p * threads + t;
      if (q < packs) {
        float w[V], o[V];
        load_param<W, V>(weight, static_cast<int64_t>(q) * V, 1.0f, w);
#pragma unroll
        for (int k = 0; k < V; ++k) {
          const float xhat = (pack_f(cx[p], k) - cm) * cr, g = pack_f(cg[p], k) * w[k];
          o[k] = cr * (g - c1 - xhat * c2);
        }
        store_floats<T, V>(dxr + static_cast<int64_t>(q) * V, o);
      }
    }
#pragma unroll
    for (int p = 0; p < P; ++p) {
      cx[p] = nx[p];
      cg[p] = ng[p];
    }
    cm = nm;
    cr = nr;
  }
  __syncthreads();
  if (group != 0) return;  // group 0 adds up the groups' sums of its columns
#pragma unroll
  for (int j = 0; j < kParts; ++j) {
    float* out = part + (static_cast<int64_t>(j) * gridDim.x + blockIdx.x) * n;
#pragma unroll
    for (int p = 0; p < P; ++p) {
      const int q = p * threads + t;
      if (q < packs) {
#pragma unroll
        for (int k = 0; k < V; ++k) {
          const int slot = j * P * V + p * V + k;
          float total = 0.0f;
          for (int r = 0; r < groups; ++r) total += sums[(r * threads + t) * kStride + slot];
          out[static_cast<int64_t>(q) * V + k] = total;
        }
      }
    }
  }
}

// Backward of rows of 16-byte packs, P per thread: row groups as in backward_rows, but a group
// takes R rows at a time (a grid's groups apart), with one reduction for the R of them (more work
// between the group's barriers), and the next S - 1 such steps of x and dy are on their way into shared
// memory (each thread copies and reads only its own packs) while the group works on the
// current one. Each thread keeps its columns' sums in registers, and its weights, both the same
// for every row; at the end the stages' memory holds every thread's sums, slot by slot, for
// group 0 to add up (a block of one group stores its sums from registers).
template <class T, class W, bool kCentered, int R, int S, int P, int kBlockThreads>
__global__ void __launch_bounds__(kBlockThreads)
    backward_staged(const T* __restrict__ dy, const T* __restrict__ x,
                    const float* __restrict__ mean, const float* __restrict__ rstd,
                    const W* __restrict__ weight, T* __restrict__ dx, float* __restrict__ part,
                    int64_t rows, int n, int threads) {
  constexpr int V = kVec<T>;
  constexpr int kParts = kCentered ? 2 : 1;
  constexpr int kRowPacks = 2 * P;  // x then dy, per thread
  using Raw = Pack<T, V>;
  extern __shared__ uint4 staged[];  // [groups][S][R][x, dy][P][threads] packs
  __shared__ float scratch[kMaxGroups][32 * 2 * R];
  const int groups = blockDim.x / threads, group = threadIdx.x / threads;
  const int t = threadIdx.x % threads, packs = n / V;
  const float inv_n = 1.0f / static_cast<float>(n);
  Raw* mine = reinterpret_cast<Raw*>(staged) + group * S * R * kRowPacks * threads + t;
  float w[P][V], acc[kParts][P][V];
  wait_for_prior_grid();
#pragma unroll
  for (int p = 0; p < P; ++p) {
    const int q = p * threads + t;
    if (q < packs) load_param<W, V>(weight, static_cast<int64_t>(q) * V, 1.0f, w[p]);
#pragma unroll
    for (int k = 0; k < V; ++k) {
#pragma unroll
      for (int j = 0; j < kParts; ++j) acc[j][p][k] = 0.0f;
    }
  }
  // A step's R rows lie `spread` rows apart, each group's first one beside the other groups':
  // the last, partial step then gives one row to as many groups as it can (with R adjacent
  // rows, half the SMs would take two rows each while the other half idled).
  const int64_t spread = static_cast<int64_t>(gridDim.x) * groups;
  const int64_t step = spread * R;
  int64_t first = static_cast<int64_t>(blockIdx.x) * groups + group;
  auto fetch = [&](int64_t step_first, int stage) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (step_first + r * spread < rows) {
        const Raw* xr = reinterpret_cast<const Raw*>(x + (step_first + r * spread) * n);
        const Raw* gr = reinterpret_cast<const Raw*>(dy + (step_first + r * spread) * n);
        Raw* dst = mine + (stage * R + r) * kRowPacks * threads;
#pragma unroll
        for (int p = 0; p < P; ++p) {
          const int q = p * threads + t;
          if (q < packs) {
            copy_async<16>(dst + p * threads, xr + q);
            copy_async<16>(dst + (P + p) * threads, gr + q);
          }
        }
      }
    }
    async_commit();  // an empty group past the last row keeps the wait count below uniform
  };
#pragma unroll
  for (int stage = 0; stage < S - 1; ++stage) fetch(first + stage * step, stage);
  // The statistics of a step's rows are loaded during the step before.
  float cm[R], cr[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    cm[r] = kCentered && first + r * spread < rows ? mean[first + r * spread] : 0.0f;
    cr[r] = first + r * spread < rows ? rstd[first + r * spread] : 0.0f;
  }
  for (int i = 0; first < rows; first += step, ++i) {
    fetch(first + (S - 1) * step, (i + S - 1) % S);
    float nm[R], nr[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int64_t next = first + step + r * spread;
      nm[r] = kCentered && next < rows ? mean[next] : 0.0f;
      nr[r] = next < rows ? rstd[next] : 0.0f;
    }
    async_wait<S - 1>();
    // x and dy are read from the stage twice rather than kept through the reduction: fewer
    // live registers.
    const Raw* cur = mine + (i % S) * R * kRowPacks * threads;
    float s[2 * R];  // per row: sum of g, sum of g * xhat
#pragma unroll
    for (int r = 0; r < R; ++r) {
      s[2 * r] = 0.0f;
      s[2 * r + 1] = 0.0f;
      if (first + r * spread >= rows) continue;
#pragma unroll
      for (int p = 0; p < P; ++p) {
        if (p * threads + t < packs) {
          const Raw cx = cur[(r * kRowPacks + p) * threads];
          const Raw cg = cur[(r * kRowPacks + P + p) * threads];
#pragma unroll
          for (int k = 0; k < V; ++k) {
            const float d = pack_f(cg, k), xhat = (pack_f(cx, k) - cm[r]) * cr[r];
            const float g = d * w[p][k];
            acc[0][p][k] += d * xhat;
            if (kCentered) acc[kParts - 1][p][k] += d;
            s[2 * r] += g;
            s[2 * r + 1] += g * xhat;
          }
        }
      }
    }
    group_sum<2 * R>(s, scratch[group], 1 + group, threads);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (first + r * spread >= rows) continue;
      const float c1 = kCentered ? s[2 * r] * inv_n : 0.0f, c2 = s[2 * r + 1] * inv_n;
      T* dxr = dx + (first + r * spread) * n;
#pragma unroll
      for (int p = 0; p < P; ++p) {
        const int q = p * threads + t;
        if (q < packs) {
          const Raw cx = cur[(r * kRowPacks + p) * threads];
          const Raw cg = cur[(r * kRowPacks + P + p) * threads];
          float o[V];
#pragma unroll
          for (int k = 0; k < V; ++k) {
            const float xhat = (pack_f(cx, k) - cm[r]) * cr[r], g = pack_f(cg, k) * w[p][k];
            o[k] = cr[r] * (g - c1 - xhat * c2);
          }
          store_floats<T, V>(dxr + static_cast<int64_t>(q) * V, o);
        }
      }
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
      cm[r] = nm[r];
      cr[r] = nr[r];
    }
  }
  async_wait<0>();
  if (groups == 1) {  // the block's sums are each thread's own: no adding up across groups
#pragma unroll
    for (int j = 0; j < kParts; ++j) {
      float* out = part + (static_cast<int64_t>(j) * gridDim.x + blockIdx.x) * n;
#pragma unroll
      for (int p = 0; p < P; ++p) {
        const int q = p * threads + t;
        if (q < packs) store_floats<float, V>(out + static_cast<int64_t>(q) * V, acc[j][p]);
      }
    }
    return;
  }
  __syncthreads();  // every group is done with the stages: they now hold the sums
  float* sums = reinterpret_cast<float*>(staged);  // [slot][blockDim.x]
#pragma unroll
  for (int j = 0; j < kParts; ++j) {
#pragma unroll
    for (int p = 0; p < P; ++p) {
#pragma unroll
      for (int k = 0; k < V; ++k) {
        sums[((j * P + p) * V + k) * blockDim.x + threadIdx.x] = acc[j][p][k];
      }
    }
  }
  __syncthreads();
  if (group != 0) return;  // group 0 adds up the groups' sums of its columns
#pragma unroll
  for (int j = 0; j < kParts; ++j) {
    float* out = part + (static_cast<int64_t>(j) * gridDim.x + blockIdx.x) * n;
#pragma unroll
    for (int p = 0; p < P; ++p) {
      const int q = p * threads + t;
      if (q < packs) {
        float total[V];
#pragma unroll
        for (int k = 0; k < V; ++k) {
          const float* slot = sums + ((j * P + p) * V + k) * blockDim.x + t;
          total[k] = 0.0f;
          for (int r = 0; r < groups; ++r) total[k] += slot[r * threads];
        }
        store_floats<float, V>(out + static_cast<int64_t>(q) * V, total);
      }
    }
  }
}

// Backward of rows longer than the registers hold: two reads of x and dy per row; a block's
// partial column sums live in its rows of `part` (each thread owns the same columns throughout).
template <class T, class W, bool kCentered>
__global__ void __launch_bounds__(kLongThreads)
    backward_long(const T* __restrict__ dy, const T* __restrict__ x,
                  const float* __restrict__ mean, const float* __restrict__ rstd,
                  const W* __restrict__ weight, T* __restrict__ dx, float* __restrict__ part,
                  int64_t rows, int64_t n) {
  __shared__ float scratch[32 * 2];
  const int threads = blockDim.x;
  const float inv_n = 1.0f / static_cast<float>(n);
  float* pw = part + static_cast<int64_t>(blockIdx.x) * n;
  float* pb = part + (static_cast<int64_t>(gridDim.x) + blockIdx.x) * n;
  for (int64_t i = threadIdx.x; i < n; i += threads) {
    pw[i] = 0.0f;
    if (kCentered) pb[i] = 0.0f;
  }
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t base = row * n;
    const float mu = kCentered ? mean[row] : 0.0f, rs = rstd[row];
    float sum_g = 0.0f, sum_gx = 0.0f;
    for (int64_t i = threadIdx.x; i < n; i += threads) {
      const float xhat = (to_f(x[base + i]) - mu) * rs;
      const float g = to_f(dy[base + i]) * (weight != nullptr ? to_f(weight[i]) : 1.0f);
      sum_g += g;
      sum_gx += g * xhat;
    }
    float s[2] = {sum_g, sum_gx};
    group_sum<2>(s, scratch, 0, threads);
    const float c1 = kCentered ? s[0] * inv_n : 0.0f, c2 = s[1] * inv_n;
    for (int64_t i = threadIdx.x; i < n; i += threads) {
      const float xhat = (to_f(x[base + i]) - mu) * rs, d = to_f(dy[base + i]);
      const float g = d * (weight != nullptr ? to_f(weight[i]) : 1.0f);
      dx[base + i] = from_f<T>(rs * (g - c1 - xhat * c2));
      pw[i] += d * xhat;
      if (kCentered) pb[i] += d;
    }
  }
}

constexpr int kColumnSumLoads = 8;  // a column_sums thread's partial rows in flight at once

// out_j[c] = sum over b < blocks of part[j][b][c], b in order; j = blockIdx.y. Block 32 x 32,
// each thread V adjacent columns (V > 1 only when n % V == 0): with V = 4 one wave of blocks
// covers a row of 8192 columns on an H100, each thread's loads 16 bytes. With `discard` (rows of
// whole 128-byte lines, part aligned to them), the lines read are dropped from L2 afterwards:
// written moments before by the row kernel and still there, they would otherwise be written
// back to memory (8.6 MB for layer_norm's 4096 x 8192 on an H100), which nothing reads again.
template <int V>
__global__ void __launch_bounds__(1024)
    column_sums(const float* __restrict__ part, int64_t blocks, int64_t n, float* __restrict__ out0,
                float* __restrict__ out1, bool discard) {
  constexpr int kCols = 32 * V;  // per block
  __shared__ float tile[32][kCols];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kCols;
  const int64_t c = first + tx * V;
  const float* p = part + static_cast<int64_t>(blockIdx.y) * blocks * n;
  float s[V] = {};
  wait_for_prior_grid();
  if (c < n) {
    // All of a thread's rows in flight at once, up to kColumnSumLoads (one wait for L2 where
    // there are at most 32 * kColumnSumLoads blocks, as the 132 of an H100), added in order.
    for (int64_t b0 = ty; b0 < blocks; b0 += 32 * kColumnSumLoads) {
      float v[kColumnSumLoads][V];
#pragma unroll
      for (int u = 0; u < kColumnSumLoads; ++u) {
        if (b0 + 32 * u < blocks) load_floats<float, V>(p + (b0 + 32 * u) * n + c, v[u]);
      }
#pragma unroll
      for (int u = 0; u < kColumnSumLoads; ++u) {
        if (b0 + 32 * u < blocks) {
#pragma unroll
          for (int k = 0; k < V; ++k) s[k] += v[u][k];
        }
      }
    }
  }
#pragma unroll
  for (int k = 0; k < V; ++k) tile[ty][tx * V + k] = s[k];
  __syncthreads();  // also: every load above is done
#if __CUDA_ARCH__ >= 800
  constexpr int kLineLanes = 32 / V;  // lanes reading one 128-byte line
  if (discard && tx % kLineLanes == 0 && c < n) {
    for (int64_t b = ty; b < blocks; b += 32) {
      asm volatile("discard.global.L2 [%0], 128;" ::"l"(p + b * n + c) : "memory");
    }
  }
#endif
  const int col = ty * 32 + tx;
  if (col < kCols && first + col < n) {
    float total = 0.0f;
    for (int j = 0; j < 32; ++j) total += tile[j][col];
    (blockIdx.y == 0 ? out0 : out1)[first + col] = total;
  }
}

// Calls f(W{}) with W a parameter's device type: float, or T.
template <class T, class F>
opforge_status with_param_type(bool float_param, F&& f) {
  if (float_param) return f(float{});
  return f(T{});
}

// Threads of a row group holding `packs` packs, `per_thread` each: a power of two from 32;
// 0 when even kMaxThreads cannot hold the row.
inline int row_threads(int64_t packs, int per_thread) {
  int threads = 32;
  while (threads < kMaxThreads && static_cast<int64_t>(threads) * per_thread < packs) threads *= 2;
  return static_cast<int64_t>(threads) * per_thread >= packs ? threads : 0;
}

// Rows and elements per row of x normalised over its last k dims.
struct RowsOf {
  int64_t rows = 1, n = 1;
};

inline RowsOf rows_of(const Tensor& x, size_t k) {
  RowsOf r;
  for (int d = 0; d < x.ndim(); ++d) {
    (static_cast<size_t>(d) < x.shape.size() - k ? r.rows : r.n) *= x.shape[d];
  }
  return r;
}

// Contiguous versions of a call's tensors: each is the tensor itself when contiguous, else a
// copy (inputs) or a temporary copied back by `finish` (outputs).
class Dense {
 public:
  Dense(const char* op, cudaStream_t stream) : op_(op), stream_(stream), scratch_(stream) {}

  // The data of `t` as contiguous memory (nullptr for an absent tensor).
  template <class T>
  const T* input(const Tensor* t) {
    return static_cast<const T*>(view(t, true));
  }
  template <class T>
  T* output(Tensor* t) {
    return static_cast<T*>(view(t, false));
  }
  Scratch& scratch() { return scratch_; }
  opforge_status status() const { return status_; }

  // Copies the output temporaries into their tensors; the first failure of the call.
  opforge_status finish() {
    for (const auto& [t, dense] : outputs_) {
      if (status_ == OPFORGE_OK) status_ = copy_back(op_, dense, *t, stream_);
    }
    return status_;
  }

 private:
  void* view(const Tensor* t, bool fill) {
    if (t == nullptr || status_ != OPFORGE_OK) return nullptr;
    Tensor dense;
    status_ = dense_like(op_, *t, fill, scratch_, stream_, dense);
    if (!fill && dense.data != t->data) outputs_.emplace_back(t, dense);
    return dense.data;
  }

  const char* op_;
  cudaStream_t stream_;
  Scratch scratch_;
  opforge_status status_ = OPFORGE_OK;
  std::vector<std::pair<const Tensor*, Tensor>> outputs_;
};

template <class T, class W, class B, bool kCentered>
opforge_status launch_forward(const char* op, const T* x, const W* weight, const B* bias, T* y,
                              float* mean, float* rstd, int64_t rows, int64_t n, float eps,
                              int device, cudaStream_t s) {
  constexpr int V = kVec<T>;
  const unsigned grid = grid_for(rows, 1);
  DeviceInfo dev;
  cudaError_t err = device_info(device, &dev);
  if (err != cudaSuccess) return cuda_failure(op, "cudaDeviceGetAttribute", err);
  if (n % V == 0 && aligned16(x) && aligned16(y) && aligned16(weight) && aligned16(bias)) {
    if (const int threads = row_threads(n / V, fwd_packs<V>())) {
      // Rows of 2-byte types go through the stages. A float32 row in registers already keeps
      // twice the bytes in flight, and float32 stages would take the shared memory of blocks
      // that fit by registers (slower on an H100).
      if constexpr (sizeof(T) == 2) {
        const size_t smem = size_t{16} * kFwdStages * fwd_packs<V>() * threads;
        if (smem + sizeof(float) * 32 <= static_cast<size_t>(dev.smem_optin)) {
          auto kernel = forward_staged<T, W, B, kCentered>;
          err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
          int per_sm = 0;
          if (err == cudaSuccess) {
            err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem);
          }
          if (err != cudaSuccess) return cuda_failure(op, "forward kernel set-up", err);
          const auto blocks = std::min<int64_t>(rows, int64_t{dev.sms} * std::max(per_sm, 1));
          return launch_overlapped(op, dev, kernel, dim3(static_cast<unsigned>(blocks)),
                                   dim3(threads), smem, s, x, weight, bias, y, mean, rstd, rows,
                                   static_cast<int>(n), eps);
        }
      }
      return launch_overlapped(op, dev, forward_rows<T, W, B, V, kCentered>, dim3(grid),
                               dim3(threads), 0, s, x, weight, bias, y, mean, rstd, rows,
                               static_cast<int>(n), eps);
    }
  } else if (const int threads = row_threads(n, fwd_packs<1>())) {
    return launch_overlapped(op, dev, forward_rows<T, W, B, 1, kCentered>, dim3(grid),
                             dim3(threads), 0, s, x, weight, bias, y, mean, rstd, rows,
                             static_cast<int>(n), eps);
  }
  forward_long<T, W, B, kCentered><<<grid, kLongThreads, 0, s>>>(x, weight, bias, y, mean, rstd,
                                                                rows, n, eps);
  return check_launch(op);
}

// y, mean (centered only) and rstd of x normalised over its last k dims.
template <bool kCentered>
opforge_status norm_forward(const char* op, const Tensor& x, size_t k, const Tensor* weight,
                            const Tensor* bias, double eps, Tensor& y, Tensor* mean, Tensor& rstd,
                            void* stream) {
  const RowsOf r = rows_of(x, k);
  if (r.rows == 0) return OPFORGE_OK;
  DeviceGuard guard(x.device.device_id);
  if (guard.status() != cudaSuccess) return cuda_failure(op, "cudaSetDevice", guard.status());
  auto s = static_cast<cudaStream_t>(stream);
  Dense dense(op, s);
  float* pm = dense.output<float>(mean);
  float* pr = dense.output<float>(&rstd);
  if (r.n == 0) {
    if (dense.status() != OPFORGE_OK) return dense.status();
    empty_row_stats<<<grid_for(r.rows, 256, 4096), 256, 0, s>>>(pm, pr, r.rows);
    if (const opforge_status launched = check_launch(op)) return launched;
    return dense.finish();
  }
  // Weight and bias are each float32 or x's dtype; without a bias, its type follows the weight's.
  const bool w_float = weight != nullptr && weight->dtype == DType::kFloat32;
  const bool b_float = bias != nullptr ? bias->dtype == DType::kFloat32 : w_float;
  const opforge_status launched = by_dtype(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* px = dense.input<T>(&x);
    T* py = dense.output<T>(&y);
    return with_param_type<T>(w_float, [&](auto wtag) {
      using W = decltype(wtag);
      const W* pw = dense.input<W>(weight);
      auto run = [&](auto btag) {
        using B = decltype(btag);
        const B* pb = dense.input<B>(bias);
        if (dense.status() != OPFORGE_OK) return dense.status();
        return launch_forward<T, W, B, kCentered>(op, px, pw, pb, py, pm, pr, r.rows, r.n,
                                                  static_cast<float>(eps), x.device.device_id, s);
      };
      if constexpr (kCentered) {
        return with_param_type<T>(b_float, run);
      } else {
        return run(W{});
      }
    });
  });
  return launched != OPFORGE_OK ? launched : dense.finish();
}

// How the backward of rows of n elements (packs of kVec<T> when `vector`) runs: which kernel,
// with row groups of `threads` threads, `groups` of them per block, `smem` bytes of dynamic
// shared memory and `per_step` rows per group step; no kernel when a block cannot hold the row
// (backward_long reads it twice instead).
template <class T, class W>
struct BackwardPlan {
  void (*kernel)(const T*, const T*, const float*, const float*, const W*, T*, float*, int64_t,
                 int, int) = nullptr;
  int threads = 0;
  int groups = 0;
  size_t smem = 0;
  int per_step = 1;
};

// backward_staged: where a row group would be a whole block of 1024 threads (2-byte types:
// float32 rows that long would take 256 KB of stages), 512 threads of two packs, two rows per
// step, alone on the SM, which would otherwise idle through each row's reduction: three steps
// staged where they fit (an H100: two steps on their way while one is worked on; layer_norm
// bfloat16 4096x8192 backward 84.5 -> 85.9% of copy), else two; else one row per step, three
// staged; else (less shared memory than an H100's) backward_rows.
template <class T, class W, bool kCentered>
BackwardPlan<T, W> plan_backward(bool vector, int64_t n, const DeviceInfo& dev) {
  constexpr int V = kVec<T>;
  constexpr int kParts = kCentered ? 2 : 1;
  const int threads = vector ? row_threads(n / V, bwd_packs<V>()) : row_threads(n, bwd_packs<1>());
  if (threads == 0) return {};
  const int groups = std::min(kMaxGroups, kMaxThreads / threads);
  // Stages of x and dy for `steps` steps of `per_step` rows, `packs` packs per thread.
  auto stages = [&](int group_threads, int packs, int per_step, int steps) {
    return size_t{32} * packs * groups * group_threads * per_step * steps;
  };
  auto fits = [&](size_t staged, int per_step) {
    return vector && staged + sizeof(float) * kMaxGroups * 64 * per_step <=
                         static_cast<size_t>(dev.smem_optin);
  };
  if constexpr (sizeof(T) == 2) {
    constexpr int kWidePacks = 2 * bwd_packs<V>();
    constexpr int kWideThreads = kMaxThreads / 2;
    const size_t wide3 = stages(kWideThreads, kWidePacks, 2, 3);
    if (groups == 1 && fits(wide3, 2)) {
      return {backward_staged<T, W, kCentered, 2, 3, kWidePacks, kWideThreads>, kWideThreads, 1,
              wide3, 2};
    }
    const size_t wide2 = stages(kWideThreads, kWidePacks, 2, 2);
    if (groups == 1 && fits(wide2, 2)) {
      return {backward_staged<T, W, kCentered, 2, 2, kWidePacks, kWideThreads>, kWideThreads, 1,
              wide2, 2};
    }
  }
  const size_t three = stages(threads, bwd_packs<V>(), 1, 3);
  if (fits(three, 1)) {
    return {backward_staged<T, W, kCentered, 1, 3, bwd_packs<V>(), kMaxThreads>, threads, groups,
            three, 1};
  }
  const int elems = vector ? kBwdElems : bwd_packs<1>();  // per thread
  return {vector ? backward_rows<T, W, V, kCentered> : backward_rows<T, W, 1, kCentered>, threads,
          groups, sizeof(float) * groups * threads * (kParts * elems + 1), 1};
}

// Launches the backward kernels: dx, then the kParts rows of column sums (dweight[, dbias]).
template <class T, class W, bool kCentered>
opforge_status launch_backward(const char* op, const T* dy, const T* x, const float* mean,
                               const float* rstd, const W* weight, T* dx, float* dweight,
                               float* dbias, int64_t rows, int64_t n, Scratch& scratch,
                               int device, cudaStream_t s) {
  constexpr int V = kVec<T>;
  constexpr int kParts = kCentered ? 2 : 1;
  const bool vector =
      n % V == 0 && aligned16(dy) && aligned16(x) && aligned16(dx) && aligned16(weight);
  DeviceInfo dev;
  cudaError_t err = device_info(device, &dev);
  if (err != cudaSuccess) return cuda_failure(op, "cudaDeviceGetAttribute", err);
  const BackwardPlan<T, W> plan = plan_backward<T, W, kCentered>(vector, n, dev);
  int64_t blocks = 0;
  float* part = nullptr;
  if (rows > 0 && plan.kernel != nullptr) {
    const int block = plan.groups * plan.threads;
    err = cudaFuncSetAttribute(plan.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               plan.smem);
    int per_sm = 0;
    if (err == cudaSuccess) {
      err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, plan.kernel, block, plan.smem);
    }
    if (err != cudaSuccess) return cuda_failure(op, "backward kernel set-up", err);
    blocks = std::min<int64_t>(ceil_div(rows, plan.groups * plan.per_step),
                               int64_t{dev.sms} * std::max(per_sm, 1));
    err = scratch.alloc(kParts * blocks * n, &part);
    if (err != cudaSuccess) return cuda_failure(op, "cudaMallocAsync (partial sums)", err);
    const opforge_status launched =
        launch_overlapped(op, dev, plan.kernel, dim3(static_cast<unsigned>(blocks)), dim3(block),
                          plan.smem, s, dy, x, mean, rstd, weight, dx, part, rows,
                          static_cast<int>(n), plan.threads);
    if (launched != OPFORGE_OK) return launched;
  } else if (rows > 0) {
    int per_sm = 0;
    err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, backward_long<T, W, kCentered>,
                                                        kLongThreads, 0);
    if (err != cudaSuccess) return cuda_failure(op, "backward kernel set-up", err);
    blocks = std::min<int64_t>({rows, int64_t{dev.sms} * std::max(per_sm, 1),
                                std::max<int64_t>(1, kWorkspaceFloats / n)});
    err = scratch.alloc(kParts * blocks * n, &part);
    if (err != cudaSuccess) return cuda_failure(op, "cudaMallocAsync (partial sums)", err);
    backward_long<T, W, kCentered><<<static_cast<unsigned>(blocks), kLongThreads, 0, s>>>(
        dy, x, mean, rstd, weight, dx, part, rows, n);
    if (const opforge_status launched = check_launch(op)) return launched;
  }
  // With no rows there are no partial sums: dweight and dbias become zeros.
  const bool discard = n % 32 == 0 && reinterpret_cast<uintptr_t>(part) % 128 == 0;
  if (n % 4 == 0) {
    return launch_overlapped(op, dev, column_sums<4>, dim3(grid_for(n, 128), kParts),
                             dim3(32, 32), 0, s, static_cast<const float*>(part), blocks, n,
                             dweight, dbias, discard);
  }
  return launch_overlapped(op, dev, column_sums<1>, dim3(grid_for(n, 32), kParts), dim3(32, 32), 0,
                           s, static_cast<const float*>(part), blocks, n, dweight, dbias, discard);
}

// dx, dweight and (centered) dbias from the forward's saved statistics.
template <bool kCentered>
opforge_status norm_backward(const char* op, const Tensor& dy, const Tensor& x, size_t k,
                             const Tensor* mean, const Tensor& rstd, const Tensor* weight,
                             Tensor& dx, Tensor& dweight, Tensor* dbias, void* stream) {
  const RowsOf r = rows_of(x, k);
  if (r.n == 0) return OPFORGE_OK;  // every output is empty
  DeviceGuard guard(x.device.device_id);
  if (guard.status() != cudaSuccess) return cuda_failure(op, "cudaSetDevice", guard.status());
  auto s = static_cast<cudaStream_t>(stream);
  Dense dense(op, s);
  const float* pm = dense.input<float>(mean);
  const float* pr = dense.input<float>(&rstd);
  float* pdw = dense.output<float>(&dweight);
  float* pdb = dense.output<float>(dbias);
  const bool w_float = weight != nullptr && weight->dtype == DType::kFloat32;
  const opforge_status launched = by_dtype(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* pg = dense.input<T>(&dy);
    const T* px = dense.input<T>(&x);
    T* pdx = dense.output<T>(&dx);
    return with_param_type<T>(w_float, [&](auto wtag) {
      using W = decltype(wtag);
      const W* pw = dense.input<W>(weight);
      if (dense.status() != OPFORGE_OK) return dense.status();
      return launch_backward<T, W, kCentered>(op, pg, px, pm, pr, pw, pdx, pdw, pdb, r.rows, r.n,
                                              dense.scratch(), x.device.device_id, s);
    });
  });
  return launched != OPFORGE_OK ? launched : dense.finish();
}

}  // namespace opforge::cuda::kit
