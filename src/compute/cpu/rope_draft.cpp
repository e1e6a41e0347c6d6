// RoPE for the DSpark drafter: fp32 tables and rotation, interleaved (GPT-J) or NeoX pairing, one rounding.
#include <cmath>
#include <vector>

#include "compute/cpu/draft_ops.h"
#include "compute/cpu/rope_angles.h"

namespace ls::compute {

void rope_rotate(const OpContext& ctx, float* x, int64_t rows, int heads, const int64_t* positions,
                 const RopeTable& table, bool neox) {
  const int head_dim = table.head_dim, half = head_dim / 2;
  for (int64_t row = 0; row < rows; ++row) {
    const RopeAngles angles = rope_angles(table, positions[row]);
    const float* cosines = angles.cos;
    const float* sines = angles.sin;
    for (int head = 0; head < heads; ++head) {
      float* v = x + (row * heads + head) * head_dim;
      for (int i = 0; i < half; ++i) {
        // Pair (a, b) rotates to (a cos - b sin, a sin + b cos).
        float& a = neox ? v[i] : v[2 * i];
        float& b = neox ? v[i + half] : v[2 * i + 1];
        const float rotated_a = a * cosines[i] - b * sines[i];
        const float rotated_b = a * sines[i] + b * cosines[i];
        a = ctx.store(rotated_a);
        b = ctx.store(rotated_b);
      }
    }
  }
}

}  // namespace ls::compute
