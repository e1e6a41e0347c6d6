// Device memory of the CUDA drafter: counted buffers (so tests see every byte come back), cuBLAS and stream owners.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "compute/cuda/cuda_util.h"
#include "draft/dspark/init_steps.h"

namespace ls::dspark::cuda {

// Bytes the CUDA drafters of this process hold on the device right now (all their TrackedBuffers).
int64_t drafter_device_bytes();
void count_drafter_device_bytes(int64_t delta);

// A DeviceBuffer whose bytes are counted in drafter_device_bytes(); move-only, freed on destruction.
template <typename T>
class TrackedBuffer {
 public:
  TrackedBuffer() = default;
  ~TrackedBuffer() { reset(); }
  TrackedBuffer(TrackedBuffer&& other) noexcept = default;
  TrackedBuffer& operator=(TrackedBuffer&& other) noexcept {
    if (this != &other) {
      reset();
      buffer_ = std::move(other.buffer_);
    }
    return *this;
  }

  // Replaces the buffer with `count` uninitialised elements; OutOfMemory names `what` and the bytes.
  Status allocate(size_t count, std::string_view what) {
    reset();
    Status status = buffer_.allocate(count);
    if (!status.ok()) {
      return Status(status.code(), "drafter device buffer " + std::string(what) + " (" +
                                       std::to_string(count * sizeof(T)) + " bytes): " + status.message());
    }
    count_drafter_device_bytes(static_cast<int64_t>(buffer_.bytes()));
    return ok_status();
  }
  // The same as one counted init step (a planted failure at this step fails before allocating).
  Status allocate(size_t count, std::string_view what, InitSteps& steps) {
    LS_RETURN_IF_ERROR(steps.step(what));
    return allocate(count, what);
  }
  // Allocates and uploads `values`.
  Status upload(const std::vector<T>& values, std::string_view what, InitSteps& steps) {
    LS_RETURN_IF_ERROR(allocate(values.size(), what, steps));
    LS_CUDA_TRY(cudaMemcpy(data(), values.data(), values.size() * sizeof(T), cudaMemcpyHostToDevice));
    return ok_status();
  }
  void reset() {
    count_drafter_device_bytes(-static_cast<int64_t>(buffer_.bytes()));
    buffer_.reset();
  }
  T* data() const { return buffer_.data(); }
  size_t size() const { return buffer_.size(); }
  size_t bytes() const { return buffer_.bytes(); }

 private:
  ls::cuda::DeviceBuffer<T> buffer_;
};

// A typed view of part of a device allocation (the same data() as a TrackedBuffer's).
template <typename T>
struct DeviceSpan {
  T* pointer = nullptr;
  T* data() const { return pointer; }
};

// Page-locked host bytes (cudaHostAlloc): small uploads from them and copies back into them are plain DMA, no
// staging through the driver; grown on demand (contents dropped), freed with the owner.
class PinnedBytes {
 public:
  PinnedBytes() = default;
  ~PinnedBytes();
  PinnedBytes(const PinnedBytes&) = delete;
  PinnedBytes& operator=(const PinnedBytes&) = delete;
  Status reserve(size_t bytes);
  uint8_t* data() const { return data_; }

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// DeviceError naming the cuBLAS call and its status.
Status cublas_status(cublasStatus_t status, const char* what);

// A cuBLAS handle bound to one stream, destroyed with its owner.
class CublasHandle {
 public:
  CublasHandle() = default;
  ~CublasHandle();
  CublasHandle(const CublasHandle&) = delete;
  CublasHandle& operator=(const CublasHandle&) = delete;
  Status create(cudaStream_t stream);
  cublasHandle_t get() const { return handle_; }

 private:
  cublasHandle_t handle_ = nullptr;
};

// A non-blocking CUDA stream, destroyed with its owner.
class DeviceStream {
 public:
  DeviceStream() = default;
  ~DeviceStream();
  DeviceStream(const DeviceStream&) = delete;
  DeviceStream& operator=(const DeviceStream&) = delete;
  Status create();
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

// An instantiated CUDA graph (one captured launch sequence), destroyed with its owner; move-only.
class GraphExec {
 public:
  GraphExec() = default;
  ~GraphExec() { reset(); }
  GraphExec(GraphExec&& other) noexcept : exec_(other.exec_) { other.exec_ = nullptr; }
  GraphExec& operator=(GraphExec&& other) noexcept {
    if (this != &other) {
      reset();
      exec_ = other.exec_;
      other.exec_ = nullptr;
    }
    return *this;
  }
  // Captures what `enqueue` puts on `stream` (nothing runs) and instantiates it; on failure holds nothing.
  template <typename Enqueue>
  Status capture(cudaStream_t stream, Enqueue&& enqueue) {
    reset();
    LS_CUDA_TRY(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    Status status = enqueue();
    cudaGraph_t graph = nullptr;
    const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
    if (status.ok() && ended != cudaSuccess) status = ls::cuda::cuda_status(ended, "draft graph capture");
    if (status.ok()) {
      const cudaError_t made = cudaGraphInstantiate(&exec_, graph, 0);
      if (made != cudaSuccess) {
        exec_ = nullptr;
        status = ls::cuda::cuda_status(made, "draft graph instantiate");
      }
    }
    if (graph) cudaGraphDestroy(graph);
    if (!status.ok()) cudaGetLastError();  // a failed capture must not poison the next call's error check
    return status;
  }
  Status launch(cudaStream_t stream) const {
    LS_CUDA_TRY(cudaGraphLaunch(exec_, stream));
    return ok_status();
  }
  bool ready() const { return exec_ != nullptr; }
  void reset() {
    if (exec_) cudaGraphExecDestroy(exec_);
    exec_ = nullptr;
  }

 private:
  cudaGraphExec_t exec_ = nullptr;
};

// A pair of events timing a span of work on a stream.
class DeviceTimer {
 public:
  DeviceTimer() = default;
  ~DeviceTimer();
  DeviceTimer(const DeviceTimer&) = delete;
  DeviceTimer& operator=(const DeviceTimer&) = delete;
  Status create();
  void start(cudaStream_t stream) { cudaEventRecord(start_, stream); }
  void stop(cudaStream_t stream) { cudaEventRecord(stop_, stream); }
  // Milliseconds between start and stop (both must have completed).
  double elapsed_ms() const;

 private:
  cudaEvent_t start_ = nullptr;
  cudaEvent_t stop_ = nullptr;
};

// A side stream that work forks onto from a main stream and joins back from (graph capture follows the fork into
// the side stream; the join must come before the capture ends).
class SideBranch {
 public:
  SideBranch() = default;
  ~SideBranch();
  SideBranch(const SideBranch&) = delete;
  SideBranch& operator=(const SideBranch&) = delete;
  Status create();
  bool ready() const { return fork_ != nullptr; }
  // The side stream itself (to bind a cuBLAS handle to it).
  cudaStream_t side() const { return side_.get(); }
  // The side stream, after the work enqueued on `main` so far (null when the fork failed).
  cudaStream_t fork(cudaStream_t main);
  // `main` waits for everything enqueued on the side stream so far.
  Status join(cudaStream_t main);

 private:
  DeviceStream side_;
  cudaEvent_t fork_ = nullptr;
  cudaEvent_t join_ = nullptr;
};

// Profiling of an eager pass: an event recorded after each launch, device time per label (bench only).
class EventLog {
 public:
  EventLog() = default;
  ~EventLog();
  EventLog(const EventLog&) = delete;
  EventLog& operator=(const EventLog&) = delete;
  bool on() const { return on_; }
  void set_on(bool on) { on_ = on; }
  // Forgets the marks and records the start on `stream` (nothing while off).
  void begin(cudaStream_t stream);
  // Records the end of the work labelled `label` (enqueued since the previous mark) on `stream`.
  void mark(const char* label, cudaStream_t stream);
  // Per label in first-seen order: total ms over the marks since begin(); waits for the last event.
  std::vector<std::pair<std::string, double>> totals() const;

 private:
  bool on_ = false;
  std::vector<cudaEvent_t> events_;
  std::vector<std::string> labels_;  // labels_[i] ends at events_[i + 1]
  size_t used_ = 0;
};

}  // namespace ls::dspark::cuda
