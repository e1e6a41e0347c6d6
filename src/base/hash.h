// Counter-based hashing: splitmix64 (keyed sampling, seeds) and SHA-256 (file fingerprints).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>

namespace ls {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// A uniform in (0, 1) from 53 random bits, never 0 or 1 (safe under log(-log u)).
inline double uniform_open01(uint64_t bits) {
  return (static_cast<double>(bits >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

std::array<uint8_t, 32> sha256(std::span<const uint8_t> data);
std::string sha256_hex(std::span<const uint8_t> data);

}  // namespace ls
