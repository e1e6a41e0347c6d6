// The CUDA drafter's device byte count, cuBLAS handle, stream and timer owners.
#include "draft/dspark/cuda/device_memory.h"

#include <algorithm>

namespace ls::dspark::cuda {
namespace {

std::atomic<int64_t> device_bytes{0};

}  // namespace

int64_t drafter_device_bytes() { return device_bytes.load(); }
void count_drafter_device_bytes(int64_t delta) { device_bytes += delta; }

Status cublas_status(cublasStatus_t status, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return ok_status();
  return Status(status == CUBLAS_STATUS_ALLOC_FAILED ? ErrorCode::OutOfMemory : ErrorCode::DeviceError,
                std::string(what) + ": cuBLAS status " + std::to_string(static_cast<int>(status)));
}

CublasHandle::~CublasHandle() {
  if (handle_) cublasDestroy(handle_);
}

Status CublasHandle::create(cudaStream_t stream) {
  LS_RETURN_IF_ERROR(cublas_status(cublasCreate(&handle_), "cublasCreate"));
  LS_RETURN_IF_ERROR(cublas_status(cublasSetStream(handle_, stream), "cublasSetStream"));
  return ok_status();
}

DeviceStream::~DeviceStream() {
  if (stream_) cudaStreamDestroy(stream_);
}

Status DeviceStream::create() {
  LS_CUDA_TRY(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  return ok_status();
}

PinnedBytes::~PinnedBytes() {
  if (data_) cudaFreeHost(data_);
}

Status PinnedBytes::reserve(size_t bytes) {
  if (bytes <= size_) return ok_status();
  if (data_) cudaFreeHost(data_);
  data_ = nullptr;
  size_ = 0;
  void* fresh = nullptr;
  LS_CUDA_TRY(cudaHostAlloc(&fresh, bytes, cudaHostAllocDefault));
  data_ = static_cast<uint8_t*>(fresh);
  size_ = bytes;
  return ok_status();
}

DeviceTimer::~DeviceTimer() {
  if (start_) cudaEventDestroy(start_);
  if (stop_) cudaEventDestroy(stop_);
}

Status DeviceTimer::create() {
  LS_CUDA_TRY(cudaEventCreate(&start_));
  LS_CUDA_TRY(cudaEventCreate(&stop_));
  return ok_status();
}

double DeviceTimer::elapsed_ms() const {
  float ms = 0;
  if (cudaEventElapsedTime(&ms, start_, stop_) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return ms;
}

SideBranch::~SideBranch() {
  if (fork_) cudaEventDestroy(fork_);
  if (join_) cudaEventDestroy(join_);
}

Status SideBranch::create() {
  LS_RETURN_IF_ERROR(side_.create());
  LS_CUDA_TRY(cudaEventCreateWithFlags(&fork_, cudaEventDisableTiming));
  LS_CUDA_TRY(cudaEventCreateWithFlags(&join_, cudaEventDisableTiming));
  return ok_status();
}

cudaStream_t SideBranch::fork(cudaStream_t main) {
  if (cudaEventRecord(fork_, main) != cudaSuccess || cudaStreamWaitEvent(side_.get(), fork_, 0) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return side_.get();
}

Status SideBranch::join(cudaStream_t main) {
  LS_CUDA_TRY(cudaEventRecord(join_, side_.get()));
  LS_CUDA_TRY(cudaStreamWaitEvent(main, join_, 0));
  return ok_status();
}

EventLog::~EventLog() {
  for (cudaEvent_t event : events_) cudaEventDestroy(event);
}

void EventLog::begin(cudaStream_t stream) {
  used_ = 0;
  labels_.clear();
  mark(nullptr, stream);
}

void EventLog::mark(const char* label, cudaStream_t stream) {
  if (!on_) return;
  if (used_ == events_.size()) {
    cudaEvent_t event = nullptr;
    if (cudaEventCreate(&event) != cudaSuccess) {
      cudaGetLastError();
      return;
    }
    events_.push_back(event);
  }
  cudaEventRecord(events_[used_++], stream);
  if (label) labels_.emplace_back(label);
}

std::vector<std::pair<std::string, double>> EventLog::totals() const {
  std::vector<std::pair<std::string, double>> out;
  if (used_ == 0) return out;
  cudaEventSynchronize(events_[used_ - 1]);
  for (size_t i = 0; i + 1 < used_ && i < labels_.size(); ++i) {
    float ms = 0;
    if (cudaEventElapsedTime(&ms, events_[i], events_[i + 1]) != cudaSuccess) cudaGetLastError();
    auto found = std::find_if(out.begin(), out.end(), [&](const auto& entry) { return entry.first == labels_[i]; });
    if (found == out.end()) out.emplace_back(labels_[i], ms);
    else found->second += ms;
  }
  return out;
}

}  // namespace ls::dspark::cuda
