// A Hugging Face fast tokenizer (tokenizer.json, BPE model) plus tokenizer_config.json: encode text to the ids the
// model was trained on and decode ids back, identical to the `tokenizers` package.
//
// Encoding, in tokenizers' order: invalid UTF-8 becomes U+FFFD; added tokens are cut out of the raw text
// (non-normalized ones), the rest is normalized and cut again (normalized ones); each remaining stretch is
// pre-tokenized (PCRE2 splits, byte-level) and each pre-token merged by BPE; the post-processor adds BOS.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "text/added_tokens.h"
#include "text/bpe.h"
#include "text/normalizer.h"
#include "text/pre_tokenizer.h"

namespace ls::text {

class Tokenizer {
 public:
  // Loads `directory`/tokenizer.json and, when present, tokenizer_config.json and chat_template.jinja.
  static Result<Tokenizer> load(const std::filesystem::path& directory);
  // Builds from file contents; `config_json` may be empty. Unsupported parts are BadTokenizer naming them.
  static Result<Tokenizer> from_json(std::string_view tokenizer_json, std::string_view config_json = {});

  // The ids of `text` (any bytes; invalid UTF-8 is replaced by U+FFFD first), with BOS when add_special_tokens.
  Result<std::vector<int32_t>> encode(std::string_view text, bool add_special_tokens) const;
  // The text of `ids` as UTF-8 (invalid byte runs become U+FFFD, as tokenizers' decode does); unknown ids vanish.
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  std::optional<std::string> id_to_token(int32_t id) const;
  // One past the largest id (vocab and added tokens).
  int32_t vocab_size() const { return static_cast<int32_t>(decoded_.size()); }
  bool is_special(int32_t id) const;
  // True when `id` names a token (vocab or added).
  bool has_id(int32_t id) const { return id >= 0 && id < vocab_size() && known_[id]; }

  std::optional<int32_t> bos_id() const { return bos_id_; }
  std::optional<int32_t> eos_id() const { return eos_id_; }
  std::optional<int32_t> pad_id() const { return pad_id_; }
  // The ids that end a reply: eos, then <|im_end|> when the vocabulary has it (deduplicated).
  std::vector<int32_t> stop_token_ids() const;
  // bos_token / eos_token / pad_token / unk_token strings from tokenizer_config.json ("" when absent).
  const std::string& bos_token() const { return bos_token_; }
  const std::string& eos_token() const { return eos_token_; }
  const std::string& pad_token() const { return pad_token_; }
  const std::string& unk_token() const { return unk_token_; }
  // The chat template (Jinja source) from the config, "" when there is none.
  const std::string& chat_template() const { return chat_template_; }

  // What the decoder turns one id into before the UTF-8 check (raw bytes; "" for an unknown id).
  const std::string& token_bytes(int32_t id) const;
  // True when the decoder joins tokens with a space (a tokenizer.json without a decoder).
  bool joins_with_space() const { return decoder_ == DecoderKind::JoinWithSpace; }

 private:
  enum class DecoderKind { ByteLevel, JoinWithSpace };
  Tokenizer() = default;
  Status load_config(std::string_view config_json);
  Status encode_stretch(std::string_view text, std::vector<int32_t>& ids) const;
  Status finish_setup();

  std::unique_ptr<BpeModel> model_;
  Normalizer normalizer_;
  PreTokenizer pre_tokenizer_;
  std::vector<AddedToken> added_tokens_;
  std::unordered_map<std::string, int32_t> added_ids_;  // content -> id
  AddedTokenMatcher raw_matcher_;         // added tokens with normalized == false
  AddedTokenMatcher normalized_matcher_;  // added tokens with normalized == true
  std::vector<int32_t> prefix_ids_, suffix_ids_;  // post-processor ids around the sequence
  DecoderKind decoder_ = DecoderKind::ByteLevel;
  std::vector<std::string> decoded_;  // [vocab_size] bytes per id
  std::vector<char> special_;         // [vocab_size]
  std::vector<char> known_;           // [vocab_size] the id names a token
  std::optional<int32_t> bos_id_, eos_id_, pad_id_;
  std::string bos_token_, eos_token_, pad_token_, unk_token_;
  std::string chat_template_;
};

}  // namespace ls::text
