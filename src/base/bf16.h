// bfloat16 storage type and the conversions that match PyTorch (round to nearest even, quiet NaN kept).
#pragma once

#include <cstdint>
#include <cstring>

namespace ls {

struct bf16 {
  uint16_t bits;
};

inline float bf16_to_float(bf16 value) {
  const uint32_t bits = static_cast<uint32_t>(value.bits) << 16;
  float out;
  std::memcpy(&out, &bits, sizeof out);
  return out;
}

inline bf16 float_to_bf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return bf16{static_cast<uint16_t>((bits >> 16) | 0x0040u)};  // NaN stays NaN
  const uint32_t rounding_bias = 0x7fffu + ((bits >> 16) & 1u);
  return bf16{static_cast<uint16_t>((bits + rounding_bias) >> 16)};
}

// Rounds a float to the nearest bf16 value and returns it as a float (where transformers rounds in bf16 mode).
inline float round_to_bf16(float value) { return bf16_to_float(float_to_bf16(value)); }

// IEEE half precision (F16 checkpoints) to float.
float f16_to_float(uint16_t bits);

}  // namespace ls
