// CUDA plumbing shared by the backend: checked calls as Status, device buffers freed by RAII, device presence.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <string>
#include <utility>

#include "base/status.h"

namespace ls::cuda {

// DeviceError carrying the call and CUDA's own words.
inline Status cuda_status(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return ok_status();
  return Status(error == cudaErrorMemoryAllocation ? ErrorCode::OutOfMemory : ErrorCode::DeviceError,
                std::string(what) + ": " + cudaGetErrorName(error) + " (" + cudaGetErrorString(error) + ")");
}

// Returns the failure of a CUDA runtime call as a Status.
#define LS_CUDA_TRY(call)                                               \
  do {                                                                  \
    cudaError_t ls_cuda_error_ = (call);                                \
    if (ls_cuda_error_ != cudaSuccess) return ::ls::cuda::cuda_status(ls_cuda_error_, #call); \
  } while (0)

// Returns the failure of the last kernel launch as a Status.
#define LS_CUDA_TRY_LAUNCH(what) LS_CUDA_TRY(cudaGetLastError())

// Number of usable CUDA devices (0 when the driver or device is missing; never an error).
inline int device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return count;
}

// DeviceUnavailable when no device is present.
inline Status require_device() {
  if (device_count() > 0) return ok_status();
  return Status(ErrorCode::DeviceUnavailable, "no CUDA device is visible (cudaGetDeviceCount found none)");
}

// `count` elements of T in device memory (cudaMalloc), freed on destruction; move-only.
template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(DeviceBuffer&& other) noexcept : data_(std::exchange(other.data_, nullptr)), count_(std::exchange(other.count_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      reset();
      data_ = std::exchange(other.data_, nullptr);
      count_ = std::exchange(other.count_, 0);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  // Replaces the buffer with `count` uninitialised elements.
  Status allocate(size_t count) {
    reset();
    if (count == 0) return ok_status();
    void* raw = nullptr;
    LS_CUDA_TRY(cudaMalloc(&raw, count * sizeof(T)));
    data_ = static_cast<T*>(raw);
    count_ = count;
    return ok_status();
  }
  void reset() {
    if (data_) cudaFree(data_);
    data_ = nullptr;
    count_ = 0;
  }
  T* data() const { return data_; }
  size_t size() const { return count_; }
  size_t bytes() const { return count_ * sizeof(T); }

 private:
  T* data_ = nullptr;
  size_t count_ = 0;
};

}  // namespace ls::cuda
