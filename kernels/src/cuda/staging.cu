#include "cuda/kit.cuh"
#include "cuda/staging.cuh"
#include "cuda/strided.cuh"

namespace opforge::cuda::kit {
namespace {

constexpr int kCopyThreads = 256;

size_t item_size(DType t) { return t == DType::kFloat32 ? 4 : 2; }

// dst[walk i] = src[walk i]; tensor 0 of `s` is dst.
template <class S, class D, class I, class O>
__global__ void __launch_bounds__(kCopyThreads)
    copy_kernel(Strided<2> s, D* __restrict__ dst, const S* __restrict__ src, I count) {
  const I step = static_cast<I>(gridDim.x) * kCopyThreads;
  for (I i = static_cast<I>(blockIdx.x) * kCopyThreads + threadIdx.x; i < count; i += step) {
    O off[2];
    offsets_of<2, I, O>(s, i, off);
    dst[off[0]] = from_f<D>(to_f(src[off[1]]));
  }
}

template <class S, class D>
void launch_copy(const Strided<2>& s, D* dst, const S* src, int64_t count, cudaStream_t stream) {
  const unsigned blocks = grid_for(count, kCopyThreads);
  if (fits_int32(s, count)) {
    copy_kernel<S, D, uint32_t, int32_t><<<blocks, kCopyThreads, 0, stream>>>(
        s, dst, src, static_cast<uint32_t>(count));
  } else {
    copy_kernel<S, D, uint64_t, int64_t><<<blocks, kCopyThreads, 0, stream>>>(
        s, dst, src, static_cast<uint64_t>(count));
  }
}

}  // namespace

opforge_status copy_strided(const char* op, const void* src, DType src_type,
                            const std::vector<int64_t>& src_strides, void* dst, DType dst_type,
                            const std::vector<int64_t>& dst_strides,
                            const std::vector<int64_t>& shape, cudaStream_t stream) {
  int64_t count = 1;
  for (const int64_t d : shape) count *= d;
  if (count == 0) return OPFORGE_OK;
  const Strided<2> s = coalesce<2>(shape, {&dst_strides, &src_strides});
  if (src_type != dst_type && dst_type != DType::kFloat32) {
    return fail(OPFORGE_ERROR_INTERNAL, std::string(op) + ": unexpected dtype conversion");
  }
  return by_dtype(src_type, [&](auto tag) {
    using S = decltype(tag);
    const S* from = static_cast<const S*>(src);
    if (src_type == dst_type) {
      launch_copy<S, S>(s, static_cast<S*>(dst), from, count, stream);
    } else {
      launch_copy<S, float>(s, static_cast<float*>(dst), from, count, stream);
    }
    return check_launch(op);
  });
}

Staging::~Staging() { release(); }

void* Staging::allocate(size_t bytes) {
  if (!ok()) return nullptr;
  void* p = nullptr;
  const cudaError_t err = cudaMallocAsync(&p, bytes == 0 ? 1 : bytes, stream_);
  if (err != cudaSuccess) {
    status_ = cuda_failure(op_, "cudaMallocAsync", err);
    return nullptr;
  }
  temporaries_.push_back(p);
  return p;
}

void* Staging::scratch(size_t bytes) { return allocate(bytes); }

const void* Staging::input(const Tensor* t, bool align16, DType as) {
  if (t == nullptr || !ok()) return nullptr;
  const DType type = as == DType::kOther ? t->dtype : as;
  if (t->contiguous() && type == t->dtype && (!align16 || aligned16(t->data))) return t->data;
  void* copy = allocate(static_cast<size_t>(t->numel()) * item_size(type));
  if (copy != nullptr) {
    const opforge_status s = copy_strided(op_, t->data, t->dtype, t->strides, copy, type,
                                          row_major(t->shape), t->shape, stream_);
    if (s != OPFORGE_OK) status_ = s;
  }
  return ok() ? copy : nullptr;
}

void* Staging::output(Tensor* t) {
  if (t == nullptr || !ok()) return nullptr;
  if (t->contiguous()) return t->data;
  void* temporary = allocate(static_cast<size_t>(t->numel()) * item_size(t->dtype));
  if (temporary != nullptr) pending_.emplace_back(t, temporary);
  return temporary;
}

opforge_status Staging::finish() {
  for (const auto& [t, temporary] : pending_) {
    if (!ok()) break;
    const opforge_status s = copy_strided(op_, temporary, t->dtype, row_major(t->shape), t->data,
                                          t->dtype, t->strides, t->shape, stream_);
    if (s != OPFORGE_OK) status_ = s;
  }
  pending_.clear();
  release();
  return status_;
}

void Staging::release() {
  for (void* p : temporaries_) {
    const cudaError_t err = cudaFreeAsync(p, stream_);
    if (err != cudaSuccess && ok()) status_ = cuda_failure(op_, "cudaFreeAsync", err);
  }
  temporaries_.clear();
}

}  // namespace opforge::cuda::kit
