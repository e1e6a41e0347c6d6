// Safetensors checkpoints: mmap'd files with validated headers, single-file or sharded (model.safetensors.index.json).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/bf16.h"
#include "base/status.h"

namespace ls::io {

enum class DType { BF16, F16, F32 };

std::string_view dtype_name(DType dtype);
size_t dtype_bytes(DType dtype);

// One tensor inside a mapped file. `data` points into the mapping and lives as long as the Checkpoint.
struct TensorInfo {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  const std::byte* data = nullptr;
  size_t bytes = 0;

  int64_t elements() const;
};

class MappedFile;

// A directory's weights: `model.safetensors`, or the shards listed by `model.safetensors.index.json`.
// Every header is validated at open (dtype, shape x dtype = byte size, offsets inside the file, no overlaps);
// no tensor data is read until a caller asks.
class Checkpoint {
 public:
  static Result<std::unique_ptr<Checkpoint>> open(const std::string& directory);
  // Opens one .safetensors file.
  static Result<std::unique_ptr<Checkpoint>> open_file(const std::string& path);
  ~Checkpoint();

  const TensorInfo* find(std::string_view name) const;
  std::span<const TensorInfo> tensors() const { return tensors_; }
  const std::string& directory() const { return directory_; }

  // Converts a tensor to fp32 / bf16 into `out`, checking that its shape is `shape` (BadSafetensors otherwise).
  Status read_f32(std::string_view name, std::span<const int64_t> shape, std::span<float> out) const;
  Status read_bf16(std::string_view name, std::span<const int64_t> shape, std::span<bf16> out) const;

 private:
  Checkpoint() = default;
  std::string directory_;
  std::vector<std::unique_ptr<MappedFile>> files_;
  std::vector<TensorInfo> tensors_;  // sorted by name
};

// A tensor to write: name, dtype, shape and its raw little-endian bytes.
struct TensorToWrite {
  std::string name;
  DType dtype = DType::BF16;
  std::vector<int64_t> shape;
  std::span<const std::byte> bytes;
};

// Writes one .safetensors file (tensors in the given order, 8-byte aligned header, optional __metadata__).
Status write_safetensors(const std::string& path, std::span<const TensorToWrite> tensors);

// The header entry of a tensor that a SafetensorsWriter will stream.
struct TensorHeader {
  std::string name;
  DType dtype = DType::BF16;
  std::vector<int64_t> shape;

  size_t bytes() const;  // prod(shape) * dtype_bytes
};

// Streams one .safetensors file: the header is written at open, then each tensor's bytes in header order, in as
// many append() calls as the caller likes (so a multi-GiB shard never sits in memory). finish() checks that every
// declared byte arrived and closes the file.
class SafetensorsWriter {
 public:
  static Result<std::unique_ptr<SafetensorsWriter>> open(const std::string& path, std::span<const TensorHeader> tensors);
  ~SafetensorsWriter();

  Status append(std::span<const std::byte> bytes);
  Status finish();

 private:
  SafetensorsWriter() = default;
  std::string path_;
  std::FILE* file_ = nullptr;
  size_t data_bytes_expected_ = 0;
  size_t data_bytes_written_ = 0;
};

// Writes `model.safetensors.index.json` into `directory`: {"metadata": {"total_size": N}, "weight_map": name -> file}.
Status write_safetensors_index(const std::string& directory, std::span<const std::pair<std::string, std::string>> weight_map,
                               size_t total_size);

}  // namespace ls::io
