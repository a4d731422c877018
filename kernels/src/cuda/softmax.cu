// softmax forward and backward along any dim, for any strides.
//
// The operands are viewed around the dim (reduce_view):
// - rows (the dim has stride 1): a row that fits in registers is read once and written once by
//   a warp or a block (forward: max, sum of exp, write; backward: dot(y, dy), write). A longer
//   row (a vocabulary of 32k-256k) is held in shared memory: read once with 16-byte loads from
//   its first 16-byte boundary on, max and sum taken online while it arrives (backward: y and
//   dy copied in asynchronously, all of a block's copies in flight at once), written from
//   there. On Hopper a row of more than kRowBlockBytes is spread over a thread-block cluster
//   (so two blocks fit an SM, or so it fits at all) whose blocks merge their partial statistics
//   through distributed shared memory. Longer rows still: a block per row, reading twice.
// - columns (stride 1 along an inner dim, e.g. softmax over dim 0, or along -1 of a transposed
//   view): a tile of 32 adjacent columns (or 64 bytes of them) is held in shared memory over the
//   whole dim (one block, or a cluster of up to 16 on Hopper), copied in asynchronously while
//   the statistics are taken, and written from there: one read. Short dims: a thread per
//   column. Tiles too tall: statistics of row chunks in one kernel, merged per column in a
//   second, applied in a third (two reads).
// - anything else: through contiguous copies.
//
// Semantics as the reference: y = exp(x - max) / sum(exp(x - max)); a NaN anywhere in the
// reduced run, an all -inf run or a +inf makes the whole run NaN.
#include <cfloat>
#include <type_traits>

#include "backends.hpp"
#include "cuda/cluster.cuh"
#include "cuda/columns.cuh"
#include "cuda/layout.hpp"

namespace opforge::cuda {
namespace {

constexpr int kMaxPacks = 8;  // packs of a row each thread keeps in registers
constexpr int kWarpRowsPerBlock = 4;
constexpr int kRegisterRowThreads = 512;
constexpr int kUnroll = 4;
constexpr int kSmemRowThreads = 512;
constexpr int64_t kRowBlockBytes = 110 << 10;  // shared memory of a row block: 2 fit an SM
constexpr int kTwoPassThreads = 512;
constexpr int64_t kShortColumn = 64;  // dims shorter than this: a thread per column
constexpr int kRowStages = 4;         // groups of a long row's packs, backward, likewise
constexpr int kRowsAtOnce = 4;        // rows of a column tile a thread takes the max of at once

// The operands: in = x (forward) or y (backward), grad = dy (backward only), out = y or dx.
// Rows: row r of operand k starts at r * k_outer. Columns: element (o, l, i) is at
// o * k_outer + l * k_len + i.
template <class T>
struct Operands {
  const T* in;
  const T* grad;
  T* out;
  int64_t in_outer, grad_outer, out_outer;
  int64_t in_len, grad_len, out_len;
};

// Running max and sum of exp(v - max) of some values. max becomes NaN once a NaN arrives; sum
// stays 0 while every value is -inf. exp(v - max) / sum then gives the reference's NaNs. (The
// column tiles fill theirs their own way, with the same results: see softmax_column_tiles.)
struct Online {
  float max;
  float sum;
};

__device__ __forceinline__ Online online_merge(Online a, Online b) {
  const float m = nan_max(a.max, b.max);
  if (m == -INFINITY) return a;  // only -inf so far on both sides: both sums are 0
  return Online{m, a.sum * exp_ftz(a.max - m) + b.sum * exp_ftz(b.max - m)};
}

template <int K>
__device__ __forceinline__ void online_add(Online& acc, const float (&v)[K]) {
  float m = acc.max;
#pragma unroll
  for (int k = 0; k < K; ++k) m = nan_max(m, v[k]);
  if (m == -INFINITY) return;
  float s = acc.sum * exp_ftz(acc.max - m);
#pragma unroll
  for (int k = 0; k < K; ++k) s += exp_ftz(v[k] - m);
  acc = Online{m, s};
}

__device__ __forceinline__ Online shfl_xor(Online a, int offset) {
  return Online{__shfl_xor_sync(0xffffffffu, a.max, offset),
                __shfl_xor_sync(0xffffffffu, a.sum, offset)};
}
__device__ __forceinline__ float shfl_xor(float a, int offset) {
  return __shfl_xor_sync(0xffffffffu, a, offset);
}

// The statistic of a run: Online (forward) or dot(y, dy) (backward), and how two merge.
template <bool kBackward>
using Stat = std::conditional_t<kBackward, float, Online>;

// The statistic of nothing.
template <bool kBackward>
__device__ __forceinline__ Stat<kBackward> empty_stat() {
  if constexpr (kBackward) {
    return 0.0f;
  } else {
    return Online{-INFINITY, 0.0f};
  }
}

template <bool kBackward>
__device__ __forceinline__ Stat<kBackward> merge_stat(Stat<kBackward> a, Stat<kBackward> b) {
  if constexpr (kBackward) {
    return a + b;
  } else {
    return online_merge(a, b);
  }
}

// The output element from the input element(s) and the run's statistic. Forward takes
// Online{max, 1 / sum}.
template <bool kBackward>
__device__ __forceinline__ float finish_f(float v, float g, Stat<kBackward> st) {
  if constexpr (kBackward) {
    return v * (g - st);
  } else {
    return exp_ftz(v - st.max) * st.sum;
  }
}

template <class T, bool kBackward>
__device__ __forceinline__ T finish(T v, T g, Stat<kBackward> st) {
  return from_f<T>(finish_f<kBackward>(to_f(v), to_f(g), st));
}

template <bool kBackward>
__device__ __forceinline__ Stat<kBackward> for_output(Stat<kBackward> st) {
  if constexpr (kBackward) {
    return st;
  } else {
    return Online{st.max, 1.0f / st.sum};
  }
}

// ---------------------------------------------------------------------------------------------
// Rows held in registers: one row per warp (TPR == 32) or per block. N > 1 needs len % N == 0
// and every operand's rows 16-byte aligned.
template <class T, int N, int TPR, bool kBackward>
__global__ void __launch_bounds__(TPR == 32 ? 32 * kWarpRowsPerBlock : TPR)
    softmax_register_rows(Operands<T> a, int64_t rows, int64_t len) {
  __shared__ float scratch[32];
  using P = Pack<T, N>;
  const int lane = TPR == 32 ? (threadIdx.x & 31) : threadIdx.x;
  const int64_t row =
      TPR == 32 ? static_cast<int64_t>(blockIdx.x) * kWarpRowsPerBlock + (threadIdx.x >> 5)
                : blockIdx.x;
  if (TPR == 32 && row >= rows) return;  // whole warps leave; no block-wide barrier follows
  const int64_t packs = len / N;
  const P* pin = reinterpret_cast<const P*>(a.in + row * a.in_outer);
  const P* pgrad = kBackward ? reinterpret_cast<const P*>(a.grad + row * a.grad_outer) : nullptr;
  P* pout = reinterpret_cast<P*>(a.out + row * a.out_outer);
  auto row_sum = [&](float v) { return TPR == 32 ? warp_sum(v) : block_reduce<false>(v, scratch); };

  P v[kMaxPacks];
  P g[kMaxPacks];  // backward only
#pragma unroll
  for (int k = 0; k < kMaxPacks; ++k) {
    const int64_t p = lane + static_cast<int64_t>(k) * TPR;
    if (p < packs) {
      v[k] = pin[p];
      if constexpr (kBackward) g[k] = pgrad[p];
    }
  }
  Stat<kBackward> st;
  if constexpr (kBackward) {
    float dot = 0.0f;
#pragma unroll
    for (int k = 0; k < kMaxPacks; ++k) {
      if (lane + static_cast<int64_t>(k) * TPR < packs) {
#pragma unroll
        for (int j = 0; j < N; ++j) dot += pack_f(v[k], j) * pack_f(g[k], j);
      }
    }
    st = row_sum(dot);
  } else {
    float m = -INFINITY;
#pragma unroll
    for (int k = 0; k < kMaxPacks; ++k) {
      if (lane + static_cast<int64_t>(k) * TPR < packs) {
#pragma unroll
        for (int j = 0; j < N; ++j) m = nan_max(m, pack_f(v[k], j));
      }
    }
    m = TPR == 32 ? warp_max(m) : block_reduce<true>(m, scratch);
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < kMaxPacks; ++k) {
      if (lane + static_cast<int64_t>(k) * TPR < packs) {
#pragma unroll
        for (int j = 0; j < N; ++j) s += exp_ftz(pack_f(v[k], j) - m);
      }
    }
    st = Online{m, 1.0f / row_sum(s)};
  }
#pragma unroll
  for (int k = 0; k < kMaxPacks; ++k) {
    const int64_t p = lane + static_cast<int64_t>(k) * TPR;
    if (p < packs) {
      P r;
#pragma unroll
      for (int j = 0; j < N; ++j)
        r.v[j] = finish<T, kBackward>(v[k].v[j], kBackward ? g[k].v[j] : T{}, st);
      pout[p] = r;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Rows held in shared memory.

// Elements before the first 16-byte boundary at p (p is aligned to its element size).
template <class T>
__device__ __forceinline__ int head_of(const T* p) {
  return static_cast<int>((16 - reinterpret_cast<uintptr_t>(p) % 16) % 16 / sizeof(T));
}

// Copies p[0, n) to s[0, n), where s + head_of(p) is 16-byte aligned: the elements between p's
// 16-byte boundaries as packs (kUnroll in flight per thread), the few outside singly. Calls
// take(values) with the values each thread moved (K = 1 or N at a time).
template <class T, int kThreads, class Take>
__device__ __forceinline__ void load_to_smem(const T* __restrict__ p, int64_t n, T* s,
                                             Take&& take) {
  constexpr int N = kVec<T>;
  using P = Pack<T, N>;
  const int64_t head = std::min<int64_t>(head_of(p), n);
  const int64_t packs = (n - head) / N;
  const int64_t tail = head + packs * N;
  const int64_t t = threadIdx.x;
  auto single = [&](int64_t i) {
    const T v = p[i];
    s[i] = v;
    const float f[1] = {to_f(v)};
    take(f);
  };
  if (t < head) single(t);  // fewer than N elements before the body, and after it
  if (t < n - tail) single(tail + t);
  const P* pp = reinterpret_cast<const P*>(p + head);
  P* sp = reinterpret_cast<P*>(s + head);
  for (int64_t k = t; k < packs; k += static_cast<int64_t>(kThreads) * kUnroll) {
    P v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t kk = k + static_cast<int64_t>(u) * kThreads;
      if (kk < packs) v[u] = pp[kk];
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t kk = k + static_cast<int64_t>(u) * kThreads;
      if (kk < packs) {
        sp[kk] = v[u];
        float f[N];
#pragma unroll
        for (int j = 0; j < N; ++j) f[j] = pack_f(v[u], j);
        take(f);
      }
    }
  }
}

// As load_to_smem without take: the packs by cp.async, every one of the block's copies in flight
// at once (a synchronous loop keeps only kUnroll per thread, too few to cover the latency of a
// row's whole chunk). Complete after async_wait<0>() and a barrier.
template <class T, int kThreads>
__device__ __forceinline__ void copy_to_smem_async(const T* __restrict__ p, int64_t n, T* s) {
  constexpr int N = kVec<T>;
  const int64_t head = std::min<int64_t>(head_of(p), n);
  const int64_t packs = (n - head) / N;
  const int64_t tail = head + packs * N;
  const int64_t t = threadIdx.x;
  if (t < head) s[t] = p[t];
  if (t < n - tail) s[tail + t] = p[tail + t];
  for (int64_t k = t; k < packs; k += kThreads) copy_async<16>(s + head + k * N, p + head + k * N);
  async_commit();
}

// N elements from s[i, i + N): one 16-byte read when aligned, else element by element.
template <class T>
__device__ __forceinline__ Pack<T, kVec<T>> smem_pack(const T* s, bool aligned) {
  using P = Pack<T, kVec<T>>;
  if (aligned) return *reinterpret_cast<const P*>(s);
  P v;
#pragma unroll
  for (int j = 0; j < kVec<T>; ++j) v.v[j] = s[j];
  return v;
}

// The block of rank c among the blocks_per_row blocks of a row (a cluster when kCluster, else
// one block) takes elements [c * chunk, (c + 1) * chunk) of the row (cluster_place). Each operand
// moves with 16-byte accesses in its own 16-byte phase: element i of in sits at
// s_in[pad_in + i], pad_in aligning in's first 16-byte boundary in shared memory (grad alike,
// `stride` elements further on); out is written from its own first boundary, reading shared
// memory a pack at a time where the phases agree and element by element where they do not.
template <class T, bool kBackward, bool kCluster>
__global__ void __launch_bounds__(kSmemRowThreads)
    softmax_smem_rows(Operands<T> a, int64_t len, int64_t chunk, int blocks_per_row,
                      int64_t stride) {
  constexpr int N = kVec<T>;
  using P = Pack<T, N>;
  using S = Stat<kBackward>;
  extern __shared__ __align__(16) unsigned char dynamic_smem[];
  __shared__ S warp_parts[kSmemRowThreads / 32];
  __shared__ S block_part, row_stat;

  const Place place = cluster_place<kCluster>();
  const int64_t row = place.item;
  const int64_t begin = std::min<int64_t>(len, place.rank * chunk);
  const int64_t n = std::min<int64_t>(len, begin + chunk) - begin;
  const T* in = a.in + row * a.in_outer + begin;
  const T* grad = kBackward ? a.grad + row * a.grad_outer + begin : nullptr;
  T* out = a.out + row * a.out_outer + begin;
  const int pad_in = (N - head_of(in)) % N;
  const int pad_grad = kBackward ? (N - head_of(grad)) % N : 0;
  T* s_in = reinterpret_cast<T*>(dynamic_smem) + pad_in;               // s_in[i]: element i
  T* s_grad = reinterpret_cast<T*>(dynamic_smem) + stride + pad_grad;  // backward only

  S acc = empty_stat<kBackward>();
  if constexpr (kBackward) {
    if (pad_in == pad_grad) {
      // y's and dy's packs line up in shared memory (as they do for two rows of one shape), so
      // each thread dots exactly the packs it copied, a pack at a time: a group of them as soon
      // as it has arrived, with no barrier, while the later groups are still on their way.
      const int64_t head = std::min<int64_t>(head_of(in), n);
      const int64_t packs = (n - head) / N;
      const int64_t tail = head + packs * N;
      const int64_t t = threadIdx.x;
      const int64_t mine = t < packs ? ceil_div(packs - t, kSmemRowThreads) : 0;
      auto pack = [&](int64_t q) { return head + (t + q * kSmemRowThreads) * N; };
#pragma unroll
      for (int stage = 0; stage < kRowStages; ++stage) {
        for (int64_t q = mine * stage / kRowStages; q < mine * (stage + 1) / kRowStages; ++q) {
          copy_async<16>(s_in + pack(q), in + pack(q));
          copy_async<16>(s_grad + pack(q), grad + pack(q));
        }
        async_commit();  // empty groups too: every thread waits on the same counts below
      }
      auto single = [&](int64_t i) {
        s_in[i] = in[i];
        s_grad[i] = grad[i];
        acc += to_f(s_in[i]) * to_f(s_grad[i]);
      };
      if (t < head) single(t);  // fewer than N elements before the body, and after it
      if (t < n - tail) single(tail + t);
#pragma unroll
      for (int stage = 0; stage < kRowStages; ++stage) {
        async_wait_for<kRowStages - 1>(kRowStages - 1 - stage);
        for (int64_t q = mine * stage / kRowStages; q < mine * (stage + 1) / kRowStages; ++q) {
          const P v = *reinterpret_cast<const P*>(s_in + pack(q));
          const P g = *reinterpret_cast<const P*>(s_grad + pack(q));
#pragma unroll
          for (int j = 0; j < N; ++j) acc += pack_f(v, j) * pack_f(g, j);
        }
      }
    } else {
      copy_to_smem_async<T, kSmemRowThreads>(in, n, s_in);
      copy_to_smem_async<T, kSmemRowThreads>(grad, n, s_grad);
      async_wait<0>();
      __syncthreads();  // uniform: every thread of the block has the same pads
      for (int64_t i = threadIdx.x; i < n; i += kSmemRowThreads)
        acc += to_f(s_in[i]) * to_f(s_grad[i]);
    }
  } else {
    load_to_smem<T, kSmemRowThreads>(in, n, s_in, [&](const auto& f) { online_add(acc, f); });
  }

#pragma unroll
  for (int o = 16; o > 0; o >>= 1) acc = merge_stat<kBackward>(acc, shfl_xor(acc, o));
  if ((threadIdx.x & 31) == 0) warp_parts[threadIdx.x >> 5] = acc;
  __syncthreads();  // also: every element is in shared memory
  if (threadIdx.x == 0) {
    S t = warp_parts[0];
    for (int w = 1; w < kSmemRowThreads / 32; ++w) t = merge_stat<kBackward>(t, warp_parts[w]);
    block_part = t;
  }
  const auto leave =
      combine_blocks<kCluster>(&block_part, &row_stat, 1, blocks_per_row,
                               [](S x, S y) { return merge_stat<kBackward>(x, y); });
  const S st = for_output<kBackward>(row_stat);

  const int h = head_of(out);
  const int64_t head = std::min<int64_t>(h, n);
  const int64_t packs = (n - head) / N;
  const int64_t tail = head + packs * N;
  auto single = [&](int64_t i) {
    out[i] = finish<T, kBackward>(s_in[i], kBackward ? s_grad[i] : T{}, st);
  };
  const int64_t t = threadIdx.x;
  if (t < head) single(t);  // fewer than N elements before the body, and after it
  if (t < n - tail) single(tail + t);
  // Packs of out start at element head, which sits at s_in + pad_in + head: aligned when
  // (pad_in + head) % N == 0 (only read when packs > 0, so head == h).
  const bool in_aligned = (pad_in + h) % N == 0, grad_aligned = (pad_grad + h) % N == 0;
  P* pout = reinterpret_cast<P*>(out + head);
#pragma unroll 4
  for (int64_t k = threadIdx.x; k < packs; k += kSmemRowThreads) {
    const int64_t i = head + k * N;
    const P v = smem_pack(s_in + i, in_aligned);
    P g;
    if constexpr (kBackward) g = smem_pack(s_grad + i, grad_aligned);
    P r;
#pragma unroll
    for (int j = 0; j < N; ++j) r.v[j] = finish<T, kBackward>(v.v[j], kBackward ? g.v[j] : T{}, st);
    pout[k] = r;
  }
}

// Rows too long for shared memory: one block per row, reading it twice.
template <class T, bool kBackward>
__global__ void __launch_bounds__(kTwoPassThreads)
    softmax_two_pass_rows(Operands<T> a, int64_t len) {
  using S = Stat<kBackward>;
  __shared__ S warp_parts[kTwoPassThreads / 32];
  const int64_t row = blockIdx.x;
  const T* in = a.in + row * a.in_outer;
  const T* grad = kBackward ? a.grad + row * a.grad_outer : nullptr;
  T* out = a.out + row * a.out_outer;
  S acc = empty_stat<kBackward>();
  for (int64_t i = threadIdx.x; i < len; i += kTwoPassThreads) {
    if constexpr (kBackward) {
      acc += to_f(in[i]) * to_f(grad[i]);
    } else {
      const float f[1] = {to_f(in[i])};
      online_add(acc, f);
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) acc = merge_stat<kBackward>(acc, shfl_xor(acc, o));
  if ((threadIdx.x & 31) == 0) warp_parts[threadIdx.x >> 5] = acc;
  __syncthreads();
  S t = warp_parts[0];
  for (int w = 1; w < kTwoPassThreads / 32; ++w) t = merge_stat<kBackward>(t, warp_parts[w]);
  const S st = for_output<kBackward>(t);
  for (int64_t i = threadIdx.x; i < len; i += kTwoPassThreads) {
    out[i] = finish<T, kBackward>(in[i], kBackward ? grad[i] : T{}, st);
  }
}

// ---------------------------------------------------------------------------------------------
// Short columns: one thread per (outer, inner) column, reading it three times (from cache
// after the first).
template <class T, bool kBackward>
__global__ void softmax_short_columns(Operands<T> a, int64_t outer, int64_t len, int64_t inner) {
  const int64_t col = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (col >= outer * inner) return;
  const int64_t o = col / inner, i = col - o * inner;
  const T* in = a.in + o * a.in_outer + i;
  const T* grad = kBackward ? a.grad + o * a.grad_outer + i : nullptr;
  T* out = a.out + o * a.out_outer + i;
  Stat<kBackward> st;
  if constexpr (kBackward) {
    float dot = 0.0f;
    for (int64_t l = 0; l < len; ++l) dot += to_f(in[l * a.in_len]) * to_f(grad[l * a.grad_len]);
    st = dot;
  } else {
    float m = -INFINITY;
    for (int64_t l = 0; l < len; ++l) m = nan_max(m, to_f(in[l * a.in_len]));
    float s = 0.0f;
    for (int64_t l = 0; l < len; ++l) s += exp_ftz(to_f(in[l * a.in_len]) - m);
    st = Online{m, 1.0f / s};
  }
  for (int64_t l = 0; l < len; ++l) {
    out[l * a.out_len] =
        finish<T, kBackward>(in[l * a.in_len], kBackward ? grad[l * a.grad_len] : T{}, st);
  }
}

// Column tiles held in shared memory: W adjacent columns (kWidthBytes) of one outer index. The
// block of rank c among the blocks_per_tile blocks of a tile (a cluster when kCluster, else one
// block; cluster_place) holds rows [c * rows_per_block, ...) of the dim. kLanes threads cover a
// tile row, V columns each; a thread takes the rows slot, slot + kRowsPerStep, ... Its rows
// arrive in kTileStages groups of asynchronous copies (single 2-byte elements are copied
// through a register, at once), and it takes the statistics of a group while the later ones are
// still arriving. Each thread copies, and later reads, only its own packs: the loads need no
// barrier.
template <class T, int V, int kWidthBytes, bool kBackward, bool kCluster>
__global__ void __launch_bounds__(kTileThreads)
    softmax_column_tiles(Operands<T> a, int64_t len, int64_t inner, int64_t rows_per_block,
                         int blocks_per_tile) {
  constexpr int W = kWidthBytes / static_cast<int>(sizeof(T));
  constexpr int kLanes = W / V;
  constexpr int kRowsPerStep = kTileThreads / kLanes;
  static_assert(kLanes <= 32 && 32 % kLanes == 0, "a tile row must fit a warp");
  // The rest of the 128-byte line (64-byte tiles) or of the 256-byte block (128-byte tiles) is
  // the next tile's, whose cluster runs beside this one: the DRAM serves whole blocks. 256 bytes
  // for 64-byte tiles measured slower (bench/results/gpu-run-*-2026-11-27-7/).
  constexpr int kPrefetch = kWidthBytes < 128 ? 128 : 256;
  using P = Pack<T, V>;
  using S = Stat<kBackward>;
  extern __shared__ __align__(16) unsigned char dynamic_smem[];
  __shared__ S warp_parts[kTileThreads / 32][W];
  __shared__ S block_parts[W], tile_stats[W];
  T* s_in = reinterpret_cast<T*>(dynamic_smem);  // [rows_per_block][W]
  T* s_grad = s_in + rows_per_block * W;

  const int64_t tiles_per_outer = ceil_div(inner, W);
  const Place place = cluster_place<kCluster>();
  const int64_t tile = place.item;
  const int64_t o = tile / tiles_per_outer;
  const int cw = (threadIdx.x % kLanes) * V;  // the thread's first column within the tile
  const int64_t i = (tile - o * tiles_per_outer) * W + cw;
  const bool active = i < inner;  // V > 1 only when inner % V == 0
  const int slot = threadIdx.x / kLanes;
  const int64_t begin = std::min<int64_t>(len, place.rank * rows_per_block);
  const int64_t rows = std::min<int64_t>(len, begin + rows_per_block) - begin;
  const T* in = a.in + o * a.in_outer + begin * a.in_len + i;
  const T* grad = kBackward ? a.grad + o * a.grad_outer + begin * a.grad_len + i : nullptr;
  T* out = a.out + o * a.out_outer + begin * a.out_len + i;
  const int64_t mine = active && rows > slot ? ceil_div(rows - slot, kRowsPerStep) : 0;
  auto row = [&](int64_t k) { return slot + k * kRowsPerStep; };

#pragma unroll
  for (int stage = 0; stage < kTileStages; ++stage) {
    for (int64_t k = mine * stage / kTileStages; k < mine * (stage + 1) / kTileStages; ++k) {
      const int64_t r = row(k);
      copy_async<sizeof(P), kPrefetch>(s_in + r * W + cw, in + r * a.in_len);
      if constexpr (kBackward)
        copy_async<sizeof(P), kPrefetch>(s_grad + r * W + cw, grad + r * a.grad_len);
    }
    async_commit();  // empty groups too: every thread waits on the same counts below
  }
  // Forward: one pass, a new maximum rescaling the sum (rarely, after the first rows). The
  // running max starts at -FLT_MAX, not -inf, so a -inf adds exp(-inf) = 0, not exp(NaN); a NaN
  // or +inf still makes the sum NaN, as the reference's run.
  S st[V];
#pragma unroll
  for (int j = 0; j < V; ++j) {
    if constexpr (kBackward) {
      st[j] = 0.0f;
    } else {
      st[j] = Online{-FLT_MAX, 0.0f};
    }
  }
#pragma unroll
  for (int stage = 0; stage < kTileStages; ++stage) {
    async_wait_for<kTileStages - 1>(kTileStages - 1 - stage);
    int64_t k = mine * stage / kTileStages;
    const int64_t stage_end = mine * (stage + 1) / kTileStages;
    if constexpr (!kBackward) {
      // kRowsAtOnce rows a step: one comparison with the running max and one dependent add per
      // column for all of them, not one per row (the loop-carried chain bounds this loop).
      for (; k + kRowsAtOnce <= stage_end; k += kRowsAtOnce) {
        P v[kRowsAtOnce];
#pragma unroll
        for (int r = 0; r < kRowsAtOnce; ++r)
          v[r] = *reinterpret_cast<const P*>(s_in + row(k + r) * W + cw);
#pragma unroll
        for (int j = 0; j < V; ++j) {
          float f[kRowsAtOnce];
          float m = -FLT_MAX;
#pragma unroll
          for (int r = 0; r < kRowsAtOnce; ++r) {
            f[r] = pack_f(v[r], j);
            m = fmaxf(m, f[r]);  // a NaN is passed over here, and makes the sum NaN below
          }
          if (m > st[j].max) {
            st[j].sum *= exp_ftz(st[j].max - m);
            st[j].max = m;
          }
          float e[kRowsAtOnce];
#pragma unroll
          for (int r = 0; r < kRowsAtOnce; ++r) e[r] = exp_ftz(f[r] - st[j].max);
#pragma unroll
          for (int w = kRowsAtOnce / 2; w > 0; w /= 2) {
#pragma unroll
            for (int r = 0; r < w; ++r) e[r] += e[r + w];
          }
          st[j].sum += e[0];
        }
      }
    }
#pragma unroll 4
    for (; k < stage_end; ++k) {
      const P v = *reinterpret_cast<const P*>(s_in + row(k) * W + cw);
      if constexpr (kBackward) {
        const P g = *reinterpret_cast<const P*>(s_grad + row(k) * W + cw);
#pragma unroll
        for (int j = 0; j < V; ++j) st[j] += pack_f(v, j) * pack_f(g, j);
      } else {
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const float f = pack_f(v, j);
          if (f > st[j].max) {
            st[j].sum *= exp_ftz(st[j].max - f);
            st[j].max = f;
          }
          st[j].sum += exp_ftz(f - st[j].max);
        }
      }
    }
  }

  // Threads of one warp with the same columns, then the warps, then the cluster's blocks.
#pragma unroll
  for (int off = 16; off >= kLanes; off >>= 1) {
#pragma unroll
    for (int j = 0; j < V; ++j) st[j] = merge_stat<kBackward>(st[j], shfl_xor(st[j], off));
  }
  if ((threadIdx.x & 31) < kLanes) {
#pragma unroll
    for (int j = 0; j < V; ++j) warp_parts[threadIdx.x >> 5][cw + j] = st[j];
  }
  __syncthreads();
  if (threadIdx.x < W) {
    S t = warp_parts[0][threadIdx.x];
    for (int w = 1; w < kTileThreads / 32; ++w)
      t = merge_stat<kBackward>(t, warp_parts[w][threadIdx.x]);
    block_parts[threadIdx.x] = t;
  }
  const auto leave =
      combine_blocks<kCluster>(block_parts, tile_stats, W, blocks_per_tile,
                               [](S x, S y) { return merge_stat<kBackward>(x, y); });

  if (mine == 0) return;  // only `leave`'s wait follows, which needs no converged warp
  S fin[V];
#pragma unroll
  for (int j = 0; j < V; ++j) fin[j] = for_output<kBackward>(tile_stats[cw + j]);
#pragma unroll 4
  for (int64_t k = 0; k < mine; ++k) {
    const int64_t r = row(k);
    const P v = *reinterpret_cast<const P*>(s_in + r * W + cw);
    P g;
    if constexpr (kBackward) g = *reinterpret_cast<const P*>(s_grad + r * W + cw);
    float res[V];
#pragma unroll
    for (int j = 0; j < V; ++j)
      res[j] = finish_f<kBackward>(pack_f(v, j), kBackward ? pack_f(g, j) : 0.0f, fin[j]);
    store_global(out + r * a.out_len, to_pack<T, V>(res));
  }
}

// Tall columns, pass 1 of 3: the statistic of each chunk of rows of each column, to
// partial[chunk * cols + column].
template <class T, int V, bool kBackward>
__global__ void __launch_bounds__(kColThreads)
    softmax_column_chunks(Operands<T> a, int64_t outer, int64_t len, int64_t inner,
                          int64_t chunk_rows, Stat<kBackward>* __restrict__ partial) {
  using P = Pack<T, V>;
  using S = Stat<kBackward>;
  const int64_t cols = outer * inner;
  const int64_t col = column_of_thread<V>();
  const int64_t chunk = column_chunk(false);
  const int64_t begin = chunk * chunk_rows;
  S st[V];
#pragma unroll
  for (int j = 0; j < V; ++j) st[j] = empty_stat<kBackward>();
  if (col < cols) {
    const int64_t o = col / inner, i = col - o * inner;
    const T* in = a.in + o * a.in_outer + i;
    const T* grad = kBackward ? a.grad + o * a.grad_outer + i : nullptr;
    P v[kColUnroll];
    P g[kColUnroll];  // backward only
    for_column_rows(
        begin, std::min(len, begin + chunk_rows),
        [&](int64_t l, int u) {
          v[u] = *reinterpret_cast<const P*>(in + l * a.in_len);
          if constexpr (kBackward) g[u] = *reinterpret_cast<const P*>(grad + l * a.grad_len);
        },
        [&](int64_t, int u) {
#pragma unroll
          for (int j = 0; j < V; ++j) {
            if constexpr (kBackward) {
              st[j] += pack_f(v[u], j) * pack_f(g[u], j);
            } else {
              const float f[1] = {pack_f(v[u], j)};
              online_add(st[j], f);
            }
          }
        });
  }
  __shared__ S shared[kColGroups * 32 * V];
  merge_column_groups<V>(
      st, shared, [](S x, S y) { return merge_stat<kBackward>(x, y); },
      [&](int c, S s) {
        const int64_t cc = static_cast<int64_t>(blockIdx.x) * 32 * V + c;
        if (cc < cols) partial[chunk * cols + cc] = s;
      });
}

// Pass 2: each column's chunks merged in order, ready for the output (for_output).
template <bool kBackward>
__global__ void softmax_merge_chunks(const Stat<kBackward>* __restrict__ partial, int64_t chunks,
                                     int64_t cols, Stat<kBackward>* __restrict__ stats) {
  const int64_t cc = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (cc >= cols) return;
  Stat<kBackward> t = partial[cc];
  for (int64_t k = 1; k < chunks; ++k) t = merge_stat<kBackward>(t, partial[k * cols + cc]);
  stats[cc] = for_output<kBackward>(t);
}

// Pass 3: the output, chunks in reverse order (the rows pass 1 read last may still be in L2).
template <class T, int V, bool kBackward>
__global__ void __launch_bounds__(kColThreads)
    softmax_column_apply(Operands<T> a, int64_t outer, int64_t len, int64_t inner,
                         int64_t chunk_rows, const Stat<kBackward>* __restrict__ stats) {
  using P = Pack<T, V>;
  const int64_t cols = outer * inner;
  const int64_t col = column_of_thread<V>();
  if (col >= cols) return;  // no barrier follows
  const int64_t begin = column_chunk(true) * chunk_rows;
  const int64_t o = col / inner, i = col - o * inner;
  const T* in = a.in + o * a.in_outer + i;
  const T* grad = kBackward ? a.grad + o * a.grad_outer + i : nullptr;
  T* out = a.out + o * a.out_outer + i;
  Stat<kBackward> st[V];
#pragma unroll
  for (int j = 0; j < V; ++j) st[j] = stats[col + j];
  P v[kColUnroll];
  P g[kColUnroll];  // backward only
  for_column_rows(
      begin, std::min(len, begin + chunk_rows),
      [&](int64_t l, int u) {
        v[u] = *reinterpret_cast<const P*>(in + l * a.in_len);
        if constexpr (kBackward) g[u] = *reinterpret_cast<const P*>(grad + l * a.grad_len);
      },
      [&](int64_t l, int u) {
        P r;
#pragma unroll
        for (int j = 0; j < V; ++j)
          r.v[j] = finish<T, kBackward>(v[u].v[j], kBackward ? g[u].v[j] : T{}, st[j]);
        store_global(out + l * a.out_len, r);
      });
}

// ---------------------------------------------------------------------------------------------
// Host side.

template <class T, int N, bool kBackward>
void launch_register_rows(const Operands<T>& a, int64_t rows, int64_t len, cudaStream_t s) {
  const int64_t packs = len / N;
  if (packs <= 32 * kMaxPacks) {
    const unsigned blocks = static_cast<unsigned>(ceil_div(rows, kWarpRowsPerBlock));
    softmax_register_rows<T, N, 32, kBackward>
        <<<blocks, 32 * kWarpRowsPerBlock, 0, s>>>(a, rows, len);
  } else if (packs <= 256 * kMaxPacks) {
    softmax_register_rows<T, N, 256, kBackward>
        <<<static_cast<unsigned>(rows), 256, 0, s>>>(a, rows, len);
  } else {
    softmax_register_rows<T, N, kRegisterRowThreads, kBackward>
        <<<static_cast<unsigned>(rows), kRegisterRowThreads, 0, s>>>(a, rows, len);
  }
}

template <class T, bool kBackward>
opforge_status softmax_rows(const char* op, const Operands<T>& a, int64_t rows, int64_t len,
                            const DeviceInfo& dev, cudaStream_t s) {
  constexpr int N = kVec<T>;
  const bool packed = len % N == 0 && aligned16(a.in) && aligned16(a.out) && a.in_outer % N == 0 &&
                      a.out_outer % N == 0 &&
                      (!kBackward || (aligned16(a.grad) && a.grad_outer % N == 0));
  if (packed && len / N <= kRegisterRowThreads * kMaxPacks) {
    launch_register_rows<T, N, kBackward>(a, rows, len, s);
    return check_launch(op);
  }
  if (!packed && len <= kRegisterRowThreads * kMaxPacks) {
    launch_register_rows<T, 1, kBackward>(a, rows, len, s);
    return check_launch(op);
  }
  // Shared memory of a block holding `chunk` elements of a row (of each of in and grad).
  const auto smem_for = [](int64_t chunk) {
    return ceil_div(chunk + N, N) * N * static_cast<int64_t>(sizeof(T)) * (kBackward ? 2 : 1);
  };
  const auto stride_for = [](int64_t chunk) { return ceil_div(chunk + N, N) * N; };
  auto* single = softmax_smem_rows<T, kBackward, false>;
  auto* clustered = softmax_smem_rows<T, kBackward, true>;
  const bool fits_one = smem_for(len) <= dynamic_smem_limit(single, dev);
  // Up to kRowBlockBytes a block per row; above, the fewest blocks of a cluster that bring each
  // under kRowBlockBytes (two blocks per SM overlap one's loads with the other's stores), else
  // under the device's limit.
  if (!fits_one || smem_for(len) > kRowBlockBytes) {
    const int64_t limit = dynamic_smem_limit(clustered, dev);
    for (const int64_t cap : {std::min(kRowBlockBytes, limit), limit}) {
      for (int blocks = 2; blocks <= kMaxCluster && sm90_code_runs(dev); ++blocks) {
        // Parts of a multiple of 16 elements keep each part's 16-byte phase the row's.
        const int64_t chunk = ceil_div(ceil_div(len, blocks), 16) * 16;
        if (smem_for(chunk) > cap) continue;
        const int parts = static_cast<int>(ceil_div(len, chunk));
        if (!cluster_fits(clustered, rows * parts, kSmemRowThreads, smem_for(chunk), parts, dev,
                          s)) {
          break;
        }
        return launch_cluster(op, clustered, rows * parts, kSmemRowThreads, smem_for(chunk), parts,
                              s, a, len, chunk, parts, stride_for(chunk));
      }
      if (fits_one) break;  // one block per row beats a cluster over the device's limit
    }
  }
  if (fits_one) {
    return launch_with_smem(op, single, rows, kSmemRowThreads, smem_for(len), dev, s, a, len, len,
                            1, stride_for(len));
  }
  softmax_two_pass_rows<T, kBackward>
      <<<static_cast<unsigned>(rows), kTwoPassThreads, 0, s>>>(a, len);
  return check_launch(op);
}

template <class T, int V, bool kBackward>
opforge_status softmax_tall_columns(const char* op, const Operands<T>& a, int64_t outer,
                                    int64_t len, int64_t inner, const DeviceInfo& dev,
                                    Scratch& scratch, cudaStream_t s) {
  using S = Stat<kBackward>;
  const int64_t cols = outer * inner;
  const ColumnGrid g = column_grid(cols, len, V, dev);
  S* partial = nullptr;
  S* stats = nullptr;
  cudaError_t e = scratch.alloc(g.chunks * cols, &partial);
  if (e == cudaSuccess) e = scratch.alloc(cols, &stats);
  if (e != cudaSuccess) return cuda_failure(op, "cudaMallocAsync (workspace)", e);
  const dim3 grid(static_cast<unsigned>(g.tiles), static_cast<unsigned>(g.chunks));
  softmax_column_chunks<T, V, kBackward>
      <<<grid, kColThreads, 0, s>>>(a, outer, len, inner, g.chunk_rows, partial);
  softmax_merge_chunks<kBackward>
      <<<static_cast<unsigned>(ceil_div(cols, 256)), 256, 0, s>>>(partial, g.chunks, cols, stats);
  softmax_column_apply<T, V, kBackward>
      <<<grid, kColThreads, 0, s>>>(a, outer, len, inner, g.chunk_rows, stats);
  return check_launch(op);
}

template <class T, int V, int kWidthBytes, bool kBackward>
TilePlan plan_column_tiles(int64_t tiles, int64_t len, const DeviceInfo& dev, cudaStream_t s) {
  return plan_tiles(softmax_column_tiles<T, V, kWidthBytes, kBackward, true>,
                    softmax_column_tiles<T, V, kWidthBytes, kBackward, false>, tiles, len,
                    kWidthBytes * (kBackward ? 2 : 1), dev, s, kMaxNonPortableCluster);
}

template <class T, int V, int kWidthBytes, bool kBackward>
opforge_status launch_column_tiles(const char* op, const TilePlan& plan, const Operands<T>& a,
                                   int64_t outer, int64_t len, int64_t inner,
                                   const DeviceInfo& dev, cudaStream_t s) {
  const int64_t tiles = outer * ceil_div(inner, kWidthBytes / static_cast<int>(sizeof(T)));
  return launch_tiles(op, plan, softmax_column_tiles<T, V, kWidthBytes, kBackward, true>,
                      softmax_column_tiles<T, V, kWidthBytes, kBackward, false>, tiles, dev, s, a,
                      len, inner, plan.rows_per_block, plan.blocks);
}

// Tiles of 32 columns where a block or a cluster holds one in blocks of at most
// kTileBlockBytes, else of kTileWidthBytes; else the larger blocks that fit; else the passes that
// read twice. Why 32 columns: on an H100 a plain copy in 64-byte column tiles reaches 72-79% of
// the copy rate, in 128-byte ones 87-88% (bench/column_tile_ceiling.cu). 2-byte types keep
// 64-byte tiles: their statistics pass bounds them, and 128-byte ones measured slower
// (bench/results/kernel-variants-*-2026-11-24.txt).
template <class T, int V, bool kBackward>
opforge_status softmax_columns_v(const char* op, const Operands<T>& a, int64_t outer, int64_t len,
                                 int64_t inner, const DeviceInfo& dev, Scratch& scratch,
                                 cudaStream_t s) {
  constexpr int kWide = 32 * static_cast<int>(sizeof(T));
  constexpr int kNarrow = kTileWidthBytes;
  auto tiles_of = [&](int width) { return outer * ceil_div(inner, width / sizeof(T)); };
  const TilePlan wide = plan_column_tiles<T, V, kWide, kBackward>(tiles_of(kWide), len, dev, s);
  if (wide.blocks > 0 && (kWide == kNarrow || wide.smem <= kTileBlockBytes))
    return launch_column_tiles<T, V, kWide, kBackward>(op, wide, a, outer, len, inner, dev, s);
  if constexpr (kWide != kNarrow) {
    const TilePlan narrow =
        plan_column_tiles<T, V, kNarrow, kBackward>(tiles_of(kNarrow), len, dev, s);
    if (narrow.blocks > 0)
      return launch_column_tiles<T, V, kNarrow, kBackward>(op, narrow, a, outer, len, inner, dev,
                                                           s);
  }
  if (wide.blocks > 0)
    return launch_column_tiles<T, V, kWide, kBackward>(op, wide, a, outer, len, inner, dev, s);
  return softmax_tall_columns<T, V, kBackward>(op, a, outer, len, inner, dev, scratch, s);
}

template <class T, bool kBackward>
opforge_status softmax_columns(const char* op, const Operands<T>& a, int64_t outer, int64_t len,
                               int64_t inner, const DeviceInfo& dev, Scratch& scratch,
                               cudaStream_t s) {
  if (len < kShortColumn) {
    softmax_short_columns<T, kBackward>
        <<<static_cast<unsigned>(ceil_div(outer * inner, 256)), 256, 0, s>>>(a, outer, len, inner);
    return check_launch(op);
  }
  constexpr int N = kVec<T>;
  const bool packed =
      inner % N == 0 && aligned16(a.in) && aligned16(a.out) && a.in_outer % N == 0 &&
      a.out_outer % N == 0 && a.in_len % N == 0 && a.out_len % N == 0 &&
      (!kBackward || (aligned16(a.grad) && a.grad_outer % N == 0 && a.grad_len % N == 0));
  if (packed) return softmax_columns_v<T, N, kBackward>(op, a, outer, len, inner, dev, scratch, s);
  return softmax_columns_v<T, 1, kBackward>(op, a, outer, len, inner, dev, scratch, s);
}

template <bool kBackward>
opforge_status softmax(const char* op, const Tensor& in, const Tensor* grad, int dim, Tensor& out,
                       void* stream) {
  if (out.numel() == 0) return OPFORGE_OK;
  DeviceGuard guard(in.device.device_id);
  if (guard.status() != cudaSuccess) return cuda_failure(op, "cudaSetDevice", guard.status());
  auto s = static_cast<cudaStream_t>(stream);
  Scratch scratch(s);
  const ReduceView v = kBackward ? reduce_view(in.shape, dim, {&in, grad, &out})
                                 : reduce_view(in.shape, dim, {&in, &out});
  if (v.kind == ReduceView::Kind::kOther) {
    Tensor din, dgrad, dout;
    opforge_status st = dense_like(op, in, true, scratch, s, din);
    if (st == OPFORGE_OK && kBackward) st = dense_like(op, *grad, true, scratch, s, dgrad);
    if (st == OPFORGE_OK) st = dense_like(op, out, false, scratch, s, dout);
    if (st == OPFORGE_OK)
      st = softmax<kBackward>(op, din, kBackward ? &dgrad : nullptr, dim, dout, stream);
    if (st == OPFORGE_OK) st = copy_back(op, dout, out, s);
    return st;
  }
  if (v.outer * v.inner > INT32_MAX) {
    return fail(OPFORGE_ERROR_INVALID_ARGUMENT, std::string(op) + ": more than 2^31-1 rows");
  }
  DeviceInfo dev;
  const cudaError_t e = device_info(in.device.device_id, &dev);
  if (e != cudaSuccess) return cuda_failure(op, "cudaDeviceGetAttribute", e);
  const int g = kBackward ? 1 : 0, o = kBackward ? 2 : 1;  // operand indices in the view
  return by_dtype(in.dtype, [&](auto tag) {
    using T = decltype(tag);
    Operands<T> a{};
    a.in = in.ptr<T>();
    a.out = out.ptr<T>();
    a.in_outer = v.outer_stride[0];
    a.in_len = v.len_stride[0];
    a.out_outer = v.outer_stride[o];
    a.out_len = v.len_stride[o];
    if (kBackward) {
      a.grad = grad->ptr<T>();
      a.grad_outer = v.outer_stride[g];
      a.grad_len = v.len_stride[g];
    }
    if (v.kind == ReduceView::Kind::kRows)
      return softmax_rows<T, kBackward>(op, a, v.outer, v.len, dev, s);
    return softmax_columns<T, kBackward>(op, a, v.outer, v.len, v.inner, dev, scratch, s);
  });
}

}  // namespace

opforge_status softmax_forward(const Tensor& x, int dim, Tensor& y, void* stream) {
  return softmax<false>("opforge_softmax_forward", x, nullptr, dim, y, stream);
}

opforge_status softmax_backward(const Tensor& y, const Tensor& dy, int dim, Tensor& dx,
                                void* stream) {
  return softmax<true>("opforge_softmax_backward", y, &dy, dim, dx, stream);
}

}  // namespace opforge::cuda
