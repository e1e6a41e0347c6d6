// NFC: full canonical decomposition (Hangul by arithmetic), canonical ordering of combining marks, then canonical
// composition, over the generated tables.
#include <algorithm>
#include <vector>

#include "text/unicode_tables.h"
#include "text/utf8.h"

namespace ls::text::unicode {
namespace {

constexpr char32_t kHangulFirst = 0xAC00, kLeadFirst = 0x1100, kVowelFirst = 0x1161, kTrailFirst = 0x11A7;
constexpr char32_t kVowelCount = 21, kTrailCount = 28, kHangulCount = 11172;

uint8_t combining_class(char32_t point) {
  if (point < 0x300) return 0;
  const CombiningClassRun* end = kCombiningClasses + kCombiningClassCount;
  const CombiningClassRun* run = std::upper_bound(kCombiningClasses, end, point,
                                                  [](char32_t value, const CombiningClassRun& entry) { return value < entry.first; });
  if (run == kCombiningClasses) return 0;
  --run;
  return point <= run->last ? run->combining_class : 0;
}

void decompose(char32_t point, std::vector<char32_t>& out) {
  if (point >= kHangulFirst && point < kHangulFirst + kHangulCount) {
    const char32_t index = point - kHangulFirst;
    out.push_back(kLeadFirst + index / (kVowelCount * kTrailCount));
    out.push_back(kVowelFirst + (index % (kVowelCount * kTrailCount)) / kTrailCount);
    if (index % kTrailCount) out.push_back(kTrailFirst + index % kTrailCount);
    return;
  }
  const Decomposition* end = kDecompositions + kDecompositionCount;
  const Decomposition* found = std::lower_bound(kDecompositions, end, point,
                                                [](const Decomposition& entry, char32_t value) { return entry.composed < value; });
  if (found == end || found->composed != point) {
    out.push_back(point);
    return;
  }
  decompose(found->first, out);
  if (found->second) decompose(found->second, out);
}

// The primary composite of (first, second), or 0.
char32_t compose(char32_t first, char32_t second) {
  if (first >= kLeadFirst && first < kLeadFirst + 19 && second >= kVowelFirst && second < kVowelFirst + kVowelCount)
    return kHangulFirst + ((first - kLeadFirst) * kVowelCount + (second - kVowelFirst)) * kTrailCount;
  if (first >= kHangulFirst && first < kHangulFirst + kHangulCount && (first - kHangulFirst) % kTrailCount == 0 &&
      second > kTrailFirst && second < kTrailFirst + kTrailCount)
    return first + (second - kTrailFirst);
  const Composition* end = kCompositions + kCompositionCount;
  const Composition* found = std::lower_bound(kCompositions, end, std::make_pair(first, second),
                                              [](const Composition& entry, const std::pair<char32_t, char32_t>& key) {
                                                return entry.first != key.first ? entry.first < key.first : entry.second < key.second;
                                              });
  return found != end && found->first == first && found->second == second ? found->composed : 0;
}

}  // namespace

std::string to_nfc(std::string_view text) {
  // Code points below U+0300 neither decompose into anything else under NFC nor combine: such text is already NFC.
  bool simple = true;
  for (size_t position = 0; position < text.size() && simple;) {
    const CodePoint point = decode_code_point(text, position);
    simple = point.value < 0x300;
    position += point.length;
  }
  if (simple) return std::string(text);
  std::vector<char32_t> points;
  for (size_t position = 0; position < text.size();) {
    const CodePoint point = decode_code_point(text, position);
    decompose(point.value, points);
    position += point.length;
  }
  // Canonical ordering: stable sort of each run of non-starters by combining class.
  for (size_t begin = 0; begin < points.size();) {
    if (combining_class(points[begin]) == 0) {
      ++begin;
      continue;
    }
    size_t end = begin;
    while (end < points.size() && combining_class(points[end]) != 0) ++end;
    std::stable_sort(points.begin() + begin, points.begin() + end,
                     [](char32_t left, char32_t right) { return combining_class(left) < combining_class(right); });
    begin = end;
  }
  // Canonical composition: a mark joins the last starter unless blocked by a mark of the same or higher class.
  std::vector<char32_t> composed;
  composed.reserve(points.size());
  size_t starter = std::string::npos;  // index in `composed` of the last starter
  int last_class = 0;                   // class of the last code point kept after that starter
  for (char32_t point : points) {
    const int point_class = combining_class(point);
    if (starter != std::string::npos) {
      const bool adjacent = composed.size() == starter + 1;
      if (adjacent || (last_class != 0 && last_class < point_class)) {
        if (const char32_t joined = compose(composed[starter], point)) {
          composed[starter] = joined;
          continue;
        }
      }
    }
    if (point_class == 0) starter = composed.size();
    last_class = point_class;
    composed.push_back(point);
  }
  std::string out;
  for (char32_t point : composed) append_utf8(out, point);
  return out;
}

}  // namespace ls::text::unicode
