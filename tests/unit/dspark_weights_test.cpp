// Tests for DSpark weights: the manifest checked before reading, LiquidAI's full-size layouts, int8 and RoPE ops.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "base/thread_pool.h"
#include "compute/cpu/cpu_features.h"
#include "compute/cpu/draft_ops.h"
#include "compute/cpu/matmul_amx.h"
#include "draft/dspark/dspark_drafter.h"
#include "draft/dspark/weights.h"
#include "dspark_test_support.h"

namespace ls::dspark {
namespace {

using json = nlohmann::json;
using testing::EmbeddingTarget;
using testing::TempDir;

std::vector<testing::RandomTensor> manifest_tensors(const DsparkConfig& config) {
  std::vector<testing::RandomTensor> tensors;
  for (const ManifestEntry& entry : draft_manifest(config)) tensors.push_back({entry.name, entry.shape});
  return tensors;
}

DsparkConfig parse(const json& config) {
  Result<DsparkConfig> parsed = parse_dspark_config(config.dump());
  LS_CHECK(parsed.ok(), parsed.status().to_string().c_str());
  return *parsed;
}

// Opens `directory`'s checkpoint and runs the manifest check.
Status check_directory(const std::string& directory, const DsparkConfig& config) {
  LS_ASSIGN_OR_RETURN(std::unique_ptr<io::Checkpoint> checkpoint, io::Checkpoint::open(directory));
  return check_draft_tensors(*checkpoint, config);
}

json published(int vocab, double theta, int mask, std::vector<int> taps, int target_layers) {
  json config = testing::small_drafter_config();
  config.update(json{{"hidden_size", 2048},
                     {"num_hidden_layers", 5},
                     {"num_attention_heads", 32},
                     {"num_key_value_heads", 8},
                     {"head_dim", 64},
                     {"intermediate_size", 6144},
                     {"vocab_size", vocab},
                     {"rope_theta", theta},
                     {"block_size", 9},
                     {"markov_rank", 256},
                     {"max_position_embeddings", 128000},
                     {"layer_types", std::vector<std::string>(5, "full_attention")}});
  config["dflash_config"] = {{"mask_token_id", mask}, {"target_layer_ids", taps}, {"num_target_layers", target_layers}};
  return config;
}

int64_t parameter_count(const std::vector<ManifestEntry>& manifest) {
  int64_t total = 0;
  for (const ManifestEntry& entry : manifest) {
    int64_t count = 1;
    for (int64_t dim : entry.shape) count *= dim;
    total += count;
  }
  return total;
}

TEST(DsparkWeights, PublishedOnePointTwoBManifestHasLiquidAisSixtyTwoTensorsAndPassesOnAFullSizeCheckpoint) {
  const DsparkConfig config = parse(published(65536, 1e6, 64402, {2, 5, 8, 11, 14}, 16));
  const std::vector<ManifestEntry> manifest = draft_manifest(config);
  EXPECT_EQ(manifest.size(), 62u);
  EXPECT_EQ(parameter_count(manifest), 295'725'953);  // 295.73 M (reference/dspark.md §3.2)
  TempDir dir;
  testing::write_text(dir.path() + "/config.json", published(65536, 1e6, 64402, {2, 5, 8, 11, 14}, 16).dump());
  testing::write_sparse_checkpoint(dir.path() + "/model.safetensors", manifest_tensors(config));
  Result<DsparkConfig> read = read_dspark_config(dir.path());
  ASSERT_TRUE(read.ok()) << read.status().to_string();
  TargetFacts target{65536, 2048, 16, 64, 16, 7};
  EXPECT_TRUE(check_draft_fits_target(*read, target).ok());
  Status status = check_directory(dir.path(), *read);
  EXPECT_TRUE(status.ok()) << status.to_string();
}

TEST(DsparkWeights, PublishedEightBA1BManifestPassesOnAFullSizeCheckpoint) {
  const json layout = published(128000, 5e6, 125017, {2, 6, 10, 14, 18}, 24);
  const DsparkConfig config = parse(layout);
  EXPECT_EQ(parameter_count(draft_manifest(config)), 327'707'521);  // 327.7 M
  TempDir dir;
  testing::write_text(dir.path() + "/config.json", layout.dump());
  testing::write_sparse_checkpoint(dir.path() + "/model.safetensors", manifest_tensors(config));
  Result<DsparkConfig> read = read_dspark_config(dir.path());
  ASSERT_TRUE(read.ok()) << read.status().to_string();
  TargetFacts target{128000, 2048, 24, 64, 16, 7};
  EXPECT_TRUE(check_draft_fits_target(*read, target).ok());
  Status status = check_directory(dir.path(), *read);
  EXPECT_TRUE(status.ok()) << status.to_string();
}

TEST(DsparkWeights, TensorOfTheWrongShapeIsRefusedNamingBothShapes) {
  const DsparkConfig config = parse(testing::small_drafter_config());
  std::vector<testing::RandomTensor> tensors = manifest_tensors(config);
  for (auto& tensor : tensors)
    if (tensor.name == "layers.1.self_attn.k_proj.weight") tensor.shape = {16, 32};
  TempDir dir;
  testing::write_sparse_checkpoint(dir.path() + "/model.safetensors", tensors);
  Status status = check_directory(dir.path(), config);
  EXPECT_EQ(status.code(), ErrorCode::BadSafetensors);
  EXPECT_NE(status.message().find("layers.1.self_attn.k_proj.weight has shape [16, 32], the config needs [32, 32]"),
            std::string::npos)
      << status.to_string();
}

TEST(DsparkWeights, MissingTensorIsRefusedByName) {
  const DsparkConfig config = parse(testing::small_drafter_config());
  std::vector<testing::RandomTensor> tensors = manifest_tensors(config);
  std::erase_if(tensors, [](const auto& tensor) { return tensor.name == "markov_head.markov_w2.weight"; });
  TempDir dir;
  testing::write_sparse_checkpoint(dir.path() + "/model.safetensors", tensors);
  Status status = check_directory(dir.path(), config);
  EXPECT_EQ(status.code(), ErrorCode::BadSafetensors);
  EXPECT_NE(status.message().find("lacks markov_head.markov_w2.weight [96, 8]"), std::string::npos)
      << status.to_string();
}

TEST(DsparkWeights, ReducedDraftVocabularyIsRefusedAndUnknownTensorsAreBad) {
  const DsparkConfig config = parse(testing::small_drafter_config());
  std::vector<testing::RandomTensor> tensors = manifest_tensors(config);
  tensors.push_back({"d2t", {32}});
  TempDir dir;
  testing::write_sparse_checkpoint(dir.path() + "/model.safetensors", tensors);
  Status status = check_directory(dir.path(), config);
  EXPECT_EQ(status.code(), ErrorCode::UnsupportedDraftShape);
  EXPECT_NE(status.message().find("d2t"), std::string::npos) << status.to_string();

  tensors.back() = {"layers.0.self_attn.q_proj.bias", {64}};
  testing::write_sparse_checkpoint(dir.path() + "/model.safetensors", tensors);
  status = check_directory(dir.path(), config);
  EXPECT_EQ(status.code(), ErrorCode::BadSafetensors);
  EXPECT_NE(status.message().find("unexpected tensor layers.0.self_attn.q_proj.bias"), std::string::npos);

  tensors.back() = {"embed_tokens.weight", {96, 32}};  // a training checkpoint's frozen copy of the target's: skipped
  testing::write_sparse_checkpoint(dir.path() + "/model.safetensors", tensors);
  EXPECT_TRUE(check_directory(dir.path(), config).ok());
}

TEST(DsparkWeights, RefusalsComeBeforeTheCheckpointIsOpened) {
  // No model.safetensors at all: a refusal that needed the weights would say NotFound instead.
  TempDir dir;
  testing::write_text(dir.path() + "/config.json", testing::small_drafter_config().dump());
  EmbeddingTarget target(testing::random_embedding(96, 32, 1), 96, 32, 4);
  DrafterOptions options;
  options.bits = 4;
  Result<std::unique_ptr<DsparkDrafter>> loaded = DsparkDrafter::load(dir.path(), target, options);
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), ErrorCode::UnsupportedDraftBits);
  EXPECT_NE(loaded.status().message().find("--drafter-bits 4"), std::string::npos);

  EmbeddingTarget wide_target(testing::random_embedding(96, 64, 1), 96, 64, 4);
  loaded = DsparkDrafter::load(dir.path(), wide_target, DrafterOptions{});
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), ErrorCode::DraftTargetMismatch) << loaded.status().to_string();
  EXPECT_EQ(wide_target.state_calls, 0);
}

TEST(DsparkWeights, BitsZeroKeepsTheStoredBf16ValuesBitForBit) {
  TempDir dir;
  ASSERT_TRUE(testing::write_small_drafter(dir.path(), testing::small_drafter_config(), 3).ok());
  Result<std::unique_ptr<io::Checkpoint>> checkpoint = io::Checkpoint::open(dir.path());
  ASSERT_TRUE(checkpoint.ok());
  const DsparkConfig config = parse(testing::small_drafter_config());
  InitSteps steps;
  Result<DsparkWeights> weights = load_draft_weights(**checkpoint, config, 0, steps);
  ASSERT_TRUE(weights.ok()) << weights.status().to_string();
  const io::TensorInfo* stored = (*checkpoint)->find("layers.1.mlp.down_proj.weight");
  const DraftMatrix& loaded = weights->layers[1].down_proj;
  ASSERT_EQ(loaded.dense.b16.size() * 2, stored->bytes);
  EXPECT_EQ(std::memcmp(loaded.dense.b16.data(), stored->data, stored->bytes), 0);
  EXPECT_FALSE(loaded.quantized());
  EXPECT_EQ(steps.peak_bytes(), weights->bytes());  // bits 0 reads straight into the final buffers
}

// The drafter packs its bf16 matrices into the kernels' panels (one huge-page arena, fc, the layers, W2): every matrix
// gives a window of 1..9 rows (a block of 7 and the absorb's few rows) the bits of its row-major weights.
TEST(DsparkWeights, PackedBf16MatricesGiveEveryRowTheBitsOfTheRowMajorWeights) {
  TempDir dir;
  ASSERT_TRUE(testing::write_small_drafter(dir.path(), testing::small_drafter_config(), 5).ok());
  Result<std::unique_ptr<io::Checkpoint>> checkpoint = io::Checkpoint::open(dir.path());
  ASSERT_TRUE(checkpoint.ok());
  const DsparkConfig config = parse(testing::small_drafter_config());
  InitSteps steps;
  Result<DsparkWeights> weights = load_draft_weights(**checkpoint, config, 0, steps);
  ASSERT_TRUE(weights.ok()) << weights.status().to_string();
  const DsparkWeights row_major = *weights;
  // The panels (the B-tiles where the drafter runs on AMX sum in another order; MatmulAmx checks that kernel).
  const bool amx = compute::set_drafter_amx(false);
  const int packed = pack_draft_weights(*weights);
  compute::set_drafter_amx(amx);
  if (!compute::cpu_features().avx512) {
    EXPECT_EQ(packed, 0);
    GTEST_SKIP() << "no AVX-512: the drafter's matrices stay row-major";
  }
  ASSERT_EQ(packed, 2 + 7 * config.num_layers);  // fc, 7 per layer, W2
  std::vector<std::pair<const DraftMatrix*, const DraftMatrix*>> pairs = {{&weights->fc, &row_major.fc},
                                                                          {&weights->markov_w2, &row_major.markov_w2}};
  for (int layer = 0; layer < config.num_layers; ++layer) {
    const DraftLayerWeights &a = weights->layers[layer], &b = row_major.layers[layer];
    for (auto [x, y] : {std::pair{&a.q_proj, &b.q_proj}, {&a.k_proj, &b.k_proj}, {&a.v_proj, &b.v_proj},
                        {&a.o_proj, &b.o_proj}, {&a.gate_proj, &b.gate_proj}, {&a.up_proj, &b.up_proj},
                        {&a.down_proj, &b.down_proj}})
      pairs.push_back({x, y});
  }
  ThreadPool pool(2);
  const compute::OpContext ctx{&pool, compute::NumericMode::Bf16};
  for (const auto& [packed_matrix, plain] : pairs) {
    ASSERT_NE(packed_matrix->dense.view().packed, nullptr);
    ASSERT_EQ(plain->dense.view().packed, nullptr);
    for (int64_t rows : {1, 3, 4, 5, 6, 7, 9}) {
      std::vector<float> x(static_cast<size_t>(rows * plain->cols));
      for (size_t i = 0; i < x.size(); ++i) x[i] = round_to_bf16(std::sin(0.37f * static_cast<float>(i + rows)));
      std::vector<float> got(static_cast<size_t>(rows * plain->rows), std::numeric_limits<float>::quiet_NaN());
      std::vector<float> want(got.size(), 0.0f);
      apply_matrix(ctx, x.data(), rows, *packed_matrix, got.data());
      apply_matrix(ctx, x.data(), rows, *plain, want.data());
      EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
          << plain->rows << "x" << plain->cols << " at " << rows << " rows";
    }
  }
}

TEST(DsparkWeights, BitsEightQuantizesEachRowAndPeaksAtFinalSizePlusTheLargestMatrix) {
  TempDir dir;
  json layout = testing::small_drafter_config();
  layout["intermediate_size"] = 256;  // the FFN matrices are the largest
  ASSERT_TRUE(testing::write_small_drafter(dir.path(), layout, 4).ok());
  Result<std::unique_ptr<io::Checkpoint>> checkpoint = io::Checkpoint::open(dir.path());
  ASSERT_TRUE(checkpoint.ok());
  const DsparkConfig config = parse(layout);
  InitSteps steps;
  Result<DsparkWeights> weights = load_draft_weights(**checkpoint, config, 8, steps);
  ASSERT_TRUE(weights.ok()) << weights.status().to_string();
  const DraftMatrix& gate = weights->layers[0].gate_proj;
  ASSERT_TRUE(gate.quantized());
  EXPECT_TRUE(gate.dense.b16.empty());
  std::vector<float> stored(256 * 32);
  ASSERT_TRUE((*checkpoint)->read_f32("layers.0.mlp.gate_proj.weight", std::vector<int64_t>{256, 32}, stored).ok());
  for (int row = 0; row < 256; ++row) {
    for (int col = 0; col < 32; ++col) {
      const float w = stored[row * 32 + col];
      EXPECT_LE(std::fabs(gate.code(row, col) * gate.scales[row] - w), 0.5f * gate.scales[row] * 1.0001f);
    }
  }
  const int64_t largest_bf16_matrix = 256 * 32 * 2;
  EXPECT_EQ(steps.held_bytes(), weights->bytes());
  EXPECT_LE(steps.peak_bytes(), weights->bytes() + largest_bf16_matrix);
  EXPECT_GT(steps.peak_bytes(), weights->bytes());  // the staging buffer did exist, one at a time
}

TEST(DsparkInt8, QuantizedRowsKeepTheLargestMagnitudeAndZeroRowsStayZero) {
  std::vector<float> row = {0.5f, -1.27f, 0.01f, 0.0f, 1.0f};
  std::vector<int8_t> codes(row.size());
  float scale = 0;
  compute::quantize_row_int8(row, codes, scale);
  EXPECT_FLOAT_EQ(scale, 1.27f / 127.0f);
  EXPECT_EQ(codes[1], -127);
  EXPECT_EQ(codes[0], 50);
  EXPECT_EQ(codes[2], 1);
  EXPECT_EQ(codes[3], 0);
  std::vector<float> zeros(4, 0.0f);
  std::vector<int8_t> zero_codes(4, 7);
  compute::quantize_row_int8(zeros, zero_codes, scale);
  EXPECT_EQ(scale, 0.0f);
  for (int8_t code : zero_codes) EXPECT_EQ(code, 0);
}

TEST(DsparkInt8, MatmulMatchesADoubleReferenceAndEveryRowIsBatchInvariant) {
  // The fp32-activation paths (AVX2 and portable); the w8a8 path on VNNI CPUs is checked below.
  const compute::CpuFeaturesOverride no_vnni(
      compute::CpuFeatures{compute::cpu_features().avx2_fma, compute::cpu_features().avx512,
                           compute::cpu_features().avx512_bf16, false});
  constexpr int64_t kRows = 13, kOut = 37, kIn = 83;  // odd sizes: tails on every path
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> x(kRows * kIn), scales(kOut);
  std::vector<int8_t> codes(kOut * kIn);
  for (float& v : x) v = uniform(rng);
  for (int8_t& c : codes) c = static_cast<int8_t>(std::lround(uniform(rng) * 127));
  for (float& s : scales) s = 0.01f + 0.02f * std::fabs(uniform(rng));
  const compute::Int8Matrix w{codes.data(), scales.data(), kOut, kIn};
  std::vector<float> all(kRows * kOut, std::numeric_limits<float>::quiet_NaN());
  compute::matmul_int8(compute::OpContext{}, x.data(), kRows, w, all.data());
  for (int64_t row = 0; row < kRows; ++row) {
    for (int64_t col = 0; col < kOut; ++col) {
      double expected = 0;
      for (int64_t k = 0; k < kIn; ++k) expected += static_cast<double>(x[row * kIn + k]) * codes[col * kIn + k];
      expected *= scales[col];
      EXPECT_NEAR(all[row * kOut + col], expected, 1e-5 * (1 + std::fabs(expected)));
    }
    std::vector<float> one(kOut, std::numeric_limits<float>::quiet_NaN());
    compute::matmul_int8(compute::OpContext{}, x.data() + row * kIn, 1, w, one.data());
    EXPECT_EQ(std::memcmp(one.data(), all.data() + row * kOut, kOut * sizeof(float)), 0) << "row " << row;
  }
  ThreadPool pool(2);
  std::vector<float> threaded(kRows * kOut, std::numeric_limits<float>::quiet_NaN());
  compute::matmul_int8(compute::OpContext{&pool}, x.data(), kRows, w, threaded.data());
  EXPECT_EQ(std::memcmp(threaded.data(), all.data(), all.size() * sizeof(float)), 0);
}

// The w8a8 kernel against a scalar model of its own arithmetic (bit for bit: the integer dots are exact), near a double
// reference of the unquantized product, with every row the same alone, in a batch, on two threads and held as
// panels; a row with a NaN gives NaN and leaves the other rows alone.
TEST(DsparkInt8, VnniW8A8MatmulEqualsItsScalarModelBitForBitAndIsBatchInvariant) {
  if (!compute::cpu_features().avx512_vnni) GTEST_SKIP() << "no AVX-512 VNNI on this CPU";
  for (int64_t kIn : {83, 384}) {  // a K that is no multiple of 4 or 64, and the nano's
    // 37 columns (a partial panel); at K 384, 301 columns: over 1M multiply-adds, so the pool runs it too
    constexpr int64_t kRows = 11;
    const int64_t kOut = kIn == 384 ? 301 : 37;
    std::mt19937 rng(static_cast<uint32_t>(20 + kIn));
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    std::vector<float> x(kRows * kIn), scales(kOut);
    std::vector<int8_t> codes(kOut * kIn);
    for (float& v : x) v = uniform(rng) * (1.0f + 4.0f * std::fabs(uniform(rng)));
    for (int64_t k = 0; k < kIn; ++k) x[3 * kIn + k] = 0.0f;  // a zero row
    x[5 * kIn + 7] = std::numeric_limits<float>::quiet_NaN();  // a row with a NaN
    for (int8_t& c : codes) c = static_cast<int8_t>(std::lround(uniform(rng) * 127));
    for (float& s : scales) s = 0.01f + 0.02f * std::fabs(uniform(rng));
    std::vector<int32_t> sums(kOut);
    compute::sum_int8_codes(codes.data(), kOut, kIn, sums.data());
    const std::vector<int8_t> panels = compute::pack_int8_panels(codes.data(), kOut, kIn);
    const compute::Int8Matrix plain{codes.data(), scales.data(), kOut, kIn};
    const compute::Int8Matrix packed{nullptr, scales.data(), kOut, kIn, sums.data(), panels.data()};
    std::vector<float> all(kRows * kOut, std::numeric_limits<float>::quiet_NaN());
    ASSERT_TRUE(compute::matmul_int8_vnni(compute::OpContext{}, x.data(), kRows, plain, all.data()));
    for (int64_t row = 0; row < kRows; ++row) {
      // the model: scale = max|x| / 127, code = round-half-even(x / scale) clamped, exact dot, float(dot) * s * w
      float largest = 0.0f;
      bool finite = true;
      for (int64_t k = 0; k < kIn; ++k) {
        finite = finite && std::isfinite(x[row * kIn + k]);
        largest = std::max(largest, std::fabs(x[row * kIn + k]));
      }
      const float scale = largest / 127.0f;
      for (int64_t col = 0; col < kOut; ++col) {
        int64_t dot = 0;
        double exact = 0, magnitude = 0;
        for (int64_t k = 0; k < kIn; ++k) {
          magnitude += std::abs(codes[col * kIn + k]) * static_cast<double>(scales[col]);
          const float q = scale > 0.0f ? std::clamp(std::nearbyint(x[row * kIn + k] / scale), -127.0f, 127.0f) : 0.0f;
          dot += static_cast<int64_t>(q) * codes[col * kIn + k];
          exact += static_cast<double>(x[row * kIn + k]) * codes[col * kIn + k] * scales[col];
        }
        const float got = all[row * kOut + col];
        if (!finite) {
          EXPECT_TRUE(std::isnan(got)) << "row " << row;
          continue;
        }
        const float model = static_cast<float>(dot) * scale * scales[col];
        EXPECT_EQ(std::memcmp(&got, &model, sizeof(float)), 0) << "row " << row << " col " << col << ": " << got
                                                               << " vs " << model;
        // int8 activations: each x off by at most half its row's scale
        EXPECT_NEAR(got, exact, 0.5 * scale * magnitude * 1.001 + 1e-5 * (1 + std::fabs(exact)));
      }
    }
    for (int64_t row = 0; row < kRows; ++row) {
      std::vector<float> one(kOut, std::numeric_limits<float>::quiet_NaN());
      compute::matmul_int8(compute::OpContext{}, x.data() + row * kIn, 1, packed, one.data());
      EXPECT_EQ(std::memcmp(one.data(), all.data() + row * kOut, kOut * sizeof(float)), 0) << "row " << row;
    }
    ThreadPool pool(2);
    std::vector<float> threaded(kRows * kOut, std::numeric_limits<float>::quiet_NaN());
    compute::matmul_int8(compute::OpContext{&pool}, x.data(), kRows, packed, threaded.data());
    EXPECT_EQ(std::memcmp(threaded.data(), all.data(), all.size() * sizeof(float)), 0);
  }
}

TEST(DsparkRope, InterleavedRotationEqualsNeoxOnPairPermutedValuesBitForBit) {
  constexpr int kHeadDim = 16, kHeads = 3, kRows = 4;
  const compute::RopeTable table = compute::make_rope_table(kHeadDim, 5e5);
  const int64_t positions[kRows] = {0, 7, 1000, 123456};
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> uniform(-3.0f, 3.0f);
  std::vector<float> interleaved(kRows * kHeads * kHeadDim);
  for (float& v : interleaved) v = uniform(rng);
  // Pair i is (2i, 2i+1) interleaved and (i, i+8) half-split.
  std::vector<float> half_split(interleaved.size());
  for (int h = 0; h < kRows * kHeads; ++h)
    for (int i = 0; i < kHeadDim / 2; ++i) {
      half_split[h * kHeadDim + i] = interleaved[h * kHeadDim + 2 * i];
      half_split[h * kHeadDim + i + kHeadDim / 2] = interleaved[h * kHeadDim + 2 * i + 1];
    }
  const std::vector<float> original = interleaved;
  for (compute::NumericMode mode : {compute::NumericMode::Fp32, compute::NumericMode::Bf16}) {
    std::vector<float> a = interleaved, b = half_split;
    const compute::OpContext ctx{nullptr, mode};
    compute::rope_rotate(ctx, a.data(), kRows, kHeads, positions, table, /*neox=*/false);
    compute::rope_rotate(ctx, b.data(), kRows, kHeads, positions, table, /*neox=*/true);
    for (int h = 0; h < kRows * kHeads; ++h)
      for (int i = 0; i < kHeadDim / 2; ++i) {
        EXPECT_EQ(a[h * kHeadDim + 2 * i], b[h * kHeadDim + i]);
        EXPECT_EQ(a[h * kHeadDim + 2 * i + 1], b[h * kHeadDim + i + kHeadDim / 2]);
      }
    // And against a double-precision rotation of the same pairs (fp32 mode only: bf16 rounds the output).
    if (mode == compute::NumericMode::Fp32) {
      for (int row = 0; row < kRows; ++row)
        for (int head = 0; head < kHeads; ++head)
          for (int i = 0; i < kHeadDim / 2; ++i) {
            const int base = (row * kHeads + head) * kHeadDim;
            const double angle = static_cast<double>(static_cast<float>(positions[row]) * table.inv_freq[i]);
            const double x0 = original[base + 2 * i], x1 = original[base + 2 * i + 1];
            EXPECT_NEAR(a[base + 2 * i], x0 * std::cos(angle) - x1 * std::sin(angle),
                        2e-5 * (1 + std::fabs(x0) + std::fabs(x1)));
            EXPECT_NEAR(a[base + 2 * i + 1], x0 * std::sin(angle) + x1 * std::cos(angle),
                        2e-5 * (1 + std::fabs(x0) + std::fabs(x1)));
          }
    }
  }
}

// The AVX-512 interleaved rotation (8 pairs at a time, products never fused) gives the scalar loop's bits in both
// modes at the drafters' head size 64 and at 16, over positions from 0 to past the angle cache, signed zeros included.
TEST(DsparkRope, TheAvx512InterleavedRotationGivesTheScalarLoopsBits) {
  if (!compute::cpu_features().avx512) GTEST_SKIP() << "no AVX-512: only the scalar loop runs";
  for (int head_dim : {16, 64})
    for (compute::NumericMode mode : {compute::NumericMode::Fp32, compute::NumericMode::Bf16}) {
      const int heads = 3, rows = 5;
      const compute::RopeTable table = compute::make_rope_table(head_dim, 1e6);
      const int64_t positions[rows] = {0, 9, 511, 4000, 70001};
      std::mt19937 rng(head_dim);
      std::uniform_real_distribution<float> uniform(-40.0f, 40.0f);
      std::vector<float> vector(static_cast<size_t>(rows * heads * head_dim));
      for (float& v : vector) v = mode == compute::NumericMode::Bf16 ? round_to_bf16(uniform(rng)) : uniform(rng);
      vector[2] = 0.0f;
      vector[3] = -0.0f;
      std::vector<float> scalar = vector;
      const compute::OpContext ctx{nullptr, mode};
      compute::rope_rotate(ctx, vector.data(), rows, heads, positions, table, /*neox=*/false);
      {
        compute::CpuFeatures plain = compute::cpu_features();
        plain.avx512 = plain.avx512_bf16 = plain.avx512_vnni = false;
        const compute::CpuFeaturesOverride forced(plain);
        compute::rope_rotate(ctx, scalar.data(), rows, heads, positions, table, /*neox=*/false);
      }
      EXPECT_EQ(std::memcmp(vector.data(), scalar.data(), vector.size() * sizeof(float)), 0)
          << "head size " << head_dim << (mode == compute::NumericMode::Bf16 ? " bf16" : " fp32");
    }
}

}  // namespace
}  // namespace ls::dspark
