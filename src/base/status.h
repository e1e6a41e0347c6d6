// Named errors and the Status / Result<T> values that carry them across module boundaries.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "base/check.h"

namespace ls {

// Names from DESIGN.md "Errors and refusals"; extend, never rename.
enum class ErrorCode {
  Ok,
  InvalidArgument,  // a caller passed something malformed (bad CLI flag, bad request field)
  NotFound,         // a file or tensor that should exist does not
  IoError,          // the OS refused a read, write, mmap
  OutOfMemory,      // an allocation failed
  Internal,         // a bug surfaced as a value rather than a crash
  Cancelled,        // the request was cancelled by its client
  UnsupportedArchitecture,
  BadModelConfig,
  BadSafetensors,
  BadTokenizer,
  UnsupportedChatTemplate,
  UnsupportedDraftShape,
  BadDraftConfig,
  UnsupportedDraftActivation,
  UnsupportedDraftBits,
  DraftTargetMismatch,
  DrafterNeedsWideVerify,
  DraftNonfinite,
  DeviceUnavailable,  // a CUDA device (or the CPU's AMX path) was asked for and this build or machine has none
  DeviceError,        // a CUDA call failed (out of device memory, launch failure)
};

// The name of a code as written in DESIGN.md ("BadSafetensors").
std::string_view error_name(ErrorCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(ErrorCode code, std::string message) : code_(code), message_(std::move(message)) {
    LS_CHECK(code != ErrorCode::Ok, "an error Status needs a non-Ok code");
  }

  bool ok() const { return code_ == ErrorCode::Ok; }
  ErrorCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "BadSafetensors: tensor x ends past the file (offset 10, size 8)".
  std::string to_string() const;

 private:
  ErrorCode code_ = ErrorCode::Ok;
  std::string message_;
};

inline Status ok_status() { return Status(); }

// Holds a value or an error, never an OK status without a value.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit on purpose, `return value;`
  Result(Status status) : status_(std::move(status)) {  // NOLINT
    LS_CHECK(!status_.ok(), "Result<T> built from an OK status without a value");
  }

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  T& value() & { LS_CHECK(ok(), status_.to_string().c_str()); return *value_; }
  const T& value() const& { LS_CHECK(ok(), status_.to_string().c_str()); return *value_; }
  T&& value() && { LS_CHECK(ok(), status_.to_string().c_str()); return std::move(*value_); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::optional<T> value_;
  Status status_;
};

}  // namespace ls

// Returns early with the error of a Status expression.
#define LS_RETURN_IF_ERROR(expr)            \
  do {                                      \
    ::ls::Status ls_status_ = (expr);       \
    if (!ls_status_.ok()) return ls_status_; \
  } while (0)

#define LS_CONCAT_INNER(a, b) a##b
#define LS_CONCAT(a, b) LS_CONCAT_INNER(a, b)
// `LS_ASSIGN_OR_RETURN(auto file, open(path));` declares `file` or returns the error.
#define LS_ASSIGN_OR_RETURN(lhs, expr) LS_ASSIGN_OR_RETURN_IMPL(LS_CONCAT(ls_result_, __LINE__), lhs, expr)
#define LS_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.ok()) return tmp.status();            \
  lhs = std::move(tmp).value()
