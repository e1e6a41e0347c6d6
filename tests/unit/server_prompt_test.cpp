// From a validated request to the lanes' Request on the nano tokenizer: the chat template as generate --chat uses it,
// and every prompt refusal (context, max_tokens, ids outside the vocabulary, no chat template).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "nano_pair.h"
#include "server/prompt.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace ls::server {
namespace {

class PromptOnNano : public testing::Test {
 protected:
  void SetUp() override {
    Result<text::Tokenizer> loaded = text::Tokenizer::load(nano_target_dir());
    ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
    tokenizer_.emplace(std::move(loaded).value());
    model_.name = "nano";
    model_.tokenizer = &*tokenizer_;
    Result<text::ChatTemplate> chat_template = text::ChatTemplate::from_tokenizer(*tokenizer_);
    ASSERT_TRUE(chat_template.ok()) << chat_template.status().to_string();
    model_.chat_template = std::move(chat_template).value();
    model_.eos_ids = {7};
    model_.context_length = 64;
  }
  CompletionRequest chat(const std::string& content) {
    CompletionRequest request;
    request.messages = nlohmann::ordered_json::array({{{"role", "user"}, {"content", content}}});
    return request;
  }
  CompletionRequest completion(const std::string& prompt) {
    CompletionRequest request;
    request.endpoint = Endpoint::Completions;
    request.prompt_text = prompt;
    return request;
  }
  std::optional<text::Tokenizer> tokenizer_;
  ServedModel model_;
};

TEST_F(PromptOnNano, AChatPromptIsTheTemplateRenderedThenEncodedWithoutAddedSpecialTokens) {
  CompletionRequest request = chat("hello there");
  request.max_tokens = 5;
  request.sampling.temperature = 0.5f;
  request.has_seed = true;
  request.sampling.seed = 9;
  request.draft = false;
  request.max_draft = 2;
  Request out;
  ASSERT_FALSE(make_lanes_request(request, model_, out));
  text::ChatRequest chat_request;
  chat_request.messages = request.messages;
  Result<std::string> rendered = model_.chat_template->render(chat_request);
  ASSERT_TRUE(rendered.ok());
  EXPECT_EQ(out.prompt, *tokenizer_->encode(*rendered, /*add_special_tokens=*/false));
  EXPECT_EQ(out.max_tokens, 5);
  EXPECT_FLOAT_EQ(out.sampling.temperature, 0.5f);
  EXPECT_TRUE(out.has_seed);
  EXPECT_EQ(out.sampling.seed, 9u);
  EXPECT_FALSE(out.draft);
  EXPECT_EQ(out.max_draft, 2);
  EXPECT_EQ(out.eos_ids, std::vector<int32_t>{7});
  EXPECT_FALSE(out.stop);  // no stop strings: no hook
}

TEST_F(PromptOnNano, ATextPromptGetsTheTokenizersSpecialTokensAndRunsToTheContextEndWithoutMaxTokens) {
  Request out;
  CompletionRequest request = completion("def f(x):");
  request.stop = {"\n"};
  ASSERT_FALSE(make_lanes_request(request, model_, out));
  EXPECT_EQ(out.prompt, *tokenizer_->encode("def f(x):", /*add_special_tokens=*/true));
  EXPECT_EQ(out.max_tokens, 64 - static_cast<int>(out.prompt.size()));
  EXPECT_TRUE(out.stop);
}

TEST_F(PromptOnNano, PromptsAtOrOverTheContextAreRefused) {
  std::string long_text;
  for (int word = 0; word < 80; ++word) long_text += " word";
  Request out;
  std::optional<ApiError> error = make_lanes_request(completion(long_text), model_, out);
  ASSERT_TRUE(error);
  EXPECT_EQ(error->param, "prompt");
  EXPECT_EQ(error->code, "context_length_exceeded");
  error = make_lanes_request(chat(long_text), model_, out);
  ASSERT_TRUE(error);
  EXPECT_EQ(error->param, "messages");
}

TEST_F(PromptOnNano, MaxTokensPastTheContextEndIsRefused) {
  CompletionRequest request = completion("def f(x):");
  request.max_tokens = 60;
  Request out;
  std::optional<ApiError> error = make_lanes_request(request, model_, out);
  ASSERT_TRUE(error);
  EXPECT_EQ(error->param, "max_tokens");
  EXPECT_EQ(error->code, "context_length_exceeded");
}

TEST_F(PromptOnNano, TokenIdsOutsideTheVocabularyAreRefused) {
  CompletionRequest request = completion("");
  request.prompt_ids = std::vector<int32_t>{1, tokenizer_->vocab_size()};
  Request out;
  std::optional<ApiError> error = make_lanes_request(request, model_, out);
  ASSERT_TRUE(error);
  EXPECT_EQ(error->param, "prompt");
  request.prompt_ids = std::vector<int32_t>{1, 2};
  ASSERT_FALSE(make_lanes_request(request, model_, out));
  EXPECT_EQ(out.prompt, (std::vector<int32_t>{1, 2}));
}

TEST_F(PromptOnNano, ChatWithoutAChatTemplateIsRefusedAndCompletionsStillWork) {
  model_.chat_template.reset();
  model_.chat_template_error = "UnsupportedChatTemplate: none";
  Request out;
  std::optional<ApiError> error = make_lanes_request(chat("hi"), model_, out);
  ASSERT_TRUE(error);
  EXPECT_EQ(error->param, "messages");
  EXPECT_NE(error->message.find("UnsupportedChatTemplate"), std::string::npos);
  EXPECT_FALSE(make_lanes_request(completion("hi"), model_, out));
}

TEST_F(PromptOnNano, AMessageTheTemplateCannotRenderIsRefused) {
  CompletionRequest request = chat("x");
  request.messages[0]["content"] = nlohmann::ordered_json::array({{{"type", "image_url"}, {"image_url", "x"}}});
  Request out;
  std::optional<ApiError> error = make_lanes_request(request, model_, out);
  ASSERT_TRUE(error);
  EXPECT_EQ(error->param, "messages");
}

}  // namespace
}  // namespace ls::server
