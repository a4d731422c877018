// layer_norm (kCentered) and rms_norm on CUDA, forward and backward, float32 arithmetic. x is
// seen as `rows` contiguous rows of n elements: tensors of other layouts go through contiguous
// copies (layout.hpp's dense_like and copy_back).
//
// Forward: one row per block of 32 to 1024 threads, held in registers (fwd_packs packs per
// thread): x read once, y written once; mean and variance in two passes over the registers.
// Several blocks per SM overlap one row's reductions with other rows' loads.
//
// Backward: a block holds up to kMaxGroups row groups of G threads; each group walks rows on its
// own (its own named barrier) and keeps x and dy of its row in registers (bwd_packs packs per
// thread) while the next row's x and dy are already being loaded, writes dx, and adds dy * xhat
// (and dy) into shared-memory sums of its columns: a thread owns the same columns in every row.
// The grid is as many blocks as fit on the device at once; at the end each block writes one row
// of partial column sums, and `column_sums` adds the blocks' rows per column in a fixed order:
// dweight and dbias are deterministic, with no atomics.
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

// Sums of two floats over a row group of `threads` threads (a multiple of 32, starting at a
// warp boundary); every thread of the group gets both. `scratch` holds 32 float2 per group.
__device__ __forceinline__ float2 group_sum2(float a, float b, float2* scratch, int id,
                                             int threads) {
  const int lane = threadIdx.x & 31, warp = (threadIdx.x % threads) >> 5, warps = threads >> 5;
  a = warp_sum(a);
  b = warp_sum(b);
  if (warps == 1) return make_float2(a, b);
  group_barrier(id, threads);  // the previous call's readers are done with scratch
  if (lane == 0) scratch[warp] = make_float2(a, b);
  group_barrier(id, threads);
  const float2 v = lane < warps ? scratch[lane] : make_float2(0.0f, 0.0f);
  return make_float2(warp_sum(v.x), warp_sum(v.y));
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
  __shared__ float2 scratch[32];
  const int threads = blockDim.x, packs = n / V;
  const float inv_n = 1.0f / static_cast<float>(n);
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
    const float mu = kCentered ? group_sum2(sum, 0.0f, scratch, 0, threads).x * inv_n : 0.0f;
    float sq = 0.0f;
#pragma unroll
    for (int p = 0; p < P; ++p) {
      if (p * threads + static_cast<int>(threadIdx.x) < packs) {
#pragma unroll
        for (int k = 0; k < V; ++k) sq += (v[p][k] - mu) * (v[p][k] - mu);
      }
    }
    const float rs = rsqrtf(group_sum2(sq, 0.0f, scratch, 0, threads).x * inv_n + eps);
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

template <class T, class W, class B, bool kCentered>
__global__ void __launch_bounds__(kLongThreads)
    forward_long(const T* __restrict__ x, const W* __restrict__ weight, const B* __restrict__ bias,
                 T* __restrict__ y, float* __restrict__ mean, float* __restrict__ rstd,
                 int64_t rows, int64_t n, float eps) {
  __shared__ float2 scratch[32];
  const int threads = blockDim.x;
  const float inv_n = 1.0f / static_cast<float>(n);
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + row * n;
    float sum = 0.0f;
    if (kCentered) {
      for (int64_t i = threadIdx.x; i < n; i += threads) sum += to_f(xr[i]);
    }
    const float mu = kCentered ? group_sum2(sum, 0.0f, scratch, 0, threads).x * inv_n : 0.0f;
    float sq = 0.0f;
    for (int64_t i = threadIdx.x; i < n; i += threads) {
      const float d = to_f(xr[i]) - mu;
      sq += d * d;
    }
    const float rs = rsqrtf(group_sum2(sq, 0.0f, scratch, 0, threads).x * inv_n + eps);
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

// Backward, rows in registers. blockDim.x = groups * threads; dynamic shared memory holds
// blockDim.x * (kParts * P * V + 1) floats; `part` receives kParts rows of n per block.
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
  __shared__ float2 scratch[kMaxGroups][32];
  const int groups = blockDim.x / threads, group = threadIdx.x / threads;
  const int t = threadIdx.x % threads, packs = n / V;
  const float inv_n = 1.0f / static_cast<float>(n);
  float* mine = sums + threadIdx.x * kStride;
#pragma unroll
  for (int s = 0; s < kSlots; ++s) mine[s] = 0.0f;
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
          const float d = to_f(cg[p].v[k]), xhat = (to_f(cx[p].v[k]) - cm) * cr, g = d * w[k];
          mine[p * V + k] += d * xhat;
          if (kCentered) mine[P * V + p * V + k] += d;
          sum_g += g;
          sum_gx += g * xhat;
        }
      }
    }
    const float2 s = group_sum2(sum_g, sum_gx, scratch[group], 1 + group, threads);
    const float c1 = kCentered ? s.x * inv_n : 0.0f, c2 = s.y * inv_n;
    T* dxr = dx + row * n;
#pragma unroll
    for (int p = 0; p < P; ++p) {
      const int q = p * threads + t;
      if (q < packs) {
        float w[V], o[V];
        load_param<W, V>(weight, static_cast<int64_t>(q) * V, 1.0f, w);
#pragma unroll
        for (int k = 0; k < V; ++k) {
          const float xhat = (to_f(cx[p].v[k]) - cm) * cr, g = to_f(cg[p].v[k]) * w[k];
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

// Backward of rows longer than the registers hold: two reads of x and dy per row; a block's
// partial column sums live in its rows of `part` (each thread owns the same columns throughout).
template <class T, class W, bool kCentered>
__global__ void __launch_bounds__(kLongThreads)
    backward_long(const T* __restrict__ dy, const T* __restrict__ x,
                  const float* __restrict__ mean, const float* __restrict__ rstd,
                  const W* __restrict__ weight, T* __restrict__ dx, float* __restrict__ part,
                  int64_t rows, int64_t n) {
  __shared__ float2 scratch[32];
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
    const float2 s = group_sum2(sum_g, sum_gx, scratch, 0, threads);
    const float c1 = kCentered ? s.x * inv_n : 0.0f, c2 = s.y * inv_n;
    for (int64_t i = threadIdx.x; i < n; i += threads) {
      const float xhat = (to_f(x[base + i]) - mu) * rs, d = to_f(dy[base + i]);
      const float g = d * (weight != nullptr ? to_f(weight[i]) : 1.0f);
      dx[base + i] = from_f<T>(rs * (g - c1 - xhat * c2));
      pw[i] += d * xhat;
      if (kCentered) pb[i] += d;
    }
  }
}

// out_j[c] = sum over b < blocks of part[j][b][c], b in order; j = blockIdx.y. Block 32 x 32.
static __global__ void __launch_bounds__(1024)
    column_sums(const float* __restrict__ part, int64_t blocks, int64_t n, float* __restrict__ out0,
                float* __restrict__ out1) {
  __shared__ float tile[32][33];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * 32 + tx;
  const float* p = part + static_cast<int64_t>(blockIdx.y) * blocks * n;
  float s = 0.0f;
  if (c < n) {
#pragma unroll 4
    for (int64_t b = ty; b < blocks; b += 32) s += p[b * n + c];
  }
  tile[ty][tx] = s;
  __syncthreads();
  if (ty == 0 && c < n) {
    float total = 0.0f;
    for (int j = 0; j < 32; ++j) total += tile[j][tx];
    (blockIdx.y == 0 ? out0 : out1)[c] = total;
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
void launch_forward(const T* x, const W* weight, const B* bias, T* y, float* mean, float* rstd,
                    int64_t rows, int64_t n, float eps, cudaStream_t s) {
  constexpr int V = kVec<T>;
  const unsigned grid = grid_for(rows, 1);
  if (n % V == 0 && aligned16(x) && aligned16(y) && aligned16(weight) && aligned16(bias)) {
    if (const int threads = row_threads(n / V, fwd_packs<V>())) {
      forward_rows<T, W, B, V, kCentered><<<grid, threads, 0, s>>>(x, weight, bias, y, mean, rstd,
                                                                  rows, static_cast<int>(n), eps);
      return;
    }
  } else if (const int threads = row_threads(n, fwd_packs<1>())) {
    forward_rows<T, W, B, 1, kCentered><<<grid, threads, 0, s>>>(x, weight, bias, y, mean, rstd,
                                                                rows, static_cast<int>(n), eps);
    return;
  }
  forward_long<T, W, B, kCentered><<<grid, kLongThreads, 0, s>>>(x, weight, bias, y, mean, rstd,
                                                                rows, n, eps);
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
        launch_forward<T, W, B, kCentered>(px, pw, pb, py, pm, pr, r.rows, r.n,
                                           static_cast<float>(eps), s);
        return check_launch(op);
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
  const int threads = vector ? row_threads(n / V, bwd_packs<V>()) : row_threads(n, bwd_packs<1>());
  const int elems = vector ? kBwdElems : bwd_packs<1>();  // per thread
  DeviceInfo dev;
  cudaError_t err = device_info(device, &dev);
  if (err != cudaSuccess) return cuda_failure(op, "cudaDeviceGetAttribute", err);
  int64_t blocks = 0;
  float* part = nullptr;
  if (rows > 0 && threads > 0) {
    const int groups = std::min(kMaxGroups, kMaxThreads / threads);
    const size_t smem = sizeof(float) * groups * threads * (kParts * elems + 1);
    auto kernel = vector ? backward_rows<T, W, V, kCentered> : backward_rows<T, W, 1, kCentered>;
    err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    int per_sm = 0;
    if (err == cudaSuccess) {
      err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, groups * threads, smem);
    }
    if (err != cudaSuccess) return cuda_failure(op, "backward kernel set-up", err);
    blocks = std::min<int64_t>(ceil_div(rows, groups), int64_t{dev.sms} * std::max(per_sm, 1));
    err = scratch.alloc(kParts * blocks * n, &part);
    if (err != cudaSuccess) return cuda_failure(op, "cudaMallocAsync (partial sums)", err);
    kernel<<<static_cast<unsigned>(blocks), groups * threads, smem, s>>>(
        dy, x, mean, rstd, weight, dx, part, rows, static_cast<int>(n), threads);
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
  }
  // With no rows there are no partial sums: dweight and dbias become zeros.
  column_sums<<<dim3(grid_for(n, 32), kParts), dim3(32, 32), 0, s>>>(part, blocks, n, dweight,
                                                                     dbias);
  return check_launch(op);
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
