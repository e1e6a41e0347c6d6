// Pre-tokenizer steps applied piece by piece, following tokenizers' PreTokenizedString::split semantics.
#include "text/pre_tokenizer.h"

#include <algorithm>
#include <utility>

namespace ls::text {
namespace {

// GPT-2's split regex, used by ByteLevel when use_regex is true.
constexpr std::string_view kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

Status bad(const std::string& message) { return Status(ErrorCode::BadTokenizer, "pre_tokenizer: " + message); }

bool json_bool(const nlohmann::json& spec, const char* key, bool fallback) {
  auto found = spec.find(key);
  return found != spec.end() && found->is_boolean() ? found->get<bool>() : fallback;
}

}  // namespace

Status PreTokenizer::add_steps(const nlohmann::json& spec, std::vector<PreTokenizerStep>& steps) {
  if (!spec.is_object() || !spec.contains("type") || !spec["type"].is_string()) return bad("entry without a type");
  const std::string type = spec["type"].get<std::string>();
  if (type == "Sequence") {
    if (!spec.contains("pretokenizers") || !spec["pretokenizers"].is_array()) return bad("Sequence without pretokenizers");
    for (const auto& inner : spec["pretokenizers"]) LS_RETURN_IF_ERROR(add_steps(inner, steps));
    return ok_status();
  }
  PreTokenizerStep step;
  if (type == "ByteLevel") {
    step.kind = PreTokenizerStep::Kind::ByteLevel;
    step.add_prefix_space = json_bool(spec, "add_prefix_space", true);
    if (json_bool(spec, "use_regex", true)) {
      LS_ASSIGN_OR_RETURN(step.regex, Regex::compile(kGpt2Regex));
      step.has_regex = true;
    }
  } else if (type == "Split") {
    const auto& pattern = spec.value("pattern", nlohmann::json());
    if (pattern.contains("Regex") && pattern["Regex"].is_string()) {
      LS_ASSIGN_OR_RETURN(step.regex, Regex::compile(pattern["Regex"].get<std::string>()));
    } else if (pattern.contains("String") && pattern["String"].is_string()) {
      LS_ASSIGN_OR_RETURN(step.regex, Regex::literal(pattern["String"].get<std::string>()));
    } else {
      return bad("Split without a Regex or String pattern");
    }
    step.has_regex = true;
    const std::string behavior = spec.value("behavior", std::string("Isolated"));
    if (behavior == "Isolated") step.behavior = SplitBehavior::Isolated;
    else if (behavior == "Removed") step.behavior = SplitBehavior::Removed;
    else if (behavior == "MergedWithPrevious") step.behavior = SplitBehavior::MergedWithPrevious;
    else if (behavior == "MergedWithNext") step.behavior = SplitBehavior::MergedWithNext;
    else return bad("Split behavior '" + behavior + "' is not supported");
    step.invert = json_bool(spec, "invert", false);
  } else {
    return bad("type '" + type + "' is not supported (supported: Sequence, Split, ByteLevel)");
  }
  steps.push_back(std::move(step));
  return ok_status();
}

Result<PreTokenizer> PreTokenizer::from_json(const nlohmann::json& spec) {
  PreTokenizer pre_tokenizer;
  if (spec.is_null()) return pre_tokenizer;
  LS_RETURN_IF_ERROR(add_steps(spec, pre_tokenizer.steps_));
  for (size_t index = 0; index < pre_tokenizer.steps_.size(); ++index) {
    if (pre_tokenizer.steps_[index].kind != PreTokenizerStep::Kind::ByteLevel) continue;
    if (index + 1 != pre_tokenizer.steps_.size())
      return bad("ByteLevel is step " + std::to_string(index + 1) + " of " + std::to_string(pre_tokenizer.steps_.size()) +
                 "; only a final ByteLevel step is supported");
    pre_tokenizer.byte_level_ = true;
  }
  return pre_tokenizer;
}

Status split_piece(const PreTokenizerStep& step, std::string_view piece, std::vector<std::string_view>& out) {
  if (piece.empty()) return ok_status();
  LS_ASSIGN_OR_RETURN(std::vector<Match> matches, step.regex.find_all(piece));
  // Segments covering the piece: gaps (not delimiters) and matches (delimiters), flipped by invert.
  struct Segment {
    size_t begin, end;
    bool delimiter;
  };
  std::vector<Segment> segments;
  size_t previous = 0;
  for (const Match& match : matches) {
    if (match.begin > previous) segments.push_back({previous, match.begin, step.invert});
    segments.push_back({match.begin, match.end, !step.invert});
    previous = match.end;
  }
  if (previous < piece.size()) segments.push_back({previous, piece.size(), step.invert});

  // The folds of tokenizers' NormalizedString::split: a delimiter joins its neighbour only when that neighbour
  // is not itself a delimiter; empty results are dropped at the end.
  std::vector<std::pair<size_t, size_t>> ranges;
  bool previous_delimiter = false;
  switch (step.behavior) {
    case SplitBehavior::Isolated:
      for (const Segment& segment : segments) ranges.emplace_back(segment.begin, segment.end);
      break;
    case SplitBehavior::Removed:
      for (const Segment& segment : segments)
        if (!segment.delimiter) ranges.emplace_back(segment.begin, segment.end);
      break;
    case SplitBehavior::MergedWithPrevious:
      for (const Segment& segment : segments) {
        if (segment.delimiter && !previous_delimiter && !ranges.empty()) ranges.back().second = segment.end;
        else ranges.emplace_back(segment.begin, segment.end);
        previous_delimiter = segment.delimiter;
      }
      break;
    case SplitBehavior::MergedWithNext:
      for (auto segment = segments.rbegin(); segment != segments.rend(); ++segment) {
        if (segment->delimiter && !previous_delimiter && !ranges.empty()) ranges.back().first = segment->begin;
        else ranges.emplace_back(segment->begin, segment->end);
        previous_delimiter = segment->delimiter;
      }
      std::reverse(ranges.begin(), ranges.end());
      break;
  }
  for (const auto& [begin, end] : ranges)
    if (end > begin) out.push_back(piece.substr(begin, end - begin));
  return ok_status();
}

Status PreTokenizer::split(std::string_view text, std::vector<std::string_view>& pieces,
                           std::deque<std::string>& storage) const {
  std::vector<std::string_view> current{text};
  std::vector<std::string_view> next;
  for (const PreTokenizerStep& step : steps_) {
    next.clear();
    for (std::string_view piece : current) {
      if (step.kind == PreTokenizerStep::Kind::ByteLevel && step.add_prefix_space &&
          (piece.empty() || piece.front() != ' ')) {
        storage.push_back(" " + std::string(piece));
        piece = storage.back();
      }
      if (step.has_regex) LS_RETURN_IF_ERROR(split_piece(step, piece, next));
      else if (!piece.empty()) next.push_back(piece);
    }
    current.swap(next);
  }
  for (std::string_view piece : current)
    if (!piece.empty()) pieces.push_back(piece);
  return ok_status();
}

}  // namespace ls::text
