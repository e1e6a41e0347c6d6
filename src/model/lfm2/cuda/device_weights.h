// LFM2 / LFM2-MoE weights in device memory (bf16 as stored; gate|up fused per FFN, experts stacked per layer).
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "compute/cuda/cuda_util.h"
#include "compute/cuda/kernels.h"
#include "io/model_config.h"
#include "model/lfm2/weights.h"

namespace ls::lfm2::gpu {

// A bf16 matrix [rows, cols] (+ fp32 bias [rows]) in device memory.
struct DeviceMat {
  cuda::DeviceBuffer<bf16> w;
  cuda::DeviceBuffer<float> bias;
  int64_t rows = 0;
  int64_t cols = 0;

  cuda::DeviceMatrix view() const { return cuda::DeviceMatrix{w.data(), bias.data(), rows, cols}; }
};

struct DeviceLayer {
  io::LayerKind kind = io::LayerKind::Conv;
  bool moe = false;
  cuda::DeviceBuffer<bf16> operator_norm, ffn_norm;  // [D]
  // conv
  DeviceMat in_proj;                   // [3D, D]
  cuda::DeviceBuffer<float> conv_kernel;  // [D, K] fp32 (bf16-exact values)
  cuda::DeviceBuffer<float> conv_bias;    // [D] or empty
  DeviceMat conv_out;                  // [D, D]
  // attention
  DeviceMat q_proj, k_proj, v_proj;    // [H*hd, D], [KV*hd, D], [KV*hd, D]
  DeviceMat attn_out;                  // [D, H*hd]
  cuda::DeviceBuffer<bf16> q_norm, k_norm;  // [hd]
  // dense FFN
  DeviceMat gate_up;                   // [2F, D] = w1 rows then w3 rows
  DeviceMat down;                      // [D, F]
  // MoE
  DeviceMat router;                    // [E, D]
  cuda::DeviceBuffer<float> expert_bias;  // [E] or empty
  cuda::DeviceBuffer<bf16> experts_gate_up;  // [E, 2I, D]
  cuda::DeviceBuffer<bf16> experts_down;     // [E, D, I]
};

struct DeviceWeights {
  DeviceMat embedding;                 // [V, D]
  DeviceMat lm_head;                   // [V, D] when untied, else empty
  cuda::DeviceBuffer<bf16> final_norm;  // [D]
  cuda::DeviceBuffer<float> inv_freq;   // [hd / 2] RoPE
  std::vector<DeviceLayer> layers;
  int64_t bytes = 0;                   // device bytes held

  const DeviceMat& head() const { return lm_head.rows > 0 ? lm_head : embedding; }
};

// Uploads Bf16-mode host weights (every matrix bf16) to the current device.
Result<DeviceWeights> upload_weights(const io::ModelConfig& config, const Weights& weights);

}  // namespace ls::lfm2::gpu
