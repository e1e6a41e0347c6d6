// The BPE model of tokenizer.json: vocabulary, ranked merges, and the merge loop that turns one pre-token into ids.
//
// Glossary. A pre-token (word) is one piece the pre-tokenizer produced. Its symbols start as single characters
// (for byte-level tokenizers: single bytes, each standing for one character of GPT-2's byte alphabet). A merge joins
// two adjacent symbols into the vocabulary entry spelled by both; the lowest-ranked available merge goes first, the
// leftmost on ties (Hugging Face tokenizers' Word::merge_all).
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/status.h"

namespace ls::text {

struct BpeSettings {
  std::vector<std::pair<std::string, int32_t>> vocab;       // token text (as in tokenizer.json) -> id
  std::vector<std::pair<std::string, std::string>> merges;  // in rank order
  bool ignore_merges = false;      // a pre-token that is itself in the vocab is emitted whole
  bool byte_level = false;         // words arrive as raw bytes; symbols are GPT-2 byte-alphabet characters
  std::optional<std::string> unk_token;
  bool fuse_unk = false;
};

// Hash that lets string-keyed maps be searched with a string_view (no temporary std::string per lookup).
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view text) const { return std::hash<std::string_view>{}(text); }
};
template <typename Value>
using StringMap = std::unordered_map<std::string, Value, StringHash, std::equal_to<>>;

class BpeModel {
 public:
  // Builds the model; a merge naming a token missing from the vocab (or its joined result) is BadTokenizer.
  static Result<BpeModel> build(const BpeSettings& settings);

  BpeModel(BpeModel&& other) noexcept;
  BpeModel& operator=(BpeModel&& other) noexcept;

  // Appends the ids of one pre-token. `word` is raw bytes for byte-level models, else the normalized text.
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;
  // The merge loop without ignore_merges or the cache (what tests compare the cached path against).
  void merge_word(std::string_view word, std::vector<int32_t>& out) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  // Token text as in tokenizer.json ("Ġthe"), or nullptr for an id the vocab lacks.
  const std::string* id_to_token(int32_t id) const;
  // One past the largest id in the vocab.
  int32_t id_limit() const { return static_cast<int32_t>(id_to_token_.size()); }

 private:
  BpeModel() = default;
  struct MergeTarget {
    int32_t rank;
    int32_t merged_id;
  };
  static uint64_t pair_key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }
  // Initial symbols of `word`: one id per byte (byte-level) or per character; -1 marks a missing one.
  void initial_symbols(std::string_view word, std::vector<int32_t>& symbols) const;

  StringMap<int32_t> vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<char> id_present_;
  StringMap<int32_t> raw_vocab_;  // byte-level: raw bytes of each token -> id
  std::unordered_map<uint64_t, MergeTarget> merges_;
  std::array<int32_t, 256> byte_ids_{};
  bool ignore_merges_ = false;
  bool byte_level_ = false;
  int32_t unk_id_ = -1;
  bool fuse_unk_ = false;

  // Words seen recently -> their ids; bounded, cleared when full. Guarded because encode is const and shared.
  static constexpr size_t kCacheCapacity = 20000;
  static constexpr size_t kCacheMaxWordBytes = 128;
  mutable std::mutex cache_mutex_;
  mutable StringMap<std::vector<int32_t>> cache_;
};

}  // namespace ls::text
