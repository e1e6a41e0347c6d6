// Shared by the CUDA drafter tests (cuda_drafter_*_test.cpp): the nano pair on the device (NanoDrafter), a target
// whose embedding lives on the device, uploads of random taps, and the bit and tolerance comparisons of drafts.
// Near-tie rule (as the CPU bf16 parity test): a pick is compared while the reference's top-2 margin (relative to
// the row's largest magnitude) is above twice the bf16 tolerance; after a legitimate near-tie flip the chain differs.
#pragma once
#ifdef LS_HAVE_CUDA

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "compute/cuda/cuda_util.h"
#include "cuda_test_util.h"
#include "draft/dspark/cuda/cuda_drafter.h"
#include "draft/load.h"
#include "dspark_test_support.h"

namespace ls::dspark::cuda_test {

using cuda::CudaDsparkDrafter;

constexpr double kBf16Tolerance = 2e-2;  // the CPU bf16 parity tolerance (docs/drafter.md)

// A test target: the embedding-only CPU target plus a bf16 device copy of E, returned as device_embedding().
class DeviceEmbeddingTarget final : public Target {
 public:
  DeviceEmbeddingTarget(std::vector<float> embedding, int vocab, int hidden, int layers)
      : host_(embedding, vocab, hidden, layers) {
    std::vector<bf16> values(embedding.size());
    for (size_t i = 0; i < values.size(); ++i) values[i] = float_to_bf16(embedding[i]);
    LS_CHECK(device_.allocate(values.size()).ok(), "device embedding");
    LS_CHECK(cudaMemcpy(device_.data(), values.data(), values.size() * 2, cudaMemcpyHostToDevice) == cudaSuccess,
             "embedding upload");
  }
  const TargetFacts& facts() const override { return host_.facts(); }
  Status set_taps(std::span<const int> layers) override { return host_.set_taps(layers); }
  Result<Verified> forward(std::span<const Window> windows) override { return host_.forward(windows); }
  Status commit(StreamId stream, int kept) override { return host_.commit(stream, kept); }
  int64_t committed_length(StreamId stream) const override { return host_.committed_length(stream); }
  void release(StreamId stream) override { host_.release(stream); }
  Status embed(std::span<const int32_t> tokens, std::span<float> out) const override { return host_.embed(tokens, out); }
  Status head(std::span<const float> hidden, int rows, std::span<float> out) const override {
    return host_.head(hidden, rows, out);
  }
  const void* device_embedding() const override { return device_.data(); }
  testing::EmbeddingTarget& host() { return host_; }

 private:
  testing::EmbeddingTarget host_;
  ls::cuda::DeviceBuffer<bf16> device_;
};

// A drafter directory and its target's embedding (bf16-rounded), vocab, hidden, layers.
struct Pair {
  std::string drafter_dir;
  std::vector<float> embedding;
  int vocab = 0, hidden = 0, layers = 0;
};

inline Pair read_pair(const std::filesystem::path& target_dir, const std::filesystem::path& drafter_dir) {
  Pair pair;
  pair.drafter_dir = drafter_dir.string();
  Result<std::unique_ptr<io::Checkpoint>> target = io::Checkpoint::open(target_dir.string());
  LS_CHECK(target.ok(), "target checkpoint");
  const io::TensorInfo* embedding = (*target)->find("model.embed_tokens.weight");
  LS_CHECK(embedding != nullptr, "embedding");
  pair.vocab = static_cast<int>(embedding->shape[0]);
  pair.hidden = static_cast<int>(embedding->shape[1]);
  pair.embedding.resize(static_cast<size_t>(embedding->elements()));
  LS_CHECK((*target)->read_f32(embedding->name, embedding->shape, pair.embedding).ok(), "embedding read");
  for (float& value : pair.embedding) value = round_to_bf16(value);
  nlohmann::json config;
  std::ifstream(target_dir / "config.json") >> config;
  pair.layers = config["num_hidden_layers"].get<int>();
  return pair;
}

// A CUDA drafter's options for up to `max_streams` streams.
// The persistent scan's arms the scan tests run: both handoffs, each (session 14) with the 8-lane dot and with the
// broadcast dot, the flagged one also with the confidence helpers; each arm's name for the traces.
struct ScanArm {
  cuda::PersistentHandoff handoff;
  bool broadcast = false;
  bool helpers = false;
  int backoff_ns = 0;
  std::string name() const {
    std::string text = handoff == cuda::PersistentHandoff::Counter ? "counter handoff" : "flagged handoff";
    if (broadcast) text += ", broadcast dot";
    if (helpers) text += ", confidence helpers";
    if (backoff_ns > 0) text += ", " + std::to_string(backoff_ns) + " ns backoff";
    return text;
  }
};
inline std::vector<ScanArm> scan_arms() {
  using cuda::PersistentHandoff;
  return {{PersistentHandoff::Counter, false},     {PersistentHandoff::Flags, false},
          {PersistentHandoff::Flags, true},        {PersistentHandoff::Counter, true},
          {PersistentHandoff::Flags, false, true}, {PersistentHandoff::Flags, true, true},
          {PersistentHandoff::Flags, true, true, 200}};
}
inline void set_scan_arm(CudaDsparkDrafter& drafter, const ScanArm& arm) {
  drafter.set_persistent_handoff(arm.handoff);
  drafter.set_scan_broadcast(arm.broadcast);
  drafter.set_scan_confidence_helpers(arm.helpers);
  drafter.set_scan_handoff_backoff(arm.backoff_ns);
}

inline DrafterOptions cuda_options(int max_streams = 8) {
  DrafterOptions options;
  options.device = Device::Cuda;
  options.max_streams = max_streams;
  return options;
}

inline std::unique_ptr<CudaDsparkDrafter> load_cuda(const std::string& dir, Target& target,
                                                    const DrafterOptions& options) {
  Result<std::unique_ptr<Drafter>> loaded = load_drafter(dir, target, options);
  EXPECT_TRUE(loaded.ok()) << loaded.status().to_string();
  if (!loaded.ok()) return nullptr;
  auto* cuda_drafter = dynamic_cast<CudaDsparkDrafter*>(loaded->get());
  EXPECT_NE(cuda_drafter, nullptr) << "Device::Cuda gave a drafter of another kind";
  if (cuda_drafter == nullptr) return nullptr;
  loaded->release();
  return std::unique_ptr<CudaDsparkDrafter>(cuda_drafter);
}

// The nano pair on the device, the setup most tests share: load() puts its target (the embedding on the device) and
// a drafter `gpu` there, with the drafter's config `c` and its tap row width `width`. A test binds the four by name:
//   NanoDrafter nano;
//   ASSERT_TRUE(nano.load());
//   auto& [target, gpu, c, width] = nano;
struct NanoDrafter {
  // False (the load's failure reported) when the drafter did not load.
  bool load(const DrafterOptions& options = cuda_options()) {
    load_target();
    gpu = another(options);
    if (!gpu) return false;
    c = gpu->config();
    width = static_cast<int64_t>(c.tap_count()) * c.hidden_size;
    return true;
  }
  // The target alone (for tests of loads that must fail).
  void load_target() {
    const Pair pair = read_pair(std::string(LS_SOURCE_DIR) + "/models/nano/target", drafter_dir());
    target = std::make_unique<DeviceEmbeddingTarget>(pair.embedding, pair.vocab, pair.hidden, pair.layers);
  }
  // Another drafter of the nano pair on the same target (after load()).
  std::unique_ptr<CudaDsparkDrafter> another(const DrafterOptions& options = cuda_options()) const {
    return load_cuda(drafter_dir(), *target, options);
  }
  static std::string drafter_dir() { return std::string(LS_SOURCE_DIR) + "/models/nano/drafter"; }

  std::unique_ptr<DeviceEmbeddingTarget> target;
  std::unique_ptr<CudaDsparkDrafter> gpu;
  DsparkConfig c;
  int64_t width = 0;  // values of one tap row: every tapped layer's hidden state
};

// A request of `stream` anchored at `position` (the rows its context holds), greedy unless `sampling` says otherwise.
inline DraftRequest request_at(StreamId stream, int64_t position, int32_t anchor_token, int depth,
                               Sampling sampling = {}) {
  DraftRequest request;
  request.stream = stream;
  request.anchor_token = anchor_token;
  request.anchor_position = position;
  request.depth = depth;
  request.sampling = sampling;
  return request;
}

// `rows` random tap rows of `width` values (seed `seed`) as bf16 on the device, described for absorb_device().
struct UploadedTaps {
  ls::cuda::DeviceBuffer<bf16> buffer;
  DeviceTaps taps;
};
inline UploadedTaps upload_taps(int rows, int64_t width, uint32_t seed, int device) {
  const std::vector<float> taps = testing::random_taps(rows, width, seed);
  std::vector<bf16> values(taps.size());
  for (size_t i = 0; i < taps.size(); ++i) values[i] = float_to_bf16(taps[i]);
  UploadedTaps out;
  EXPECT_TRUE(out.buffer.allocate(values.size()).ok());
  EXPECT_EQ(cudaMemcpy(out.buffer.data(), values.data(), values.size() * sizeof(bf16), cudaMemcpyHostToDevice),
            cudaSuccess);
  out.taps.data = out.buffer.data();
  out.taps.device = device;
  out.taps.rows = rows;
  out.taps.row_values = width;
  return out;
}

// max |a - b| / max |b|.
inline double relative_error(std::span<const float> actual, std::span<const float> expected) {
  EXPECT_EQ(actual.size(), expected.size());
  double largest = 0, error = 0;
  for (size_t i = 0; i < std::min(actual.size(), expected.size()); ++i) {
    largest = std::max(largest, std::fabs(static_cast<double>(expected[i])));
    error = std::max(error, std::fabs(static_cast<double>(actual[i]) - expected[i]));
  }
  return largest > 0 ? error / largest : error;
}

// The top-2 margin of a row of scores, relative to its largest magnitude.
inline double top_two_margin(std::vector<double> row) {
  double largest = 0;
  for (double v : row) largest = std::max(largest, std::fabs(v));
  std::partial_sort(row.begin(), row.begin() + 2, row.end(), std::greater<double>());
  return largest > 0 ? (row[0] - row[1]) / largest : 0;
}

// Both drafts of every request ok, with the same tokens and chance bits.
inline void expect_same_drafts(const std::vector<Draft>& actual, const std::vector<Draft>& expected) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    ASSERT_TRUE(actual[i].status.ok()) << actual[i].status.to_string();
    ASSERT_TRUE(expected[i].status.ok()) << expected[i].status.to_string();
    EXPECT_EQ(actual[i].tokens, expected[i].tokens);
    ASSERT_EQ(actual[i].chances.size(), expected[i].chances.size());
    for (size_t slot = 0; slot < actual[i].chances.size(); ++slot) {
      EXPECT_EQ(std::bit_cast<uint32_t>(actual[i].chances[slot]), std::bit_cast<uint32_t>(expected[i].chances[slot]))
          << "slot " << slot;
    }
  }
}

// One pass's outputs: the drafts, Hf and U (fp32 copies of the device values).
struct PassBits {
  std::vector<Draft> drafts;
  std::vector<float> hidden, logits;
};

// A pass over scratch poisoned first (a value the pass fails to write cannot pass for a result).
inline PassBits poisoned_pass(CudaDsparkDrafter& gpu, std::span<const DraftRequest> requests) {
  EXPECT_TRUE(gpu.poison_scratch_for_test().ok());
  PassBits out;
  out.drafts = gpu.draft(requests);
  out.hidden = gpu.last_final_hidden().value();
  out.logits = gpu.last_base_logits().value();
  return out;
}

// Hf, U, tokens and chances bit for bit.
inline void expect_same_pass_bits(const PassBits& a, const PassBits& b) {
  ASSERT_EQ(a.hidden.size(), b.hidden.size());
  ASSERT_EQ(a.logits.size(), b.logits.size());
  EXPECT_EQ(std::memcmp(a.hidden.data(), b.hidden.data(), a.hidden.size() * sizeof(float)), 0) << "Hf bits";
  EXPECT_EQ(std::memcmp(a.logits.data(), b.logits.data(), a.logits.size() * sizeof(float)), 0) << "U bits";
  expect_same_drafts(a.drafts, b.drafts);
}

}  // namespace ls::dspark::cuda_test

#endif  // LS_HAVE_CUDA
