// Reading OpenAI request bodies: every refusal is triggered and names its field; accepted fields land in place.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "server/api_request.h"

namespace ls::server {
namespace {

std::optional<ApiError> parse_chat(const std::string& body, CompletionRequest& out) {
  return parse_completion_request(body, Endpoint::ChatCompletions, out);
}

// The refusal of a chat body made of the base request with `extra` merged in.
std::optional<ApiError> chat_with(const nlohmann::json& extra) {
  nlohmann::json body = {{"model", "m"}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  for (const auto& [key, value] : extra.items()) body[key] = value;
  CompletionRequest request;
  return parse_chat(body.dump(), request);
}

TEST(ApiRequest, AValidChatRequestFillsEveryField) {
  CompletionRequest request;
  const auto error = parse_chat(R"({"model": "m", "messages": [{"role": "user", "content": "hi"}],
      "max_tokens": 5, "temperature": 0.5, "top_p": 0.9, "top_k": 40, "min_p": 0.05, "seed": -3, "stop": "x",
      "stream": true, "stream_options": {"include_usage": true}, "n": 1, "draft": false, "max_draft": 3,
      "logprobs": false, "tools": [], "user": "u"})", request);
  ASSERT_FALSE(error) << error->message;
  EXPECT_EQ(request.model, "m");
  EXPECT_EQ(request.messages.size(), 1u);
  EXPECT_EQ(request.max_tokens, 5);
  EXPECT_FLOAT_EQ(request.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(request.sampling.top_p, 0.9f);
  EXPECT_EQ(request.sampling.top_k, 40);
  EXPECT_FLOAT_EQ(request.sampling.min_p, 0.05f);
  EXPECT_TRUE(request.has_seed);
  EXPECT_EQ(request.sampling.seed, static_cast<uint64_t>(int64_t{-3}));
  EXPECT_EQ(request.stop, std::vector<std::string>{"x"});
  EXPECT_TRUE(request.stream);
  EXPECT_TRUE(request.include_usage);
  EXPECT_FALSE(request.draft);
  EXPECT_EQ(request.max_draft, 3);
}

TEST(ApiRequest, DefaultsFollowOpenAi) {
  CompletionRequest request;
  ASSERT_FALSE(parse_chat(R"({"model": "m", "messages": [{"role": "user", "content": "hi"}]})", request));
  EXPECT_FALSE(request.max_tokens.has_value());
  EXPECT_FLOAT_EQ(request.sampling.temperature, 1.0f);
  EXPECT_FALSE(request.has_seed);
  EXPECT_FALSE(request.stream);
  EXPECT_TRUE(request.draft);
  EXPECT_EQ(request.max_draft, -1);
}

TEST(ApiRequest, MaxCompletionTokensWinsOverMaxTokens) {
  CompletionRequest request;
  ASSERT_FALSE(parse_chat(R"({"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 9,
      "max_completion_tokens": 4})", request));
  EXPECT_EQ(request.max_tokens, 4);
}

TEST(ApiRequest, CompletionPromptsAreTextOneTextInAListOrTokenIds) {
  CompletionRequest request;
  ASSERT_FALSE(parse_completion_request(R"({"model": "m", "prompt": "abc"})", Endpoint::Completions, request));
  EXPECT_EQ(request.prompt_text, "abc");
  CompletionRequest listed;
  ASSERT_FALSE(parse_completion_request(R"({"model": "m", "prompt": ["abc"]})", Endpoint::Completions, listed));
  EXPECT_EQ(listed.prompt_text, "abc");
  CompletionRequest ids;
  ASSERT_FALSE(parse_completion_request(R"({"model": "m", "prompt": [1, 2, 3]})", Endpoint::Completions, ids));
  EXPECT_EQ(ids.prompt_ids, (std::vector<int32_t>{1, 2, 3}));
}

struct Refusal {
  const char* name;
  const char* body;          // a whole body, or "" to use `extra` on the base chat request
  const char* extra;         // JSON object merged into the base chat request
  const char* param;         // the field the error names ("" = null)
  Endpoint endpoint = Endpoint::ChatCompletions;
};

class ApiRefusals : public testing::TestWithParam<Refusal> {};

TEST_P(ApiRefusals, AreA400NamingTheField) {
  const Refusal& refusal = GetParam();
  CompletionRequest request;
  std::optional<ApiError> error;
  if (std::string(refusal.body).empty()) {
    if (refusal.endpoint == Endpoint::ChatCompletions) {
      error = chat_with(nlohmann::json::parse(refusal.extra));
    } else {
      nlohmann::json body = {{"model", "m"}, {"prompt", "hi"}};
      const nlohmann::json extra = nlohmann::json::parse(refusal.extra);
      for (const auto& [key, value] : extra.items()) body[key] = value;
      error = parse_completion_request(body.dump(), Endpoint::Completions, request);
    }
  } else {
    error = parse_completion_request(refusal.body, refusal.endpoint, request);
  }
  ASSERT_TRUE(error.has_value()) << refusal.name;
  EXPECT_EQ(error->http_status, 400);
  EXPECT_EQ(error->type, "invalid_request_error");
  EXPECT_EQ(error->param, refusal.param) << error->message;
  EXPECT_FALSE(error->message.empty());
}

INSTANTIATE_TEST_SUITE_P(
    ServerApi, ApiRefusals,
    testing::Values(
        Refusal{"MalformedJson", R"({"model": "m", )", "", ""},
        Refusal{"NotAnObject", "[1, 2]", "", ""},
        Refusal{"MissingModel", R"({"messages": [{"role": "user", "content": "hi"}]})", "", "model"},
        Refusal{"ModelNotAString", "", R"({"model": 3})", "model"},
        Refusal{"MissingMessages", R"({"model": "m"})", "", "messages"},
        Refusal{"EmptyMessages", "", R"({"messages": []})", "messages"},
        Refusal{"MessagesNotAList", "", R"({"messages": "hi"})", "messages"},
        Refusal{"MessageNotAnObject", "", R"({"messages": ["hi"]})", "messages[0]"},
        Refusal{"MessageWithoutRole", "", R"({"messages": [{"content": "hi"}]})", "messages[0].role"},
        Refusal{"ContentANumber", "", R"({"messages": [{"role": "user", "content": 3}]})", "messages[0].content"},
        Refusal{"NAboveOne", "", R"({"n": 2})", "n"},
        Refusal{"NegativeMaxTokens", "", R"({"max_tokens": -1})", "max_tokens"},
        Refusal{"ZeroMaxTokens", "", R"({"max_tokens": 0})", "max_tokens"},
        Refusal{"MaxTokensAString", "", R"({"max_tokens": "5"})", "max_tokens"},
        Refusal{"MaxTokensFractional", "", R"({"max_tokens": 2.5})", "max_tokens"},
        Refusal{"NegativeMaxCompletionTokens", "", R"({"max_completion_tokens": -4})", "max_completion_tokens"},
        Refusal{"TemperatureAString", "", R"({"temperature": "hot"})", "temperature"},
        Refusal{"TemperatureAboveTwo", "", R"({"temperature": 2.5})", "temperature"},
        Refusal{"TopPZero", "", R"({"top_p": 0})", "top_p"},
        Refusal{"TopPAboveOne", "", R"({"top_p": 1.5})", "top_p"},
        Refusal{"TopKBelowMinusOne", "", R"({"top_k": -2})", "top_k"},
        Refusal{"MinPNegative", "", R"({"min_p": -0.1})", "min_p"},
        Refusal{"SeedAString", "", R"({"seed": "7"})", "seed"},
        Refusal{"StopANumber", "", R"({"stop": 3})", "stop"},
        Refusal{"StopEmptyString", "", R"({"stop": ["a", ""]})", "stop"},
        Refusal{"StopTooMany", "",
                R"({"stop": ["1","2","3","4","5","6","7","8","9","10","11","12","13","14","15","16","17"]})", "stop"},
        Refusal{"StreamAString", "", R"({"stream": "yes"})", "stream"},
        Refusal{"StreamOptionsWithoutStream", "", R"({"stream_options": {"include_usage": true}})", "stream_options"},
        Refusal{"DraftANumber", "", R"({"draft": 1})", "draft"},
        Refusal{"MaxDraftNegative", "", R"({"max_draft": -1})", "max_draft"},
        Refusal{"Logprobs", "", R"({"logprobs": true})", "logprobs"},
        Refusal{"TopLogprobs", "", R"({"top_logprobs": 3})", "top_logprobs"},
        Refusal{"Tools", "", R"({"tools": [{"type": "function", "function": {"name": "f"}}]})", "tools"},
        Refusal{"ToolChoiceRequired", "", R"({"tool_choice": "required"})", "tool_choice"},
        Refusal{"ResponseFormatJson", "", R"({"response_format": {"type": "json_object"}})", "response_format"},
        Refusal{"LogitBias", "", R"({"logit_bias": {"5": 10}})", "logit_bias"},
        Refusal{"PresencePenalty", "", R"({"presence_penalty": 0.5})", "presence_penalty"},
        Refusal{"UnknownField", "", R"({"temprature": 0.5})", "temprature"},
        Refusal{"CompletionMissingPrompt", R"({"model": "m"})", "", "prompt", Endpoint::Completions},
        Refusal{"CompletionSeveralPrompts", "", R"({"prompt": ["a", "b"]})", "prompt", Endpoint::Completions},
        Refusal{"CompletionNegativeTokenId", "", R"({"prompt": [1, -2]})", "prompt", Endpoint::Completions},
        Refusal{"CompletionEcho", "", R"({"echo": true})", "echo", Endpoint::Completions},
        Refusal{"CompletionBestOf", "", R"({"best_of": 3})", "best_of", Endpoint::Completions},
        Refusal{"CompletionMessagesField", "", R"({"messages": []})", "messages", Endpoint::Completions}),
    [](const testing::TestParamInfo<Refusal>& info) { return std::string(info.param.name); });

TEST(ApiRequest, TheErrorBodyHasOpenAisShapeWithNullsForEmptyFields) {
  const nlohmann::json body = nlohmann::json::parse(error_body(ApiError{400, "bad", "invalid_request_error", "", ""}));
  ASSERT_TRUE(body.contains("error"));
  EXPECT_EQ(body["error"]["message"], "bad");
  EXPECT_EQ(body["error"]["type"], "invalid_request_error");
  EXPECT_TRUE(body["error"]["param"].is_null());
  EXPECT_TRUE(body["error"]["code"].is_null());
  const nlohmann::json named = nlohmann::json::parse(error_body(ApiError{404, "m", "invalid_request_error", "model",
                                                                         "model_not_found"}));
  EXPECT_EQ(named["error"]["param"], "model");
  EXPECT_EQ(named["error"]["code"], "model_not_found");
}

}  // namespace
}  // namespace ls::server
