// Typed, named-error field access for config files parsed with nlohmann-json (config.json, drafter configs).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace ls::io {

// Reads fields of one JSON object; every refusal carries `code` and names the source and the field.
// A field set to null counts as absent.
class JsonFields {
 public:
  JsonFields(const nlohmann::json& object, std::string source, ErrorCode code)
      : object_(object), source_(std::move(source)), code_(code) {}

  bool has(std::string_view key) const {
    auto found = object_.find(key);
    return found != object_.end() && !found->is_null();
  }
  // True when the key is there, even as null.
  bool present(std::string_view key) const { return object_.find(key) != object_.end(); }
  const nlohmann::json& at(std::string_view key) const { return *object_.find(key); }

  Status error(const std::string& message) const { return Status(code_, source_ + ": " + message); }

  // A required integer in [low, high].
  Result<int64_t> integer(std::string_view key, int64_t low = std::numeric_limits<int64_t>::min(),
                          int64_t high = std::numeric_limits<int64_t>::max()) const {
    if (!has(key)) return error("missing required field " + std::string(key));
    return integer_value(key, at(key), low, high);
  }
  // An optional integer in [low, high], `fallback` when absent.
  Result<int64_t> integer_or(std::string_view key, int64_t fallback, int64_t low = std::numeric_limits<int64_t>::min(),
                             int64_t high = std::numeric_limits<int64_t>::max()) const {
    if (!has(key)) return fallback;
    return integer_value(key, at(key), low, high);
  }
  Result<int64_t> integer_value(std::string_view key, const nlohmann::json& value, int64_t low, int64_t high) const {
    if (!value.is_number_integer() || (value.is_number_unsigned() && value.get<uint64_t>() > uint64_t(INT64_MAX)))
      return error("field " + std::string(key) + " is " + value.dump() + ", not an integer");
    const int64_t number = value.get<int64_t>();
    if (number < low || number > high)
      return error("field " + std::string(key) + " is " + std::to_string(number) + ", outside [" + std::to_string(low) +
                   ", " + std::to_string(high) + "]");
    return number;
  }
  // An optional finite number, `fallback` when absent; `positive` also refuses <= 0.
  Result<double> number_or(std::string_view key, double fallback, bool positive) const {
    if (!has(key)) return fallback;
    const nlohmann::json& value = at(key);
    if (!value.is_number()) return error("field " + std::string(key) + " is " + value.dump() + ", not a number");
    const double number = value.get<double>();
    if (!std::isfinite(number) || (positive && !(number > 0)))
      return error("field " + std::string(key) + " is " + value.dump() + ", want a finite number" +
                   (positive ? " > 0" : ""));
    return number;
  }
  // An optional boolean, `fallback` when absent.
  Result<bool> boolean_or(std::string_view key, bool fallback) const {
    if (!has(key)) return fallback;
    const nlohmann::json& value = at(key);
    if (!value.is_boolean()) return error("field " + std::string(key) + " is " + value.dump() + ", not true/false");
    return value.get<bool>();
  }
  // An optional string, `fallback` when absent.
  Result<std::string> string_or(std::string_view key, std::string fallback) const {
    if (!has(key)) return fallback;
    const nlohmann::json& value = at(key);
    if (!value.is_string()) return error("field " + std::string(key) + " is " + value.dump() + ", not a string");
    return value.get<std::string>();
  }

 private:
  const nlohmann::json& object_;
  std::string source_;
  ErrorCode code_;
};

}  // namespace ls::io
