// The DSpark drafter behind the Drafter interface: per-stream context caches, one block pass and scan per call.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "draft/drafter.h"
#include "draft/dspark/config.h"
#include "draft/dspark/context_cache.h"
#include "draft/dspark/forward.h"
#include "draft/dspark/weights.h"
#include "draft/load.h"

namespace ls::dspark {

class DsparkDrafter final : public Drafter {
 public:
  // Takes loaded weights; reserves scratch and warms up as counted init steps (`steps` continues the loader's).
  static Result<std::unique_ptr<DsparkDrafter>> create(DsparkConfig config, DsparkWeights weights, const Target& target,
                                                       const DrafterOptions& options, InitSteps& steps);
  // Admission, manifest check, weights (one matrix at a time) and create(), from a drafter directory.
  static Result<std::unique_ptr<DsparkDrafter>> load(const std::string& directory, const Target& target,
                                                     const DrafterOptions& options);

  const DraftFacts& facts() const override { return facts_; }
  Status absorb(StreamId stream, int64_t start, int rows, std::span<const float> taps) override;
  std::vector<Draft> draft(std::span<const DraftRequest> requests) override;
  void release(StreamId stream) override { cache_.release(stream); }
  // Skips to `position`: later rows go right after the rows held (keys rotated at their own positions).
  Status restart(StreamId stream, int64_t position) override;

  const DsparkConfig& config() const { return config_; }
  int bits() const { return options_.bits; }  // 0 or 8: --drafter-bits as loaded (auto resolved)
  const DsparkWeights& weights() const { return weights_; }
  int64_t weight_bytes() const { return weights_.bytes(); }
  // The most bytes the weight loader held at once (final weights + one staged matrix), 0 if not made by load().
  int64_t loader_peak_bytes() const { return loader_peak_bytes_; }
  // Positions the stream's context holds (0 for an unknown stream).
  int64_t context_length(StreamId stream);
  size_t open_streams() const { return cache_.stream_count(); }
  // Drafts failed with DraftNonfinite since load.
  int64_t nonfinite_drafts() const { return nonfinite_drafts_; }
  // The last draft() call's block outputs, rows in request order (i * block_size + slot), for parity tests:
  // Hf [rows, d] and U [rows, V] fp32.
  std::span<const float> last_final_hidden() const;
  std::span<const float> last_base_logits() const;
  // Wall time of the last draft() call's block pass (embed, layers, final norm, head) and Markov scan, in ms.
  double last_block_ms() const { return last_block_ms_; }
  // The pool its passes and absorbs run on: the target's (Target::cpu_pool, same thread count), its own, or none.
  const ThreadPool* pool() const { return ops_.pool; }
  double last_scan_ms() const { return last_scan_ms_; }

 private:
  DsparkDrafter(DsparkConfig config, DsparkWeights weights, const Target& target, const DrafterOptions& options);
  Status warm_up();

  DsparkConfig config_;
  DsparkWeights weights_;
  const Target& target_;
  DrafterOptions options_;
  std::unique_ptr<ThreadPool> pool_;
  compute::OpContext ops_;
  compute::RopeTable rope_;
  ContextCache cache_;
  BlockScratch scratch_;
  DraftFacts facts_;
  int64_t last_rows_ = 0;
  int64_t nonfinite_drafts_ = 0;
  int64_t loader_peak_bytes_ = 0;
  double last_block_ms_ = 0;
  double last_scan_ms_ = 0;
};

}  // namespace ls::dspark
