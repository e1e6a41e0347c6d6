// tokenizer.json's pre_tokenizer: Split (regex or literal, each delimiter behavior but Contiguous), ByteLevel, and
// Sequences of them. Splits text into the pre-tokens the BPE model merges independently.
#pragma once

#include <deque>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "text/regex.h"

namespace ls::text {

enum class SplitBehavior { Isolated, Removed, MergedWithPrevious, MergedWithNext };

struct PreTokenizerStep {
  enum class Kind { Split, ByteLevel } kind = Kind::Split;
  Regex regex;                         // Split pattern, or GPT-2's regex for ByteLevel with use_regex
  bool has_regex = false;
  SplitBehavior behavior = SplitBehavior::Isolated;
  bool invert = false;                 // Split: the pattern describes the pieces, not the delimiters
  bool add_prefix_space = false;       // ByteLevel: prepend ' ' to each piece that lacks one
};

class PreTokenizer {
 public:
  // Reads the "pre_tokenizer" value (null = no pre-tokenization). Unsupported types are BadTokenizer by name.
  static Result<PreTokenizer> from_json(const nlohmann::json& spec);

  // True when a ByteLevel step ends the sequence: pre-tokens then go to BPE as raw bytes.
  bool byte_level() const { return byte_level_; }
  // Appends the pre-tokens of `text` (valid UTF-8) to `pieces`; views point into `text` or into `storage`.
  Status split(std::string_view text, std::vector<std::string_view>& pieces, std::deque<std::string>& storage) const;

 private:
  static Status add_steps(const nlohmann::json& spec, std::vector<PreTokenizerStep>& steps);
  std::vector<PreTokenizerStep> steps_;
  bool byte_level_ = false;
};

// Splits one piece by `step`'s regex with its delimiter behavior (the rules of tokenizers' NormalizedString::split).
Status split_piece(const PreTokenizerStep& step, std::string_view piece, std::vector<std::string_view>& out);

}  // namespace ls::text
