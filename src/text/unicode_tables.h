// Unicode data for NFC (generated tables in unicode_tables.cpp) and the normalization built on them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ls::text::unicode {

struct CombiningClassRun {
  char32_t first, last;
  uint8_t combining_class;
};
struct Decomposition {
  char32_t composed, first, second;  // second == 0: a singleton decomposition
};
struct Composition {
  char32_t first, second, composed;
};

extern const CombiningClassRun kCombiningClasses[];
extern const size_t kCombiningClassCount;
extern const Decomposition kDecompositions[];
extern const size_t kDecompositionCount;
extern const Composition kCompositions[];
extern const size_t kCompositionCount;

// The NFC form of valid UTF-8 `text` (canonical decomposition, canonical ordering, canonical composition).
std::string to_nfc(std::string_view text);

}  // namespace ls::text::unicode
