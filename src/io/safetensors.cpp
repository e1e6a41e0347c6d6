// Safetensors reading: mmap each file read-only, validate its header strictly, merge shards, convert on read.
#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <unordered_map>

#include <nlohmann/json.hpp>

namespace ls::io {

namespace {

using json = nlohmann::json;

// HF's safetensors refuses headers above 100 MB; so do we.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
// No real tensor dimension comes near this; it keeps prod(shape) * 4 far from overflowing.
constexpr int64_t kMaxDim = int64_t{1} << 40;

Status bad(const std::string& file, const std::string& message) {
  return Status(ErrorCode::BadSafetensors, file + ": " + message);
}

std::string shape_text(std::span<const int64_t> shape) {
  std::string text = "[";
  for (size_t index = 0; index < shape.size(); ++index) text += (index ? ", " : "") + std::to_string(shape[index]);
  return text + "]";
}

Result<DType> parse_dtype(std::string_view name) {
  if (name == "BF16") return DType::BF16;
  if (name == "F16") return DType::F16;
  if (name == "F32") return DType::F32;
  return Status(ErrorCode::BadSafetensors, "");
}

// A non-negative JSON integer below `limit`, else nullopt.
std::optional<int64_t> json_count(const json& value, int64_t limit) {
  if (value.is_number_unsigned()) {
    const uint64_t number = value.get<uint64_t>();
    if (number > static_cast<uint64_t>(limit)) return std::nullopt;
    return static_cast<int64_t>(number);
  }
  if (value.is_number_integer()) {
    const int64_t number = value.get<int64_t>();
    if (number < 0 || number > limit) return std::nullopt;
    return number;
  }
  return std::nullopt;
}

}  // namespace

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::BF16: return "BF16";
    case DType::F16: return "F16";
    case DType::F32: return "F32";
  }
  return "?";
}

size_t dtype_bytes(DType dtype) { return dtype == DType::F32 ? 4 : 2; }

int64_t TensorInfo::elements() const {
  int64_t count = 1;
  for (int64_t dim : shape) count *= dim;
  return count;
}

// A read-only private mapping of a whole file; unmapped on destruction.
class MappedFile {
 public:
  static Result<std::unique_ptr<MappedFile>> open(const std::string& path) {
    const int descriptor = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (descriptor < 0)
      return Status(errno == ENOENT ? ErrorCode::NotFound : ErrorCode::IoError,
                    path + ": cannot open (" + std::strerror(errno) + ")");
    struct stat info {};
    if (::fstat(descriptor, &info) != 0) {
      const int error = errno;
      ::close(descriptor);
      return Status(ErrorCode::IoError, path + ": cannot stat (" + std::strerror(error) + ")");
    }
    auto file = std::unique_ptr<MappedFile>(new MappedFile());
    file->path_ = path;
    file->size_ = static_cast<size_t>(info.st_size);
    if (file->size_ > 0) {
      void* address = ::mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE, descriptor, 0);
      if (address == MAP_FAILED) {
        const int error = errno;
        ::close(descriptor);
        return Status(ErrorCode::IoError, path + ": mmap of " + std::to_string(file->size_) + " bytes failed (" +
                                              std::strerror(error) + ")");
      }
      file->data_ = static_cast<const std::byte*>(address);
    }
    ::close(descriptor);
    return file;
  }
  ~MappedFile() {
    if (data_) ::munmap(const_cast<std::byte*>(data_), size_);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::string& path() const { return path_; }
  const std::byte* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  MappedFile() = default;
  std::string path_;
  const std::byte* data_ = nullptr;
  size_t size_ = 0;
};

namespace {

// Validates one mapped file's header and appends its tensors (data pointers into the mapping) to `out`.
Status parse_header(const MappedFile& file, std::vector<TensorInfo>& out) {
  const std::string& path = file.path();
  if (file.size() < 8) return bad(path, "file is " + std::to_string(file.size()) + " bytes, shorter than the 8-byte header length");
  uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, file.data(), 8);  // little-endian on every platform we build for
  if (header_bytes > kMaxHeaderBytes)
    return bad(path, "header length " + std::to_string(header_bytes) + " is above the limit " + std::to_string(kMaxHeaderBytes));
  if (header_bytes > file.size() - 8)
    return bad(path, "header length " + std::to_string(header_bytes) + " runs past the file (" + std::to_string(file.size()) + " bytes)");
  const char* header_text = reinterpret_cast<const char*>(file.data() + 8);
  const size_t data_bytes = file.size() - 8 - header_bytes;
  const std::byte* data_start = file.data() + 8 + header_bytes;

  // nlohmann keeps the last of duplicate keys; catch top-level duplicates while parsing.
  std::set<std::string> seen_names;
  std::string duplicate;
  auto watch_keys = [&](int depth, json::parse_event_t event, json& parsed) {
    if (depth == 1 && event == json::parse_event_t::key && parsed.is_string()) {
      const auto& key = parsed.get_ref<const std::string&>();
      if (!seen_names.insert(key).second && duplicate.empty()) duplicate = key;
    }
    return true;
  };
  json header = json::parse(header_text, header_text + header_bytes, watch_keys, /*allow_exceptions=*/false);
  if (header.is_discarded()) return bad(path, "header (" + std::to_string(header_bytes) + " bytes) is not valid JSON");
  if (!header.is_object()) return bad(path, "header is JSON but not an object");
  if (!duplicate.empty()) return bad(path, "tensor " + duplicate + " is listed twice in the header");

  struct Range {
    uint64_t begin, end;
    const std::string* name;
  };
  std::vector<Range> ranges;
  const size_t first_new = out.size();
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) return bad(path, "__metadata__ is not an object");
      continue;
    }
    if (!entry.is_object()) return bad(path, "tensor " + name + ": entry is not an object");
    if (!entry.contains("dtype") || !entry["dtype"].is_string())
      return bad(path, "tensor " + name + ": missing or non-string dtype");
    const std::string dtype_text = entry["dtype"].get<std::string>();
    Result<DType> dtype = parse_dtype(dtype_text);
    if (!dtype.ok()) return bad(path, "tensor " + name + ": dtype " + dtype_text + " is not one of BF16, F16, F32");
    if (!entry.contains("shape") || !entry["shape"].is_array())
      return bad(path, "tensor " + name + ": missing or non-array shape");
    TensorInfo info;
    info.name = name;
    info.dtype = *dtype;
    uint64_t elements = 1;
    for (const json& dim : entry["shape"]) {
      std::optional<int64_t> value = json_count(dim, kMaxDim);
      if (!value) return bad(path, "tensor " + name + ": shape " + dim.dump() + " in " + entry["shape"].dump() +
                                       " is not a dimension (an integer in [0, 2^40])");
      info.shape.push_back(*value);
      elements *= static_cast<uint64_t>(*value);
      if (elements > (uint64_t{1} << 60)) return bad(path, "tensor " + name + ": shape " + entry["shape"].dump() + " is absurdly large");
    }
    const json* offsets = entry.contains("data_offsets") ? &entry["data_offsets"] : nullptr;
    if (!offsets || !offsets->is_array() || offsets->size() != 2)
      return bad(path, "tensor " + name + ": data_offsets " + (offsets ? offsets->dump() : std::string("missing")) +
                           " is not [begin, end]");
    std::optional<int64_t> begin = json_count((*offsets)[0], INT64_MAX);
    std::optional<int64_t> end = json_count((*offsets)[1], INT64_MAX);
    if (!begin || !end || *begin > *end)
      return bad(path, "tensor " + name + ": data_offsets " + offsets->dump() + " is not [begin, end] with 0 <= begin <= end");
    if (static_cast<uint64_t>(*end) > data_bytes)
      return bad(path, "tensor " + name + ": data_offsets end " + std::to_string(*end) + " is past the data section (" +
                           std::to_string(data_bytes) + " bytes)");
    const uint64_t expected_bytes = elements * dtype_bytes(info.dtype);
    if (static_cast<uint64_t>(*end - *begin) != expected_bytes)
      return bad(path, "tensor " + name + ": holds " + std::to_string(*end - *begin) + " bytes but shape " +
                           shape_text(info.shape) + " x " + std::string(dtype_name(info.dtype)) + " needs " +
                           std::to_string(expected_bytes));
    info.data = data_start + *begin;
    info.bytes = static_cast<size_t>(expected_bytes);
    out.push_back(std::move(info));
    ranges.push_back({static_cast<uint64_t>(*begin), static_cast<uint64_t>(*end), nullptr});
  }
  for (size_t index = 0; index < ranges.size(); ++index) ranges[index].name = &out[first_new + index].name;
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) { return a.begin < b.begin; });
  uint64_t covered_end = 0;
  const std::string* covered_by = nullptr;
  for (const Range& range : ranges) {
    if (range.begin == range.end) continue;  // empty tensors occupy no bytes
    if (covered_by && range.begin < covered_end)
      return bad(path, "tensor " + *range.name + " [" + std::to_string(range.begin) + ", " + std::to_string(range.end) +
                           ") overlaps tensor " + *covered_by + " ending at " + std::to_string(covered_end));
    covered_end = range.end;
    covered_by = range.name;
  }
  return ok_status();
}

Result<std::string> read_text_file(const std::string& path) {
  std::ifstream stream(path, std::ios::binary);
  if (!stream) return Status(ErrorCode::NotFound, path + ": cannot open");
  std::ostringstream text;
  text << stream.rdbuf();
  if (stream.bad()) return Status(ErrorCode::IoError, path + ": read failed");
  return text.str();
}

bool path_exists(const std::string& path) {
  std::error_code error;
  return std::filesystem::exists(path, error);
}

}  // namespace

Checkpoint::~Checkpoint() = default;

Result<std::unique_ptr<Checkpoint>> Checkpoint::open_file(const std::string& path) {
  auto checkpoint = std::unique_ptr<Checkpoint>(new Checkpoint());
  checkpoint->directory_ = std::filesystem::path(path).parent_path().string();
  if (checkpoint->directory_.empty()) checkpoint->directory_ = ".";
  LS_ASSIGN_OR_RETURN(auto file, MappedFile::open(path));
  LS_RETURN_IF_ERROR(parse_header(*file, checkpoint->tensors_));
  checkpoint->files_.push_back(std::move(file));
  std::sort(checkpoint->tensors_.begin(), checkpoint->tensors_.end(),
            [](const TensorInfo& a, const TensorInfo& b) { return a.name < b.name; });
  return checkpoint;
}

Result<std::unique_ptr<Checkpoint>> Checkpoint::open(const std::string& directory) {
  const std::string index_path = directory + "/model.safetensors.index.json";
  const std::string single_path = directory + "/model.safetensors";
  if (!path_exists(index_path)) {
    if (!path_exists(single_path))
      return Status(ErrorCode::NotFound, directory + ": neither model.safetensors nor model.safetensors.index.json exists");
    LS_ASSIGN_OR_RETURN(auto checkpoint, open_file(single_path));
    checkpoint->directory_ = directory;
    return checkpoint;
  }
  LS_ASSIGN_OR_RETURN(std::string index_text, read_text_file(index_path));
  const json index = json::parse(index_text, nullptr, /*allow_exceptions=*/false);
  if (index.is_discarded() || !index.is_object())
    return bad(index_path, "is not a JSON object");
  if (!index.contains("weight_map") || !index["weight_map"].is_object())
    return bad(index_path, "has no weight_map object");

  auto checkpoint = std::unique_ptr<Checkpoint>(new Checkpoint());
  checkpoint->directory_ = directory;
  // Shard file name -> the tensor names the index places there.
  std::vector<std::pair<std::string, std::vector<std::string>>> shards;
  std::unordered_map<std::string, size_t> shard_index;
  for (const auto& [name, file_value] : index["weight_map"].items()) {
    if (!file_value.is_string()) return bad(index_path, "weight_map entry for tensor " + name + " is not a file name");
    const std::string file_name = file_value.get<std::string>();
    if (file_name.empty() || file_name.find('/') != std::string::npos || file_name == "." || file_name == "..")
      return bad(index_path, "weight_map entry for tensor " + name + " names '" + file_name + "', not a file in the directory");
    auto [slot, inserted] = shard_index.emplace(file_name, shards.size());
    if (inserted) shards.push_back({file_name, {}});
    shards[slot->second].second.push_back(name);
  }
  if (shards.empty()) return bad(index_path, "weight_map is empty");

  for (const auto& [file_name, names] : shards) {
    const std::string shard_path = directory + "/" + file_name;
    if (!path_exists(shard_path))
      return bad(index_path, "tensor " + names.front() + " is mapped to " + file_name + ", which does not exist");
    LS_ASSIGN_OR_RETURN(auto file, MappedFile::open(shard_path));
    std::vector<TensorInfo> shard_tensors;
    LS_RETURN_IF_ERROR(parse_header(*file, shard_tensors));
    std::set<std::string_view> present;
    for (const TensorInfo& info : shard_tensors) present.insert(info.name);
    for (const std::string& name : names)
      if (!present.count(name)) return bad(index_path, "tensor " + name + " is mapped to " + file_name + ", which does not contain it");
    for (TensorInfo& info : shard_tensors) checkpoint->tensors_.push_back(std::move(info));
    checkpoint->files_.push_back(std::move(file));
  }
  std::sort(checkpoint->tensors_.begin(), checkpoint->tensors_.end(),
            [](const TensorInfo& a, const TensorInfo& b) { return a.name < b.name; });
  for (size_t index = 1; index < checkpoint->tensors_.size(); ++index)
    if (checkpoint->tensors_[index].name == checkpoint->tensors_[index - 1].name)
      return bad(directory, "tensor " + checkpoint->tensors_[index].name + " is stored in more than one shard");
  return checkpoint;
}

const TensorInfo* Checkpoint::find(std::string_view name) const {
  auto found = std::lower_bound(tensors_.begin(), tensors_.end(), name,
                                [](const TensorInfo& info, std::string_view key) { return info.name < key; });
  if (found == tensors_.end() || found->name != name) return nullptr;
  return &*found;
}

namespace {

Result<const TensorInfo*> find_with_shape(const Checkpoint& checkpoint, std::string_view name,
                                          std::span<const int64_t> shape, size_t out_elements) {
  const TensorInfo* info = checkpoint.find(name);
  if (!info) return Status(ErrorCode::NotFound, checkpoint.directory() + ": tensor " + std::string(name) + " is missing");
  if (!std::equal(info->shape.begin(), info->shape.end(), shape.begin(), shape.end()))
    return Status(ErrorCode::BadSafetensors, checkpoint.directory() + ": tensor " + std::string(name) + " has shape " +
                                                 shape_text(info->shape) + ", expected " + shape_text(shape));
  if (static_cast<size_t>(info->elements()) != out_elements)
    return Status(ErrorCode::InvalidArgument, "tensor " + std::string(name) + " has " + std::to_string(info->elements()) +
                                                  " elements, the output holds " + std::to_string(out_elements));
  return info;
}

// Loads element `index` of a possibly unaligned little-endian array.
template <typename T>
T load_unaligned(const std::byte* data, size_t index) {
  T value;
  std::memcpy(&value, data + index * sizeof(T), sizeof(T));
  return value;
}

}  // namespace

Status Checkpoint::read_f32(std::string_view name, std::span<const int64_t> shape, std::span<float> out) const {
  LS_ASSIGN_OR_RETURN(const TensorInfo* info, find_with_shape(*this, name, shape, out.size()));
  const size_t count = out.size();
  switch (info->dtype) {
    case DType::F32:
      std::memcpy(out.data(), info->data, count * sizeof(float));
      break;
    case DType::BF16:
      for (size_t index = 0; index < count; ++index) out[index] = bf16_to_float(bf16{load_unaligned<uint16_t>(info->data, index)});
      break;
    case DType::F16:
      for (size_t index = 0; index < count; ++index) out[index] = f16_to_float(load_unaligned<uint16_t>(info->data, index));
      break;
  }
  return ok_status();
}

Status Checkpoint::read_bf16(std::string_view name, std::span<const int64_t> shape, std::span<bf16> out) const {
  LS_ASSIGN_OR_RETURN(const TensorInfo* info, find_with_shape(*this, name, shape, out.size()));
  const size_t count = out.size();
  switch (info->dtype) {
    case DType::BF16:
      std::memcpy(out.data(), info->data, count * sizeof(bf16));
      break;
    case DType::F32:
      for (size_t index = 0; index < count; ++index) out[index] = float_to_bf16(load_unaligned<float>(info->data, index));
      break;
    case DType::F16:
      for (size_t index = 0; index < count; ++index)
        out[index] = float_to_bf16(f16_to_float(load_unaligned<uint16_t>(info->data, index)));
      break;
  }
  return ok_status();
}

}  // namespace ls::io
