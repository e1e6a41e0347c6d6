// Draft acceptance by equality with the target's keyed draws.
#include "lanes/accept.h"

#include "base/check.h"

namespace ls {

Accepted accept_window(std::span<const int32_t> window, std::span<const int32_t> draws) {
  LS_CHECK(!window.empty() && window.size() == draws.size(), "a window has one draw per row");
  Accepted accepted;
  while (accepted.drafts_kept + 1 < static_cast<int>(window.size()) &&
         window[accepted.drafts_kept + 1] == draws[accepted.drafts_kept]) {
    ++accepted.drafts_kept;
  }
  accepted.bonus = draws[accepted.drafts_kept];
  return accepted;
}

std::vector<int32_t> accepted_tokens(std::span<const int32_t> window, const Accepted& accepted) {
  std::vector<int32_t> tokens(window.begin() + 1, window.begin() + 1 + accepted.drafts_kept);
  tokens.push_back(accepted.bonus);
  return tokens;
}

}  // namespace ls
