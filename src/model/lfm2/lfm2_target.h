// The LFM2 model behind the Target seam: windows of many streams in one forward, keyed draws, taps, commit.
#pragma once

#include <memory>
#include <unordered_map>
#include <vector>

#include "model/lfm2/model.h"
#include "model/target.h"

namespace ls::lfm2 {

class Lfm2Target final : public Target {
 public:
  // `max_rows`: most rows one forward accepts; `pass_rows`: rows run through the layers together (bounds scratch).
  Lfm2Target(std::unique_ptr<Model> model, int max_rows, int pass_rows = 512);

  const TargetFacts& facts() const override { return facts_; }
  Status set_taps(std::span<const int> layers) override;
  Result<Verified> forward(std::span<const Window> windows) override;
  Status commit(StreamId stream, int kept) override;
  int64_t committed_length(StreamId stream) const override;
  void release(StreamId stream) override;
  Status embed(std::span<const int32_t> tokens, std::span<float> out) const override;
  Status head(std::span<const float> hidden, int rows, std::span<float> out) const override;
  ThreadPool* cpu_pool() const override { return &model_->pool(); }

  // Records the measured exact width (model/exact_width.h).
  void set_exact_width(int width) { facts_.exact_width = width; }
  const Model& model() const { return *model_; }
  Model& model() { return *model_; }
  int64_t stream_count() const { return static_cast<int64_t>(streams_.size()); }

 private:
  Status check_windows(std::span<const Window> windows) const;
  // Final norm + head + keyed draw for the drawn rows among the pass's rows.
  struct DrawnRow {
    int64_t pass_row;    // row inside the pass (hidden_)
    int64_t global_row;  // row inside the forward (Verified)
    const Window* window;
    int64_t position;    // absolute position of the row
  };
  void draw_rows(std::span<const DrawnRow> rows, Verified& verified);

  std::unique_ptr<Model> model_;
  TargetFacts facts_;
  int pass_rows_;
  std::vector<int> taps_;
  std::unordered_map<StreamId, StreamState> streams_;  // node-based: pointers stay valid across inserts
  std::vector<float> hidden_;  // [pass rows, D]
  std::vector<float> logits_;  // [drawn rows in a group, V]
  std::vector<float> gathered_;
};

}  // namespace ls::lfm2
