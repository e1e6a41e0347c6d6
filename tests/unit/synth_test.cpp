// Tests for synth: the public shape table, synthetic checkpoints that pass the loader's checks, determinism by seed.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>

#include <nlohmann/json.hpp>

#include "base/hash.h"
#include "io/model_config.h"
#include "io/safetensors.h"
#include "io/synthetic_checkpoint.h"
#include "io_test_util.h"
#include "model/shapes.h"

namespace ls {
namespace {

using io::testing::TempDir;

std::string config_for(std::string_view name, std::optional<int> layers = std::nullopt, std::optional<int> vocab = std::nullopt) {
  const model::ModelShape* shape = model::find_model_shape(name);
  EXPECT_NE(shape, nullptr) << name;
  model::ShapeOverrides overrides;
  overrides.num_layers = layers;
  overrides.vocab_size = vocab;
  Result<std::string> text = model::shape_config_json(*shape, overrides);
  EXPECT_TRUE(text.ok()) << text.status().to_string();
  return text.ok() ? *text : "";
}

int64_t parameter_count(const io::ModelConfig& config) {
  int64_t total = 0;
  for (const io::ExpectedTensor& tensor : io::expected_target_tensors(config)) {
    int64_t elements = 1;
    for (int64_t dim : tensor.shape) elements *= dim;
    total += elements;
  }
  return total;
}

TEST(ShapeTable, EveryShapeParsesAndHasThePublicParameterCount) {
  // Published totals (model cards), in billions; our tensor lists must land within 4%.
  const std::map<std::string, double> published = {
      {"lfm2-350m", 0.354}, {"lfm2-700m", 0.742}, {"lfm2-1.2b", 1.17},   {"lfm2.5-1.2b", 1.17},  {"lfm2-2.6b", 2.57},
      {"lfm2-8b-a1b", 8.3}, {"lfm2.5-8b-a1b", 8.4}, {"lfm2-24b-a2b", 24.0}, {"lfm2.5-24b-a2b", 24.1}};
  ASSERT_EQ(model::model_shapes().size(), published.size());
  for (const model::ModelShape& shape : model::model_shapes()) {
    Result<io::ModelConfig> config = io::parse_model_config(config_for(shape.name));
    ASSERT_TRUE(config.ok()) << shape.name << ": " << config.status().to_string();
    EXPECT_EQ(config->head_dim, 64) << shape.name;
    EXPECT_EQ(config->eos_token_id, 7) << shape.name;
    EXPECT_EQ(config->moe.has_value(), shape.moe) << shape.name;
    int attention = 0;
    for (io::LayerKind kind : config->layer_kinds) attention += kind == io::LayerKind::Attention;
    EXPECT_EQ(attention, static_cast<int>(shape.attention_layers.size())) << shape.name;
    const double billions = parameter_count(*config) / 1e9;
    const double expected = published.at(std::string(shape.name));
    EXPECT_NEAR(billions, expected, 0.04 * expected) << shape.name;
  }
}

TEST(ShapeTable, DenseShapesGetTheirEffectiveFfnWidths) {
  const std::map<std::string, int> widths = {{"lfm2-350m", 4608}, {"lfm2-700m", 6912}, {"lfm2-1.2b", 8192},
                                             {"lfm2.5-1.2b", 8192}, {"lfm2-2.6b", 10752}};
  for (const auto& [name, width] : widths) {
    Result<io::ModelConfig> config = io::parse_model_config(config_for(name));
    ASSERT_TRUE(config.ok()) << name;
    EXPECT_EQ(config->ffn_size, width) << name;
  }
}

TEST(ShapeTable, LayersKeepAPrefixOfThePatternAndOverridesOutOfRangeAreRefused) {
  Result<io::ModelConfig> config = io::parse_model_config(config_for("lfm2-8b-a1b", 7, 1024));
  ASSERT_TRUE(config.ok());
  std::string pattern;
  for (io::LayerKind kind : config->layer_kinds) pattern += kind == io::LayerKind::Attention ? 'A' : 'c';
  EXPECT_EQ(pattern, "ccAcccA");
  EXPECT_EQ(config->vocab_size, 1024);
  EXPECT_EQ(config->moe->num_dense_layers, 2);
  Result<io::ModelConfig> one = io::parse_model_config(config_for("lfm2-8b-a1b", 1));
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->moe->num_dense_layers, 1);
  const model::ModelShape& shape = *model::find_model_shape("lfm2-350m");
  for (int layers : {0, 17}) {
    Result<std::string> refused = model::shape_config_json(shape, {layers, std::nullopt, "bfloat16"});
    ASSERT_FALSE(refused.ok()) << layers;
    EXPECT_EQ(refused.status().code(), ErrorCode::InvalidArgument);
  }
  Result<std::string> tiny_vocab = model::shape_config_json(shape, {std::nullopt, 8, "bfloat16"});
  ASSERT_FALSE(tiny_vocab.ok());
  EXPECT_NE(tiny_vocab.status().message().find("--vocab 8 must be above 13"), std::string::npos);
  EXPECT_EQ(model::find_model_shape("lfm2-9000b"), nullptr);
}

TEST(ShapeTable, DenseConfigsCarryTheLiquidBlockFieldsAndRopeParameters) {
  const nlohmann::json config = nlohmann::json::parse(config_for("lfm2-350m"));
  EXPECT_EQ(config["block_ff_dim"], 6656);
  EXPECT_EQ(config["block_auto_adjust_ff_dim"], true);
  EXPECT_EQ(config["block_multiple_of"], 256);
  EXPECT_EQ(config["rope_parameters"]["rope_theta"], 1e6);
  EXPECT_EQ(config["eos_token_id"], 7);
  EXPECT_EQ(config["architectures"][0], "Lfm2ForCausalLM");
  EXPECT_EQ(config["tie_embedding"], true);
  Result<io::ModelConfig> moe = io::parse_model_config(config_for("lfm2.5-8b-a1b"));
  ASSERT_TRUE(moe.ok());
  EXPECT_EQ(moe->rope_theta, 5e6);
  EXPECT_EQ(moe->vocab_size, 128000);
}

// Opens a synthetic checkpoint and checks it as the model loader will.
std::unique_ptr<io::Checkpoint> open_checked(const std::string& directory, io::ModelConfig& config) {
  Result<io::ModelConfig> parsed = io::read_model_config(directory);
  EXPECT_TRUE(parsed.ok()) << parsed.status().to_string();
  if (!parsed.ok()) return nullptr;
  config = *parsed;
  auto checkpoint = io::Checkpoint::open(directory);
  EXPECT_TRUE(checkpoint.ok()) << checkpoint.status().to_string();
  if (!checkpoint.ok()) return nullptr;
  Status status = io::check_target_tensors(**checkpoint, config);
  EXPECT_TRUE(status.ok()) << status.to_string();
  return std::move(checkpoint).value();
}

TEST(Synth, Lfm2350mWithTwoLayersPassesTheTensorCheck) {
  TempDir dir;
  Result<io::SyntheticSummary> summary = io::write_synthetic_checkpoint(dir.path(), config_for("lfm2-350m", 2), {1});
  ASSERT_TRUE(summary.ok()) << summary.status().to_string();
  EXPECT_EQ(summary->shards, 1);
  EXPECT_TRUE(std::filesystem::exists(dir.file("model-00001-of-00001.safetensors")));
  io::ModelConfig config;
  auto checkpoint = open_checked(dir.path(), config);
  ASSERT_NE(checkpoint, nullptr);
  EXPECT_EQ(checkpoint->tensors().size(), summary->tensors);
  EXPECT_EQ(config.ffn_size, 4608);
  for (const io::TensorInfo& tensor : checkpoint->tensors()) EXPECT_EQ(tensor.dtype, io::DType::BF16) << tensor.name;
}

TEST(Synth, Lfm28bA1bWithThreeLayersShardsAndKeepsExpertBiasF32) {
  TempDir dir;
  io::SyntheticOptions options{3, io::DType::BF16, size_t{200} << 20};
  Result<io::SyntheticSummary> summary = io::write_synthetic_checkpoint(dir.path(), config_for("lfm2-8b-a1b", 3, 1024), options);
  ASSERT_TRUE(summary.ok()) << summary.status().to_string();
  EXPECT_GT(summary->shards, 1);
  for (int shard = 1; shard <= summary->shards; ++shard) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", shard, summary->shards);
    ASSERT_TRUE(std::filesystem::exists(dir.file(name))) << name;
    EXPECT_LE(std::filesystem::file_size(dir.file(name)), options.max_shard_bytes + 65536) << name;
  }
  io::ModelConfig config;
  auto checkpoint = open_checked(dir.path(), config);
  ASSERT_NE(checkpoint, nullptr);
  ASSERT_TRUE(config.is_moe_layer(2));
  const io::TensorInfo* bias = checkpoint->find("model.layers.2.feed_forward.expert_bias");
  ASSERT_NE(bias, nullptr);
  EXPECT_EQ(bias->dtype, io::DType::F32);
  EXPECT_NE(checkpoint->find("model.layers.2.feed_forward.experts.31.w2.weight"), nullptr);
  EXPECT_EQ(checkpoint->find("model.layers.2.feed_forward.w1.weight"), nullptr);
  EXPECT_EQ(checkpoint->tensors().size(), summary->tensors);
}

// SHA-256 of every file in a directory, by name.
std::map<std::string, std::string> directory_hashes(const std::string& directory) {
  std::map<std::string, std::string> hashes;
  for (const auto& entry : std::filesystem::directory_iterator(directory)) {
    const std::string bytes = io::testing::read_bytes(entry.path().string());
    hashes[entry.path().filename().string()] =
        sha256_hex(std::span(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
  }
  return hashes;
}

TEST(Synth, TheSameSeedWritesTheSameBytesAndAnotherSeedOtherBytes) {
  TempDir first, second, other;
  const std::string config = config_for("lfm2-350m", 1, 1024);
  io::SyntheticOptions options{42, io::DType::BF16, size_t{8} << 20};  // small shards: several files to compare
  ASSERT_TRUE(io::write_synthetic_checkpoint(first.path(), config, options).ok());
  ASSERT_TRUE(io::write_synthetic_checkpoint(second.path(), config, options).ok());
  options.seed = 43;
  ASSERT_TRUE(io::write_synthetic_checkpoint(other.path(), config, options).ok());
  const auto hashes = directory_hashes(first.path());
  EXPECT_GT(hashes.size(), 3u);  // config, index, several shards
  EXPECT_EQ(hashes, directory_hashes(second.path()));
  const auto other_hashes = directory_hashes(other.path());
  ASSERT_EQ(other_hashes.size(), hashes.size());
  for (const auto& [name, hash] : hashes) {
    if (name.find(".safetensors") != std::string::npos && name.find("index") == std::string::npos)
      EXPECT_NE(other_hashes.at(name), hash) << name << " did not change with the seed";
  }
}

TEST(Synth, WeightsHaveTheDocumentedScalesAndStayFinite) {
  TempDir dir;
  io::SyntheticOptions options{5, io::DType::F32};
  ASSERT_TRUE(io::write_synthetic_checkpoint(dir.path(), config_for("lfm2-350m", 3, 512), options).ok());
  io::ModelConfig config;
  auto checkpoint = open_checked(dir.path(), config);
  ASSERT_NE(checkpoint, nullptr);
  auto stats = [&](const std::string& name, double& mean, double& std_dev, double& max_abs) {
    const io::TensorInfo* tensor = checkpoint->find(name);
    ASSERT_NE(tensor, nullptr) << name;
    std::vector<float> values(tensor->elements(), NAN);
    ASSERT_TRUE(checkpoint->read_f32(name, tensor->shape, values).ok());
    double sum = 0, squares = 0;
    max_abs = 0;
    for (float value : values) {
      ASSERT_TRUE(std::isfinite(value)) << name;
      sum += value;
      max_abs = std::max(max_abs, std::fabs(static_cast<double>(value)));
    }
    mean = sum / values.size();
    for (float value : values) squares += (value - mean) * (value - mean);
    std_dev = std::sqrt(squares / values.size());
  };
  double mean, std_dev, max_abs;
  stats("model.layers.0.feed_forward.w1.weight", mean, std_dev, max_abs);
  EXPECT_NEAR(mean, 0.0, 1e-4);
  EXPECT_NEAR(std_dev, 0.02, 0.0005);
  stats("model.layers.2.self_attn.q_layernorm.weight", mean, std_dev, max_abs);
  EXPECT_NEAR(mean, 1.0, 0.05);
  EXPECT_LE(max_abs, 1.1);
  EXPECT_GT(std_dev, 0.01);  // not all ones: a (1 + w) convention bug would show
  stats("model.layers.0.conv.conv.weight", mean, std_dev, max_abs);
  EXPECT_LE(max_abs, 0.5);
  EXPECT_GT(std_dev, 0.2);
}

TEST(Synth, AnUnparseableConfigWritesNothing) {
  TempDir dir;
  Result<io::SyntheticSummary> summary = io::write_synthetic_checkpoint(dir.file("out"), R"({"model_type":"gpt2"})", {1});
  ASSERT_FALSE(summary.ok());
  EXPECT_EQ(summary.status().code(), ErrorCode::UnsupportedArchitecture);
  EXPECT_FALSE(std::filesystem::exists(dir.file("out")));
}

}  // namespace
}  // namespace ls
