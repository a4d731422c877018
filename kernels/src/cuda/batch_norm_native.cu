// batch_norm by column reductions, for any strides.
//
// x (N x C x S) is viewed as N rows of J = C * S columns, column j belonging to channel j / S;
// that needs each tensor's (C, S) plane to be one run of stride 1 (row-major, or a row-strided
// slice of it), anything else goes through contiguous copies.
// Where each channel's batch fits the shared memory of a cluster (Hopper) or of one block,
// training forward and backward read x and dy once: a tile holds the whole batch of its
// channels and merges their statistics through distributed shared memory. 2-D input (S == 1)
// takes tiles of adjacent channels (bn_column_tiles), spatial input one channel a tile
// (bn_plane_tiles, its N runs of S values).
// Otherwise each pass is a column pass (columns.cuh):
// - training forward: Welford mean/M2 per column and chunk of rows; a warp per channel merges
//   the chunks and the channel's S columns (in float64), writes save_mean/save_invstd, updates
//   the running statistics (unbiased variance) and expands y = (x - mean) * scale + shift into
//   per-column coefficients; a last pass applies them.
// - inference: the same last pass, its coefficients from the running statistics (with
//   spatial dims a multiple of the pack: one per channel, applied as an elementwise pass).
// - backward: sums of dy and dy * (x - mean) per column and chunk; a warp per channel merges
//   them into dbias, dweight and dx = (dy - mean(dy)) * a + (x - mean) * b per column.
// The last pass walks the chunks backwards: the rows the reduction read last are still in L2.
#include <algorithm>
#include <initializer_list>
#include <type_traits>
#include <utility>

#include "cuda/batch_norm_native.hpp"
#include "cuda/cluster.cuh"
#include "cuda/columns.cuh"
#include "cuda/layout.hpp"

namespace opforge::cuda {
namespace {

constexpr const char* kTraining = "opforge_batch_norm_forward_training";
constexpr const char* kInference = "opforge_batch_norm_forward_inference";
constexpr const char* kBackward = "opforge_batch_norm_backward";
constexpr int kApplyThreads = 256;
constexpr int kApplyUnroll = 4;
constexpr int64_t kMaxGridY = 65535;

// A float32 parameter or statistic of C elements (p == nullptr: absent).
struct ChannelVec {
  float* p;
  int64_t stride;
  __device__ __forceinline__ float& operator[](int64_t c) const { return p[c * stride]; }
};

ChannelVec channel_vec(const Tensor* t) {
  return t == nullptr ? ChannelVec{nullptr, 0} : ChannelVec{t->ptr<float>(), t->strides[0]};
}

// t's (C, S) plane as one run of stride 1: the stride between rows (0 when N == 1), or false.
bool plane_rows(const Tensor& t, int64_t* row) {
  int64_t expected = 1;
  for (int d = t.ndim() - 1; d >= 1; --d) {
    if (t.shape[d] != 1 && t.strides[d] != expected) return false;
    expected *= t.shape[d];
  }
  *row = t.shape[0] == 1 ? 0 : t.strides[0];
  return true;
}

struct Welford {
  float n, mean, m2;
};

__device__ __forceinline__ Welford welford_merge(Welford a, Welford b) {
  const float n = a.n + b.n;
  if (n == 0.0f) return a;
  const float d = b.mean - a.mean, f = b.n / n;
  return Welford{n, a.mean + d * f, a.m2 + b.m2 + d * d * a.n * f};
}

struct GradSums {
  float dy, dy_xmu;  // sums of dy and of dy * (x - mean)
};

// y = (x - mean) * scale + shift.
struct Affine {
  float mean, scale, shift;
};

// dx = (dy - g) * a + (x - mean) * b.
struct GradAffine {
  float mean, a, b, g;
};

// Pass 1 (training): Welford statistics of each column over a chunk of rows, to
// partial[chunk * cols + column].
template <class T, int V>
__global__ void __launch_bounds__(kColThreads)
    bn_column_stats(const T* __restrict__ x, int64_t x_row, int64_t rows, int64_t cols,
                    int64_t chunk_rows, Welford* __restrict__ partial) {
  using P = Pack<T, V>;
  const int64_t col = column_of_thread<V>();
  const int64_t chunk = column_chunk(false);
  const int64_t begin = chunk * chunk_rows;
  float mean[V], m2[V];
#pragma unroll
  for (int j = 0; j < V; ++j) mean[j] = m2[j] = 0.0f;
  int count = 0;
  if (col < cols) {
    P buf[kColUnroll];
    for_column_rows(
        begin, std::min(rows, begin + chunk_rows),
        [&](int64_t l, int u) { buf[u] = *reinterpret_cast<const P*>(x + col + l * x_row); },
        [&](int64_t, int u) {
          ++count;
          const float inv = 1.0f / static_cast<float>(count);
#pragma unroll
          for (int j = 0; j < V; ++j) {
            const float v = to_f(buf[u].v[j]);
            const float d = v - mean[j];
            mean[j] += d * inv;
            m2[j] += d * (v - mean[j]);
          }
        });
  }
  Welford st[V];
#pragma unroll
  for (int j = 0; j < V; ++j) st[j] = Welford{static_cast<float>(count), mean[j], m2[j]};
  __shared__ Welford shared[kColGroups * 32 * V];
  merge_column_groups<V>(
      st, shared, [](Welford a, Welford b) { return welford_merge(a, b); },
      [&](int c, Welford w) {
        const int64_t cc = static_cast<int64_t>(blockIdx.x) * 32 * V + c;
        if (cc < cols) partial[chunk * cols + cc] = w;
      });
}

__device__ __forceinline__ void welford_add(double& n, double& mean, double& m2, double bn,
                                            double bmean, double bm2) {
  const double t = n + bn;
  if (t == 0.0) return;
  const double d = bmean - mean, f = bn / t;
  m2 += bm2 + d * d * n * f;
  mean += d * f;
  n = t;
}

// Pass 2 (training): a warp per channel.
__global__ void bn_finalize_training(const Welford* __restrict__ partial, int64_t chunks,
                                     int64_t channels, int64_t spatial, ChannelVec weight,
                                     ChannelVec bias, ChannelVec running_mean,
                                     ChannelVec running_var, ChannelVec save_mean,
                                     ChannelVec save_invstd, double momentum, double eps,
                                     Affine* __restrict__ coef) {
  const int lane = threadIdx.x & 31;
  const int64_t c = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  if (c >= channels) return;  // whole warps leave
  const int64_t cols = channels * spatial;
  double n = 0.0, mean = 0.0, m2 = 0.0;
  for (int64_t p = lane; p < chunks * spatial; p += 32) {
    const int64_t k = p / spatial;
    const Welford w = partial[k * cols + c * spatial + (p - k * spatial)];
    welford_add(n, mean, m2, w.n, w.mean, w.m2);
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const double bn = __shfl_xor_sync(0xffffffffu, n, o);
    const double bmean = __shfl_xor_sync(0xffffffffu, mean, o);
    const double bm2 = __shfl_xor_sync(0xffffffffu, m2, o);
    welford_add(n, mean, m2, bn, bmean, bm2);
  }
  // Merging is not bitwise symmetric: every lane takes lane 0's result.
  n = __shfl_sync(0xffffffffu, n, 0);
  mean = __shfl_sync(0xffffffffu, mean, 0);
  m2 = __shfl_sync(0xffffffffu, m2, 0);
  const double var = m2 / n;
  const double invstd = 1.0 / sqrt(var + eps);
  if (lane == 0) {
    if (save_mean.p != nullptr) save_mean[c] = static_cast<float>(mean);
    if (save_invstd.p != nullptr) save_invstd[c] = static_cast<float>(invstd);
    if (running_mean.p != nullptr) {
      running_mean[c] = static_cast<float>((1.0 - momentum) * running_mean[c] + momentum * mean);
      running_var[c] =
          static_cast<float>((1.0 - momentum) * running_var[c] + momentum * var * n / (n - 1.0));
    }
  }
  const double w = weight.p != nullptr ? weight[c] : 1.0;
  const double b = bias.p != nullptr ? bias[c] : 0.0;
  const Affine a{static_cast<float>(mean), static_cast<float>(w * invstd), static_cast<float>(b)};
  for (int64_t s = lane; s < spatial; s += 32) coef[c * spatial + s] = a;
}

// Training: the coefficients pass 2 wrote, a column each.
struct CoefTable {
  const Affine* __restrict__ coef;
  __device__ __forceinline__ Affine operator()(int64_t col, bool) const { return coef[col]; }
};

// Inference: a column's coefficients from its channel's running statistics, computed where they
// are applied (a launch of their own, and one for the saved statistics, cost a tenth of a
// 100 MB pass). In float, as torch's CUDA kernels take them: every thread computes a few, and in
// double their square roots and divisions cost 2% of a 4-D bfloat16 pass. The caller that `owns`
// a channel's first column (one per grid) also returns the statistics used as the saved ones.
struct RunningCoef {
  ChannelVec weight, bias, running_mean, running_var, save_mean, save_invstd;
  float eps;
  int64_t spatial;

  __device__ __forceinline__ float invstd(int64_t c) const {
    return 1.0f / sqrtf(running_var[c] + eps);
  }

  __device__ __forceinline__ void save(int64_t c, float mean, float invstd) const {
    if (save_mean.p != nullptr) save_mean[c] = mean;
    if (save_invstd.p != nullptr) save_invstd[c] = invstd;
  }

  __device__ __forceinline__ Affine operator()(int64_t col, bool owner) const {
    const int64_t c = col / spatial;
    const float mean = running_mean[c], is = invstd(c);
    const float w = weight.p != nullptr ? weight[c] : 1.0f;
    const float b = bias.p != nullptr ? bias[c] : 0.0f;
    if (owner && col - c * spatial == 0) save(c, mean, is);
    return Affine{mean, w * is, b};
  }
};

// The saved statistics on their own (an empty batch, or outputs that may share the parameters'
// memory): every channel's read into `staged` by one kernel, written by the next.
__global__ void bn_stage_running(RunningCoef coef, int64_t channels, float2* __restrict__ staged) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c < channels) staged[c] = make_float2(coef.running_mean[c], coef.invstd(c));
}

__global__ void bn_write_saved(RunningCoef coef, int64_t channels,
                               const float2* __restrict__ staged) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c < channels) coef.save(c, staged[c].x, staged[c].y);
}

// Last forward pass: y from x and the column coefficients (a CoefTable or RunningCoef). Warp 0
// of the first chunk owns its columns.
template <class T, int V, class Coef>
__global__ void __launch_bounds__(kColThreads)
    bn_apply(const T* __restrict__ x, int64_t x_row, T* __restrict__ y, int64_t y_row, int64_t rows,
             int64_t cols, int64_t chunk_rows, Coef coef) {
  using P = Pack<T, V>;
  const int64_t col = column_of_thread<V>();
  if (col >= cols) return;  // no barrier follows
  const int64_t begin = column_chunk(true) * chunk_rows;
  const bool owner = blockIdx.y == 0 && threadIdx.x < 32;
  Affine a[V];
#pragma unroll
  for (int j = 0; j < V; ++j) a[j] = coef(col + j, owner);
  P buf[kColUnroll];
  for_column_rows(
      begin, std::min(rows, begin + chunk_rows),
      [&](int64_t l, int u) { buf[u] = *reinterpret_cast<const P*>(x + col + l * x_row); },
      [&](int64_t l, int u) {
        P r;
#pragma unroll
        for (int j = 0; j < V; ++j) {
          r.v[j] = from_f<T>((to_f(buf[u].v[j]) - a[j].mean) * a[j].scale + a[j].shift);
        }
        store_global(y + col + l * y_row, r);
      });
}

// Inference with spatial dims (S > 1): y from x and each channel's coefficients, as an
// elementwise pass over each row's packs (kApplyUnroll in flight per thread) with the rows along
// grid.y. A pack lies in one channel (S a multiple of V), whose coefficients each thread takes
// once for all its rows; the blocks of row 0 own the channels' first packs. Per-column
// coefficients (bn_apply) would read 12 bytes per column for only the few rows of a batch of
// images.
template <class T, int V>
__global__ void __launch_bounds__(kApplyThreads)
    bn_apply_channels(const T* __restrict__ x, int64_t x_row, T* __restrict__ y, int64_t y_row,
                      int64_t rows, int64_t packs, RunningCoef coef) {
  using P = Pack<T, V>;
  const int64_t first =
      static_cast<int64_t>(blockIdx.x) * kApplyThreads * kApplyUnroll + threadIdx.x;
  Affine a[kApplyUnroll];
#pragma unroll
  for (int u = 0; u < kApplyUnroll; ++u) {
    const int64_t k = first + static_cast<int64_t>(u) * kApplyThreads;
    if (k < packs) a[u] = coef(k * V, blockIdx.y == 0);
  }
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const P* xr = reinterpret_cast<const P*>(x + r * x_row);
    T* yr = y + r * y_row;
    P buf[kApplyUnroll];
#pragma unroll
    for (int u = 0; u < kApplyUnroll; ++u) {
      const int64_t k = first + static_cast<int64_t>(u) * kApplyThreads;
      if (k < packs) buf[u] = xr[k];
    }
#pragma unroll
    for (int u = 0; u < kApplyUnroll; ++u) {
      const int64_t k = first + static_cast<int64_t>(u) * kApplyThreads;
      if (k < packs) {
        P res;
#pragma unroll
        for (int j = 0; j < V; ++j) {
          res.v[j] = from_f<T>((to_f(buf[u].v[j]) - a[u].mean) * a[u].scale + a[u].shift);
        }
        store_global(yr + k * V, res);
      }
    }
  }
}

// Backward pass 1: per column and chunk of rows, sums of dy and dy * (x - mean).
template <class T, int V>
__global__ void __launch_bounds__(kColThreads)
    bn_column_grad_sums(const T* __restrict__ dy, int64_t dy_row, const T* __restrict__ x,
                        int64_t x_row, int64_t rows, int64_t cols, int64_t spatial,
                        ChannelVec save_mean, int64_t chunk_rows, GradSums* __restrict__ partial) {
  using P = Pack<T, V>;
  const int64_t col = column_of_thread<V>();
  const int64_t chunk = column_chunk(false);
  const int64_t begin = chunk * chunk_rows;
  GradSums st[V];
#pragma unroll
  for (int j = 0; j < V; ++j) st[j] = GradSums{0.0f, 0.0f};
  if (col < cols) {
    float mean[V];
#pragma unroll
    for (int j = 0; j < V; ++j) mean[j] = save_mean[(col + j) / spatial];
    P gb[kColUnroll], xb[kColUnroll];
    for_column_rows(
        begin, std::min(rows, begin + chunk_rows),
        [&](int64_t l, int u) {
          gb[u] = *reinterpret_cast<const P*>(dy + col + l * dy_row);
          xb[u] = *reinterpret_cast<const P*>(x + col + l * x_row);
        },
        [&](int64_t, int u) {
#pragma unroll
          for (int j = 0; j < V; ++j) {
            const float g = to_f(gb[u].v[j]);
            st[j].dy += g;
            st[j].dy_xmu += g * (to_f(xb[u].v[j]) - mean[j]);
          }
        });
  }
  __shared__ GradSums shared[kColGroups * 32 * V];
  merge_column_groups<V>(
      st, shared, [](GradSums a, GradSums b) { return GradSums{a.dy + b.dy, a.dy_xmu + b.dy_xmu}; },
      [&](int c, GradSums s) {
        const int64_t cc = static_cast<int64_t>(blockIdx.x) * 32 * V + c;
        if (cc < cols) partial[chunk * cols + cc] = s;
      });
}

// Backward pass 2: a warp per channel.
__global__ void bn_finalize_backward(const GradSums* __restrict__ partial, int64_t chunks,
                                     int64_t channels, int64_t spatial, double count,
                                     ChannelVec weight, ChannelVec save_mean,
                                     ChannelVec save_invstd, ChannelVec dweight, ChannelVec dbias,
                                     GradAffine* __restrict__ coef) {
  const int lane = threadIdx.x & 31;
  const int64_t c = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  if (c >= channels) return;  // whole warps leave
  const int64_t cols = channels * spatial;
  double sum_dy = 0.0, sum_dy_xmu = 0.0;
  for (int64_t p = lane; p < chunks * spatial; p += 32) {
    const int64_t k = p / spatial;
    const GradSums s = partial[k * cols + c * spatial + (p - k * spatial)];
    sum_dy += s.dy;
    sum_dy_xmu += s.dy_xmu;
  }
  // Sums are symmetric: after the butterfly every lane holds the same totals.
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    sum_dy += __shfl_xor_sync(0xffffffffu, sum_dy, o);
    sum_dy_xmu += __shfl_xor_sync(0xffffffffu, sum_dy_xmu, o);
  }
  const double invstd = save_invstd[c];
  const double scale = (weight.p != nullptr ? weight[c] : 1.0) * invstd;
  if (lane == 0) {
    if (dweight.p != nullptr) dweight[c] = static_cast<float>(sum_dy_xmu * invstd);
    if (dbias.p != nullptr) dbias[c] = static_cast<float>(sum_dy);
  }
  const GradAffine k{save_mean[c], static_cast<float>(scale),
                     static_cast<float>(-scale * invstd * invstd * sum_dy_xmu / count),
                     static_cast<float>(sum_dy / count)};
  for (int64_t s = lane; s < spatial; s += 32) coef[c * spatial + s] = k;
}

// Backward pass 3: dx.
template <class T, int V>
__global__ void __launch_bounds__(kColThreads)
    bn_apply_backward(const T* __restrict__ dy, int64_t dy_row, const T* __restrict__ x,
                      int64_t x_row, T* __restrict__ dx, int64_t dx_row, int64_t rows, int64_t cols,
                      int64_t chunk_rows, const GradAffine* __restrict__ coef) {
  using P = Pack<T, V>;
  const int64_t col = column_of_thread<V>();
  if (col >= cols) return;  // no barrier follows
  const int64_t begin = column_chunk(true) * chunk_rows;
  GradAffine k[V];
#pragma unroll
  for (int j = 0; j < V; ++j) k[j] = coef[col + j];
  P gb[kColUnroll], xb[kColUnroll];
  for_column_rows(
      begin, std::min(rows, begin + chunk_rows),
      [&](int64_t l, int u) {
        gb[u] = *reinterpret_cast<const P*>(dy + col + l * dy_row);
        xb[u] = *reinterpret_cast<const P*>(x + col + l * x_row);
      },
      [&](int64_t l, int u) {
        P r;
#pragma unroll
        for (int j = 0; j < V; ++j) {
          r.v[j] = from_f<T>((to_f(gb[u].v[j]) - k[j].g) * k[j].a +
                             (to_f(xb[u].v[j]) - k[j].mean) * k[j].b);
        }
        store_global(dx + col + l * dx_row, r);
      });
}

// 2-D input (S == 1), training forward and backward: a tile of W adjacent channels over the
// whole batch in (cluster) shared memory, so x and dy are read once. The block of rank r among
// the blocks_per_tile blocks of a tile (a cluster when kCluster, else one block; cluster_place)
// holds rows [r * rows_per_block, ...); they merge their column statistics through distributed
// shared memory, rank 0 writes the per-channel outputs, and every block writes its rows.
template <class T>
struct TileData {
  const T* x;
  const T* dy;  // backward only
  T* out;       // y or dx
  int64_t x_row, dy_row, out_row;
  int64_t rows, cols;  // N, C
};

struct TileParams {
  ChannelVec weight, bias, running_mean, running_var, save_mean, save_invstd, dweight, dbias;
  double momentum, eps;
};

// Forward: y = (x - mean) * a + b. Backward: dx = (dy - g) * a + (x - mean) * b.
struct Coef {
  float mean, a, b, g;
};

__device__ __forceinline__ Welford shfl_xor(Welford w, int offset) {
  return Welford{__shfl_xor_sync(0xffffffffu, w.n, offset),
                 __shfl_xor_sync(0xffffffffu, w.mean, offset),
                 __shfl_xor_sync(0xffffffffu, w.m2, offset)};
}
__device__ __forceinline__ GradSums shfl_xor(GradSums s, int offset) {
  return GradSums{__shfl_xor_sync(0xffffffffu, s.dy, offset),
                  __shfl_xor_sync(0xffffffffu, s.dy_xmu, offset)};
}
// A tile's partial statistics merged: the forward's Welford, the backward's sums.
__device__ __forceinline__ GradSums merge_stats(GradSums a, GradSums b) {
  return GradSums{a.dy + b.dy, a.dy_xmu + b.dy_xmu};
}
__device__ __forceinline__ Welford merge_stats(Welford a, Welford b) { return welford_merge(a, b); }

// Channel c's coefficients from its merged statistic t (the forward's Welford, the backward's
// sums over `count` values); the block of rank 0 (`first`) also writes the channel's saved and
// running statistics (forward) or its parameter gradients (backward).
template <bool kBackward, class S>
__device__ __forceinline__ Coef channel_coef(S t, int64_t c, bool first, const TileParams& p,
                                             double count) {
  const double w = p.weight.p != nullptr ? p.weight[c] : 1.0;
  if constexpr (kBackward) {
    const double invstd = p.save_invstd[c], scale = w * invstd;
    if (first && p.dweight.p != nullptr) p.dweight[c] = static_cast<float>(t.dy_xmu * invstd);
    if (first && p.dbias.p != nullptr) p.dbias[c] = t.dy;
    return Coef{p.save_mean[c], static_cast<float>(scale),
                static_cast<float>(-scale * invstd * invstd * t.dy_xmu / count),
                static_cast<float>(t.dy / count)};
  } else {
    const double nn = t.n, m = t.mean, var = t.m2 / nn;
    const double invstd = 1.0 / sqrt(var + p.eps);
    if (first) {
      if (p.save_mean.p != nullptr) p.save_mean[c] = t.mean;
      if (p.save_invstd.p != nullptr) p.save_invstd[c] = static_cast<float>(invstd);
      if (p.running_mean.p != nullptr) {
        p.running_mean[c] =
            static_cast<float>((1.0 - p.momentum) * p.running_mean[c] + p.momentum * m);
        p.running_var[c] = static_cast<float>((1.0 - p.momentum) * p.running_var[c] +
                                              p.momentum * var * nn / (nn - 1.0));
      }
    }
    const double b = p.bias.p != nullptr ? p.bias[c] : 0.0;
    return Coef{t.mean, static_cast<float>(w * invstd), static_cast<float>(b), 0.0f};
  }
}

// The forward's y, or the backward's dx, from x (and dy) and the channel's coefficients.
template <bool kBackward>
__device__ __forceinline__ float apply_coef(const Coef& k, float x, float dy) {
  const float xm = x - k.mean;
  return kBackward ? (dy - k.g) * k.a + xm * k.b : xm * k.a + k.b;
}

template <class T, int V, int kWidthBytes, bool kBackward, bool kCluster>
__global__ void __launch_bounds__(kTileThreads)
    bn_column_tiles(TileData<T> d, TileParams p, int64_t rows_per_block, int blocks_per_tile) {
  constexpr int W = kWidthBytes / static_cast<int>(sizeof(T));
  constexpr int kLanes = W / V;
  constexpr int kRowsPerStep = kTileThreads / kLanes;
  static_assert(kLanes <= 32 && 32 % kLanes == 0, "a tile row must fit a warp");
  using P = Pack<T, V>;
  using S = std::conditional_t<kBackward, GradSums, Welford>;
  extern __shared__ __align__(16) unsigned char dynamic_smem[];
  __shared__ S warp_parts[kTileThreads / 32][W];
  __shared__ S block_parts[W], tile_stats[W];
  __shared__ Coef coef[W];
  T* s_x = reinterpret_cast<T*>(dynamic_smem);  // [rows_per_block][W]
  T* s_dy = s_x + rows_per_block * W;           // backward only
  auto merge = [](S a, S b) { return merge_stats(a, b); };

  const Place place = cluster_place<kCluster>();
  const int64_t tile = place.item;
  const int rank = place.rank;
  const int cw = (threadIdx.x % kLanes) * V;  // the thread's first column within the tile
  const int64_t col = tile * W + cw;
  const bool active = col < d.cols;  // V > 1 only when cols % V == 0
  const int slot = threadIdx.x / kLanes;
  const int64_t begin = std::min<int64_t>(d.rows, rank * rows_per_block);
  const int64_t n = std::min<int64_t>(d.rows, begin + rows_per_block) - begin;
  const T* x = d.x + begin * d.x_row + col;
  const T* dy = kBackward ? d.dy + begin * d.dy_row + col : nullptr;

  float acc0[V], acc1[V], mean[V];  // forward: Welford mean, M2; backward: sums of dy, dy*(x-mean)
#pragma unroll
  for (int j = 0; j < V; ++j) acc0[j] = acc1[j] = mean[j] = 0.0f;
  int count = 0;
  if (active) {
    if constexpr (kBackward) {
#pragma unroll
      for (int j = 0; j < V; ++j) mean[j] = p.save_mean[col + j];
    }
    for (int64_t r = slot; r < n; r += static_cast<int64_t>(kRowsPerStep) * kColUnroll) {
      P xv[kColUnroll], gv[kColUnroll];
#pragma unroll
      for (int u = 0; u < kColUnroll; ++u) {
        const int64_t rr = r + static_cast<int64_t>(u) * kRowsPerStep;
        if (rr < n) {
          xv[u] = *reinterpret_cast<const P*>(x + rr * d.x_row);
          if constexpr (kBackward) gv[u] = *reinterpret_cast<const P*>(dy + rr * d.dy_row);
        }
      }
#pragma unroll
      for (int u = 0; u < kColUnroll; ++u) {
        const int64_t rr = r + static_cast<int64_t>(u) * kRowsPerStep;
        if (rr < n) {
          *reinterpret_cast<P*>(s_x + rr * W + cw) = xv[u];
          if constexpr (kBackward) {
            *reinterpret_cast<P*>(s_dy + rr * W + cw) = gv[u];
#pragma unroll
            for (int j = 0; j < V; ++j) {
              const float g = to_f(gv[u].v[j]);
              acc0[j] += g;
              acc1[j] += g * (to_f(xv[u].v[j]) - mean[j]);
            }
          } else {
            ++count;
            const float inv = 1.0f / static_cast<float>(count);
#pragma unroll
            for (int j = 0; j < V; ++j) {
              const float v = to_f(xv[u].v[j]);
              const float dlt = v - acc0[j];
              acc0[j] += dlt * inv;
              acc1[j] += dlt * (v - acc0[j]);
            }
          }
        }
      }
    }
  }
  S st[V];
#pragma unroll
  for (int j = 0; j < V; ++j) {
    if constexpr (kBackward) {
      st[j] = GradSums{acc0[j], acc1[j]};
    } else {
      st[j] = Welford{static_cast<float>(count), acc0[j], acc1[j]};
    }
  }

  // Threads of one warp with the same columns, then the warps, then the cluster's blocks.
#pragma unroll
  for (int off = 16; off >= kLanes; off >>= 1) {
#pragma unroll
    for (int j = 0; j < V; ++j) st[j] = merge(st[j], shfl_xor(st[j], off));
  }
  if ((threadIdx.x & 31) < kLanes) {
#pragma unroll
    for (int j = 0; j < V; ++j) warp_parts[threadIdx.x >> 5][cw + j] = st[j];
  }
  __syncthreads();
  if (threadIdx.x < W) {
    S t = warp_parts[0][threadIdx.x];
    for (int w = 1; w < kTileThreads / 32; ++w) t = merge(t, warp_parts[w][threadIdx.x]);
    block_parts[threadIdx.x] = t;
  }
  const auto leave = combine_blocks<kCluster>(block_parts, tile_stats, W, blocks_per_tile, merge);

  const int64_t c = tile * W + threadIdx.x;
  if (threadIdx.x < W && c < d.cols) {
    coef[threadIdx.x] = channel_coef<kBackward>(tile_stats[threadIdx.x], c, rank == 0, p,
                                                static_cast<double>(d.rows));
  }
  __syncthreads();

  if (active) {
    Coef k[V];
#pragma unroll
    for (int j = 0; j < V; ++j) k[j] = coef[cw + j];
    T* out = d.out + begin * d.out_row + col;
#pragma unroll 4
    for (int64_t r = slot; r < n; r += kRowsPerStep) {
      const P xv = *reinterpret_cast<const P*>(s_x + r * W + cw);
      P gv;
      if constexpr (kBackward) gv = *reinterpret_cast<const P*>(s_dy + r * W + cw);
      P res;
#pragma unroll
      for (int j = 0; j < V; ++j) {
        res.v[j] = from_f<T>(
            apply_coef<kBackward>(k[j], to_f(xv.v[j]), kBackward ? to_f(gv.v[j]) : 0.0f));
      }
      store_global(out + r * d.out_row, res);
    }
  }
}

// Spatial input (S > 1), training forward and backward: each channel's N x S values, whole, in
// (cluster) shared memory, so x and dy are read once, as long runs of S (the column tiles above
// read 64- or 128-byte pieces). The block of rank r among the blocks_per_plane blocks of
// channel c (a cluster when kCluster, else one block; cluster_place) holds samples
// [r * rows_per_block, ...); its threads take every kTileThreads-th pack of them, copied in
// asynchronously in kTileStages groups while the statistics of the earlier groups are taken.
// Each thread copies, and later reads, only its own packs: the loads need no barrier. V divides
// S, so no pack spans two channels.
template <class T, int V, bool kBackward, bool kCluster>
__global__ void __launch_bounds__(kTileThreads)
    bn_plane_tiles(TileData<T> d, TileParams p, int spatial, int64_t rows_per_block,
                   int blocks_per_plane) {
  using P = Pack<T, V>;
  using S = std::conditional_t<kBackward, GradSums, Welford>;
  extern __shared__ __align__(16) unsigned char dynamic_smem[];
  __shared__ S warp_parts[kTileThreads / 32];
  __shared__ S block_part, plane_stat;
  __shared__ Coef coef;
  auto merge = [](S a, S b) { return merge_stats(a, b); };

  const Place place = cluster_place<kCluster>();
  const int64_t c = place.item;
  const int64_t begin = std::min<int64_t>(d.rows, place.rank * rows_per_block);
  const int per_run = spatial / V;  // packs per sample
  // At most the block's shared memory in packs: an int.
  const int packs = static_cast<int>(std::min<int64_t>(d.rows, begin + rows_per_block) - begin) *
                    per_run;
  const int mine = static_cast<int>(threadIdx.x) < packs
                       ? (packs - 1 - static_cast<int>(threadIdx.x)) / kTileThreads + 1
                       : 0;
  T* s_x = reinterpret_cast<T*>(dynamic_smem);  // [rows_per_block][S]
  T* s_dy = s_x + rows_per_block * spatial;     // backward only
  const int64_t plane = c * spatial;
  const T* x = d.x + begin * d.x_row + plane;
  const T* dy = kBackward ? d.dy + begin * d.dy_row + plane : nullptr;
  auto pack = [](int k) { return static_cast<int>(threadIdx.x) + k * kTileThreads; };
  // Element offset of pack q from the block's first sample, in a tensor with rows `row` apart.
  auto at = [per_run](int q, int64_t row) {
    const int r = q / per_run;
    return r * row + static_cast<int64_t>(q - r * per_run) * V;
  };

#pragma unroll
  for (int stage = 0; stage < kTileStages; ++stage) {
    for (int k = mine * stage / kTileStages; k < mine * (stage + 1) / kTileStages; ++k) {
      const int q = pack(k);
      copy_async<sizeof(P)>(s_x + q * V, x + at(q, d.x_row));
      if constexpr (kBackward) copy_async<sizeof(P)>(s_dy + q * V, dy + at(q, d.dy_row));
    }
    async_commit();  // empty groups too: every thread waits on the same counts below
  }
  // Forward: Welford over packs (each pack's own mean and M2 merged in, one division a pack).
  // Backward: sums of dy and dy * (x - mean), the saved mean known.
  float acc0 = 0.0f, acc1 = 0.0f, count = 0.0f;
  const float mean = kBackward ? p.save_mean[c] : 0.0f;
#pragma unroll
  for (int stage = 0; stage < kTileStages; ++stage) {
    async_wait_for<kTileStages - 1>(kTileStages - 1 - stage);
#pragma unroll 2
    for (int k = mine * stage / kTileStages; k < mine * (stage + 1) / kTileStages; ++k) {
      const int q = pack(k);
      const P xv = *reinterpret_cast<const P*>(s_x + q * V);
      if constexpr (kBackward) {
        const P gv = *reinterpret_cast<const P*>(s_dy + q * V);
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const float g = pack_f(gv, j);
          acc0 += g;
          acc1 += g * (pack_f(xv, j) - mean);
        }
      } else {
        float sum = 0.0f;
#pragma unroll
        for (int j = 0; j < V; ++j) sum += pack_f(xv, j);
        const float pack_mean = sum * (1.0f / V);
        float m2 = 0.0f;
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const float dev = pack_f(xv, j) - pack_mean;
          m2 += dev * dev;
        }
        const float total = count + V, f = V / total, dlt = pack_mean - acc0;
        acc0 += dlt * f;
        acc1 += m2 + dlt * dlt * count * f;
        count = total;
      }
    }
  }
  S st;
  if constexpr (kBackward) {
    st = GradSums{acc0, acc1};
  } else {
    st = Welford{count, acc0, acc1};
  }

  // The warp's threads, then the warps, then the cluster's blocks.
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) st = merge(st, shfl_xor(st, off));
  if ((threadIdx.x & 31) == 0) warp_parts[threadIdx.x >> 5] = st;
  __syncthreads();
  if (threadIdx.x == 0) {
    S t = warp_parts[0];
    for (int w = 1; w < kTileThreads / 32; ++w) t = merge(t, warp_parts[w]);
    block_part = t;
  }
  const auto leave = combine_blocks<kCluster>(&block_part, &plane_stat, 1, blocks_per_plane, merge);
  if (threadIdx.x == 0) {
    coef = channel_coef<kBackward>(plane_stat, c, place.rank == 0, p,
                                   static_cast<double>(d.rows) * spatial);
  }
  __syncthreads();

  const Coef k = coef;
  T* out = d.out + begin * d.out_row + plane;
#pragma unroll 4
  for (int i = 0; i < mine; ++i) {
    const int q = pack(i);
    const P xv = *reinterpret_cast<const P*>(s_x + q * V);
    P gv;
    if constexpr (kBackward) gv = *reinterpret_cast<const P*>(s_dy + q * V);
    float res[V];
#pragma unroll
    for (int j = 0; j < V; ++j)
      res[j] = apply_coef<kBackward>(k, pack_f(xv, j), kBackward ? pack_f(gv, j) : 0.0f);
    store_global(out + at(q, d.out_row), to_pack<T, V>(res));
  }
}

__global__ void fill_channels(ChannelVec v, int64_t channels, float value) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c < channels) v[c] = value;
}

// Shared by the three entry points: the device, the scratch, the data as rows.
class Pass {
 public:
  Pass(const char* op, const BatchNorm& bn, cudaStream_t stream)
      : guard_(bn.x->device.device_id), op(op), bn(bn), stream(stream), scratch(stream) {}

  opforge_status begin() {
    if (guard_.status() != cudaSuccess) return cuda_failure(op, "cudaSetDevice", guard_.status());
    if (ceil_div(bn.c * bn.s, 32) > INT32_MAX) {
      return fail(OPFORGE_ERROR_INVALID_ARGUMENT,
                  std::string(op) + ": more than 2^36 values per sample");
    }
    const cudaError_t e = device_info(bn.x->device.device_id, &dev);
    return e == cudaSuccess ? OPFORGE_OK : cuda_failure(op, "cudaDeviceGetAttribute", e);
  }

  opforge_status zero(const Tensor* t) {
    if (t == nullptr || bn.c == 0) return OPFORGE_OK;
    fill_channels<<<static_cast<unsigned>(ceil_div(bn.c, 256)), 256, 0, stream>>>(channel_vec(t),
                                                                                  bn.c, 0.0f);
    return check_launch(op);
  }

  template <class T>
  cudaError_t workspace(int64_t count, T** out) {
    return scratch.alloc(count, out);
  }

  // Packs of V = kVec<T> elements when the columns and every row allow, else 1.
  template <class T>
  bool packed(std::initializer_list<std::pair<const Tensor*, int64_t>> data) const {
    constexpr int N = kVec<T>;
    if ((bn.c * bn.s) % N != 0) return false;
    for (const auto& [t, row] : data) {
      if (!aligned16(t->data) || row % N != 0) return false;
    }
    return true;
  }

 private:
  DeviceGuard guard_;  // first in, last out: the scratch is freed on x's device

 public:
  const char* op;
  const BatchNorm& bn;
  cudaStream_t stream;
  Scratch scratch;
  DeviceInfo dev;
};

template <class T>
TileData<T> tile_data(const BatchNorm& bn, int64_t x_row, int64_t dy_row, int64_t out_row) {
  return TileData<T>{bn.x->ptr<T>(),
                     bn.dy != nullptr ? bn.dy->ptr<T>() : nullptr,
                     bn.out->ptr<T>(),
                     x_row,
                     dy_row,
                     out_row,
                     bn.n,
                     bn.c};
}

TileParams tile_params(const BatchNorm& bn) {
  return TileParams{channel_vec(bn.weight),
                    channel_vec(bn.bias),
                    channel_vec(bn.running_mean),
                    channel_vec(bn.running_var),
                    channel_vec(bn.save_mean),
                    channel_vec(bn.save_invstd),
                    channel_vec(bn.dweight),
                    channel_vec(bn.dbias),
                    bn.momentum,
                    bn.eps};
}

// 2-D input in (cluster) shared-memory tiles kWidthBytes wide, as planned.
template <class T, int V, int kWidthBytes, bool kBackward>
struct ColumnTiles {
  static constexpr auto clustered = bn_column_tiles<T, V, kWidthBytes, kBackward, true>;
  static constexpr auto single = bn_column_tiles<T, V, kWidthBytes, kBackward, false>;

  static int64_t tiles(const BatchNorm& bn) {
    return ceil_div(bn.c, kWidthBytes / static_cast<int>(sizeof(T)));
  }
  static TilePlan plan(const Pass& p, int max_cluster) {
    return plan_tiles(clustered, single, tiles(p.bn), p.bn.n, kWidthBytes * (kBackward ? 2 : 1),
                      p.dev, p.stream, max_cluster);
  }
  static opforge_status launch(const Pass& p, const TilePlan& plan, int64_t x_row,
                               int64_t dy_row, int64_t out_row) {
    return launch_tiles(p.op, plan, clustered, single, tiles(p.bn), p.dev, p.stream,
                        tile_data<T>(p.bn, x_row, dy_row, out_row), tile_params(p.bn),
                        plan.rows_per_block, plan.blocks);
  }
};

// 2-D input in (cluster) shared-memory tiles, when they fit: *launched says whether they did.
// Tiles of 32 channels (128 bytes of float32) where blocks of at most kTileBlockBytes hold them,
// else of kTileWidthBytes (clusters of 16 wide tiles fit where clusters of 8 narrow ones do: no
// wider fallback).
template <class T, int V, bool kBackward>
opforge_status column_tiles(Pass& p, int64_t x_row, int64_t dy_row, int64_t out_row,
                            bool* launched) {
  constexpr int kWide = 32 * static_cast<int>(sizeof(T));
  if constexpr (kWide != kTileWidthBytes) {
    using Wide = ColumnTiles<T, V, kWide, kBackward>;
    const TilePlan wide = Wide::plan(p, kMaxNonPortableCluster);
    if (wide.blocks > 0 && wide.smem <= kTileBlockBytes) {
      *launched = true;
      return Wide::launch(p, wide, x_row, dy_row, out_row);
    }
  }
  using Narrow = ColumnTiles<T, V, kTileWidthBytes, kBackward>;
  const TilePlan narrow = Narrow::plan(p, kMaxCluster);
  *launched = narrow.blocks > 0;
  return *launched ? Narrow::launch(p, narrow, x_row, dy_row, out_row) : OPFORGE_OK;
}

// Spatial input (S > 1) as whole channels in (cluster) shared memory, when they fit (in packs
// of V where V divides S, else of single elements): *launched says whether they did.
template <class T, int V, bool kBackward>
opforge_status plane_tiles(Pass& p, int64_t x_row, int64_t dy_row, int64_t out_row,
                           bool* launched) {
  const BatchNorm& bn = p.bn;
  *launched = false;
  if constexpr (V > 1) {
    if (bn.s % V != 0) return plane_tiles<T, 1, kBackward>(p, x_row, dy_row, out_row, launched);
  }
  if (bn.s > INT32_MAX) return OPFORGE_OK;
  auto* clustered = bn_plane_tiles<T, V, kBackward, true>;
  auto* single = bn_plane_tiles<T, V, kBackward, false>;
  const TilePlan plan =
      plan_tiles(clustered, single, bn.c, bn.n,
                 bn.s * static_cast<int64_t>(sizeof(T)) * (kBackward ? 2 : 1), p.dev, p.stream,
                 kMaxNonPortableCluster);
  *launched = plan.blocks > 0;
  if (!*launched) return OPFORGE_OK;
  return launch_tiles(p.op, plan, clustered, single, bn.c, p.dev, p.stream,
                      tile_data<T>(bn, x_row, dy_row, out_row), tile_params(bn),
                      static_cast<int>(bn.s), plan.rows_per_block, plan.blocks);
}

// The single-read tiles for this input's layout (column tiles for 2-D, plane tiles for spatial
// input), when they fit: *launched says whether they did.
template <class T, int V, bool kBackward>
opforge_status resident_tiles(Pass& p, int64_t x_row, int64_t dy_row, int64_t out_row,
                              bool* launched) {
  if (p.bn.s == 1) return column_tiles<T, V, kBackward>(p, x_row, dy_row, out_row, launched);
  return plane_tiles<T, V, kBackward>(p, x_row, dy_row, out_row, launched);
}

template <class T, int V>
opforge_status training(Pass& p, int64_t x_row, int64_t y_row) {
  const BatchNorm& bn = p.bn;
  bool launched = false;
  const opforge_status st = resident_tiles<T, V, false>(p, x_row, 0, y_row, &launched);
  if (st != OPFORGE_OK || launched) return st;
  const int64_t cols = bn.c * bn.s;
  const ColumnGrid g = column_grid(cols, bn.n, V, p.dev);
  Welford* partial = nullptr;
  Affine* coef = nullptr;
  cudaError_t e = p.workspace(g.chunks * cols, &partial);
  if (e == cudaSuccess) e = p.workspace(cols, &coef);
  if (e != cudaSuccess) return cuda_failure(p.op, "cudaMallocAsync (workspace)", e);
  const dim3 grid(static_cast<unsigned>(g.tiles), static_cast<unsigned>(g.chunks));
  const T* x = bn.x->ptr<T>();
  bn_column_stats<T, V>
      <<<grid, kColThreads, 0, p.stream>>>(x, x_row, bn.n, cols, g.chunk_rows, partial);
  bn_finalize_training<<<static_cast<unsigned>(ceil_div(bn.c, 8)), 256, 0, p.stream>>>(
      partial, g.chunks, bn.c, bn.s, channel_vec(bn.weight), channel_vec(bn.bias),
      channel_vec(bn.running_mean), channel_vec(bn.running_var), channel_vec(bn.save_mean),
      channel_vec(bn.save_invstd), bn.momentum, bn.eps, coef);
  bn_apply<T, V><<<grid, kColThreads, 0, p.stream>>>(x, x_row, bn.out->ptr<T>(), y_row, bn.n, cols,
                                                     g.chunk_rows, CoefTable{coef});
  return check_launch(p.op);
}

// The inference coefficients of bn's columns (S of them a channel); with `saves` false they
// leave the saved statistics alone.
RunningCoef running_coef(const BatchNorm& bn, bool saves) {
  return RunningCoef{channel_vec(bn.weight),
                     channel_vec(bn.bias),
                     channel_vec(bn.running_mean),
                     channel_vec(bn.running_var),
                     channel_vec(saves ? bn.save_mean : nullptr),
                     channel_vec(saves ? bn.save_invstd : nullptr),
                     static_cast<float>(bn.eps),
                     std::max<int64_t>(bn.s, 1)};
}

// Whether a saved statistic may share memory with x or a parameter the pass reads: the C ABI
// lets an inference output be exactly an input's view, and leaves interleaved strided views
// unchecked. The pass then leaves the saved statistics to kernels after it, so that no thread
// reads a value another has already replaced.
bool saves_after_pass(const BatchNorm& bn) {
  for (const Tensor* out : {bn.save_mean, bn.save_invstd}) {
    for (const Tensor* in : std::initializer_list<const Tensor*>{
             bn.x, bn.weight, bn.bias, bn.running_mean, bn.running_var}) {
      if (out != nullptr && in != nullptr && spans_meet(*out, *in)) return true;
    }
  }
  return false;
}

// The saved statistics alone: read, then written by a second kernel.
opforge_status save_running(Pass& p) {
  float2* staged = nullptr;
  const cudaError_t e = p.workspace(p.bn.c, &staged);
  if (e != cudaSuccess) return cuda_failure(p.op, "cudaMallocAsync (workspace)", e);
  const auto blocks = static_cast<unsigned>(ceil_div(p.bn.c, 256));
  const RunningCoef coef = running_coef(p.bn, true);
  bn_stage_running<<<blocks, 256, 0, p.stream>>>(coef, p.bn.c, staged);
  bn_write_saved<<<blocks, 256, 0, p.stream>>>(coef, p.bn.c, staged);
  return check_launch(p.op);
}

template <class T, int V>
opforge_status inference(Pass& p, int64_t x_row, int64_t y_row) {
  const BatchNorm& bn = p.bn;
  const int64_t cols = bn.c * bn.s;
  const bool later = saves_after_pass(bn);
  const RunningCoef coef = running_coef(bn, !later);
  if (bn.s > 1 && bn.s % V == 0) {
    const int64_t packs = cols / V;
    const dim3 grid(static_cast<unsigned>(ceil_div(packs, kApplyThreads * kApplyUnroll)),
                    static_cast<unsigned>(std::min(bn.n, kMaxGridY)));
    bn_apply_channels<T, V><<<grid, kApplyThreads, 0, p.stream>>>(
        bn.x->ptr<T>(), x_row, bn.out->ptr<T>(), y_row, bn.n, packs, coef);
  } else {
    const ColumnGrid g = column_grid(cols, bn.n, V, p.dev);
    const dim3 grid(static_cast<unsigned>(g.tiles), static_cast<unsigned>(g.chunks));
    bn_apply<T, V><<<grid, kColThreads, 0, p.stream>>>(
        bn.x->ptr<T>(), x_row, bn.out->ptr<T>(), y_row, bn.n, cols, g.chunk_rows, coef);
  }
  const opforge_status st = check_launch(p.op);
  return st == OPFORGE_OK && later ? save_running(p) : st;
}

template <class T, int V>
opforge_status backward(Pass& p, int64_t dy_row, int64_t x_row, int64_t dx_row) {
  const BatchNorm& bn = p.bn;
  bool launched = false;
  const opforge_status st = resident_tiles<T, V, true>(p, x_row, dy_row, dx_row, &launched);
  if (st != OPFORGE_OK || launched) return st;
  const int64_t cols = bn.c * bn.s;
  const ColumnGrid g = column_grid(cols, bn.n, V, p.dev);
  GradSums* partial = nullptr;
  GradAffine* coef = nullptr;
  cudaError_t e = p.workspace(g.chunks * cols, &partial);
  if (e == cudaSuccess) e = p.workspace(cols, &coef);
  if (e != cudaSuccess) return cuda_failure(p.op, "cudaMallocAsync (workspace)", e);
  const dim3 grid(static_cast<unsigned>(g.tiles), static_cast<unsigned>(g.chunks));
  const T* dy = bn.dy->ptr<T>();
  const T* x = bn.x->ptr<T>();
  bn_column_grad_sums<T, V><<<grid, kColThreads, 0, p.stream>>>(
      dy, dy_row, x, x_row, bn.n, cols, bn.s, channel_vec(bn.save_mean), g.chunk_rows, partial);
  bn_finalize_backward<<<static_cast<unsigned>(ceil_div(bn.c, 8)), 256, 0, p.stream>>>(
      partial, g.chunks, bn.c, bn.s, static_cast<double>(bn.n) * static_cast<double>(bn.s),
      channel_vec(bn.weight), channel_vec(bn.save_mean), channel_vec(bn.save_invstd),
      channel_vec(bn.dweight), channel_vec(bn.dbias), coef);
  bn_apply_backward<T, V><<<grid, kColThreads, 0, p.stream>>>(
      dy, dy_row, x, x_row, bn.out->ptr<T>(), dx_row, bn.n, cols, g.chunk_rows, coef);
  return check_launch(p.op);
}

// Runs `run(dense)` on a copy of bn whose data tensors are contiguous temporaries (inputs
// filled from the originals), then copies the output back.
template <class Run>
opforge_status through_dense(Pass& p, Run&& run) {
  BatchNorm dense = p.bn;
  Tensor x, dy, out;
  opforge_status st = dense_like(p.op, *p.bn.x, true, p.scratch, p.stream, x);
  if (st == OPFORGE_OK && p.bn.dy != nullptr) {
    st = dense_like(p.op, *p.bn.dy, true, p.scratch, p.stream, dy);
    dense.dy = &dy;
  }
  if (st == OPFORGE_OK) st = dense_like(p.op, *p.bn.out, false, p.scratch, p.stream, out);
  dense.x = &x;
  dense.out = &out;
  if (st == OPFORGE_OK) st = run(dense);
  if (st == OPFORGE_OK) st = copy_back(p.op, out, *p.bn.out, p.stream);
  return st;
}

}  // namespace

opforge_status native_batch_norm_forward_training(const BatchNorm& bn, cudaStream_t stream) {
  Pass p(kTraining, bn, stream);
  opforge_status st = p.begin();
  if (st != OPFORGE_OK) return st;
  if (bn.x->numel() == 0) {
    // Empty batch: zero saved statistics, running statistics untouched (as PyTorch).
    st = p.zero(bn.save_mean);
    return st == OPFORGE_OK ? p.zero(bn.save_invstd) : st;
  }
  int64_t x_row = 0, y_row = 0;
  if (!plane_rows(*bn.x, &x_row) || !plane_rows(*bn.out, &y_row)) {
    return through_dense(
        p, [&](const BatchNorm& d) { return native_batch_norm_forward_training(d, stream); });
  }
  return by_dtype(bn.x->dtype, [&](auto tag) {
    using T = decltype(tag);
    if (p.packed<T>({{bn.x, x_row}, {bn.out, y_row}})) return training<T, kVec<T>>(p, x_row, y_row);
    return training<T, 1>(p, x_row, y_row);
  });
}

opforge_status native_batch_norm_forward_inference(const BatchNorm& bn, cudaStream_t stream) {
  Pass p(kInference, bn, stream);
  const opforge_status st = p.begin();
  if (st != OPFORGE_OK || bn.c == 0) return st;
  if (bn.x->numel() == 0) return save_running(p);
  int64_t x_row = 0, y_row = 0;
  if (!plane_rows(*bn.x, &x_row) || !plane_rows(*bn.out, &y_row)) {
    return through_dense(
        p, [&](const BatchNorm& d) { return native_batch_norm_forward_inference(d, stream); });
  }
  return by_dtype(bn.x->dtype, [&](auto tag) {
    using T = decltype(tag);
    if (p.packed<T>({{bn.x, x_row}, {bn.out, y_row}}))
      return inference<T, kVec<T>>(p, x_row, y_row);
    return inference<T, 1>(p, x_row, y_row);
  });
}

opforge_status native_batch_norm_backward(const BatchNorm& bn, cudaStream_t stream) {
  Pass p(kBackward, bn, stream);
  opforge_status st = p.begin();
  if (st != OPFORGE_OK) return st;
  if (bn.x->numel() == 0) {
    st = p.zero(bn.dweight);
    return st == OPFORGE_OK ? p.zero(bn.dbias) : st;
  }
  int64_t dy_row = 0, x_row = 0, dx_row = 0;
  if (!plane_rows(*bn.dy, &dy_row) || !plane_rows(*bn.x, &x_row) || !plane_rows(*bn.out, &dx_row)) {
    return through_dense(p,
                         [&](const BatchNorm& d) { return native_batch_norm_backward(d, stream); });
  }
  return by_dtype(bn.x->dtype, [&](auto tag) {
    using T = decltype(tag);
    if (p.packed<T>({{bn.dy, dy_row}, {bn.x, x_row}, {bn.out, dx_row}})) {
      return backward<T, kVec<T>>(p, dy_row, x_row, dx_row);
    }
    return backward<T, 1>(p, dy_row, x_row, dx_row);
  });
}

opforge_status resident_batch_norm_forward_training(const BatchNorm& bn, cudaStream_t stream,
                                                    bool* ran) {
  *ran = false;
  Pass p(kTraining, bn, stream);
  const opforge_status st = p.begin();
  int64_t x_row = 0, y_row = 0;
  if (st != OPFORGE_OK || bn.x->numel() == 0 || !plane_rows(*bn.x, &x_row) ||
      !plane_rows(*bn.out, &y_row)) {
    return st;
  }
  return by_dtype(bn.x->dtype, [&](auto tag) {
    using T = decltype(tag);
    if (p.packed<T>({{bn.x, x_row}, {bn.out, y_row}}))
      return resident_tiles<T, kVec<T>, false>(p, x_row, 0, y_row, ran);
    return resident_tiles<T, 1, false>(p, x_row, 0, y_row, ran);
  });
}

opforge_status resident_batch_norm_backward(const BatchNorm& bn, cudaStream_t stream, bool* ran) {
  *ran = false;
  Pass p(kBackward, bn, stream);
  const opforge_status st = p.begin();
  int64_t dy_row = 0, x_row = 0, dx_row = 0;
  if (st != OPFORGE_OK || bn.x->numel() == 0 || !plane_rows(*bn.dy, &dy_row) ||
      !plane_rows(*bn.x, &x_row) || !plane_rows(*bn.out, &dx_row)) {
    return st;
  }
  return by_dtype(bn.x->dtype, [&](auto tag) {
    using T = decltype(tag);
    if (p.packed<T>({{bn.dy, dy_row}, {bn.x, x_row}, {bn.out, dx_row}}))
      return resident_tiles<T, kVec<T>, true>(p, x_row, dy_row, dx_row, ran);
    return resident_tiles<T, 1, true>(p, x_row, dy_row, dx_row, ran);
  });
}

}  // namespace opforge::cuda
