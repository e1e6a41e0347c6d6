// LS_CHECK: assertions for programmer errors only (never for input a user controls).
#pragma once

#include <cstdio>
#include <cstdlib>

namespace ls::detail {
[[noreturn]] inline void check_failed(const char* file, int line, const char* condition, const char* message) {
  std::fprintf(stderr, "%s:%d: check failed: %s: %s\n", file, line, condition, message);
  std::abort();
}
}  // namespace ls::detail

#define LS_CHECK(cond, message)                                                    \
  do {                                                                             \
    if (!(cond)) ::ls::detail::check_failed(__FILE__, __LINE__, #cond, (message)); \
  } while (0)
