// Safetensors writing: a streaming writer (header first, then tensor bytes in order) and the sharded index.
#include <cerrno>
#include <cstring>

#include <nlohmann/json.hpp>

#include "io/safetensors.h"

namespace ls::io {

namespace {

using ordered_json = nlohmann::ordered_json;

Status io_error(const std::string& path, const std::string& what) {
  return Status(ErrorCode::IoError, path + ": " + what + " (" + std::strerror(errno) + ")");
}

}  // namespace

size_t TensorHeader::bytes() const {
  size_t count = 1;
  for (int64_t dim : shape) count *= static_cast<size_t>(dim);
  return count * dtype_bytes(dtype);
}

Result<std::unique_ptr<SafetensorsWriter>> SafetensorsWriter::open(const std::string& path,
                                                                   std::span<const TensorHeader> tensors) {
  ordered_json header = ordered_json::object();
  header["__metadata__"] = {{"format", "pt"}};
  size_t offset = 0;
  for (const TensorHeader& tensor : tensors) {
    for (int64_t dim : tensor.shape)
      if (dim < 0) return Status(ErrorCode::InvalidArgument, path + ": tensor " + tensor.name + " has a negative dimension");
    if (header.contains(tensor.name))
      return Status(ErrorCode::InvalidArgument, path + ": tensor " + tensor.name + " is written twice");
    const size_t bytes = tensor.bytes();
    header[tensor.name] = {{"dtype", std::string(dtype_name(tensor.dtype))},
                           {"shape", tensor.shape},
                           {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  // Pad with spaces so the data section starts 8-byte aligned (8 + header length is a multiple of 8).
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t header_bytes = text.size();

  auto writer = std::unique_ptr<SafetensorsWriter>(new SafetensorsWriter());
  writer->path_ = path;
  writer->data_bytes_expected_ = offset;
  writer->file_ = std::fopen(path.c_str(), "wb");
  if (!writer->file_) return io_error(path, "cannot create");
  if (std::fwrite(&header_bytes, 8, 1, writer->file_) != 1 ||
      std::fwrite(text.data(), 1, text.size(), writer->file_) != text.size())
    return io_error(path, "header write failed");
  return writer;
}

SafetensorsWriter::~SafetensorsWriter() {
  if (file_) std::fclose(file_);
}

Status SafetensorsWriter::append(std::span<const std::byte> bytes) {
  if (!file_) return Status(ErrorCode::Internal, path_ + ": append after finish");
  if (data_bytes_written_ + bytes.size() > data_bytes_expected_)
    return Status(ErrorCode::InvalidArgument, path_ + ": " + std::to_string(data_bytes_written_ + bytes.size()) +
                                                  " data bytes appended, the header declares " +
                                                  std::to_string(data_bytes_expected_));
  if (!bytes.empty() && std::fwrite(bytes.data(), 1, bytes.size(), file_) != bytes.size())
    return io_error(path_, "data write failed");
  data_bytes_written_ += bytes.size();
  return ok_status();
}

Status SafetensorsWriter::finish() {
  if (!file_) return Status(ErrorCode::Internal, path_ + ": finish called twice");
  std::FILE* file = file_;
  file_ = nullptr;
  if (data_bytes_written_ != data_bytes_expected_) {
    std::fclose(file);
    return Status(ErrorCode::InvalidArgument, path_ + ": " + std::to_string(data_bytes_written_) +
                                                  " data bytes written, the header declares " +
                                                  std::to_string(data_bytes_expected_));
  }
  if (std::fclose(file) != 0) return io_error(path_, "close failed");
  return ok_status();
}

Status write_safetensors(const std::string& path, std::span<const TensorToWrite> tensors) {
  std::vector<TensorHeader> headers;
  headers.reserve(tensors.size());
  for (const TensorToWrite& tensor : tensors) {
    TensorHeader header{tensor.name, tensor.dtype, tensor.shape};
    if (header.bytes() != tensor.bytes.size())
      return Status(ErrorCode::InvalidArgument, path + ": tensor " + tensor.name + " has " +
                                                    std::to_string(tensor.bytes.size()) + " bytes, its shape needs " +
                                                    std::to_string(header.bytes()));
    headers.push_back(std::move(header));
  }
  LS_ASSIGN_OR_RETURN(auto writer, SafetensorsWriter::open(path, headers));
  for (const TensorToWrite& tensor : tensors) LS_RETURN_IF_ERROR(writer->append(tensor.bytes));
  return writer->finish();
}

Status write_safetensors_index(const std::string& directory, std::span<const std::pair<std::string, std::string>> weight_map,
                               size_t total_size) {
  ordered_json index = ordered_json::object();
  index["metadata"] = {{"total_size", total_size}};
  ordered_json map = ordered_json::object();
  for (const auto& [name, file] : weight_map) map[name] = file;
  index["weight_map"] = std::move(map);
  const std::string path = directory + "/model.safetensors.index.json";
  std::FILE* file = std::fopen(path.c_str(), "wb");
  if (!file) return io_error(path, "cannot create");
  const std::string text = index.dump(2) + "\n";
  const bool written = std::fwrite(text.data(), 1, text.size(), file) == text.size();
  if (std::fclose(file) != 0 || !written) return io_error(path, "write failed");
  return ok_status();
}

}  // namespace ls::io
