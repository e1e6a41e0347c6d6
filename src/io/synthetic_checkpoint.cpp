// Synthetic checkpoints: counter-based random weights per tensor, packed into <= max_shard_bytes shards, streamed.
#include "io/synthetic_checkpoint.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "base/bf16.h"
#include "base/hash.h"
#include "io/model_config.h"

namespace ls::io {

namespace {

constexpr size_t kChunkElements = size_t{1} << 20;

uint64_t name_key(uint64_t seed, const std::string& name) {
  uint64_t hash = 0xcbf29ce484222325ull;  // FNV-1a over the name, then mixed with the seed
  for (unsigned char c : name) hash = (hash ^ c) * 0x100000001b3ull;
  return splitmix64(splitmix64(seed) ^ hash);
}

// A uniform value in [-1, 1) for element `index` of the tensor keyed `key`.
float symmetric_uniform(uint64_t key, uint64_t index) {
  const uint64_t bits = splitmix64(key + index * 0x9e3779b97f4a7c15ull);
  return static_cast<float>(static_cast<double>(bits >> 40) * (1.0 / 8388608.0) - 1.0);
}

// Scale and centre per role: std 0.02 for matrices (uniform half-width 0.02 * sqrt 3), norms around 1.
void role_distribution(TensorRole role, float& centre, float& half_width) {
  centre = 0.0f;
  switch (role) {
    case TensorRole::Embedding:
    case TensorRole::Matrix:
    case TensorRole::Router: half_width = 0.02f * std::sqrt(3.0f); break;
    case TensorRole::Norm: centre = 1.0f; half_width = 0.1f; break;
    case TensorRole::ConvKernel: half_width = 0.5f; break;
    case TensorRole::Bias: half_width = 0.01f; break;
    case TensorRole::ExpertBias: half_width = 0.02f; break;
  }
}

struct PlannedTensor {
  ExpectedTensor tensor;
  DType dtype;
  size_t bytes;
};

Status write_tensor_data(SafetensorsWriter& writer, const PlannedTensor& planned, uint64_t seed) {
  float centre = 0, half_width = 0;
  role_distribution(planned.tensor.role, centre, half_width);
  const uint64_t key = name_key(seed, planned.tensor.name);
  const size_t element_bytes = dtype_bytes(planned.dtype);
  const size_t elements = planned.bytes / element_bytes;
  std::vector<std::byte> chunk(std::min(elements, kChunkElements) * element_bytes);
  for (size_t begin = 0; begin < elements; begin += kChunkElements) {
    const size_t count = std::min(kChunkElements, elements - begin);
    for (size_t offset = 0; offset < count; ++offset) {
      const float value = centre + half_width * symmetric_uniform(key, begin + offset);
      if (planned.dtype == DType::F32) {
        std::memcpy(chunk.data() + offset * 4, &value, 4);
      } else {
        const bf16 rounded = float_to_bf16(value);
        std::memcpy(chunk.data() + offset * 2, &rounded.bits, 2);
      }
    }
    LS_RETURN_IF_ERROR(writer.append(std::span<const std::byte>(chunk.data(), count * element_bytes)));
  }
  return ok_status();
}

PlannedTensor plan_tensor(ExpectedTensor tensor, DType dtype_for_others) {
  const DType dtype = tensor.role == TensorRole::ExpertBias ? DType::F32 : dtype_for_others;
  size_t elements = 1;
  for (int64_t dim : tensor.shape) elements *= static_cast<size_t>(dim);
  return PlannedTensor{std::move(tensor), dtype, elements * dtype_bytes(dtype)};
}

Status write_text(const std::string& path, const std::string& text) {
  std::ofstream stream(path, std::ios::binary | std::ios::trunc);
  stream << text;
  stream.close();
  if (!stream) return Status(ErrorCode::IoError, path + ": write failed");
  return ok_status();
}

}  // namespace

Result<SyntheticSummary> write_synthetic_checkpoint(const std::string& directory, const std::string& config_json,
                                                    const SyntheticOptions& options) {
  if (options.dtype == DType::F16)
    return Status(ErrorCode::InvalidArgument, "synthetic checkpoints are bf16 or f32, not f16");
  LS_ASSIGN_OR_RETURN(ModelConfig config, parse_model_config(config_json));
  std::error_code error;
  std::filesystem::create_directories(directory, error);
  if (error) return Status(ErrorCode::IoError, directory + ": cannot create (" + error.message() + ")");
  LS_RETURN_IF_ERROR(write_text(directory + "/config.json", config_json));

  // Plan the shards: tensors in HF order, a new shard whenever the next tensor would pass the limit.
  std::vector<std::vector<PlannedTensor>> shards(1);
  size_t shard_bytes = 0, total_bytes = 0, tensor_count = 0;
  for (ExpectedTensor& tensor : expected_target_tensors(config)) {
    PlannedTensor planned = plan_tensor(std::move(tensor), options.dtype);
    const size_t bytes = planned.bytes;
    if (!shards.back().empty() && shard_bytes + bytes > options.max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(std::move(planned));
    shard_bytes += bytes;
    total_bytes += bytes;
    ++tensor_count;
  }

  std::vector<std::pair<std::string, std::string>> weight_map;
  for (size_t shard = 0; shard < shards.size(); ++shard) {
    char file_name[64];
    std::snprintf(file_name, sizeof file_name, "model-%05zu-of-%05zu.safetensors", shard + 1, shards.size());
    std::vector<TensorHeader> headers;
    for (const PlannedTensor& planned : shards[shard]) {
      headers.push_back({planned.tensor.name, planned.dtype, planned.tensor.shape});
      weight_map.emplace_back(planned.tensor.name, file_name);
    }
    LS_ASSIGN_OR_RETURN(auto writer, SafetensorsWriter::open(directory + "/" + file_name, headers));
    for (const PlannedTensor& planned : shards[shard]) LS_RETURN_IF_ERROR(write_tensor_data(*writer, planned, options.seed));
    LS_RETURN_IF_ERROR(writer->finish());
  }
  LS_RETURN_IF_ERROR(write_safetensors_index(directory, weight_map, total_bytes));
  return SyntheticSummary{tensor_count, total_bytes, static_cast<int>(shards.size())};
}

Result<SyntheticSummary> write_synthetic_safetensors(const std::string& path, std::span<const ExpectedTensor> tensors,
                                                     const SyntheticOptions& options) {
  if (options.dtype == DType::F16)
    return Status(ErrorCode::InvalidArgument, "synthetic checkpoints are bf16 or f32, not f16");
  std::vector<PlannedTensor> planned;
  std::vector<TensorHeader> headers;
  size_t total_bytes = 0;
  for (const ExpectedTensor& tensor : tensors) {
    planned.push_back(plan_tensor(tensor, options.dtype));
    headers.push_back({tensor.name, planned.back().dtype, tensor.shape});
    total_bytes += planned.back().bytes;
  }
  LS_ASSIGN_OR_RETURN(auto writer, SafetensorsWriter::open(path, headers));
  for (const PlannedTensor& tensor : planned) LS_RETURN_IF_ERROR(write_tensor_data(*writer, tensor, options.seed));
  LS_RETURN_IF_ERROR(writer->finish());
  return SyntheticSummary{planned.size(), total_bytes, 1};
}

}  // namespace ls::io
