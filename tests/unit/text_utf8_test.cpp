// UTF-8 helpers: the maximal-subpart replacement rule, streaming equals whole-text decoding, the byte alphabet.
#include <gtest/gtest.h>

#include <random>
#include <set>
#include <string>

#include "text/unicode_tables.h"
#include "text/utf8.h"

namespace ls::text {
namespace {

const std::string kReplacement = "\xEF\xBF\xBD";

TEST(TextUtf8, InvalidSequencesAreReplacedByMaximalSubpartsAsPythonAndRustDo) {
  EXPECT_EQ(sanitize_utf8("abc"), "abc");
  EXPECT_EQ(sanitize_utf8("\xFF"), kReplacement);
  EXPECT_EQ(sanitize_utf8("\xF0\x9F\x98" "A"), kReplacement + "A");            // truncated 4-byte: one U+FFFD
  EXPECT_EQ(sanitize_utf8("\xE0\x80\xAF"), kReplacement + kReplacement + kReplacement);  // E0 needs A0..BF next
  EXPECT_EQ(sanitize_utf8("\xED\xA0\x80"), kReplacement + kReplacement + kReplacement);  // surrogate
  EXPECT_EQ(sanitize_utf8("\xC0\xAF"), kReplacement + kReplacement);           // overlong lead never valid
  EXPECT_EQ(sanitize_utf8("\xF4\x90\x80\x80"), kReplacement + kReplacement + kReplacement + kReplacement);  // > U+10FFFF
  EXPECT_EQ(sanitize_utf8("\xE6\x97\xA5\xE6\x9C"), "\xE6\x97\xA5" + kReplacement);
  EXPECT_TRUE(is_valid_utf8(sanitize_utf8("\x80\x81\xFE\xE2\x82")));
}

TEST(TextUtf8, StreamingPiecesConcatenateToTheWholeTextDecodingOnRandomBytes) {
  std::mt19937 random(9);
  for (int trial = 0; trial < 500; ++trial) {
    std::string bytes;
    for (int length = random() % 40; length > 0; --length) {
      const int kind = random() % 4;
      if (kind == 0) bytes += "\xE6\x97\xA5";
      else if (kind == 1) bytes += "\xF0\x9F\x98\x80";
      else bytes.push_back(static_cast<char>(random() % 256));
    }
    Utf8Stream stream;
    std::string streamed;
    for (size_t position = 0; position < bytes.size();) {
      const size_t piece = 1 + random() % 5;
      streamed += stream.push(std::string_view(bytes).substr(position, piece));
      position += piece;
    }
    streamed += stream.finish();
    EXPECT_EQ(streamed, sanitize_utf8(bytes));
    EXPECT_EQ(stream.pending_bytes(), 0u);
  }
}

TEST(TextUtf8, AStreamHoldsAnIncompleteCharacterUntilItCompletes) {
  Utf8Stream stream;
  EXPECT_EQ(stream.push("a\xF0\x9F"), "a");
  EXPECT_EQ(stream.pending_bytes(), 2u);
  EXPECT_EQ(stream.push("\x98"), "");
  EXPECT_EQ(stream.push("\x80!"), "\xF0\x9F\x98\x80!");
  EXPECT_EQ(stream.push("\xE6\x97"), "");
  EXPECT_EQ(stream.finish(), kReplacement);
}

TEST(TextUtf8, TheByteAlphabetIsABijectionThatKeepsPrintableAsciiAndMapsSpaceToGDot) {
  std::set<char32_t> seen;
  for (int byte = 0; byte < 256; ++byte) {
    const char32_t character = byte_to_unicode()[byte];
    EXPECT_TRUE(seen.insert(character).second);
    EXPECT_EQ(unicode_to_byte(character), byte);
  }
  EXPECT_EQ(byte_to_unicode()['A'], U'A');
  EXPECT_EQ(byte_to_unicode()[' '], U'\u0120');  // 'Ġ'
  EXPECT_EQ(unicode_to_byte(U'\u4E00'), -1);
}

TEST(TextUtf8, CodePointsRoundTripThroughAppendAndDecode) {
  for (char32_t point : {U'a', U'\u00E9', U'\u4E00', U'\U0001F600', U'\U0010FFFF'}) {
    std::string text;
    append_utf8(text, point);
    EXPECT_EQ(decode_code_point(text, 0).value, point);
    EXPECT_EQ(static_cast<size_t>(decode_code_point(text, 0).length), text.size());
    EXPECT_EQ(count_code_points(text + text), 2u);
  }
}

}  // namespace
}  // namespace ls::text

namespace ls::text {
namespace {

TEST(TextNfc, ComposesReordersMarksAndLeavesComposedTextAlone) {
  EXPECT_EQ(unicode::to_nfc("cafe\u0301"), "caf\u00e9");
  EXPECT_EQ(unicode::to_nfc("\u212b"), "\u00c5");                       // singleton decomposition, recomposed
  EXPECT_EQ(unicode::to_nfc("\u1100\u1161\u11a8"), "\uac01");            // Hangul L V T
  EXPECT_EQ(unicode::to_nfc("q\u0307\u0323"), "q\u0323\u0307");          // marks reordered by combining class
  EXPECT_EQ(unicode::to_nfc("d\u0307\u0323"), "\u1e0d\u0307");           // d + dot below composes first
  EXPECT_EQ(unicode::to_nfc("plain ASCII and \u00e9"), "plain ASCII and \u00e9");
}

}  // namespace
}  // namespace ls::text
