// tokenizer.json's normalizer: null, NFC, Prepend, Replace, Strip and Sequences of them; others are refused by name.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "text/regex.h"

namespace ls::text {

struct NormalizerStep {
  enum class Kind { Nfc, Prepend, Replace, Strip } kind = Kind::Prepend;
  std::string text;       // Prepend: the prefix; Replace: the replacement
  Regex pattern;          // Replace: what to replace
  bool strip_left = false, strip_right = false;
};

class Normalizer {
 public:
  // Reads the "normalizer" value; null means none. NFD, NFKC, Lowercase, BertNormalizer... are BadTokenizer by name.
  static Result<Normalizer> from_json(const nlohmann::json& spec);
  // True when there is nothing to apply.
  bool empty() const { return steps_.empty(); }
  // The normalized form of valid UTF-8 `text`.
  Result<std::string> apply(std::string_view text) const;

 private:
  static Status add_steps(const nlohmann::json& spec, std::vector<NormalizerStep>& steps);
  std::vector<NormalizerStep> steps_;
};

}  // namespace ls::text
