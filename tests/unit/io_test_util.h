// Shared helpers for the io tests: a temporary directory that removes itself, and raw file crafting.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace ls::io::testing {

// A fresh directory under the system temp dir, removed with everything in it when the object dies.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "lanespark-io-XXXXXX").string();
    std::vector<char> buffer(pattern.begin(), pattern.end());
    buffer.push_back('\0');
    const char* made = ::mkdtemp(buffer.data());
    if (!made) ADD_FAILURE() << "mkdtemp failed";
    path_ = made ? made : "";
  }
  ~TempDir() {
    std::error_code error;
    if (!path_.empty()) std::filesystem::remove_all(path_, error);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream stream(path, std::ios::binary | std::ios::trunc);
  stream.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline std::string read_bytes(const std::string& path) {
  std::ifstream stream(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(stream), std::istreambuf_iterator<char>());
}

// A safetensors file from a header text, a declared header length and a data section, byte for byte as given.
inline std::string craft_safetensors(const std::string& header, const std::string& data, uint64_t declared_length) {
  std::string bytes(8, '\0');
  std::memcpy(bytes.data(), &declared_length, 8);
  return bytes + header + data;
}
inline std::string craft_safetensors(const std::string& header, const std::string& data) {
  return craft_safetensors(header, data, header.size());
}

}  // namespace ls::io::testing
