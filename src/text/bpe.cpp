// BPE merges with a rank-ordered priority queue over a linked list of symbols (linear-logarithmic per word).
#include "text/bpe.h"

#include <array>
#include <queue>

#include "text/utf8.h"

namespace ls::text {
namespace {

// Raw bytes a byte-level token stands for, or nullopt when a character is outside the byte alphabet.
std::optional<std::string> byte_level_to_raw(std::string_view token) {
  std::string raw;
  size_t position = 0;
  while (position < token.size()) {
    const CodePoint point = decode_code_point(token, position);
    const int byte = unicode_to_byte(point.value);
    if (byte < 0) return std::nullopt;
    raw.push_back(static_cast<char>(byte));
    position += point.length;
  }
  return raw;
}

struct Symbol {
  int32_t id;
  int32_t previous;  // index of the previous live symbol, -1 at the start
  int32_t next;      // index of the next live symbol, -1 at the end
  bool live;
};

struct Candidate {
  int32_t rank;
  int32_t position;
  int32_t merged_id;
  bool operator>(const Candidate& other) const {
    return rank != other.rank ? rank > other.rank : position > other.position;
  }
};

}  // namespace

Result<BpeModel> BpeModel::build(const BpeSettings& settings) {
  BpeModel model;
  model.ignore_merges_ = settings.ignore_merges;
  model.byte_level_ = settings.byte_level;
  model.fuse_unk_ = settings.fuse_unk;
  int32_t max_id = -1;
  for (const auto& [token, id] : settings.vocab) {
    if (id < 0) return Status(ErrorCode::BadTokenizer, "vocab entry '" + token + "' has negative id " + std::to_string(id));
    max_id = std::max(max_id, id);
  }
  model.id_to_token_.resize(static_cast<size_t>(max_id + 1));
  model.id_present_.assign(static_cast<size_t>(max_id + 1), 0);
  for (const auto& [token, id] : settings.vocab) {
    model.vocab_[token] = id;
    model.id_to_token_[id] = token;
    model.id_present_[id] = 1;
    if (settings.byte_level)
      if (auto raw = byte_level_to_raw(token)) model.raw_vocab_.emplace(std::move(*raw), id);
  }
  model.byte_ids_.fill(-1);
  const auto& alphabet = byte_to_unicode();
  for (int byte = 0; byte < 256; ++byte) {
    std::string character;
    append_utf8(character, alphabet[byte]);
    if (auto found = model.vocab_.find(character); found != model.vocab_.end()) model.byte_ids_[byte] = found->second;
  }
  if (settings.unk_token) {
    auto found = model.vocab_.find(*settings.unk_token);
    if (found == model.vocab_.end())
      return Status(ErrorCode::BadTokenizer, "unk_token '" + *settings.unk_token + "' is not in the vocab");
    model.unk_id_ = found->second;
  }
  model.merges_.reserve(settings.merges.size());
  for (size_t rank = 0; rank < settings.merges.size(); ++rank) {
    const auto& [left, right] = settings.merges[rank];
    auto left_id = model.vocab_.find(left);
    auto right_id = model.vocab_.find(right);
    auto merged_id = model.vocab_.find(left + right);
    if (left_id == model.vocab_.end() || right_id == model.vocab_.end() || merged_id == model.vocab_.end())
      return Status(ErrorCode::BadTokenizer, "merge " + std::to_string(rank) + " ('" + left + "', '" + right +
                                                 "') names a token missing from the vocab");
    // A repeated pair keeps its last rank: tokenizers collects the merges into a map, later entries overwriting.
    model.merges_.insert_or_assign(pair_key(left_id->second, right_id->second),
                                   MergeTarget{static_cast<int32_t>(rank), merged_id->second});
  }
  return model;
}

BpeModel::BpeModel(BpeModel&& other) noexcept { *this = std::move(other); }

BpeModel& BpeModel::operator=(BpeModel&& other) noexcept {
  vocab_ = std::move(other.vocab_);
  id_to_token_ = std::move(other.id_to_token_);
  id_present_ = std::move(other.id_present_);
  raw_vocab_ = std::move(other.raw_vocab_);
  merges_ = std::move(other.merges_);
  byte_ids_ = other.byte_ids_;
  ignore_merges_ = other.ignore_merges_;
  byte_level_ = other.byte_level_;
  unk_id_ = other.unk_id_;
  fuse_unk_ = other.fuse_unk_;
  cache_.clear();
  return *this;
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  auto found = vocab_.find(token);
  if (found == vocab_.end()) return std::nullopt;
  return found->second;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || id >= id_limit() || !id_present_[id]) return nullptr;
  return &id_to_token_[id];
}

void BpeModel::initial_symbols(std::string_view word, std::vector<int32_t>& symbols) const {
  symbols.clear();
  if (byte_level_) {
    for (char byte : word) symbols.push_back(byte_ids_[static_cast<unsigned char>(byte)]);
    return;
  }
  size_t position = 0;
  while (position < word.size()) {
    const CodePoint point = decode_code_point(word, position);
    auto found = vocab_.find(word.substr(position, point.length));
    symbols.push_back(found == vocab_.end() ? -1 : found->second);
    position += point.length;
  }
}

void BpeModel::merge_word(std::string_view word, std::vector<int32_t>& out) const {
  std::vector<int32_t> initial;
  initial_symbols(word, initial);
  // Missing characters become unk (fused when asked) or vanish, as in tokenizers' Word building.
  std::vector<Symbol> symbols;
  symbols.reserve(initial.size());
  bool previous_unknown = false;
  for (int32_t id : initial) {
    if (id < 0) {
      if (unk_id_ < 0) continue;
      if (fuse_unk_ && previous_unknown) continue;
      id = unk_id_;
      previous_unknown = true;
    } else {
      previous_unknown = false;
    }
    const auto index = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, index - 1, index + 1, true});
  }
  if (symbols.empty()) return;
  symbols.back().next = -1;

  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
  auto consider = [&](int32_t position) {
    const int32_t next = symbols[position].next;
    if (next < 0) return;
    auto found = merges_.find(pair_key(symbols[position].id, symbols[next].id));
    if (found != merges_.end()) queue.push({found->second.rank, position, found->second.merged_id});
  };
  for (int32_t position = 0; position + 1 < static_cast<int32_t>(symbols.size()); ++position) consider(position);

  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.position];
    if (!left.live || left.next < 0) continue;
    // Stale when either side changed since the candidate was queued.
    auto found = merges_.find(pair_key(left.id, symbols[left.next].id));
    if (found == merges_.end() || found->second.merged_id != top.merged_id) continue;
    Symbol& right = symbols[left.next];
    left.id = top.merged_id;
    right.live = false;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].previous = top.position;
    if (left.previous >= 0) consider(left.previous);
    consider(top.position);
  }
  for (int32_t position = 0; position >= 0; position = symbols[position].next) out.push_back(symbols[position].id);
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (ignore_merges_) {
    const auto& whole_words = byte_level_ ? raw_vocab_ : vocab_;
    if (auto found = whole_words.find(word); found != whole_words.end()) {
      out.push_back(found->second);
      return;
    }
  }
  const bool cacheable = word.size() <= kCacheMaxWordBytes;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    if (auto found = cache_.find(word); found != cache_.end()) {
      out.insert(out.end(), found->second.begin(), found->second.end());
      return;
    }
  }
  const size_t first = out.size();
  merge_word(word, out);
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    if (cache_.size() >= kCacheCapacity) cache_.clear();
    cache_.emplace(std::string(word), std::vector<int32_t>(out.begin() + first, out.end()));
  }
}

}  // namespace ls::text
