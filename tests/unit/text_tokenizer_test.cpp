// Tokenizer on the shipped LFM2-style tokenizer: round trips, special tokens, invalid UTF-8, the streaming
// detokenizer, and one refusal test per unsupported tokenizer.json / tokenizer_config.json feature.
#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "text/detokenizer.h"
#include "text/tokenizer.h"
#include "text/utf8.h"

namespace ls::text {
namespace {

const std::string kGolden = std::string(LS_SOURCE_DIR) + "/tests/golden/tokenizer";

const Tokenizer& golden() {
  static const Tokenizer tokenizer = [] {
    auto loaded = Tokenizer::load(kGolden);
    LS_CHECK(loaded.ok(), loaded.status().to_string().c_str());
    return std::move(*loaded);
  }();
  return tokenizer;
}

std::string golden_json() {
  std::ifstream file(kGolden + "/tokenizer.json");
  std::ostringstream contents;
  contents << file.rdbuf();
  return contents.str();
}

const std::vector<std::string> kTexts = {
    "", "Hello world", "def f(x):\n    return x  # done\n", "日本語のテキスト", "emoji 👨‍👩‍👧 ok", "  \t\n\r\n  ",
    "don't WE'LL", "12345678", "<|im_start|>user\nhi<|im_end|>\n", "e\u0301 combining", std::string(3000, 'z')};

TEST(TextTokenizer, DecodingTheEncodingOfValidTextGivesTheTextBack) {
  for (const std::string& text : kTexts) {
    auto ids = golden().encode(text, false);
    ASSERT_TRUE(ids.ok()) << ids.status().to_string();
    EXPECT_EQ(golden().decode(*ids, false), text);
  }
}

TEST(TextTokenizer, AddSpecialTokensPrependsExactlyTheBosId) {
  for (const std::string& text : kTexts) {
    auto plain = golden().encode(text, false);
    auto with_bos = golden().encode(text, true);
    ASSERT_TRUE(plain.ok() && with_bos.ok());
    ASSERT_EQ(with_bos->size(), plain->size() + 1);
    EXPECT_EQ(with_bos->front(), *golden().bos_id());
    EXPECT_TRUE(std::equal(plain->begin(), plain->end(), with_bos->begin() + 1));
  }
}

TEST(TextTokenizer, SpecialTokensInTextAreSingleIdsAndTheConfigNamesBosEosPadAndStops) {
  auto ids = golden().encode("<|im_start|><|im_end|><|pad|>", false);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<int32_t>{6, 7, 0}));
  EXPECT_EQ(golden().bos_id(), 1);
  EXPECT_EQ(golden().eos_id(), 7);
  EXPECT_EQ(golden().pad_id(), 0);
  EXPECT_EQ(golden().stop_token_ids(), (std::vector<int32_t>{7}));
  EXPECT_EQ(golden().token_to_id("<|tool_call_start|>"), 10);
  EXPECT_EQ(golden().id_to_token(6), "<|im_start|>");
  EXPECT_TRUE(golden().is_special(2));
  EXPECT_EQ(golden().decode(*ids, true), "");
  EXPECT_NE(golden().chat_template().find("<|im_start|>"), std::string::npos);
}

TEST(TextTokenizer, InvalidUtf8EncodesLikeItsReplacementCharacterForm) {
  const std::string invalid = "ok \xE2\x82 partial \xFF\xF0\x9F\x98";
  auto from_bytes = golden().encode(invalid, true);
  auto from_replaced = golden().encode("ok \xEF\xBF\xBD partial \xEF\xBF\xBD\xEF\xBF\xBD", true);
  ASSERT_TRUE(from_bytes.ok() && from_replaced.ok());
  EXPECT_EQ(*from_bytes, *from_replaced);
}

TEST(TextDetokenizer, StreamingOneIdAtATimeEqualsTheFullDecodeForRandomIds) {
  std::mt19937 random(4);
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<int32_t> ids;
    for (int length = 1 + random() % 30; length > 0; --length) ids.push_back(static_cast<int32_t>(random() % (golden().vocab_size() + 3)));
    for (bool skip : {false, true}) {
      Detokenizer detokenizer(golden(), skip);
      std::string streamed;
      for (int32_t id : ids) {
        const std::string piece = detokenizer.push(id);
        streamed += piece;
      }
      streamed += detokenizer.flush();
      EXPECT_EQ(streamed, golden().decode(ids, skip));
    }
  }
}

TEST(TextDetokenizer, ACharacterSplitAcrossTokensComesOutOnlyWhenWhole) {
  // "😀" as four single-byte tokens: nothing until the fourth.
  std::vector<int32_t> byte_ids;
  for (unsigned char byte : std::string("\xF0\x9F\x98\x80")) {
    std::string character;
    append_utf8(character, byte_to_unicode()[byte]);
    auto id = golden().token_to_id(character);
    ASSERT_TRUE(id.has_value());
    byte_ids.push_back(*id);
  }
  Detokenizer detokenizer(golden(), false);
  EXPECT_EQ(detokenizer.push(byte_ids[0]), "");
  EXPECT_EQ(detokenizer.push(byte_ids[1]), "");
  EXPECT_EQ(detokenizer.push(byte_ids[2]), "");
  EXPECT_EQ(detokenizer.pending_bytes(), 3u);
  EXPECT_EQ(detokenizer.push(byte_ids[3]), "\xF0\x9F\x98\x80");
  EXPECT_EQ(detokenizer.push(byte_ids[0]), "");
  EXPECT_EQ(detokenizer.flush(), "\xEF\xBF\xBD");
  Detokenizer skipping(golden(), true);
  EXPECT_EQ(skipping.push(7), "");
  EXPECT_EQ(Detokenizer(golden(), false).push(7), "<|im_end|>");
}

// Loads the golden tokenizer.json after `edit` and expects BadTokenizer mentioning `words`.
void expect_refused(const std::function<void(nlohmann::json&)>& edit, const std::string& words, const std::string& config = "") {
  nlohmann::json spec = nlohmann::json::parse(golden_json());
  edit(spec);
  auto tokenizer = Tokenizer::from_json(spec.dump(), config);
  ASSERT_FALSE(tokenizer.ok()) << "accepted a tokenizer that should be refused for " << words;
  EXPECT_EQ(tokenizer.status().code(), ErrorCode::BadTokenizer);
  EXPECT_NE(tokenizer.status().message().find(words), std::string::npos) << tokenizer.status().to_string();
}

TEST(TextTokenizerRefusals, EachUnsupportedFeatureIsBadTokenizerNamingIt) {
  expect_refused([](auto& spec) { spec["model"]["type"] = "Unigram"; }, "Unigram");
  expect_refused([](auto& spec) { spec["model"]["byte_fallback"] = true; }, "byte_fallback");
  expect_refused([](auto& spec) { spec["model"]["dropout"] = 0.1; }, "dropout");
  expect_refused([](auto& spec) { spec["model"]["continuing_subword_prefix"] = "##"; }, "continuing_subword_prefix");
  expect_refused([](auto& spec) { spec["model"]["end_of_word_suffix"] = "</w>"; }, "end_of_word_suffix");
  expect_refused([](auto& spec) { spec["model"]["merges"][0] = "a b c"; }, "merge 0");
  expect_refused([](auto& spec) { spec["model"]["merges"][1] = nlohmann::json::array({"zzqq", "x"}); }, "merge 1");
  expect_refused([](auto& spec) { spec["model"]["vocab"] = nlohmann::json::array(); }, "vocab");
  expect_refused([](auto& spec) { spec["truncation"] = {{"max_length", 8}}; }, "truncation");
  expect_refused([](auto& spec) { spec["padding"] = {{"strategy", "BatchLongest"}}; }, "padding");
  expect_refused([](auto& spec) { spec["normalizer"] = {{"type", "NFKC"}}; }, "NFKC");
  expect_refused([](auto& spec) { spec["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "Lowercase"}}}}}; }, "Lowercase");
  expect_refused([](auto& spec) { spec["pre_tokenizer"] = {{"type", "Whitespace"}}; }, "Whitespace");
  expect_refused([](auto& spec) { spec["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Contiguous"; }, "Contiguous");
  expect_refused([](auto& spec) { spec["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"Regex", "(unclosed"}}; }, "does not compile");
  expect_refused([](auto& spec) {
    auto steps = spec["pre_tokenizer"]["pretokenizers"];
    spec["pre_tokenizer"]["pretokenizers"] = nlohmann::json::array({steps[1], steps[0]});
  }, "only a final ByteLevel");
  expect_refused([](auto& spec) { spec["post_processor"] = {{"type", "RobertaProcessing"}}; }, "RobertaProcessing");
  expect_refused([](auto& spec) { spec["post_processor"]["single"][1]["Sequence"]["id"] = "B"; }, "other than A");
  expect_refused([](auto& spec) { spec["decoder"] = {{"type", "WordPiece"}}; }, "WordPiece");
  expect_refused([](auto&) {}, "default", R"({"chat_template": [{"name": "tool_use", "template": "x"}]})");
  expect_refused([](auto&) {}, "not an id", R"({"added_tokens_decoder": {"seven": {"content": "x"}}})");
  auto not_json = Tokenizer::from_json("{not json");
  ASSERT_FALSE(not_json.ok());
  EXPECT_EQ(not_json.status().code(), ErrorCode::BadTokenizer);
  auto missing = Tokenizer::load("/nonexistent/tokenizer/dir");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), ErrorCode::NotFound);
}

TEST(TextTokenizer, AddedTokensDecoderEntriesMissingFromTokenizerJsonAreAdded) {
  auto tokenizer = Tokenizer::from_json(
      golden_json(), R"({"added_tokens_decoder": {"6000": {"content": "<|extra|>", "special": true}}, "eos_token": "<|extra|>"})");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().to_string();
  auto ids = tokenizer->encode("a<|extra|>b", false);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ((*ids)[1], 6000);
  EXPECT_EQ(tokenizer->eos_id(), 6000);
  EXPECT_EQ(tokenizer->stop_token_ids(), (std::vector<int32_t>{6000, 7}));
}

}  // namespace
}  // namespace ls::text
