// Tests for src/io/model_config: field reading as HF does it, the FFN width rule, every refusal, the tensor check.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "io/model_config.h"
#include "io/safetensors.h"
#include "io_test_util.h"

namespace ls::io {
namespace {

using json = nlohmann::json;

// LFM2-350M's config.json fields (the ones we read), in Liquid's layout with block_* fields and rope_theta.
json dense_config() {
  return json{{"architectures", {"Lfm2ForCausalLM"}},
              {"model_type", "lfm2"},
              {"vocab_size", 65536},
              {"hidden_size", 1024},
              {"num_hidden_layers", 16},
              {"num_attention_heads", 16},
              {"num_key_value_heads", 8},
              {"intermediate_size", 6656},
              {"block_ff_dim", 6656},
              {"block_auto_adjust_ff_dim", true},
              {"block_multiple_of", 256},
              {"block_ffn_dim_multiplier", 1.0},
              {"layer_types", {"conv", "conv", "full_attention", "conv", "conv", "full_attention", "conv", "conv",
                               "full_attention", "conv", "full_attention", "conv", "full_attention", "conv",
                               "full_attention", "conv"}},
              {"rope_theta", 1000000.0},
              {"norm_eps", 1e-5},
              {"conv_L_cache", 3},
              {"conv_bias", false},
              {"tie_embedding", true},
              {"bos_token_id", 1},
              {"eos_token_id", 7},
              {"pad_token_id", 0},
              {"max_position_embeddings", 128000}};
}

// LFM2-8B-A1B's fields in the transformers 5 layout (rope_parameters).
json moe_config() {
  json config = {{"architectures", {"Lfm2MoeForCausalLM"}},
                 {"model_type", "lfm2_moe"},
                 {"vocab_size", 65536},
                 {"hidden_size", 2048},
                 {"num_hidden_layers", 24},
                 {"num_attention_heads", 32},
                 {"num_key_value_heads", 8},
                 {"intermediate_size", 7168},
                 {"moe_intermediate_size", 1792},
                 {"num_experts", 32},
                 {"num_experts_per_tok", 4},
                 {"num_dense_layers", 2},
                 {"norm_topk_prob", true},
                 {"use_expert_bias", true},
                 {"routed_scaling_factor", 1.0},
                 {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 1000000.0}}},
                 {"eos_token_id", 7}};
  json types = json::array();
  for (int layer = 0; layer < 24; ++layer)
    types.push_back((layer == 2 || layer == 6 || layer == 10 || layer == 14 || layer == 18 || layer == 21) ? "full_attention" : "conv");
  config["layer_types"] = types;
  return config;
}

Result<ModelConfig> parse(const json& config) { return parse_model_config(config.dump()); }

void expect_refused(const json& config, ErrorCode code, const std::string& fragment) {
  Result<ModelConfig> parsed = parse(config);
  ASSERT_FALSE(parsed.ok()) << "expected a refusal mentioning: " << fragment;
  EXPECT_EQ(parsed.status().code(), code) << parsed.status().to_string();
  EXPECT_NE(parsed.status().message().find(fragment), std::string::npos)
      << parsed.status().to_string() << "\n  lacks: " << fragment;
}

TEST(ModelConfig, TheDenseFieldsAreReadAsTransformersReadsThem) {
  Result<ModelConfig> config = parse(dense_config());
  ASSERT_TRUE(config.ok()) << config.status().to_string();
  EXPECT_EQ(config->model_type, "lfm2");
  EXPECT_EQ(config->vocab_size, 65536);
  EXPECT_EQ(config->hidden_size, 1024);
  EXPECT_EQ(config->num_layers, 16);
  EXPECT_EQ(config->num_heads, 16);
  EXPECT_EQ(config->num_kv_heads, 8);
  EXPECT_EQ(config->head_dim, 64);
  EXPECT_EQ(config->ffn_size, 4608);
  EXPECT_EQ(config->rope_theta, 1e6);
  EXPECT_EQ(config->norm_eps, 1e-5f);
  EXPECT_EQ(config->conv_kernel, 3);
  EXPECT_TRUE(config->tie_embeddings);
  EXPECT_EQ(config->eos_token_id, 7);
  EXPECT_EQ(config->eos_token_ids, std::vector<int>{7});
  EXPECT_FALSE(config->moe.has_value());
  ASSERT_EQ(config->layer_kinds.size(), 16u);
  std::string pattern;
  for (LayerKind kind : config->layer_kinds) pattern += kind == LayerKind::Attention ? 'A' : 'c';
  EXPECT_EQ(pattern, "ccAccAccAcAcAcAc");
}

TEST(ModelConfig, TheMoeFieldsAreReadAndDenseLayersComeFirst) {
  Result<ModelConfig> config = parse(moe_config());
  ASSERT_TRUE(config.ok()) << config.status().to_string();
  ASSERT_TRUE(config->moe.has_value());
  EXPECT_EQ(config->ffn_size, 7168);  // lfm2_moe: intermediate_size as-is, no auto-adjust
  EXPECT_EQ(config->moe->num_experts, 32);
  EXPECT_EQ(config->moe->experts_per_token, 4);
  EXPECT_EQ(config->moe->expert_ffn_size, 1792);
  EXPECT_EQ(config->moe->num_dense_layers, 2);
  EXPECT_FALSE(config->is_moe_layer(1));
  EXPECT_TRUE(config->is_moe_layer(2));
  json no_defaults = moe_config();
  for (const char* key : {"num_dense_layers", "norm_topk_prob", "use_expert_bias", "routed_scaling_factor"}) no_defaults.erase(key);
  no_defaults["norm_topk_prob"] = false;
  no_defaults["routed_scaling_factor"] = 2.5;
  Result<ModelConfig> defaults = parse(no_defaults);
  ASSERT_TRUE(defaults.ok()) << defaults.status().to_string();
  EXPECT_EQ(defaults->moe->num_dense_layers, 2);
  EXPECT_FALSE(defaults->moe->norm_topk_prob);
  EXPECT_TRUE(defaults->moe->use_expert_bias);
  EXPECT_EQ(defaults->moe->routed_scaling_factor, 2.5f);
}

TEST(FfnWidthRule, ThePublicCheckpointsGetTheirKnownWidths) {
  EXPECT_EQ(effective_ffn_size(6656, true, 256, 1.0), 4608);    // LFM2-350M
  EXPECT_EQ(effective_ffn_size(10240, true, 256, 1.0), 6912);   // LFM2-700M
  EXPECT_EQ(effective_ffn_size(12288, true, 256, 1.0), 8192);   // LFM2-1.2B
  EXPECT_EQ(effective_ffn_size(10752, false, 256, 1.0), 10752); // LFM2-2.6B: no auto-adjust
}

TEST(FfnWidthRule, ANullMultiplierSkipsTheRoundingAndAMultiplierScalesBeforeIt) {
  EXPECT_EQ(effective_ffn_size(1000, true, 256, std::nullopt), 666);  // int(2000/3), no rounding
  EXPECT_EQ(effective_ffn_size(1000, true, 256, 1.0), 768);
  EXPECT_EQ(effective_ffn_size(1000, true, 64, 1.5), 1024);           // int(1.5 * 666) = 999 -> 1024
  json config = dense_config();
  config["block_ff_dim"] = 1000;
  config["block_ffn_dim_multiplier"] = nullptr;
  EXPECT_EQ(parse(config)->ffn_size, 666);
  config.erase("block_ffn_dim_multiplier");  // absent: HF's default 1.0
  EXPECT_EQ(parse(config)->ffn_size, 768);
}

TEST(FfnWidthRule, BlockFfDimOverridesIntermediateSize) {
  json config = dense_config();
  config["intermediate_size"] = 99999;
  EXPECT_EQ(parse(config)->ffn_size, 4608);
  config.erase("block_ff_dim");
  config["intermediate_size"] = 10240;
  EXPECT_EQ(parse(config)->ffn_size, 6912);
  config["block_auto_adjust_ff_dim"] = false;
  EXPECT_EQ(parse(config)->ffn_size, 10240);
}

TEST(ModelConfig, LegacyFullAttnIdxsMarkAttentionLayersAndNullMeansAllAttention) {
  json config = dense_config();
  config.erase("layer_types");
  config["full_attn_idxs"] = {0, 15};
  Result<ModelConfig> parsed = parse(config);
  ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
  EXPECT_EQ(parsed->layer_kinds[0], LayerKind::Attention);
  EXPECT_EQ(parsed->layer_kinds[1], LayerKind::Conv);
  EXPECT_EQ(parsed->layer_kinds[15], LayerKind::Attention);
  config["full_attn_idxs"] = nullptr;
  parsed = parse(config);
  ASSERT_TRUE(parsed.ok());
  for (LayerKind kind : parsed->layer_kinds) EXPECT_EQ(kind, LayerKind::Attention);
  config["full_attn_idxs"] = {3, 16};
  expect_refused(config, ErrorCode::BadModelConfig, "full_attn_idxs entry 16 is not a layer index in [0, 16)");
}

TEST(ModelConfig, RopeThetaComesFromRopeParametersOrTheLegacyField) {
  json config = dense_config();
  config["rope_theta"] = 5e5;
  EXPECT_EQ(parse(config)->rope_theta, 5e5);
  config["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 2e6}};
  EXPECT_EQ(parse(config)->rope_theta, 2e6);
  config.erase("rope_parameters");
  config.erase("rope_theta");
  EXPECT_EQ(parse(config)->rope_theta, 1e6);
}

TEST(ModelConfig, HeadDimTieEosListAndOtherOptionalFieldsAreHonoured) {
  json config = dense_config();
  config["head_dim"] = 128;
  config["tie_embedding"] = false;
  config["eos_token_id"] = {7, 2};
  config["conv_L_cache"] = 4;
  config["conv_bias"] = true;
  config["norm_eps"] = 1e-6;
  config["max_position_embeddings"] = 32768;
  config["sliding_window"] = nullptr;
  Result<ModelConfig> parsed = parse(config);
  ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
  EXPECT_EQ(parsed->head_dim, 128);
  EXPECT_FALSE(parsed->tie_embeddings);
  EXPECT_EQ(parsed->eos_token_id, 7);
  EXPECT_EQ(parsed->eos_token_ids, (std::vector<int>{7, 2}));
  EXPECT_EQ(parsed->conv_kernel, 4);
  EXPECT_TRUE(parsed->conv_bias);
  EXPECT_EQ(parsed->norm_eps, 1e-6f);
  EXPECT_EQ(parsed->max_position, 32768);
  config["tie_word_embeddings"] = true;  // the HF name wins over the legacy one
  EXPECT_TRUE(parse(config)->tie_embeddings);
}

TEST(ModelConfigRefusal, AnotherModelTypeIsUnsupportedArchitectureNamingIt) {
  json config = dense_config();
  config["model_type"] = "llama";
  config["architectures"] = {"LlamaForCausalLM"};
  expect_refused(config, ErrorCode::UnsupportedArchitecture, "model_type 'llama' (architectures [\"LlamaForCausalLM\"])");
  config.erase("model_type");
  expect_refused(config, ErrorCode::UnsupportedArchitecture, "no model_type");
}

TEST(ModelConfigRefusal, TextThatIsNotAJsonObjectIsBadModelConfig) {
  Result<ModelConfig> not_json = parse_model_config("{\"model_type\": ");
  ASSERT_FALSE(not_json.ok());
  EXPECT_EQ(not_json.status().code(), ErrorCode::BadModelConfig);
  Result<ModelConfig> array = parse_model_config("[1]");
  ASSERT_FALSE(array.ok());
  EXPECT_EQ(array.status().code(), ErrorCode::BadModelConfig);
}

TEST(ModelConfigRefusal, EachMissingRequiredFieldIsNamed) {
  for (const char* key : {"vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads"}) {
    json config = dense_config();
    config.erase(key);
    expect_refused(config, ErrorCode::BadModelConfig, std::string("missing required field ") + key);
  }
  json no_ffn = dense_config();
  no_ffn.erase("block_ff_dim");
  no_ffn.erase("intermediate_size");
  expect_refused(no_ffn, ErrorCode::BadModelConfig, "missing required field intermediate_size");
  for (const char* key : {"num_experts", "num_experts_per_tok", "moe_intermediate_size"}) {
    json config = moe_config();
    config.erase(key);
    expect_refused(config, ErrorCode::BadModelConfig, std::string("missing required field ") + key);
  }
}

TEST(ModelConfigRefusal, NonPositiveOrMistypedSizesAreRefused) {
  json config = dense_config();
  config["hidden_size"] = 0;
  expect_refused(config, ErrorCode::BadModelConfig, "field hidden_size is 0, outside [1,");
  config = dense_config();
  config["num_key_value_heads"] = -8;
  expect_refused(config, ErrorCode::BadModelConfig, "field num_key_value_heads is -8");
  config = dense_config();
  config["vocab_size"] = "65536";
  expect_refused(config, ErrorCode::BadModelConfig, "field vocab_size is \"65536\", not an integer");
  config = dense_config();
  config["block_ff_dim"] = 1;  // int(2/3) = 0 before the multiplier
  config["block_ffn_dim_multiplier"] = nullptr;
  expect_refused(config, ErrorCode::BadModelConfig, "block_ff_dim 1 gives a non-positive FFN width 0");
}

TEST(ModelConfigRefusal, HeadsThatDoNotDivideAreRefused) {
  json config = dense_config();
  config["hidden_size"] = 1000;
  expect_refused(config, ErrorCode::BadModelConfig, "num_attention_heads 16 does not divide hidden_size 1000");
  config = dense_config();
  config["num_key_value_heads"] = 5;
  expect_refused(config, ErrorCode::BadModelConfig, "num_key_value_heads 5 does not divide num_attention_heads 16");
}

TEST(ModelConfigRefusal, LayerTypesOfTheWrongLengthOrKindAreRefused) {
  json config = dense_config();
  config["num_hidden_layers"] = 12;
  expect_refused(config, ErrorCode::BadModelConfig, "layer_types has 16 entries, num_hidden_layers is 12");
  config = dense_config();
  config["layer_types"][3] = "mamba";
  expect_refused(config, ErrorCode::BadModelConfig, "layer_types[3] is \"mamba\", not \"conv\" or \"full_attention\"");
}

TEST(ModelConfigRefusal, RopeOtherThanDefaultOrANonPositiveThetaIsRefused) {
  json config = dense_config();
  config["rope_parameters"] = {{"rope_type", "yarn"}, {"rope_theta", 1e6}, {"factor", 4.0}};
  expect_refused(config, ErrorCode::BadModelConfig, "rope_parameters.rope_type is 'yarn'; only default RoPE is supported");
  config = dense_config();
  config["rope_theta"] = 0;
  expect_refused(config, ErrorCode::BadModelConfig, "field rope_theta is 0, want a finite number > 0");
  config = dense_config();
  config["rope_parameters"] = {{"rope_theta", -10000.0}};
  expect_refused(config, ErrorCode::BadModelConfig, "field rope_theta is -10000.0, want a finite number > 0");
}

TEST(ModelConfigRefusal, MoreExpertsPerTokenThanExpertsIsRefused) {
  json config = moe_config();
  config["num_experts_per_tok"] = 33;
  expect_refused(config, ErrorCode::BadModelConfig, "num_experts_per_tok 33 is more than num_experts 32");
  config = moe_config();
  config["num_dense_layers"] = 25;
  expect_refused(config, ErrorCode::BadModelConfig, "field num_dense_layers is 25, outside [0, 24]");
}

TEST(ModelConfigRefusal, ASlidingWindowIsRefusedByName) {
  json config = dense_config();
  config["sliding_window"] = 4096;
  expect_refused(config, ErrorCode::BadModelConfig, "sliding_window 4096: sliding-window attention is not supported");
  config["sliding_window"] = 0;
  EXPECT_TRUE(parse(config).ok());
}

TEST(ModelConfigRefusal, AMissingConfigFileIsNotFoundAndErrorsNameThePath) {
  testing::TempDir dir;
  Result<ModelConfig> missing = read_model_config(dir.path());
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), ErrorCode::NotFound);
  json config = dense_config();
  config["hidden_size"] = -1;
  testing::write_bytes(dir.file("config.json"), config.dump());
  Result<ModelConfig> bad = read_model_config(dir.path());
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message().rfind(dir.path() + "/config.json: field hidden_size", 0), 0u) << bad.status().message();
}

// A tiny two-layer MoE-free config and its checkpoint, with one tensor replaced by `replace` (or dropped if empty shape).
json tiny_config() {
  return json{{"model_type", "lfm2"}, {"vocab_size", 32}, {"hidden_size", 16}, {"num_hidden_layers", 2},
              {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"intermediate_size", 48},
              {"block_multiple_of", 8}, {"layer_types", {"conv", "full_attention"}}};
}

Status check_with(const json& config_json, const std::string& replaced, std::optional<std::vector<int64_t>> new_shape,
                  DType dtype = DType::BF16) {
  testing::TempDir dir;
  Result<ModelConfig> config = parse(config_json);
  EXPECT_TRUE(config.ok()) << config.status().to_string();
  std::vector<TensorToWrite> tensors;
  std::vector<std::vector<std::byte>> storage;
  for (const ExpectedTensor& expected : expected_target_tensors(*config)) {
    std::vector<int64_t> shape = expected.shape;
    if (expected.name == replaced) {
      if (!new_shape) continue;
      shape = *new_shape;
    }
    size_t elements = 1;
    for (int64_t dim : shape) elements *= dim;
    storage.emplace_back(elements * dtype_bytes(dtype));
    tensors.push_back({expected.name, dtype, shape, storage.back()});
  }
  EXPECT_TRUE(write_safetensors(dir.file("model.safetensors"), tensors).ok());
  auto checkpoint = Checkpoint::open(dir.path());
  EXPECT_TRUE(checkpoint.ok()) << checkpoint.status().to_string();
  return check_target_tensors(**checkpoint, *config);
}

TEST(TargetTensors, ACompleteCheckpointPassesInAnyDtype) {
  EXPECT_TRUE(check_with(tiny_config(), "", std::nullopt).ok());
  EXPECT_TRUE(check_with(tiny_config(), "", std::nullopt, DType::F32).ok());
  Result<ModelConfig> config = parse(tiny_config());
  EXPECT_EQ(config->ffn_size, 32);
  EXPECT_EQ(expected_target_tensors(*config).size(), 1u + 2 * 2 + 3 + 6 + 2 * 3 + 1);
}

TEST(TargetTensors, AMissingTensorIsRefusedWithItsExpectedShape) {
  Status status = check_with(tiny_config(), "model.layers.1.self_attn.k_layernorm.weight", std::nullopt);
  EXPECT_EQ(status.code(), ErrorCode::BadSafetensors);
  EXPECT_NE(status.message().find("tensor model.layers.1.self_attn.k_layernorm.weight [4] is missing"), std::string::npos)
      << status.to_string();
}

TEST(TargetTensors, AWrongShapeIsRefusedNamingBothShapes) {
  Status status = check_with(tiny_config(), "model.layers.0.conv.conv.weight", std::vector<int64_t>{16, 3});
  EXPECT_EQ(status.code(), ErrorCode::BadSafetensors);
  EXPECT_NE(status.message().find("tensor model.layers.0.conv.conv.weight has shape [16, 3], config.json implies [16, 1, 3]"),
            std::string::npos) << status.to_string();
}

TEST(TargetTensors, AnFfnWidthThatDisagreesWithTheRuleIsBadModelConfig) {
  Status status = check_with(tiny_config(), "model.layers.1.feed_forward.w1.weight", std::vector<int64_t>{48, 16});
  EXPECT_EQ(status.code(), ErrorCode::BadModelConfig);
  EXPECT_NE(status.message().find("has shape [48, 16] (FFN width 48), config.json's FFN width rule gives 32"), std::string::npos)
      << status.to_string();
}

TEST(TargetTensors, UntiedEmbeddingsNeedAnLmHead) {
  json config = tiny_config();
  config["tie_word_embeddings"] = false;
  EXPECT_TRUE(check_with(config, "", std::nullopt).ok());
  Status status = check_with(config, "lm_head.weight", std::nullopt);
  EXPECT_EQ(status.code(), ErrorCode::BadSafetensors);
  EXPECT_NE(status.message().find("lm_head.weight [32, 16] is missing (config.json says tie_word_embeddings false)"),
            std::string::npos) << status.to_string();
}

TEST(TargetTensors, MoeLayersNeedTheirRouterBiasAndEveryExpert) {
  json config = {{"model_type", "lfm2_moe"}, {"vocab_size", 32}, {"hidden_size", 16}, {"num_hidden_layers", 2},
                 {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"intermediate_size", 24},
                 {"moe_intermediate_size", 8}, {"num_experts", 3}, {"num_experts_per_tok", 2},
                 {"num_dense_layers", 1}, {"layer_types", {"conv", "full_attention"}}};
  EXPECT_TRUE(check_with(config, "", std::nullopt).ok());
  Status status = check_with(config, "model.layers.1.feed_forward.experts.2.w2.weight", std::nullopt);
  EXPECT_EQ(status.code(), ErrorCode::BadSafetensors);
  EXPECT_NE(status.message().find("experts.2.w2.weight [16, 8] is missing"), std::string::npos) << status.to_string();
  status = check_with(config, "model.layers.1.feed_forward.expert_bias", std::nullopt);
  EXPECT_NE(status.message().find("feed_forward.expert_bias [3] is missing"), std::string::npos) << status.to_string();
  config["use_expert_bias"] = false;
  EXPECT_TRUE(check_with(config, "model.layers.1.feed_forward.expert_bias", std::nullopt).ok());
}

}  // namespace
}  // namespace ls::io
