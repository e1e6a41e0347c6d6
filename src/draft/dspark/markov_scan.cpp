// The Markov scan: serial slots, batched over requests; confidence head in fp32; DraftNonfinite on any bad value.
#include "draft/dspark/markov_scan.h"

#include <chrono>
#include <cmath>
#include <limits>
#include <string>

#include "compute/cpu/cpu_features.h"
#include "compute/cpu/fused_ops.h"
#include "compute/sampling.h"
#include "compute/cpu/matmul_avx512.h"
#include "compute/cpu/simd_avx512.h"
#include "draft/dspark/forward.h"

namespace ls::dspark {
namespace {

Status nonfinite(const std::string& what, int slot, StreamId stream) {
  return Status(ErrorCode::DraftNonfinite,
                what + " at draft slot " + std::to_string(slot) + " of stream " + std::to_string(stream));
}

// W1[token] as fp32 [r].
void markov_embedding(const compute::OwnedMatrix& w1, int32_t token, float* out) {
  const int64_t r = w1.cols;
  for (int64_t j = 0; j < r; ++j) {
    out[j] = w1.b16.empty() ? w1.f32[token * r + j] : bf16_to_float(w1.b16[token * r + j]);
  }
}

// Greedy pick over corrected logits: the first maximum (ties to the lower id); counts non-finite values.
int32_t argmax_scalar(std::span<const float> logits, bool& all_finite) {
  int32_t best = 0;
  float best_value = 0.0f;
  bool found = false;
  all_finite = true;
  for (size_t id = 0; id < logits.size(); ++id) {
    const float value = logits[id];
    if (!std::isfinite(value)) {
      all_finite = false;
      continue;
    }
    if (!found || value > best_value) {
      best = static_cast<int32_t>(id);
      best_value = value;
      found = true;
    }
  }
  return best;
}

// The same pick 16 lanes at a time: each lane keeps its first strictly larger finite value (so its lowest id among
// equals), then the largest lane value wins with the lowest id among lanes holding it. -0 == +0 as in the scalar.
LS_TARGET_AVX512 int32_t argmax_avx512(std::span<const float> logits, bool& all_finite) {
  const int64_t n = static_cast<int64_t>(logits.size());
  const __m512 infinity = _mm512_set1_ps(std::numeric_limits<float>::infinity());
  const __m512i step = _mm512_set1_epi32(16);
  __m512 best = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  __m512i best_id = _mm512_set1_epi32(-1);
  __m512i id = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  __mmask16 nonfinite = 0;
  for (int64_t k = 0; k < n; k += 16) {
    const __mmask16 inside = n - k >= 16 ? __mmask16(0xffff) : _cvtu32_mask16((1u << (n - k)) - 1u);
    const __m512 v = _mm512_maskz_loadu_ps(inside, logits.data() + k);
    // finite: |v| < inf (false for NaN)
    const __mmask16 finite = _mm512_mask_cmp_ps_mask(inside, _mm512_abs_ps(v), infinity, _CMP_LT_OQ);
    nonfinite |= inside & ~finite;
    const __mmask16 better = _mm512_mask_cmp_ps_mask(finite, v, best, _CMP_GT_OQ) |
                             (finite & _mm512_cmp_epi32_mask(best_id, _mm512_set1_epi32(-1), _MM_CMPINT_EQ));
    best = _mm512_mask_mov_ps(best, better, v);
    best_id = _mm512_mask_mov_epi32(best_id, better, id);
    id = _mm512_add_epi32(id, step);
  }
  all_finite = nonfinite == 0;
  const __mmask16 found = _mm512_cmp_epi32_mask(best_id, _mm512_set1_epi32(-1), _MM_CMPINT_NE);
  if (found == 0) return 0;
  const float top = _mm512_mask_reduce_max_ps(found, best);
  const __mmask16 at_top = _mm512_mask_cmp_ps_mask(found, best, _mm512_set1_ps(top), _CMP_EQ_OQ);
  return _mm512_mask_reduce_min_epi32(at_top, best_id);
}

bool all_finite(std::span<const float> values) {
  for (float value : values)
    if (!std::isfinite(value)) return false;
  return true;
}

// One chunk's part of a greedy pick: its first finite maximum, if any, and whether all its values were finite.
struct ChunkPick {
  bool seen = false;
  bool found = false;
  bool all_finite = true;
  int32_t id = 0;
  float value = 0;
};

}  // namespace

int32_t first_finite_argmax(std::span<const float> logits, bool& all_finite) {
  if (compute::cpu_features().avx512) return argmax_avx512(logits, all_finite);
  return argmax_scalar(logits, all_finite);
}

void markov_scan(const DsparkConfig& config, const DsparkWeights& weights, const compute::OpContext& ops,
                 std::span<const ScanRequest> requests, const PlantedFaults& faults, std::span<Draft> results) {
  const int64_t count = static_cast<int64_t>(requests.size());
  const int64_t V = config.vocab_size, r = config.markov_rank, d = config.hidden_size;
  // The Markov product and the confidence head run in fp32 whatever the block's numeric mode.
  const compute::OpContext fp32{ops.pool, compute::NumericMode::Fp32};
  std::vector<int32_t> previous(static_cast<size_t>(count));
  std::vector<float> embeddings(static_cast<size_t>(count * r));  // [count, r] e = W1[prev]
  std::vector<float> corrected(static_cast<size_t>(count * V));   // [count, V] l = U_s + W2 e
  std::vector<float> running(static_cast<size_t>(count), 1.0f);
  std::vector<char> active(static_cast<size_t>(count));
  // The fused slot step's state: W2 as one dense matrix, and per request a pick per 16 columns (chunks start there).
  const bool w2_dense = !weights.markov_w2.quantized();
  const compute::Matrix w2_view = weights.markov_w2.dense.view();
  float* const corrected_out = corrected.data();
  const int64_t pick_slots = (V + 15) / 16;
  std::vector<ChunkPick> chunk_picks(static_cast<size_t>(count * pick_slots));
  int max_depth = 0;
  for (int64_t i = 0; i < count; ++i) {
    previous[i] = requests[i].anchor;
    active[i] = results[i].status.ok() && requests[i].depth > 0;
    results[i].tokens.clear();
    results[i].chances.clear();
    if (active[i]) max_depth = std::max(max_depth, requests[i].depth);
  }
  PassProfile* const profile = pass_profile();
  using ProfileClock = std::chrono::steady_clock;
  auto since = [](ProfileClock::time_point start) {
    return std::chrono::duration<double, std::milli>(ProfileClock::now() - start).count();
  };
  for (int slot = 0; slot < max_depth; ++slot) {
    const ProfileClock::time_point slot_start = profile ? ProfileClock::now() : ProfileClock::time_point{};
    for (int64_t i = 0; i < count; ++i) {
      if (active[i] && slot >= requests[i].depth) active[i] = 0;
      if (active[i]) {
        markov_embedding(weights.markov_w1, previous[i], embeddings.data() + i * r);
      } else {
        std::fill_n(embeddings.data() + i * r, r, 0.0f);
      }
    }
    // Few rows on a pool: W2's pool call also adds the base logits and finds each greedy request's pick per chunk
    // of columns (the same adds; the chunks' first maxima met in id order are first_finite_argmax's pick).
    const bool fused =
        !faults.enabled && w2_dense && compute::fuses_markov_scan() &&
        compute::matmul_columns_then_avx512(
            fp32, embeddings.data(), count, std::span<const compute::Matrix>(&w2_view, 1),
            std::span<float* const>(&corrected_out, 1), 0, [&](int64_t begin, int64_t end) {
              for (int64_t i = 0; i < count; ++i) {
                if (!active[i]) continue;
                float* logits = corrected.data() + i * V;
                const float* base = requests[i].base_logits + slot * V;
                for (int64_t id = begin; id < end; ++id) logits[id] += base[id];
                if (!requests[i].sampling.greedy()) continue;
                ChunkPick& part = chunk_picks[i * pick_slots + begin / 16];
                const int32_t at = first_finite_argmax(
                    std::span<const float>(logits + begin, static_cast<size_t>(end - begin)), part.all_finite);
                part.seen = true;
                part.found = std::isfinite(logits[begin + at]);
                part.id = static_cast<int32_t>(begin) + at;
                part.value = logits[begin + at];
              }
            });
    if (!fused) apply_matrix(fp32, embeddings.data(), count, weights.markov_w2, corrected.data());
    const ProfileClock::time_point pick_start = profile ? ProfileClock::now() : ProfileClock::time_point{};
    if (profile) profile->scan_w2 += since(slot_start);
    for (int64_t i = 0; i < count; ++i) {
      if (!active[i]) continue;
      const ScanRequest& request = requests[i];
      const bool planted = faults.enabled && faults.stream == request.stream;
      std::span<float> logits(corrected.data() + i * V, static_cast<size_t>(V));
      const float* base = request.base_logits + slot * V;
      if (!fused)
        for (int64_t id = 0; id < V; ++id) logits[id] += base[id];
      if (planted && faults.nan_logit_slot == slot) logits[V / 2] = std::numeric_limits<float>::quiet_NaN();

      bool finite = true;
      int32_t pick = 0;
      if (request.sampling.greedy() && fused) {
        bool found = false;
        float best = 0;
        for (int64_t k = 0; k < pick_slots; ++k) {
          ChunkPick& part = chunk_picks[i * pick_slots + k];
          if (!part.seen) continue;
          finite = finite && part.all_finite;
          if (part.found && (!found || part.value > best)) {
            found = true;
            best = part.value;
            pick = part.id;
          }
          part = ChunkPick{};
        }
      } else if (request.sampling.greedy()) {
        pick = first_finite_argmax(logits, finite);
      } else {
        finite = all_finite(logits);
        // draw_token's id, most of the vocabulary pruned by its keys' bits (batch s12B: the Xeon's load-time sampled
        // pass at depth 7 2.95 / 3.57 -> 1.81 / 2.07 ms, alternated).
        pick = draw_token(logits, request.sampling, request.anchor_position + slot + 1);
      }
      if (planted && faults.out_of_range_pick_slot == slot) pick = static_cast<int32_t>(V);

      float chance = std::numeric_limits<float>::quiet_NaN();
      bool confidence_finite = true;
      if (config.has_confidence) {
        // z = w . [Hf_s ; e] + b, accumulated in double, then c = sigmoid(z / T_s) in fp32.
        const float* hidden = request.final_hidden + slot * d;
        const float* e = embeddings.data() + i * r;
        double z = weights.confidence_bias;
        for (int64_t j = 0; j < d; ++j) z += static_cast<double>(weights.confidence_weight[j]) * hidden[j];
        for (int64_t j = 0; j < r; ++j) z += static_cast<double>(weights.confidence_weight[d + j]) * e[j];
        float logit = static_cast<float>(z);
        if (!config.confidence_temperatures.empty()) logit /= config.confidence_temperatures[slot];
        float confidence = 1.0f / (1.0f + std::exp(-logit));
        if (planted && faults.inf_confidence_slot == slot) confidence = std::numeric_limits<float>::infinity();
        confidence_finite = std::isfinite(confidence);
        running[i] *= confidence;
        chance = running[i];
      }

      // The failure flags: nothing non-finite or out of range leaves the drafter.
      Status failure;
      if (!finite)
        failure = nonfinite("non-finite draft logit", slot, request.stream);
      else if (!confidence_finite)
        failure = nonfinite("non-finite draft confidence", slot, request.stream);
      else if (pick < 0 || pick >= V) {
        failure = Status(ErrorCode::DraftNonfinite, "draft pick " + std::to_string(pick) + " outside vocabulary " +
                                                        std::to_string(V) + " at draft slot " + std::to_string(slot) +
                                                        " of stream " + std::to_string(request.stream));
      }
      if (!failure.ok()) {
        results[i].status = failure;
        results[i].tokens.clear();
        results[i].chances.clear();
        active[i] = 0;
        continue;
      }
      results[i].tokens.push_back(pick);
      results[i].chances.push_back(chance);
      previous[i] = pick;
    }
    if (profile) profile->scan_pick += since(pick_start);
  }
}

}  // namespace ls::dspark
