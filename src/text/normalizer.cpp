// Normalizer steps, applied in order to each piece of text outside the added tokens.
#include "text/normalizer.h"

#include "text/unicode_tables.h"
#include "text/utf8.h"

namespace ls::text {

Status Normalizer::add_steps(const nlohmann::json& spec, std::vector<NormalizerStep>& steps) {
  if (!spec.is_object() || !spec.contains("type") || !spec["type"].is_string())
    return Status(ErrorCode::BadTokenizer, "normalizer: entry without a type");
  const std::string type = spec["type"].get<std::string>();
  NormalizerStep step;
  if (type == "Sequence") {
    if (!spec.contains("normalizers") || !spec["normalizers"].is_array())
      return Status(ErrorCode::BadTokenizer, "normalizer: Sequence without normalizers");
    for (const auto& inner : spec["normalizers"]) LS_RETURN_IF_ERROR(add_steps(inner, steps));
    return ok_status();
  } else if (type == "NFC") {
    step.kind = NormalizerStep::Kind::Nfc;
  } else if (type == "Prepend" && spec.value("prepend", nlohmann::json()).is_string()) {
    step.kind = NormalizerStep::Kind::Prepend;
    step.text = spec["prepend"].get<std::string>();
  } else if (type == "Replace" && spec.value("content", nlohmann::json()).is_string()) {
    step.kind = NormalizerStep::Kind::Replace;
    step.text = spec["content"].get<std::string>();
    const auto& pattern = spec.value("pattern", nlohmann::json());
    if (pattern.contains("String") && pattern["String"].is_string()) {
      LS_ASSIGN_OR_RETURN(step.pattern, Regex::literal(pattern["String"].get<std::string>()));
    } else if (pattern.contains("Regex") && pattern["Regex"].is_string()) {
      LS_ASSIGN_OR_RETURN(step.pattern, Regex::compile(pattern["Regex"].get<std::string>()));
    } else {
      return Status(ErrorCode::BadTokenizer, "normalizer: Replace without a String or Regex pattern");
    }
  } else if (type == "Strip") {
    step.kind = NormalizerStep::Kind::Strip;
    step.strip_left = spec.value("strip_left", false);
    step.strip_right = spec.value("strip_right", false);
  } else {
    return Status(ErrorCode::BadTokenizer,
                  "normalizer type '" + type + "' is not supported (supported: Sequence, NFC, Prepend, Replace, Strip)");
  }
  steps.push_back(std::move(step));
  return ok_status();
}

Result<Normalizer> Normalizer::from_json(const nlohmann::json& spec) {
  Normalizer normalizer;
  if (!spec.is_null()) LS_RETURN_IF_ERROR(add_steps(spec, normalizer.steps_));
  return normalizer;
}

Result<std::string> Normalizer::apply(std::string_view text) const {
  std::string current(text);
  for (const NormalizerStep& step : steps_) {
    switch (step.kind) {
      case NormalizerStep::Kind::Nfc:
        current = unicode::to_nfc(current);
        break;
      case NormalizerStep::Kind::Prepend:
        if (!current.empty()) current = step.text + current;
        break;
      case NormalizerStep::Kind::Replace: {
        LS_ASSIGN_OR_RETURN(std::vector<Match> matches, step.pattern.find_all(current));
        std::string replaced;
        size_t previous = 0;
        for (const Match& match : matches) {
          if (match.end == match.begin) continue;
          replaced.append(current, previous, match.begin - previous);
          replaced += step.text;
          previous = match.end;
        }
        replaced.append(current, previous, std::string::npos);
        current = std::move(replaced);
        break;
      }
      case NormalizerStep::Kind::Strip: {
        size_t begin = 0, end = current.size();
        if (step.strip_left)
          while (begin < end) {
            const CodePoint point = decode_code_point(current, begin);
            if (!is_unicode_whitespace(point.value)) break;
            begin += point.length;
          }
        if (step.strip_right)
          while (end > begin) {
            size_t start = end - 1;
            while (start > begin && (static_cast<unsigned char>(current[start]) & 0xC0) == 0x80) --start;
            if (!is_unicode_whitespace(decode_code_point(current, start).value)) break;
            end = start;
          }
        current = current.substr(begin, end - begin);
        break;
      }
    }
  }
  return current;
}

}  // namespace ls::text
