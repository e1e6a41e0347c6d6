// Leveled logging to stderr with a monotonic timestamp.
#include "base/log.h"

#include <atomic>
#include <chrono>
#include <cstdarg>
#include <cstdio>

namespace ls {
namespace {
std::atomic<LogLevel> g_level{LogLevel::Info};

void log_at(LogLevel level, const char* tag, const char* format, va_list args) {
  if (level < g_level.load(std::memory_order_relaxed)) return;
  static const auto start = std::chrono::steady_clock::now();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  char line[2048];
  std::vsnprintf(line, sizeof line, format, args);
  std::fprintf(stderr, "[%8.3f %s] %s\n", seconds, tag, line);
}
}  // namespace

void set_log_level(LogLevel level) { g_level.store(level); }
LogLevel log_level() { return g_level.load(); }

#define LS_DEFINE_LOG(name, level, tag)  \
  void name(const char* format, ...) {   \
    va_list args;                        \
    va_start(args, format);              \
    log_at(level, tag, format, args);    \
    va_end(args);                        \
  }
LS_DEFINE_LOG(log_debug, LogLevel::Debug, "debug")
LS_DEFINE_LOG(log_info, LogLevel::Info, "info")
LS_DEFINE_LOG(log_warn, LogLevel::Warn, "warn")
LS_DEFINE_LOG(log_error, LogLevel::Error, "error")
#undef LS_DEFINE_LOG

}  // namespace ls
