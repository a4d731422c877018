// argmax along a dim, for any strides: first index of the maximum, NaN counting as the maximum
// (the first NaN wins).
//
// The operands are viewed around the dim (reduce_view):
// - rows (the dim has stride 1): a warp per short row; a longer row is cut into segments, a
//   block each, read with 16-byte loads from its first 16-byte boundary on (any alignment).
//   With fewer rows than the GPU has room for (down to one row of 2^28 elements: argmax over a
//   whole tensor), each row gets several segments and a second kernel merges their results.
// - columns (stride 1 along an inner dim): column tiles read row by row (columns.cuh), the dim
//   split into chunks when the tiles alone cannot fill the GPU, merged by a second kernel.
// - anything else: through a contiguous copy.
#include <climits>
#include <type_traits>

#include "backends.hpp"
#include "cuda/columns.cuh"
#include "cuda/layout.hpp"

namespace opforge::cuda {
namespace {

constexpr const char* kOp = "opforge_argmax";
constexpr int kUnroll = 4;
constexpr int kWarpRowsPerBlock = 4;
constexpr int64_t kWarpRowMax = 1024;  // rows up to this length take one warp each
constexpr int kSegmentThreads = 256;
constexpr int64_t kMinSegment = 16384;  // elements of a segment when a row is split

// Values as int32 keys that order as argmax does: NaN (any) above +inf, -0 equal to +0, and
// nothing at INT32_MIN, the key of "no value yet".
__device__ __forceinline__ int32_t order_key(float v) {
  const int32_t bits = __float_as_int(v + 0.0f);  // -0 + 0 is +0
  return v != v ? INT32_MAX : bits ^ ((bits >> 31) & 0x7fffffff);
}

struct Best {
  int32_t key;
  int64_t index;
};

__device__ __forceinline__ Best worst() { return Best{INT32_MIN, LLONG_MAX}; }

// Within one thread indices only grow, so a strictly larger key is all it takes to win.
__device__ __forceinline__ void take(Best& best, float v, int64_t index) {
  const int32_t key = order_key(v);
  if (key > best.key) best = Best{key, index};
}

// A thread's best, taken a pack of N elements at a time (each thread's indices increasing). For
// 2-byte floats the pack's largest value comes first, two lanes an instruction (NaN winning),
// and a pack whose value wins is kept whole, its element found once at the end: keying every
// element (twice float32's elements a byte), or scanning each winning pack (with 32 lanes, one
// of them wins at most packs), kept bfloat16 rows at two thirds of copy speed, short of issue
// slots.
template <class T, int N>
struct PackBest {
  static constexpr bool kPairs = sizeof(T) == 2 && N % 2 == 0;
  Best best = worst();  // kPairs: the key of `pack`, the index of its first element
  Pack<T, N> pack;

  __device__ __forceinline__ void take(const Pack<T, N>& p, int64_t index) {
    if constexpr (kPairs) {
      using T2 = std::conditional_t<std::is_same_v<T, __half>, __half2, __nv_bfloat162>;
      const T2* pairs = reinterpret_cast<const T2*>(p.v);
      T2 m = pairs[0];
#pragma unroll
      for (int j = 1; j < N / 2; ++j) m = __hmax2_nan(m, pairs[j]);
      const int32_t key = order_key(nan_max(to_f(m.x), to_f(m.y)));
      if (key > best.key) {
        best = Best{key, index};
        pack = p;
      }
    } else {
#pragma unroll
      for (int j = 0; j < N; ++j) ::opforge::cuda::take(best, to_f(p.v[j]), index + j);
    }
  }

  // The element: the first of the kept pack with its key.
  __device__ __forceinline__ Best result() const {
    if constexpr (kPairs) {
      if (best.key == INT32_MIN) return best;
#pragma unroll
      for (int j = 0; j < N; ++j) {
        if (order_key(to_f(pack.v[j])) == best.key) return Best{best.key, best.index + j};
      }
    }
    return best;
  }
};

// The better of two candidates: the larger key, then the lower index.
__device__ __forceinline__ Best better(Best a, Best b) {
  if (a.key != b.key) return a.key > b.key ? a : b;
  return a.index < b.index ? a : b;
}

__device__ __forceinline__ Best warp_best(Best b) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    Best other{
        __shfl_xor_sync(0xffffffffu, b.key, o),
        static_cast<int64_t>(__shfl_xor_sync(0xffffffffu, static_cast<long long>(b.index), o))};
    b = better(b, other);
  }
  return b;
}

// The best of the whole block, returned to every thread.
template <int kThreads>
__device__ __forceinline__ Best block_best(Best b) {
  __shared__ Best parts[kThreads / 32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  b = warp_best(b);
  if (lane == 0) parts[warp] = b;
  __syncthreads();
  b = lane < kThreads / 32 ? parts[lane] : worst();
  return warp_best(b);
}

// Short rows: one warp per row. N > 1 needs len % N == 0, x 16-byte aligned, x_row % N == 0.
template <class T, int N>
__global__ void __launch_bounds__(32 * kWarpRowsPerBlock)
    argmax_warp_rows(const T* __restrict__ x, int64_t x_row, int64_t* __restrict__ out,
                     int64_t out_row, int64_t rows, int64_t len) {
  using P = Pack<T, N>;
  const int lane = threadIdx.x & 31;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpRowsPerBlock + (threadIdx.x >> 5);
  if (row >= rows) return;  // whole warps leave; no block-wide barrier follows
  const P* px = reinterpret_cast<const P*>(x + row * x_row);
  const int64_t packs = len / N;
  PackBest<T, N> mine;
  for (int64_t start = lane; start < packs; start += 32 * kUnroll) {
    P v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t p = start + static_cast<int64_t>(u) * 32;
      if (p < packs) v[u] = px[p];
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t p = start + static_cast<int64_t>(u) * 32;
      if (p < packs) mine.take(v[u], p * N);
    }
  }
  const Best best = warp_best(mine.result());
  if (lane == 0) out[row * out_row] = best.index;
}

// Calls one(value, i) or packed(pack, i) for each element i or 16-byte pack from i on of
// [begin, end) of `p`, spread over the block's kThreads threads: the elements before the first
// 16-byte boundary and after the last one singly, the rest as packs, kUnroll in flight per
// thread. `p` need only be aligned to its element size. Each thread sees its indices in
// increasing order.
template <class T, int kThreads, class One, class Packed>
__device__ __forceinline__ void for_segment(const T* __restrict__ p, int64_t begin, int64_t end,
                                            One&& one, Packed&& packed) {
  constexpr int N = kVec<T>;
  using P = Pack<T, N>;
  const int64_t n = end - begin;
  if (n <= 0) return;
  const T* q = p + begin;
  const int64_t head = std::min<int64_t>(
      n, static_cast<int64_t>((16 - reinterpret_cast<uintptr_t>(q) % 16) % 16 / sizeof(T)));
  const int64_t t = threadIdx.x;
  if (t < head) one(to_f(q[t]), begin + t);
  const int64_t packs = (n - head) / N;
  const P* body = reinterpret_cast<const P*>(q + head);
  for (int64_t k = t; k < packs; k += static_cast<int64_t>(kThreads) * kUnroll) {
    P v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t kk = k + static_cast<int64_t>(u) * kThreads;
      if (kk < packs) v[u] = body[kk];
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t kk = k + static_cast<int64_t>(u) * kThreads;
      if (kk < packs) packed(v[u], begin + head + kk * N);
    }
  }
  const int64_t tail = head + packs * N;  // fewer than N elements remain after it
  if (tail + t < n) one(to_f(q[tail + t]), begin + tail + t);
}

// Longer rows: block b takes segment b % splits of row b / splits. With one segment per row it
// writes the index; else its best goes to partial[b] for argmax_merge_segments.
template <class T>
__global__ void __launch_bounds__(kSegmentThreads)
    argmax_segments(const T* __restrict__ x, int64_t x_row, int64_t len, int64_t segment,
                    int64_t splits, int64_t* __restrict__ out, int64_t out_row,
                    Best* __restrict__ partial) {
  const int64_t row = blockIdx.x / splits;
  const int64_t begin = (blockIdx.x % splits) * segment;
  if (partial != nullptr) allow_dependents();  // argmax_merge_segments follows
  Best single = worst();  // the elements before the first 16-byte boundary and after the last
  PackBest<T, kVec<T>> packed;
  for_segment<T, kSegmentThreads>(x + row * x_row, begin, std::min(len, begin + segment),
                                  [&](float v, int64_t i) { take(single, v, i); },
                                  [&](const auto& v, int64_t i) { packed.take(v, i); });
  const Best best = block_best<kSegmentThreads>(better(single, packed.result()));
  if (threadIdx.x == 0) {
    if (partial != nullptr) {
      partial[blockIdx.x] = best;
    } else {
      out[row * out_row] = best.index;
    }
  }
}

// Merges each row's `splits` segment results (launch_overlapped): a warp per row
// (kMergeThreads 32, kWarpRowsPerBlock rows a block) or, for rows of many segments (a whole
// tensor's row has thousands), a block per row. Each thread loads kMergeUnroll of them at once,
// so a row takes few L2 round trips, not one after another (which took 8 us of a 360 us argmax
// over 2^28 elements). `better` picks the same winner in any order.
constexpr int kMergeUnroll = 8;
constexpr int kMergeBlock = 1024;
template <int kMergeThreads>
__global__ void __launch_bounds__(kMergeThreads == 32 ? 32 * kWarpRowsPerBlock : kMergeThreads)
    argmax_merge_segments(const Best* __restrict__ partial, int64_t splits, int64_t rows,
                          int64_t* __restrict__ out, int64_t out_row) {
  constexpr bool kWarp = kMergeThreads == 32;
  const int t = kWarp ? threadIdx.x & 31 : threadIdx.x;
  const int64_t row = kWarp ? static_cast<int64_t>(blockIdx.x) * kWarpRowsPerBlock +
                                  (threadIdx.x >> 5)
                            : blockIdx.x;
  wait_for_prior_grid();
  if (row >= rows) return;  // whole warps leave; a block per row has no row to leave
  const Best* parts = partial + row * splits;
  Best best = worst();
  for (int64_t k = t; k < splits; k += kMergeUnroll * kMergeThreads) {
    Best b[kMergeUnroll];
#pragma unroll
    for (int u = 0; u < kMergeUnroll; ++u) {
      const int64_t q = k + static_cast<int64_t>(u) * kMergeThreads;
      b[u] = q < splits ? parts[q] : worst();
    }
#pragma unroll
    for (int u = 0; u < kMergeUnroll; ++u) best = better(best, b[u]);
  }
  if constexpr (kWarp) {
    best = warp_best(best);
  } else {
    best = block_best<kMergeThreads>(best);
  }
  if (t == 0) out[row * out_row] = best.index;
}

// x as [outer, len, inner] (stride 1 along inner; out: [outer, inner], stride 1 along inner).
struct Columns {
  int64_t outer, len, inner;
  int64_t x_outer, x_len, out_outer;
};

// A chunk of rows of a tile of columns. With one chunk, writes the indices; else the chunk's
// bests go to partial[chunk * cols + column].
template <class T, int V>
__global__ void __launch_bounds__(kColThreads)
    argmax_column_chunks(const T* __restrict__ x, Columns v, int64_t chunk_rows,
                         int64_t* __restrict__ out, Best* __restrict__ partial) {
  using P = Pack<T, V>;
  const int64_t cols = v.outer * v.inner;
  const int64_t col = column_of_thread<V>();
  const int64_t chunk = column_chunk(false);
  const int64_t begin = chunk * chunk_rows;
  Best best[V];
#pragma unroll
  for (int j = 0; j < V; ++j) best[j] = worst();
  if (col < cols) {
    const int64_t o = col / v.inner;
    const T* base = x + o * v.x_outer + (col - o * v.inner);
    P buf[kColUnroll];
    for_column_rows(
        begin, std::min(v.len, begin + chunk_rows),
        [&](int64_t l, int u) { buf[u] = *reinterpret_cast<const P*>(base + l * v.x_len); },
        [&](int64_t l, int u) {
#pragma unroll
          for (int j = 0; j < V; ++j) take(best[j], to_f(buf[u].v[j]), l);
        });
  }
  __shared__ Best shared[kColGroups * 32 * V];
  merge_column_groups<V>(
      best, shared, [](Best a, Best b) { return better(a, b); },
      [&](int c, Best b) {
        const int64_t cc = static_cast<int64_t>(blockIdx.x) * 32 * V + c;
        if (cc >= cols) return;
        if (partial != nullptr) {
          partial[chunk * cols + cc] = b;
        } else {
          const int64_t o = cc / v.inner;
          out[o * v.out_outer + (cc - o * v.inner)] = b.index;
        }
      });
}

// One thread per column merges the column's chunk results, in chunk order.
__global__ void argmax_merge_chunks(const Best* __restrict__ partial, int64_t chunks, Columns v,
                                    int64_t* __restrict__ out) {
  const int64_t cols = v.outer * v.inner;
  const int64_t cc = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (cc >= cols) return;
  Best best = partial[cc];
  for (int64_t k = 1; k < chunks; ++k) best = better(best, partial[k * cols + cc]);
  const int64_t o = cc / v.inner;
  out[o * v.out_outer + (cc - o * v.inner)] = best.index;
}

template <class T>
opforge_status argmax_rows(const T* x, int64_t* out, const ReduceView& v, const DeviceInfo& dev,
                           Scratch& scratch, cudaStream_t s) {
  constexpr int N = kVec<T>;
  const int64_t rows = v.outer, len = v.len;
  const int64_t x_row = v.outer_stride[0], out_row = v.outer_stride[1];
  if (len <= kWarpRowMax) {
    const unsigned blocks = static_cast<unsigned>(ceil_div(rows, kWarpRowsPerBlock));
    if (len % N == 0 && aligned16(x) && x_row % N == 0) {
      argmax_warp_rows<T, N>
          <<<blocks, 32 * kWarpRowsPerBlock, 0, s>>>(x, x_row, out, out_row, rows, len);
    } else {
      argmax_warp_rows<T, 1>
          <<<blocks, 32 * kWarpRowsPerBlock, 0, s>>>(x, x_row, out, out_row, rows, len);
    }
    return check_launch(kOp);
  }
  // Split rows only while the rows alone leave the GPU short of blocks.
  const int64_t wanted = static_cast<int64_t>(dev.sms) * 16;
  int64_t splits = 1;
  if (rows < wanted)
    splits = std::min(ceil_div(wanted, rows), std::max<int64_t>(1, len / kMinSegment));
  // Segments of a multiple of 16 elements keep every segment's 16-byte phase the row's.
  const int64_t segment = splits == 1 ? len : ceil_div(ceil_div(len, splits), 16) * 16;
  splits = ceil_div(len, segment);
  const unsigned blocks = static_cast<unsigned>(rows * splits);
  if (splits == 1) {
    argmax_segments<T>
        <<<blocks, kSegmentThreads, 0, s>>>(x, x_row, len, segment, 1, out, out_row, nullptr);
    return check_launch(kOp);
  }
  Best* partial = nullptr;
  const cudaError_t e = scratch.alloc(rows * splits, &partial);
  if (e != cudaSuccess) return cuda_failure(kOp, "cudaMallocAsync (workspace)", e);
  argmax_segments<T>
      <<<blocks, kSegmentThreads, 0, s>>>(x, x_row, len, segment, splits, out, out_row, partial);
  if (const opforge_status launched = check_launch(kOp)) return launched;
  if (splits > 32 * kMergeUnroll) {
    return launch_overlapped(kOp, dev, argmax_merge_segments<kMergeBlock>,
                             dim3(static_cast<unsigned>(rows)), dim3(kMergeBlock), 0, s,
                             static_cast<const Best*>(partial), splits, rows, out, out_row);
  }
  return launch_overlapped(kOp, dev, argmax_merge_segments<32>,
                           dim3(static_cast<unsigned>(ceil_div(rows, kWarpRowsPerBlock))),
                           dim3(32 * kWarpRowsPerBlock), 0, s, static_cast<const Best*>(partial),
                           splits, rows, out, out_row);
}

template <class T, int V>
opforge_status argmax_columns_v(const T* x, int64_t* out, const Columns& c, const DeviceInfo& dev,
                                Scratch& scratch, cudaStream_t s) {
  const ColumnGrid g = column_grid(c.outer * c.inner, c.len, V, dev);
  const dim3 grid(static_cast<unsigned>(g.tiles), static_cast<unsigned>(g.chunks));
  if (g.chunks == 1) {
    argmax_column_chunks<T, V><<<grid, kColThreads, 0, s>>>(x, c, g.chunk_rows, out, nullptr);
    return check_launch(kOp);
  }
  const int64_t cols = c.outer * c.inner;
  Best* partial = nullptr;
  const cudaError_t e = scratch.alloc(g.chunks * cols, &partial);
  if (e != cudaSuccess) return cuda_failure(kOp, "cudaMallocAsync (workspace)", e);
  argmax_column_chunks<T, V><<<grid, kColThreads, 0, s>>>(x, c, g.chunk_rows, out, partial);
  argmax_merge_chunks<<<static_cast<unsigned>(ceil_div(cols, 256)), 256, 0, s>>>(partial, g.chunks,
                                                                                 c, out);
  return check_launch(kOp);
}

template <class T>
opforge_status argmax_columns(const T* x, int64_t* out, const ReduceView& v, const DeviceInfo& dev,
                              Scratch& scratch, cudaStream_t s) {
  constexpr int N = kVec<T>;
  const Columns c{v.outer, v.len, v.inner, v.outer_stride[0], v.len_stride[0], v.outer_stride[1]};
  if (c.inner % N == 0 && aligned16(x) && c.x_outer % N == 0 && c.x_len % N == 0) {
    return argmax_columns_v<T, N>(x, out, c, dev, scratch, s);
  }
  return argmax_columns_v<T, 1>(x, out, c, dev, scratch, s);
}

}  // namespace

opforge_status argmax(const Tensor& x, int dim, Tensor& out, void* stream) {
  if (out.numel() == 0) return OPFORGE_OK;
  DeviceGuard guard(x.device.device_id);
  if (guard.status() != cudaSuccess) return cuda_failure(kOp, "cudaSetDevice", guard.status());
  auto s = static_cast<cudaStream_t>(stream);
  Scratch scratch(s);
  const ReduceView v = reduce_view(x.shape, dim, {&x, &out});
  if (v.kind == ReduceView::Kind::kOther) {
    Tensor dx, dout;
    opforge_status st = dense_like(kOp, x, true, scratch, s, dx);
    if (st == OPFORGE_OK) st = dense_like(kOp, out, false, scratch, s, dout);
    if (st == OPFORGE_OK) st = argmax(dx, dim, dout, stream);
    if (st == OPFORGE_OK) st = copy_back(kOp, dout, out, s);
    return st;
  }
  if (v.outer * v.inner > INT32_MAX) {
    return fail(OPFORGE_ERROR_INVALID_ARGUMENT, std::string(kOp) + ": more than 2^31-1 rows");
  }
  DeviceInfo dev;
  const cudaError_t e = device_info(x.device.device_id, &dev);
  if (e != cudaSuccess) return cuda_failure(kOp, "cudaDeviceGetAttribute", e);
  return by_dtype(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    if (v.kind == ReduceView::Kind::kRows) {
      return argmax_rows<T>(x.ptr<T>(), out.ptr<int64_t>(), v, dev, scratch, s);
    }
    return argmax_columns<T>(x.ptr<T>(), out.ptr<int64_t>(), v, dev, scratch, s);
  });
}

}  // namespace opforge::cuda
