// Safetensors checkpoints: mmap'd files with validated headers, single-file or sharded (model.safetensors.index.json).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
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

}  // namespace ls::io
