// Tests for DSpark config admission: LiquidAI's published layouts parse; every refusal names its field and numbers.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "draft/dspark/config.h"

namespace ls::dspark {
namespace {

using json = nlohmann::json;

// LiquidAI/LFM2.5-1.2B-Instruct-DSpark config.json field layout (reference/dspark.md §3.1).
json published_1_2b() {
  return json::parse(R"({
    "architectures": ["Lfm2DSparkDraftModel"], "model_type": "qwen3",
    "hidden_size": 2048, "num_hidden_layers": 5, "num_attention_heads": 32, "num_key_value_heads": 8,
    "head_dim": 64, "intermediate_size": 6144, "hidden_act": "silu", "rms_norm_eps": 1e-5,
    "vocab_size": 65536, "rope_theta": 1000000.0, "max_position_embeddings": 128000,
    "layer_types": ["full_attention", "full_attention", "full_attention", "full_attention", "full_attention"],
    "block_size": 9,
    "dflash_config": {"mask_token_id": 64402, "target_layer_ids": [2, 5, 8, 11, 14], "num_target_layers": 16},
    "markov_rank": 256, "markov_head_type": "vanilla", "rope_is_neox_style": false,
    "enable_confidence_head": true
  })");
}

// LiquidAI/LFM2.5-8B-A1B-DSpark (128k vocabulary, theta 5e6, 24-layer target).
json published_8b_a1b() {
  json config = published_1_2b();
  config["vocab_size"] = 128000;
  config["rope_theta"] = 5000000.0;
  config["dflash_config"] = {
      {"mask_token_id", 125017}, {"target_layer_ids", {2, 6, 10, 14, 18}}, {"num_target_layers", 24}};
  return config;
}

TargetFacts target_1_2b() {
  TargetFacts facts;
  facts.vocab_size = 65536;
  facts.hidden_size = 2048;
  facts.num_layers = 16;
  return facts;
}

// Parses `config` and expects refusal `code` whose message mentions `field`.
void expect_refused(const json& config, ErrorCode code, const std::string& field) {
  Result<DsparkConfig> parsed = parse_dspark_config(config.dump());
  ASSERT_FALSE(parsed.ok()) << "admitted: " << config.dump();
  EXPECT_EQ(parsed.status().code(), code) << parsed.status().to_string();
  EXPECT_NE(parsed.status().message().find(field), std::string::npos) << parsed.status().to_string();
}

TEST(DsparkConfig, PublishedOnePointTwoBLayoutParsesWithTheDflashConfigFields) {
  Result<DsparkConfig> parsed = parse_dspark_config(published_1_2b().dump());
  ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
  const DsparkConfig& config = *parsed;
  EXPECT_EQ(config.vocab_size, 65536);
  EXPECT_EQ(config.hidden_size, 2048);
  EXPECT_EQ(config.num_layers, 5);
  EXPECT_EQ(config.num_heads, 32);
  EXPECT_EQ(config.num_kv_heads, 8);
  EXPECT_EQ(config.head_dim, 64);
  EXPECT_EQ(config.ffn_size, 6144);
  EXPECT_FLOAT_EQ(config.norm_eps, 1e-5f);
  EXPECT_EQ(config.rope_theta, 1e6);
  EXPECT_EQ(config.rope_style, RopeStyle::Interleaved);
  EXPECT_EQ(config.block_size, 9);
  EXPECT_EQ(config.mask_token_id, 64402);
  EXPECT_EQ(config.target_layer_ids, (std::vector<int>{2, 5, 8, 11, 14}));
  EXPECT_EQ(config.num_target_layers, 16);
  EXPECT_EQ(config.markov_rank, 256);
  EXPECT_TRUE(config.has_confidence);
  EXPECT_TRUE(config.confidence_temperatures.empty());
  EXPECT_TRUE(check_draft_fits_target(config, target_1_2b()).ok());
}

TEST(DsparkConfig, PublishedEightBA1BLayoutParses) {
  Result<DsparkConfig> parsed = parse_dspark_config(published_8b_a1b().dump());
  ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
  EXPECT_EQ(parsed->vocab_size, 128000);
  EXPECT_EQ(parsed->rope_theta, 5e6);
  EXPECT_EQ(parsed->mask_token_id, 125017);
  EXPECT_EQ(parsed->target_layer_ids, (std::vector<int>{2, 6, 10, 14, 18}));
  EXPECT_EQ(parsed->num_target_layers, 24);
}

TEST(DsparkConfig, FieldsAreFoundTopLevelUnderDsparkConfigAndDsparkPrefixed) {
  json base = published_1_2b();
  json fields = base["dflash_config"];
  base.erase("dflash_config");

  json top = base;
  for (auto& [key, value] : fields.items()) top[key] = value;
  json nested = base;
  nested["dspark_config"] = fields;
  json prefixed = base;
  for (auto& [key, value] : fields.items()) prefixed["dspark_" + key] = value;

  for (const json& config : {top, nested, prefixed}) {
    Result<DsparkConfig> parsed = parse_dspark_config(config.dump());
    ASSERT_TRUE(parsed.ok()) << parsed.status().to_string() << " for " << config.dump();
    EXPECT_EQ(parsed->mask_token_id, 64402);
    EXPECT_EQ(parsed->target_layer_ids, (std::vector<int>{2, 5, 8, 11, 14}));
    EXPECT_EQ(parsed->num_target_layers, 16);
  }
}

TEST(DsparkConfig, TwoPlacesDisagreeingOnAFieldIsRefused) {
  json config = published_1_2b();
  config["mask_token_id"] = 7;
  expect_refused(config, ErrorCode::BadDraftConfig, "mask_token_id");
}

TEST(DsparkConfig, NeoxStyleAndCalibrationTemperaturesAreRead) {
  json config = published_1_2b();
  config["rope_is_neox_style"] = true;
  config["confidence_temperatures"] = {1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7, 1.8};
  Result<DsparkConfig> parsed = parse_dspark_config(config.dump());
  ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
  EXPECT_EQ(parsed->rope_style, RopeStyle::NeoX);
  ASSERT_EQ(parsed->confidence_temperatures.size(), 9u);
  EXPECT_FLOAT_EQ(parsed->confidence_temperatures[8], 1.8f);
}

TEST(DsparkConfig, ActivationOtherThanSiluIsRefusedByName) {
  json config = published_1_2b();
  config["hidden_act"] = "gelu";
  expect_refused(config, ErrorCode::UnsupportedDraftActivation, "hidden_act \"gelu\"");
}

TEST(DsparkConfig, MarkovRankAboveTheKernelLimitIsRefused) {
  json config = published_1_2b();
  config["markov_rank"] = 512;
  expect_refused(config, ErrorCode::UnsupportedDraftShape, "markov_rank 512");
  config["markov_rank"] = kMaxMarkovRank + 1;
  expect_refused(config, ErrorCode::UnsupportedDraftShape, "257");
}

TEST(DsparkConfig, MissingMarkovHeadIsRefusedAsDflash) {
  json config = published_1_2b();
  config["markov_rank"] = 0;
  expect_refused(config, ErrorCode::UnsupportedDraftShape, "markov_rank 0");
}

TEST(DsparkConfig, MarkovHeadOtherThanVanillaIsRefused) {
  json config = published_1_2b();
  config["markov_head_type"] = "rnn";
  expect_refused(config, ErrorCode::UnsupportedDraftShape, "markov_head_type \"rnn\"");
}

TEST(DsparkConfig, DflashSlotConventionsAreRefused) {
  json speculators = published_1_2b();
  speculators["speculators_model_type"] = "dspark";
  expect_refused(speculators, ErrorCode::UnsupportedDraftShape, "speculators_model_type");
  json no_anchor = published_1_2b();
  no_anchor["dflash_config"]["sample_from_anchor"] = false;
  expect_refused(no_anchor, ErrorCode::UnsupportedDraftShape, "sample_from_anchor");
  json bonus = published_1_2b();
  bonus["dspark_bonus_anchor"] = true;
  expect_refused(bonus, ErrorCode::UnsupportedDraftShape, "dspark_bonus_anchor");
}

TEST(DsparkConfig, CausalBlocksAndSlidingWindowsAreRefused) {
  json causal = published_1_2b();
  causal["dflash_config"]["causal"] = true;
  expect_refused(causal, ErrorCode::UnsupportedDraftShape, "causal");
  json swa = published_1_2b();
  swa["use_swa"] = true;
  expect_refused(swa, ErrorCode::UnsupportedDraftShape, "use_swa");
  json window = published_1_2b();
  window["sliding_window"] = 128;
  expect_refused(window, ErrorCode::UnsupportedDraftShape, "sliding_window 128");
  json sliding_layer = published_1_2b();
  sliding_layer["layer_types"][2] = "sliding_attention";
  expect_refused(sliding_layer, ErrorCode::UnsupportedDraftShape, "sliding_attention");
  // Qwen3's inactive default window is not a refusal.
  json inactive = published_1_2b();
  inactive["sliding_window"] = 4096;
  inactive["use_sliding_window"] = false;
  EXPECT_TRUE(parse_dspark_config(inactive.dump()).ok());
}

TEST(DsparkConfig, NonFiniteOrNonPositiveRopeThetaIsRefused) {
  json config = published_1_2b();
  config["rope_theta"] = 1e100;  // finite as double, infinite as the fp32 RoPE tables see it
  expect_refused(config, ErrorCode::BadDraftConfig, "rope_theta 1e+100");
  config["rope_theta"] = 0.0;
  expect_refused(config, ErrorCode::BadDraftConfig, "rope_theta 0");
  config["rope_theta"] = -5.0;
  expect_refused(config, ErrorCode::BadDraftConfig, "rope_theta -5");
  std::string text = published_1_2b().dump();
  text.replace(text.find("1000000.0"), 9, "1e400");  // overflows double: the JSON reader itself refuses it
  Result<DsparkConfig> parsed = parse_dspark_config(text);
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), ErrorCode::BadDraftConfig) << parsed.status().to_string();
}

TEST(DsparkConfig, MissingMaskIdIsRefused) {
  json config = published_1_2b();
  config["dflash_config"].erase("mask_token_id");
  expect_refused(config, ErrorCode::BadDraftConfig, "mask_token_id");
  config["dflash_config"]["mask_token_id"] = 65536;
  expect_refused(config, ErrorCode::BadDraftConfig, "mask_token_id 65536 is outside vocab_size 65536");
}

TEST(DsparkConfig, BlockSizeZeroIsRefused) {
  json config = published_1_2b();
  config["block_size"] = 0;
  expect_refused(config, ErrorCode::BadDraftConfig, "block_size 0");
}

TEST(DsparkConfig, MissingRequiredFieldsAreRefusedByName) {
  for (const char* field : {"hidden_size", "vocab_size", "num_hidden_layers", "intermediate_size", "block_size",
                            "markov_rank", "rope_theta"}) {
    json config = published_1_2b();
    config.erase(field);
    expect_refused(config, ErrorCode::BadDraftConfig, std::string("missing field ") + field);
  }
  json no_taps = published_1_2b();
  no_taps["dflash_config"].erase("target_layer_ids");
  expect_refused(no_taps, ErrorCode::BadDraftConfig, "target_layer_ids");
}

TEST(DsparkConfig, TemperaturesOfTheWrongCountAreRefused) {
  json config = published_1_2b();
  config["confidence_temperatures"] = {1.0, 1.0};
  expect_refused(config, ErrorCode::BadDraftConfig, "block_size 9");
}

TEST(DsparkConfig, VocabularyThatDiffersFromTheTargetIsAMismatch) {
  Result<DsparkConfig> parsed = parse_dspark_config(published_8b_a1b().dump());
  ASSERT_TRUE(parsed.ok());
  TargetFacts target = target_1_2b();
  target.num_layers = 24;
  Status status = check_draft_fits_target(*parsed, target);
  EXPECT_EQ(status.code(), ErrorCode::DraftTargetMismatch);
  EXPECT_NE(status.message().find("vocab_size 128000 != target vocab_size 65536"), std::string::npos)
      << status.to_string();
}

TEST(DsparkConfig, HiddenSizeThatDiffersFromTheTargetIsAMismatch) {
  Result<DsparkConfig> parsed = parse_dspark_config(published_1_2b().dump());
  ASSERT_TRUE(parsed.ok());
  TargetFacts target = target_1_2b();
  target.hidden_size = 1024;
  Status status = check_draft_fits_target(*parsed, target);
  EXPECT_EQ(status.code(), ErrorCode::DraftTargetMismatch);
  EXPECT_NE(status.message().find("hidden_size 2048 != target hidden_size 1024"), std::string::npos)
      << status.to_string();
}

TEST(DsparkConfig, TapOnTheLastTargetLayerOrNegativeIsAMismatch) {
  json config = published_1_2b();
  config["dflash_config"]["target_layer_ids"] = {2, 5, 8, 11, 15};  // 15 = last layer of 16: post-norm elsewhere
  Result<DsparkConfig> parsed = parse_dspark_config(config.dump());
  ASSERT_TRUE(parsed.ok());
  Status status = check_draft_fits_target(*parsed, target_1_2b());
  EXPECT_EQ(status.code(), ErrorCode::DraftTargetMismatch);
  EXPECT_NE(status.message().find("target_layer_ids holds 15, outside [0, 14]"), std::string::npos)
      << status.to_string();
  config["dflash_config"]["target_layer_ids"] = {-1, 5};
  parsed = parse_dspark_config(config.dump());
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(check_draft_fits_target(*parsed, target_1_2b()).code(), ErrorCode::DraftTargetMismatch);
}

TEST(DsparkConfig, TargetLayerCountThatDiffersIsAMismatch) {
  Result<DsparkConfig> parsed = parse_dspark_config(published_1_2b().dump());
  ASSERT_TRUE(parsed.ok());
  TargetFacts target = target_1_2b();
  target.num_layers = 30;
  Status status = check_draft_fits_target(*parsed, target);
  EXPECT_EQ(status.code(), ErrorCode::DraftTargetMismatch);
  EXPECT_NE(status.message().find("num_target_layers 16 != target layers 30"), std::string::npos) << status.to_string();
}

TEST(DsparkConfig, DrafterBitsOtherThanZeroAndEightAreRefused) {
  EXPECT_TRUE(check_draft_bits(0).ok());
  EXPECT_TRUE(check_draft_bits(8).ok());
  for (int bits : {4, 16, -1, 1}) {
    Status status = check_draft_bits(bits);
    EXPECT_EQ(status.code(), ErrorCode::UnsupportedDraftBits);
    EXPECT_NE(status.message().find("--drafter-bits " + std::to_string(bits)), std::string::npos) << status.to_string();
  }
}

}  // namespace
}  // namespace ls::dspark
