// Stop strings on detokenized text: the matcher holds back what may start a stop string and never returns one; the
// lanes' stop hook ends a stream at the token that completes one.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "nano_pair.h"
#include "server/reply_text.h"
#include "text/tokenizer.h"
#include "text/utf8.h"

namespace ls::server {
namespace {

std::string push_all(StopMatcher& matcher, const std::vector<std::string>& pieces) {
  std::string out;
  for (const std::string& piece : pieces) out += matcher.push(piece);
  return out;
}

TEST(StopMatcher, ReturnsTheTextBeforeTheStopStringEvenWhenItIsSplitAcrossPieces) {
  StopMatcher matcher({"STOP"});
  EXPECT_EQ(push_all(matcher, {"hello S", "TO", "P and more"}), "hello ");
  EXPECT_TRUE(matcher.stopped());
  EXPECT_EQ(matcher.push("later"), "");
  EXPECT_EQ(matcher.finish(), "");
}

TEST(StopMatcher, HoldsBackOnlyWhatCouldStartAStopStringAndReleasesItWhenItCannot) {
  StopMatcher matcher({"abc"});
  EXPECT_EQ(matcher.push("xxab"), "xx");
  EXPECT_EQ(matcher.push("d"), "abd");
  EXPECT_EQ(matcher.push("a"), "");
  EXPECT_FALSE(matcher.stopped());
  EXPECT_EQ(matcher.finish(), "a");
}

TEST(StopMatcher, TheEarliestOfSeveralStopStringsWins) {
  StopMatcher matcher({"world", "lo w", "\n\n"});
  EXPECT_EQ(push_all(matcher, {"hel", "lo wor", "ld"}), "hel");
  EXPECT_TRUE(matcher.stopped());
}

TEST(StopMatcher, AMatchAfterARepeatedPrefixIsFound) {
  StopMatcher matcher({"aab"});
  EXPECT_EQ(push_all(matcher, {"a", "a", "a", "b", "c"}), "a");
  EXPECT_TRUE(matcher.stopped());
}

TEST(StopMatcher, WithoutStopStringsEverythingPassesAtOnce) {
  StopMatcher matcher({});
  EXPECT_EQ(matcher.push("abc"), "abc");
  EXPECT_EQ(matcher.finish(), "");
}

class ReplyTextOnNano : public testing::Test {
 protected:
  void SetUp() override {
    Result<text::Tokenizer> loaded = text::Tokenizer::load(nano_target_dir());
    ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
    tokenizer_.emplace(std::move(loaded).value());
  }
  std::vector<int32_t> encode(const std::string& text) {
    Result<std::vector<int32_t>> ids = tokenizer_->encode(text, /*add_special_tokens=*/false);
    EXPECT_TRUE(ids.ok());
    return ids.ok() ? *ids : std::vector<int32_t>{};
  }
  std::optional<text::Tokenizer> tokenizer_;
};

TEST_F(ReplyTextOnNano, TheReplyEndsBeforeTheStopStringAndEosGivesNoText) {
  const std::vector<int32_t> ids = encode("def read_config(path):\n    return open(path).read()\n");
  const int32_t eos = *tokenizer_->eos_id();
  ReplyText plain(*tokenizer_, {}, {eos});
  std::string all;
  for (int32_t id : ids) all += plain.push(id);
  all += plain.push(eos);
  all += plain.finish();
  EXPECT_EQ(all, "def read_config(path):\n    return open(path).read()\n");

  ReplyText cut(*tokenizer_, {"open("}, {eos});
  std::string text;
  for (int32_t id : ids) text += cut.push(id);
  text += cut.finish();
  EXPECT_EQ(text, "def read_config(path):\n    return ");
  EXPECT_TRUE(cut.stopped());
}

TEST_F(ReplyTextOnNano, EveryPieceIsWholeUtf8EvenWithAStopStringThatStartsWithAMultiByteCharacter) {
  const std::string text = "na\xc3\xafve caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e \xf0\x9f\x99\x82 \xc3\xa9t\xc3\xa9 end";
  const std::vector<int32_t> ids = encode(text);
  // Some token carries only part of a character, so whole pieces are the detokenizer's doing.
  EXPECT_TRUE(std::any_of(ids.begin(), ids.end(),
                          [&](int32_t id) { return !text::is_valid_utf8(tokenizer_->token_bytes(id)); }));
  ReplyText reply(*tokenizer_, {"\xc3\xa9t\xc3\xa9"}, {});
  std::string joined;
  for (int32_t id : ids) {
    const std::string piece = reply.push(id);
    EXPECT_TRUE(text::is_valid_utf8(piece)) << "token " << id;
    joined += piece;
  }
  joined += reply.finish();
  EXPECT_EQ(joined, text.substr(0, text.find("\xc3\xa9t\xc3\xa9")));
  EXPECT_TRUE(reply.stopped());
}

TEST_F(ReplyTextOnNano, TheStopHookEndsTheStreamAtTheTokenThatCompletesTheStopString) {
  const std::vector<int32_t> ids = encode("alpha beta gamma delta");
  const StopHook hook = make_stop_hook(*tokenizer_, {"gamma"}, {});
  std::vector<int32_t> generated;
  size_t stopped_at = ids.size();
  for (size_t index = 0; index < ids.size(); ++index) {
    generated.push_back(ids[index]);
    if (hook(generated)) {
      stopped_at = index;
      break;
    }
  }
  ASSERT_LT(stopped_at, ids.size());
  const std::string before = tokenizer_->decode(std::span(ids).first(stopped_at), false);
  const std::string through = tokenizer_->decode(std::span(ids).first(stopped_at + 1), false);
  EXPECT_EQ(before.find("gamma"), std::string::npos) << before;
  EXPECT_NE(through.find("gamma"), std::string::npos) << through;
}

}  // namespace
}  // namespace ls::server
