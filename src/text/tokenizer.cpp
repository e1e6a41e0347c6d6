// Tokenizer: the encode pipeline (added tokens, normalizer, pre-tokenizer, BPE, post-processor) and decode.
#include "text/tokenizer.h"

#include <deque>

#include "text/utf8.h"

namespace ls::text {

Status Tokenizer::encode_stretch(std::string_view text, std::vector<int32_t>& ids) const {
  std::vector<std::string_view> pieces;
  std::deque<std::string> storage;
  LS_RETURN_IF_ERROR(pre_tokenizer_.split(text, pieces, storage));
  for (std::string_view piece : pieces) model_->encode_word(piece, ids);
  return ok_status();
}

Result<std::vector<int32_t>> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  const std::string valid = is_valid_utf8(text) ? std::string() : sanitize_utf8(text);
  if (!valid.empty()) text = valid;
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  if (add_special_tokens) ids.insert(ids.end(), prefix_ids_.begin(), prefix_ids_.end());
  std::vector<TextSegment> raw_segments;
  raw_matcher_.split(text, raw_segments);
  std::vector<TextSegment> normalized_segments;
  for (const TextSegment& segment : raw_segments) {
    if (segment.id >= 0) {
      ids.push_back(segment.id);
      continue;
    }
    std::string normalized;
    std::string_view stretch = segment.text;
    if (!normalizer_.empty()) {
      LS_ASSIGN_OR_RETURN(normalized, normalizer_.apply(stretch));
      stretch = normalized;
    }
    if (normalized_matcher_.empty()) {
      LS_RETURN_IF_ERROR(encode_stretch(stretch, ids));
      continue;
    }
    normalized_segments.clear();
    normalized_matcher_.split(stretch, normalized_segments);
    for (const TextSegment& inner : normalized_segments) {
      if (inner.id >= 0) ids.push_back(inner.id);
      else LS_RETURN_IF_ERROR(encode_stretch(inner.text, ids));
    }
  }
  if (add_special_tokens) ids.insert(ids.end(), suffix_ids_.begin(), suffix_ids_.end());
  return ids;
}

const std::string& Tokenizer::token_bytes(int32_t id) const {
  static const std::string kNone;
  return id >= 0 && id < vocab_size() ? decoded_[id] : kNone;
}

bool Tokenizer::is_special(int32_t id) const { return id >= 0 && id < vocab_size() && special_[id]; }

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::string bytes;
  bool first = true;
  for (int32_t id : ids) {
    if (!has_id(id)) continue;
    if (skip_special_tokens && special_[id]) continue;
    if (decoder_ == DecoderKind::JoinWithSpace && !first) bytes.push_back(' ');
    bytes += decoded_[id];
    first = false;
  }
  return sanitize_utf8(bytes);
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (auto found = added_ids_.find(std::string(token)); found != added_ids_.end()) return found->second;
  return model_->token_to_id(token);
}

std::optional<std::string> Tokenizer::id_to_token(int32_t id) const {
  if (!has_id(id)) return std::nullopt;
  for (const AddedToken& added : added_tokens_)
    if (added.id == id) return added.content;
  if (const std::string* token = model_->id_to_token(id)) return *token;
  return std::nullopt;
}

std::vector<int32_t> Tokenizer::stop_token_ids() const {
  std::vector<int32_t> stops;
  if (eos_id_) stops.push_back(*eos_id_);
  if (auto im_end = token_to_id("<|im_end|>"); im_end && (!eos_id_ || *eos_id_ != *im_end)) stops.push_back(*im_end);
  return stops;
}

}  // namespace ls::text
