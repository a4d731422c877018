// Prototype: softmax over dim 0 of [L, N] in column bands, persistent blocks, stats then apply
// with the second read from L2.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#define CK(x)                                                                        \
  do {                                                                               \
    cudaError_t e_ = (x);                                                            \
    if (e_ != cudaSuccess) {                                                         \
      printf("CUDA %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__);     \
      exit(1);                                                                       \
    }                                                                                \
  } while (0)

__device__ __forceinline__ float ex2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float exp_ftz(float x) { return ex2_ftz(x * 1.4426950408889634f); }

__device__ __forceinline__ float to_f(float v) { return v; }
__device__ __forceinline__ float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }
template <class T>
__device__ __forceinline__ T from_f(float v);
template <>
__device__ __forceinline__ float from_f<float>(float v) { return v; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float v) {
  return __float2bfloat16(v);
}

template <class T, int N>
struct alignas(16) Pack {
  T v[N];
};

template <int kHint>
__device__ __forceinline__ uint4 load16(const void* p) {
  uint4 u;
  if constexpr (kHint == 0) {
    u = *reinterpret_cast<const uint4*>(p);
  } else {
    uint64_t pol;
    if constexpr (kHint == 1) {
      asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(pol));
    } else {
      asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
    }
    asm volatile("ld.global.L1::no_allocate.L2::cache_hint.v4.u32 {%0,%1,%2,%3}, [%4], %5;"
                 : "=r"(u.x), "=r"(u.y), "=r"(u.z), "=r"(u.w)
                 : "l"(p), "l"(pol));
  }
  return u;
}

template <int kHint>
__device__ __forceinline__ void store16(void* p, uint4 u) {
  if constexpr (kHint == 0) {
    *reinterpret_cast<uint4*>(p) = u;
  } else {
    __stcs(reinterpret_cast<uint4*>(p), u);
  }
}

struct Online {
  float max, sum;
};

constexpr int kThreads = 256;

// Workspace: ticket, count[B], ready[B], partial[B][C][Wb] stats, final[B][Wb].
template <class T, int kBandBytes, int kRows, bool kBackward, int kLag, int kLoadHint,
          int kStoreHint>
__global__ void __launch_bounds__(kThreads)
    band_softmax(const T* __restrict__ in, const T* __restrict__ grad, T* __restrict__ out,
                 int64_t L, int64_t N, int* ticket, int* count, int* ready, float2* partial,
                 float2* fin) {
  constexpr int V = 16 / sizeof(T);
  constexpr int Wb = kBandBytes / sizeof(T);
  constexpr int kLanes = Wb / V;
  constexpr int kSlots = kThreads / kLanes;
  constexpr int kPer = kRows / kSlots;  // rows of an item per thread
  constexpr int kU = kPer < 8 ? kPer : 8;
  static_assert(kPer % kU == 0, "");
  using P = Pack<T, V>;
  const int64_t B = N / Wb;
  const int64_t C = (L + kRows - 1) / kRows;
  const int64_t lag = kLag < B ? kLag : B;
  const int64_t total = 2 * B * C;
  __shared__ int s_item[2];
  __shared__ int s_last;
  __shared__ float2 s_part[kSlots][Wb];
  const int lane = threadIdx.x % kLanes, slot = threadIdx.x / kLanes;
  const int cw = lane * V;

  if (threadIdx.x == 0) s_item[0] = atomicAdd(ticket, 1);
  for (int it = 0;; ++it) {
    __syncthreads();
    const int64_t t = s_item[it & 1];
    if (t >= total) return;
    if (threadIdx.x == 0) s_item[(it + 1) & 1] = atomicAdd(ticket, 1);
    bool stats;
    int64_t band, chunk;
    if (t < lag * C) {
      stats = true;
      band = t / C;
      chunk = t % C;
    } else if (t < lag * C + (B - lag) * 2 * C) {
      const int64_t t2 = t - lag * C;
      const int64_t p = lag + t2 / (2 * C), u = t2 % (2 * C);
      stats = (u & 1) == 0;
      band = stats ? p : p - lag;
      chunk = u >> 1;
    } else {
      const int64_t t3 = t - lag * C - (B - lag) * 2 * C;
      stats = false;
      band = B - lag + t3 / C;
      chunk = t3 % C;
    }
    const int64_t r0 = chunk * kRows;
    const int64_t col = band * Wb + cw;
    const T* pin = in + r0 * N + col;
    const T* pgr = kBackward ? grad + r0 * N + col : nullptr;
    T* pout = out + r0 * N + col;
    const int64_t rows = (L - r0 < kRows ? L - r0 : kRows);
    if (stats) {
      float2 st[V];
#pragma unroll
      for (int j = 0; j < V; ++j) st[j] = kBackward ? make_float2(0.f, 0.f) : make_float2(-FLT_MAX, 0.f);
      for (int k0 = 0; k0 < kPer; k0 += kU) {
        P v[kU], g[kU];
#pragma unroll
        for (int u = 0; u < kU; ++u) {
          const int64_t r = slot + (int64_t)(k0 + u) * kSlots;
          if (r < rows) {
            uint4 x = load16<kLoadHint == 1 ? 1 : 0>(pin + r * N);
            memcpy(&v[u], &x, 16);
            if constexpr (kBackward) {
              uint4 y = load16<kLoadHint == 1 ? 1 : 0>(pgr + r * N);
              memcpy(&g[u], &y, 16);
            }
          } else {
#pragma unroll
            for (int j = 0; j < V; ++j) {
              v[u].v[j] = from_f<T>(-INFINITY);
              g[u].v[j] = from_f<T>(0.f);
            }
          }
        }
#pragma unroll
        for (int j = 0; j < V; ++j) {
          if constexpr (kBackward) {
#pragma unroll
            for (int u = 0; u < kU; ++u) st[j].x += to_f(v[u].v[j]) * to_f(g[u].v[j]);
          } else {
            float f[kU];
            float m = -FLT_MAX;
#pragma unroll
            for (int u = 0; u < kU; ++u) {
              f[u] = to_f(v[u].v[j]);
              m = fmaxf(m, f[u]);
            }
            if (m > st[j].x) {
              st[j].y *= exp_ftz(st[j].x - m);
              st[j].x = m;
            }
            float e = 0.f;
#pragma unroll
            for (int u = 0; u < kU; ++u) e += exp_ftz(f[u] - st[j].x);
            st[j].y += e;
          }
        }
      }
#pragma unroll
      for (int j = 0; j < V; ++j) s_part[slot][cw + j] = st[j];
      __syncthreads();
      for (int c = threadIdx.x; c < Wb; c += kThreads) {
        float2 a = s_part[0][c];
        for (int s = 1; s < kSlots; ++s) {
          const float2 b = s_part[s][c];
          if constexpr (kBackward) {
            a.x += b.x;
          } else {
            const float m = fmaxf(a.x, b.x);
            a = make_float2(m, a.y * exp_ftz(a.x - m) + b.y * exp_ftz(b.x - m));
          }
        }
        partial[(band * Wb + c) * C + chunk] = a;
      }
      __threadfence();
      __syncthreads();
      if (threadIdx.x == 0) s_last = atomicAdd(&count[band], 1) == C - 1;
      __syncthreads();
      if (s_last) {
        __threadfence();
        const int w = threadIdx.x >> 5, l = threadIdx.x & 31;
        for (int c = w; c < Wb; c += kThreads / 32) {
          const float2* p = partial + (band * Wb + c) * C;
          float2 a = kBackward ? make_float2(0.f, 0.f) : make_float2(-FLT_MAX, 0.f);
          for (int64_t k = l; k < C; k += 32) {
            const float2 b = __ldcg(p + k);
            if constexpr (kBackward) {
              a.x += b.x;
            } else {
              const float m = fmaxf(a.x, b.x);
              a = make_float2(m, a.y * exp_ftz(a.x - m) + b.y * exp_ftz(b.x - m));
            }
          }
#pragma unroll
          for (int o = 16; o > 0; o >>= 1) {
            const float2 b = make_float2(__shfl_xor_sync(~0u, a.x, o), __shfl_xor_sync(~0u, a.y, o));
            if constexpr (kBackward) {
              a.x += b.x;
            } else {
              const float m = fmaxf(a.x, b.x);
              a = make_float2(m, a.y * exp_ftz(a.x - m) + b.y * exp_ftz(b.x - m));
            }
          }
          if (l == 0) fin[band * Wb + c] = kBackward ? a : make_float2(a.x, 1.0f / a.y);
        }
        __threadfence();
        __syncthreads();
        if (threadIdx.x == 0) {
          asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(ready + band), "r"(1) : "memory");
        }
      }
    } else {
      if (threadIdx.x == 0) {
        unsigned r;
        for (;;) {
          asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(r) : "l"(ready + band) : "memory");
          if (r) break;
          __nanosleep(64);
        }
      }
      __syncthreads();
      float2 st[V];
#pragma unroll
      for (int j = 0; j < V; ++j) st[j] = __ldcg(fin + band * Wb + cw + j);
      for (int k0 = 0; k0 < kPer; k0 += kU) {
        P v[kU], g[kU];
#pragma unroll
        for (int u = 0; u < kU; ++u) {
          const int64_t r = slot + (int64_t)(k0 + u) * kSlots;
          if (r < rows) {
            uint4 x = load16<kLoadHint == 1 ? 2 : 0>(pin + r * N);
            memcpy(&v[u], &x, 16);
            if constexpr (kBackward) {
              uint4 y = load16<kLoadHint == 1 ? 2 : 0>(pgr + r * N);
              memcpy(&g[u], &y, 16);
            }
          }
        }
#pragma unroll
        for (int u = 0; u < kU; ++u) {
          const int64_t r = slot + (int64_t)(k0 + u) * kSlots;
          if (r < rows) {
            P o;
#pragma unroll
            for (int j = 0; j < V; ++j) {
              const float f = to_f(v[u].v[j]);
              float res;
              if constexpr (kBackward) {
                res = f * (to_f(g[u].v[j]) - st[j].x);
              } else {
                res = exp_ftz(f - st[j].x) * st[j].y;
              }
              o.v[j] = from_f<T>(res);
            }
            uint4 w;
            memcpy(&w, &o, 16);
            store16<kStoreHint>(pout + r * N, w);
          }
        }
      }
    }
  }
}

// Reference: one thread per column, three passes (float accumulation).
template <class T, bool kBackward>
__global__ void ref_softmax(const T* in, const T* grad, T* out, int64_t L, int64_t N) {
  const int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= N) return;
  if constexpr (kBackward) {
    float d = 0.f;
    for (int64_t l = 0; l < L; ++l) d += to_f(in[l * N + c]) * to_f(grad[l * N + c]);
    for (int64_t l = 0; l < L; ++l)
      out[l * N + c] = from_f<T>(to_f(in[l * N + c]) * (to_f(grad[l * N + c]) - d));
  } else {
    float m = -INFINITY;
    for (int64_t l = 0; l < L; ++l) m = fmaxf(m, to_f(in[l * N + c]));
    float s = 0.f;
    for (int64_t l = 0; l < L; ++l) s += expf(to_f(in[l * N + c]) - m);
    for (int64_t l = 0; l < L; ++l) out[l * N + c] = from_f<T>(expf(to_f(in[l * N + c]) - m) / s);
  }
}

template <class T>
__global__ void fill(T* p, int64_t n, uint32_t seed, float scale) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    uint32_t h = (uint32_t)i * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    p[i] = from_f<T>(((h & 0xffffff) / 16777216.0f - 0.5f) * scale);
  }
}

template <class F>
float time_ms(F f) {
  for (int i = 0; i < 3; ++i) f();
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  std::vector<float> v;
  for (int rep = 0; rep < 7; ++rep) {
    cudaEventRecord(a);
    for (int i = 0; i < 20; ++i) f();
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    v.push_back(ms / 20);
  }
  std::sort(v.begin(), v.end());
  return v[3];
}

double g_copy_tbps = 0;
int g_sms = 0;

template <class T>
float max_rel_diff(const T* a, const T* b, int64_t n) {
  std::vector<T> ha(n), hb(n);
  cudaMemcpy(ha.data(), a, n * sizeof(T), cudaMemcpyDeviceToHost);
  cudaMemcpy(hb.data(), b, n * sizeof(T), cudaMemcpyDeviceToHost);
  double worst = 0;
  for (int64_t i = 0; i < n; ++i) {
    float x, y;
    if constexpr (sizeof(T) == 4) {
      memcpy(&x, &ha[i], 4);
      memcpy(&y, &hb[i], 4);
    } else {
      uint16_t u, w;
      memcpy(&u, &ha[i], 2);
      memcpy(&w, &hb[i], 2);
      uint32_t uu = (uint32_t)u << 16, ww = (uint32_t)w << 16;
      memcpy(&x, &uu, 4);
      memcpy(&y, &ww, 4);
    }
    const double d = fabs((double)x - y) / (fabs((double)y) + 1e-6);
    if (!(d <= worst)) worst = d;
  }
  return (float)worst;
}

template <class T, int kBandBytes, int kRows, bool kBackward, int kLag, int kLoadHint, int kStoreHint>
void run(const char* name, int64_t L, int64_t N, T* in, T* grad, T* out, T* ref, void* ws, int want = 99) {
  auto k = band_softmax<T, kBandBytes, kRows, kBackward, kLag, kLoadHint, kStoreHint>;
  int per_sm = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k, kThreads, 0));
  per_sm = std::min(per_sm, want);
  const int64_t Wb = kBandBytes / sizeof(T);
  const int64_t B = N / Wb, C = (L + kRows - 1) / kRows;
  int* ticket = static_cast<int*>(ws);
  int* count = ticket + 32;
  int* ready = count + B;
  const size_t ctl = (32 + 2 * B) * sizeof(int);
  float2* partial = reinterpret_cast<float2*>(static_cast<char*>(ws) + ((ctl + 255) / 256) * 256);
  float2* fin = partial + B * C * Wb;
  auto call = [&] {
    cudaMemsetAsync(ws, 0, ctl);
    k<<<g_sms * per_sm, kThreads>>>(in, grad, out, L, N, ticket, count, ready, partial, fin);
  };
  call();
  CK(cudaDeviceSynchronize());
  const float diff = max_rel_diff(out, ref, L * N);
  const float ms = time_ms(call);
  CK(cudaGetLastError());
  const double bytes = (kBackward ? 3.0 : 2.0) * L * N * sizeof(T);
  printf("%-34s band %4d B rows %4d lag %d hint %d/%d, %d/SM: %.4f ms %5.1f%% of copy, max rel diff %.2e\n",
         name, kBandBytes, kRows, kLag, kLoadHint, kStoreHint, per_sm, ms,
         bytes / (ms * 1e-3) / (g_copy_tbps * 1e12) * 100, diff);
}

template <class T, bool kBackward>
void suite(const char* name, int64_t L, int64_t N) {
  T *in, *grad, *out, *ref;
  void* ws;
  CK(cudaMalloc(&in, L * N * sizeof(T)));
  CK(cudaMalloc(&grad, L * N * sizeof(T)));
  CK(cudaMalloc(&out, L * N * sizeof(T)));
  CK(cudaMalloc(&ref, L * N * sizeof(T)));
  CK(cudaMalloc(&ws, 64 << 20));
  fill<<<1024, 256>>>(in, L * N, 1, 8.f);
  fill<<<1024, 256>>>(grad, L * N, 2, 2.f);
  if (kBackward) {  // in = a softmax output: positive, columns sum to ~1
    ref_softmax<T, false><<<(N + 255) / 256, 256>>>(in, nullptr, out, L, N);
    CK(cudaMemcpy(in, out, L * N * sizeof(T), cudaMemcpyDeviceToDevice));
  }
  ref_softmax<T, kBackward><<<(N + 255) / 256, 256>>>(in, grad, ref, L, N);
  CK(cudaDeviceSynchronize());
  run<T, 512, 64, kBackward, 2, 0, 0>(name, L, N, in, grad, out, ref, ws);
  run<T, 512, 64, kBackward, 4, 0, 0>(name, L, N, in, grad, out, ref, ws);
  run<T, 512, 64, kBackward, 4, 0, 0>(name, L, N, in, grad, out, ref, ws, 2);
  run<T, 512, 64, kBackward, 4, 1, 0>(name, L, N, in, grad, out, ref, ws, 2);
  run<T, 512, 64, kBackward, 4, 1, 1>(name, L, N, in, grad, out, ref, ws, 2);
  run<T, 512, 64, kBackward, 8, 0, 0>(name, L, N, in, grad, out, ref, ws, 2);
  run<T, 512, 128, kBackward, 4, 0, 0>(name, L, N, in, grad, out, ref, ws, 2);
  run<T, 1024, 32, kBackward, 2, 0, 0>(name, L, N, in, grad, out, ref, ws);
  run<T, 1024, 32, kBackward, 2, 0, 0>(name, L, N, in, grad, out, ref, ws, 2);
  run<T, 1024, 32, kBackward, 4, 0, 0>(name, L, N, in, grad, out, ref, ws, 2);
  run<T, 1024, 64, kBackward, 2, 0, 0>(name, L, N, in, grad, out, ref, ws, 2);
  run<T, 256, 128, kBackward, 8, 0, 0>(name, L, N, in, grad, out, ref, ws, 2);
  run<T, 256, 128, kBackward, 16, 0, 0>(name, L, N, in, grad, out, ref, ws, 2);
  cudaFree(in);
  cudaFree(grad);
  cudaFree(out);
  cudaFree(ref);
  cudaFree(ws);
}

int main() {
  const int64_t n = int64_t{1} << 28;
  char *s, *d;
  CK(cudaMalloc(&s, n * 4));
  CK(cudaMalloc(&d, n * 4));
  const float ms = time_ms([&] { cudaMemcpyAsync(d, s, n * 4, cudaMemcpyDeviceToDevice); });
  g_copy_tbps = 2.0 * n * 4 / (ms * 1e-3) / 1e12;
  cudaFree(s);
  cudaFree(d);
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  g_sms = prop.multiProcessorCount;
  printf("%s: copy %.3f TB/s, %d SMs, L2 %d MB\n", prop.name, g_copy_tbps, g_sms,
         prop.l2CacheSize >> 20);
  suite<float, false>("f32 8192x8192 dim0 fwd", 8192, 8192);
  suite<__nv_bfloat16, false>("bf16 8192x8192 dim0 fwd", 8192, 8192);
  suite<float, true>("f32 8192x8192 dim0 bwd", 8192, 8192);
  suite<__nv_bfloat16, true>("bf16 8192x8192 dim0 bwd", 8192, 8192);
  return 0;
}
