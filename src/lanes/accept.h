// Accepting a verified window: drafts are kept while each equals the target's draw; the bonus is the draw at the
// first mismatch (or after the last draft). So the kept tokens are exactly what plain decoding would produce.
//
// Worked example: window [p, d1, d2, d3], draws [g0, g1, g2, g3]. If d1 == g0 and d2 == g1 but d3 != g2, then
// drafts_kept = 2, the new tokens are [d1, d2, g2] and rows_kept = 3 (p, d1, d2 are now part of the context).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace ls {

struct Accepted {
  int drafts_kept = 0;  // leading drafts equal to the target's draws
  int32_t bonus = -1;   // the target's draw after the last kept row
  int rows_kept() const { return drafts_kept + 1; }
};

// `window` [1 + drafts] = pending token then drafts; `draws` [1 + drafts] = the target's draw after each row.
Accepted accept_window(std::span<const int32_t> window, std::span<const int32_t> draws);

// The tokens a window produces: the kept drafts then the bonus.
std::vector<int32_t> accepted_tokens(std::span<const int32_t> window, const Accepted& accepted);

}  // namespace ls
