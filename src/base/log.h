// Leveled logging to stderr, printf-style. The level is set once from the CLI.
#pragma once

namespace ls {

enum class LogLevel { Debug, Info, Warn, Error, Quiet };

void set_log_level(LogLevel level);
LogLevel log_level();

void log_debug(const char* format, ...) __attribute__((format(printf, 1, 2)));
void log_info(const char* format, ...) __attribute__((format(printf, 1, 2)));
void log_warn(const char* format, ...) __attribute__((format(printf, 1, 2)));
void log_error(const char* format, ...) __attribute__((format(printf, 1, 2)));

}  // namespace ls
