// batch_norm on CUDA through cuDNN.
//
// cuDNN's batch norm takes 4-D NCHW tensors only, and rejects 2-D input: N×C is viewed as
// N×C×1×1 (normalised per activation, as PyTorch does) and N×C×L as N×C×L×1 (spatial).
#include "backends.hpp"
#include "cuda/common.cuh"

#ifdef OPFORGE_HAVE_CUDNN
#include <cudnn.h>

#include <climits>
#include <map>
#include <vector>
#endif

namespace opforge::cuda {

#ifndef OPFORGE_HAVE_CUDNN

namespace {
opforge_status no_cudnn(const char* op) {
  return fail(OPFORGE_ERROR_UNSUPPORTED,
              std::string(op) + ": this library was built without cuDNN (OPFORGE_WITH_CUDNN=OFF)");
}
}  // namespace

opforge_status batch_norm_forward_training(const BatchNorm&, void*) {
  return no_cudnn("opforge_batch_norm_forward_training");
}
opforge_status batch_norm_forward_inference(const BatchNorm&, void*) {
  return no_cudnn("opforge_batch_norm_forward_inference");
}
opforge_status batch_norm_backward(const BatchNorm&, void*) {
  return no_cudnn("opforge_batch_norm_backward");
}

#else

namespace {

__global__ void fill(float* p, float value, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) p[i] = value;
}

// Failure of a cuDNN or CUDA call, recorded with the op's name; OPFORGE_OK otherwise.
class Checker {
 public:
  explicit Checker(const char* op) : op_(op) {}
  bool ok() const { return status_ == OPFORGE_OK; }
  opforge_status status() const { return status_; }

  bool operator()(cudnnStatus_t s, const char* what) {
    if (ok() && s != CUDNN_STATUS_SUCCESS) {
      status_ = fail(OPFORGE_ERROR_CUDA,
                     std::string(op_) + ": " + what + ": " + cudnnGetErrorString(s));
    }
    return ok();
  }

  bool operator()(cudaError_t e, const char* what) {
    if (ok() && e != cudaSuccess) status_ = cuda_failure(op_, what, e);
    return ok();
  }

  void invalid(const std::string& message) {
    if (ok()) status_ = fail(OPFORGE_ERROR_INVALID_ARGUMENT, std::string(op_) + ": " + message);
  }

 private:
  const char* op_;
  opforge_status status_ = OPFORGE_OK;
};

// One cuDNN handle per device and thread: creating one costs far more than a call.
cudnnStatus_t handle_for(int device, cudnnHandle_t* out) {
  thread_local std::map<int, cudnnHandle_t> handles;
  auto it = handles.find(device);
  if (it != handles.end()) {
    *out = it->second;
    return CUDNN_STATUS_SUCCESS;
  }
  const cudnnStatus_t s = cudnnCreate(out);
  if (s == CUDNN_STATUS_SUCCESS) handles[device] = *out;
  return s;
}

cudnnDataType_t cudnn_type(DType d) {
  switch (d) {
    case DType::kFloat16: return CUDNN_DATA_HALF;
    case DType::kBFloat16: return CUDNN_DATA_BFLOAT16;
    default: return CUDNN_DATA_FLOAT;
  }
}

// Descriptors and scratch of one call; released on every path out.
class Call {
 public:
  Call(const char* op, const BatchNorm& bn, void* stream)
      : check(op), bn_(bn), stream_(static_cast<cudaStream_t>(stream)), guard_(bn.x->device.device_id) {
    check(guard_.status(), "cudaSetDevice");
    if (!check.ok() || bn.x->numel() == 0) return;  // an empty batch needs no cuDNN call
    for (int64_t d : bn.x->shape) {
      if (d > INT_MAX) {
        check.invalid("a dimension of x exceeds cuDNN's limit of 2^31-1");
        return;
      }
    }
    if (bn.eps < CUDNN_BN_MIN_EPSILON) {
      check.invalid("eps " + std::to_string(bn.eps) + " is below cuDNN's minimum " +
                    std::to_string(CUDNN_BN_MIN_EPSILON));
      return;
    }
    // Per-activation for N×C×1×1 (as PyTorch): measured on an H100 it is 2.4x faster than
    // spatial mode, NHWC or spatial-persistent for 4096×16384 (bench/results, issue note).
    mode = bn.x->ndim() == 2 ? CUDNN_BATCHNORM_PER_ACTIVATION : CUDNN_BATCHNORM_SPATIAL;
    const int n = static_cast<int>(bn.n), c = static_cast<int>(bn.c);
    const int h = bn.x->ndim() > 2 ? static_cast<int>(bn.x->shape[2]) : 1;
    const int w = bn.x->ndim() > 3 ? static_cast<int>(bn.x->shape[3]) : 1;
    if (check(handle_for(bn.x->device.device_id, &handle), "cudnnCreate") &&
        check(cudnnSetStream(handle, stream_), "cudnnSetStream") &&
        check(cudnnCreateTensorDescriptor(&data), "cudnnCreateTensorDescriptor") &&
        check(cudnnCreateTensorDescriptor(&params), "cudnnCreateTensorDescriptor") &&
        check(cudnnSetTensor4dDescriptor(data, CUDNN_TENSOR_NCHW, cudnn_type(bn.x->dtype), n, c, h, w),
              "cudnnSetTensor4dDescriptor")) {
      check(cudnnDeriveBNTensorDescriptor(params, data, mode), "cudnnDeriveBNTensorDescriptor");
    }
  }

  ~Call() {
    if (data) cudnnDestroyTensorDescriptor(data);
    if (params) cudnnDestroyTensorDescriptor(params);
    for (float* p : scratch_) cudaFreeAsync(p, stream_);
  }

  // `t`'s float32 data, or a stream-ordered scratch vector of C values `fill_value`.
  float* vector_or(const Tensor* t, float fill_value) {
    if (t != nullptr) return t->ptr<float>();
    float* p = nullptr;
    if (!check(cudaMallocAsync(reinterpret_cast<void**>(&p), bn_.c * sizeof(float), stream_),
               "cudaMallocAsync")) {
      return nullptr;
    }
    scratch_.push_back(p);
    fill<<<static_cast<unsigned>((bn_.c + 255) / 256), 256, 0, stream_>>>(p, fill_value, bn_.c);
    check(cudaGetLastError(), "fill");
    return p;
  }

  void zero(const Tensor* t) {
    if (t != nullptr) check(cudaMemsetAsync(t->data, 0, bn_.c * sizeof(float), stream_), "cudaMemsetAsync");
  }

  Checker check;
  cudnnHandle_t handle = nullptr;
  cudnnTensorDescriptor_t data = nullptr, params = nullptr;
  cudnnBatchNormMode_t mode = CUDNN_BATCHNORM_SPATIAL;

 private:
  const BatchNorm& bn_;
  cudaStream_t stream_;
  DeviceGuard guard_;
  std::vector<float*> scratch_;
};

constexpr float kOne = 1.0f, kZero = 0.0f;

}  // namespace

opforge_status batch_norm_forward_training(const BatchNorm& bn, void* stream) {
  Call call("opforge_batch_norm_forward_training", bn, stream);
  if (!call.check.ok()) return call.check.status();
  if (bn.x->numel() == 0) {
    // Empty batch: zero saved statistics, running statistics untouched (as PyTorch).
    call.zero(bn.save_mean);
    call.zero(bn.save_invstd);
    return call.check.status();
  }
  float* weight = call.vector_or(bn.weight, 1.0f);
  float* bias = call.vector_or(bn.bias, 0.0f);
  if (!call.check.ok()) return call.check.status();
  call.check(cudnnBatchNormalizationForwardTraining(
                 call.handle, call.mode, &kOne, &kZero, call.data, bn.x->data, call.data,
                 bn.out->data, call.params, weight, bias, bn.momentum,
                 bn.running_mean ? bn.running_mean->data : nullptr,
                 bn.running_var ? bn.running_var->data : nullptr, bn.eps,
                 bn.save_mean ? bn.save_mean->data : nullptr,
                 bn.save_invstd ? bn.save_invstd->data : nullptr),
             "cudnnBatchNormalizationForwardTraining");
  return call.check.status();
}

opforge_status batch_norm_forward_inference(const BatchNorm& bn, void* stream) {
  Call call("opforge_batch_norm_forward_inference", bn, stream);
  if (!call.check.ok() || bn.x->numel() == 0) return call.check.status();
  float* weight = call.vector_or(bn.weight, 1.0f);
  float* bias = call.vector_or(bn.bias, 0.0f);
  if (!call.check.ok()) return call.check.status();
  call.check(cudnnBatchNormalizationForwardInference(
                 call.handle, call.mode, &kOne, &kZero, call.data, bn.x->data, call.data,
                 bn.out->data, call.params, weight, bias, bn.running_mean->data,
                 bn.running_var->data, bn.eps),
             "cudnnBatchNormalizationForwardInference");
  return call.check.status();
}

opforge_status batch_norm_backward(const BatchNorm& bn, void* stream) {
  Call call("opforge_batch_norm_backward", bn, stream);
  if (!call.check.ok()) return call.check.status();
  if (bn.x->numel() == 0) {
    call.zero(bn.dweight);
    call.zero(bn.dbias);
    return call.check.status();
  }
  float* weight = call.vector_or(bn.weight, 1.0f);
  float* dweight = call.vector_or(bn.dweight, 0.0f);
  float* dbias = call.vector_or(bn.dbias, 0.0f);
  if (!call.check.ok()) return call.check.status();
  call.check(cudnnBatchNormalizationBackward(
                 call.handle, call.mode, &kOne, &kZero, &kOne, &kZero, call.data, bn.x->data,
                 call.data, bn.dy->data, call.data, bn.out->data, call.params, weight, dweight,
                 dbias, bn.eps, bn.save_mean->data, bn.save_invstd->data),
             "cudnnBatchNormalizationBackward");
  return call.check.status();
}

#endif  // OPFORGE_HAVE_CUDNN

}  // namespace opforge::cuda
