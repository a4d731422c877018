// nvcc 13.0 (V13.0.88) miscompiles this: k<false> stores 0, not the sum of o[0..3] * 3.
// The loop after an `if constexpr (false)` whose unbraced statement is a loop holding a
// `#pragma unroll` is dropped with it. Braces around that loop, or a plain `if`, give the sum.
// tests/kernels/test_kernel_sources.py keeps the form out of the kernel library.
//   nvcc -arch=sm_90 -ptx -std=c++17 -o - nvcc-if-constexpr-loop.cu | grep -c fma   # 0, not 4
template <bool B>
__global__ void k(float* o, int n) {
  float s = 0;
  if constexpr (B) for (int i = 0; i < n; i += 4) {
#pragma unroll
    for (int u = 0; u < 4; ++u) s += o[i + u];
  }
#pragma unroll
  for (int j = 0; j < 4; ++j) s += o[j] * 3.0f;
  o[0] = s;
}
template __global__ void k<false>(float*, int);
