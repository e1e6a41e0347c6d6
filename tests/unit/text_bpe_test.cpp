// BPE core: the priority-queue merge loop against a naive quadratic reference, ignore_merges, unk handling,
// the word cache, long words, and refusals of merges that name missing tokens.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "text/bpe.h"
#include "text/utf8.h"

namespace ls::text {
namespace {

// Classic BPE: repeatedly merge the lowest-ranked adjacent pair, leftmost first. Quadratic, obviously correct.
std::vector<std::string> naive_bpe(const std::string& word, const std::vector<std::pair<std::string, std::string>>& merges) {
  std::vector<std::string> symbols;
  for (char character : word) symbols.emplace_back(1, character);
  while (true) {
    size_t best_rank = std::numeric_limits<size_t>::max(), best_position = 0;
    for (size_t position = 0; position + 1 < symbols.size(); ++position)
      for (size_t rank = 0; rank < merges.size() && rank < best_rank; ++rank)
        if (merges[rank].first == symbols[position] && merges[rank].second == symbols[position + 1]) {
          best_rank = rank;
          best_position = position;
        }
    if (best_rank == std::numeric_limits<size_t>::max()) return symbols;
    symbols[best_position] += symbols[best_position + 1];
    symbols.erase(symbols.begin() + best_position + 1);
  }
}

// A random non-byte-level model over the alphabet "abc": every merge result is added to the vocab.
BpeSettings random_settings(std::mt19937& random, size_t merge_count) {
  BpeSettings settings;
  std::vector<std::string> tokens = {"a", "b", "c"};
  for (size_t index = 0; index < merge_count; ++index) {
    const std::string left = tokens[random() % tokens.size()], right = tokens[random() % tokens.size()];
    if (std::find(settings.merges.begin(), settings.merges.end(), std::make_pair(left, right)) != settings.merges.end()) continue;
    settings.merges.emplace_back(left, right);
    if (std::find(tokens.begin(), tokens.end(), left + right) == tokens.end()) tokens.push_back(left + right);
  }
  for (size_t id = 0; id < tokens.size(); ++id) settings.vocab.emplace_back(tokens[id], static_cast<int32_t>(id));
  return settings;
}

TEST(TextBpe, MergesMatchTheNaiveLowestRankLeftmostFirstAlgorithmOnRandomWords) {
  std::mt19937 random(1);
  for (int trial = 0; trial < 40; ++trial) {
    const BpeSettings settings = random_settings(random, 30);
    auto model = BpeModel::build(settings);
    ASSERT_TRUE(model.ok()) << model.status().to_string();
    for (int word_index = 0; word_index < 30; ++word_index) {
      std::string word;
      for (int length = 1 + random() % 24; length > 0; --length) word.push_back("abc"[random() % 3]);
      std::vector<int32_t> ids;
      model->encode_word(word, ids);
      std::vector<std::string> got;
      for (int32_t id : ids) got.push_back(*model->id_to_token(id));
      EXPECT_EQ(got, naive_bpe(word, settings.merges)) << "word " << word;
    }
  }
}

TEST(TextBpe, CachedEncodingEqualsTheUncachedMergeLoopOnRepeatedWords) {
  std::mt19937 random(2);
  const BpeSettings settings = random_settings(random, 40);
  auto model = BpeModel::build(settings);
  ASSERT_TRUE(model.ok());
  for (int round = 0; round < 3; ++round)
    for (int word_index = 0; word_index < 50; ++word_index) {
      std::mt19937 words(word_index);
      std::string word;
      for (int length = 1 + words() % 16; length > 0; --length) word.push_back("abc"[words() % 3]);
      std::vector<int32_t> cached, uncached;
      model->encode_word(word, cached);
      model->merge_word(word, uncached);
      EXPECT_EQ(cached, uncached) << word;
    }
}

TEST(TextBpe, ARepeatedMergeTakesItsLastRankAsTokenizersDoes) {
  BpeSettings settings;
  settings.vocab = {{"a", 0}, {"b", 1}, {"c", 2}, {"ab", 3}, {"bc", 4}};
  settings.merges = {{"a", "b"}, {"b", "c"}, {"a", "b"}};  // tokenizers encodes "abc" as a, bc
  auto model = BpeModel::build(settings);
  ASSERT_TRUE(model.ok());
  std::vector<int32_t> ids;
  model->encode_word("abc", ids);
  EXPECT_EQ(ids, (std::vector<int32_t>{0, 4}));
}

TEST(TextBpe, IgnoreMergesEmitsAWordThatIsInTheVocabWhole) {
  BpeSettings settings;
  settings.vocab = {{"a", 0}, {"b", 1}, {"ab", 2}, {"aba", 3}};
  settings.merges = {{"a", "b"}};
  for (bool ignore : {false, true}) {
    settings.ignore_merges = ignore;
    auto model = BpeModel::build(settings);
    ASSERT_TRUE(model.ok());
    std::vector<int32_t> ids;
    model->encode_word("aba", ids);
    const std::vector<int32_t> expected = ignore ? std::vector<int32_t>{3} : std::vector<int32_t>{2, 0};
    EXPECT_EQ(ids, expected);
  }
}

TEST(TextBpe, ByteLevelWordsStartFromTheByteAlphabetAndIgnoreMergesLooksUpRawBytes) {
  BpeSettings settings;
  settings.byte_level = true;
  settings.ignore_merges = true;
  const auto& alphabet = byte_to_unicode();
  for (int byte = 0; byte < 256; ++byte) {
    std::string character;
    append_utf8(character, alphabet[byte]);
    settings.vocab.emplace_back(character, byte);
  }
  settings.vocab.emplace_back("\xC4\xA0" "a", 256);  // "Ġa" = " a"
  settings.vocab.emplace_back("\xC4\xA0" "ab", 257);
  settings.merges = {{"\xC4\xA0", "a"}};
  auto model = BpeModel::build(settings);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  std::vector<int32_t> ids;
  model->encode_word(" ab", ids);  // whole word in the vocab
  EXPECT_EQ(ids, (std::vector<int32_t>{257}));
  ids.clear();
  model->encode_word(" ac\xFF", ids);
  EXPECT_EQ(ids, (std::vector<int32_t>{256, 'c', 0xFF}));  // ids equal byte values in this vocab
}

TEST(TextBpe, UnknownCharactersBecomeUnkFusedWhenAskedOrVanishWithoutUnk) {
  BpeSettings settings;
  settings.vocab = {{"a", 0}, {"<unk>", 1}};
  auto plain = BpeModel::build(settings);
  ASSERT_TRUE(plain.ok());
  std::vector<int32_t> ids;
  plain->encode_word("axya", ids);
  EXPECT_EQ(ids, (std::vector<int32_t>{0, 0}));
  settings.unk_token = "<unk>";
  for (bool fuse : {false, true}) {
    settings.fuse_unk = fuse;
    auto model = BpeModel::build(settings);
    ASSERT_TRUE(model.ok());
    ids.clear();
    model->encode_word("axya", ids);
    EXPECT_EQ(ids, fuse ? std::vector<int32_t>({0, 1, 0}) : std::vector<int32_t>({0, 1, 1, 0}));
  }
}

TEST(TextBpe, AVeryLongWordMergesInLinearithmicTime) {
  std::mt19937 random(3);
  const BpeSettings settings = random_settings(random, 60);
  auto model = BpeModel::build(settings);
  ASSERT_TRUE(model.ok());
  std::string word;
  for (int index = 0; index < 400000; ++index) word.push_back("abc"[random() % 3]);
  const auto start = std::chrono::steady_clock::now();
  std::vector<int32_t> ids;
  model->merge_word(word, ids);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 2.0) << "a quadratic merge loop would take minutes on 400k symbols";
  std::string rebuilt;
  for (int32_t id : ids) rebuilt += *model->id_to_token(id);
  EXPECT_EQ(rebuilt, word);
}

TEST(TextBpe, AMergeNamingAMissingTokenIsBadTokenizer) {
  BpeSettings settings;
  settings.vocab = {{"a", 0}, {"b", 1}};
  settings.merges = {{"a", "b"}};  // "ab" is not in the vocab
  auto model = BpeModel::build(settings);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), ErrorCode::BadTokenizer);
  EXPECT_NE(model.status().message().find("merge 0"), std::string::npos);
  settings.vocab.emplace_back("ab", 2);
  settings.unk_token = "<unk>";
  auto missing_unk = BpeModel::build(settings);
  ASSERT_FALSE(missing_unk.ok());
  EXPECT_EQ(missing_unk.status().code(), ErrorCode::BadTokenizer);
}

}  // namespace
}  // namespace ls::text
