// UTF-8 decoding with the maximal-subpart replacement rule, White_Space, and GPT-2's byte-level alphabet.
#include "text/utf8.h"

namespace ls::text {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// Valid range of the second byte after lead `lead` (Unicode Table 3-7); later bytes are always 80..BF.
void second_byte_range(unsigned char lead, unsigned char& low, unsigned char& high) {
  low = 0x80;
  high = 0xBF;
  if (lead == 0xE0) low = 0xA0;
  if (lead == 0xED) high = 0x9F;
  if (lead == 0xF0) low = 0x90;
  if (lead == 0xF4) high = 0x8F;
}

// Length of the sequence a lead byte starts, 0 for bytes that never start one.
int sequence_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;
}

enum class Scan { Whole, Invalid, Truncated };

// Classifies the sequence at `position`: Whole (length = its size), Invalid (length = the maximal subpart to
// replace), Truncated (the input ends inside a sequence that is valid so far; length = bytes present).
Scan scan_sequence(std::string_view bytes, size_t position, int& length) {
  const auto lead = static_cast<unsigned char>(bytes[position]);
  const int need = sequence_length(lead);
  if (need == 0) {
    length = 1;
    return Scan::Invalid;
  }
  for (int index = 1; index < need; ++index) {
    if (position + index >= bytes.size()) {
      length = index;
      return Scan::Truncated;
    }
    const auto byte = static_cast<unsigned char>(bytes[position + index]);
    unsigned char low = 0x80, high = 0xBF;
    if (index == 1) second_byte_range(lead, low, high);
    if (byte < low || byte > high) {
      length = index;
      return Scan::Invalid;
    }
  }
  length = need;
  return Scan::Whole;
}

}  // namespace

CodePoint decode_code_point(std::string_view text, size_t position) {
  const auto lead = static_cast<unsigned char>(text[position]);
  const int length = sequence_length(lead);
  if (length <= 1 || position + length > text.size()) return {lead, 1};
  char32_t value = lead & (0xFF >> (length + 1));
  for (int index = 1; index < length; ++index) value = (value << 6) | (static_cast<unsigned char>(text[position + index]) & 0x3F);
  return {value, length};
}

void append_utf8(std::string& out, char32_t code_point) {
  if (code_point < 0x80) {
    out.push_back(static_cast<char>(code_point));
  } else if (code_point < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (code_point >> 6)));
    out.push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  } else if (code_point < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (code_point >> 12)));
    out.push_back(static_cast<char>(0x80 | ((code_point >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (code_point >> 18)));
    out.push_back(static_cast<char>(0x80 | ((code_point >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((code_point >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  }
}

bool is_valid_utf8(std::string_view text) {
  size_t position = 0;
  while (position < text.size()) {
    if (static_cast<unsigned char>(text[position]) < 0x80) {
      ++position;
      continue;
    }
    int length = 0;
    if (scan_sequence(text, position, length) != Scan::Whole) return false;
    position += length;
  }
  return true;
}

std::string sanitize_utf8(std::string_view bytes) {
  if (is_valid_utf8(bytes)) return std::string(bytes);
  Utf8Stream stream;
  std::string out = stream.push(bytes);
  out += stream.finish();
  return out;
}

size_t count_code_points(std::string_view text) {
  size_t count = 0;
  for (char byte : text) count += (static_cast<unsigned char>(byte) & 0xC0) != 0x80;
  return count;
}

bool is_unicode_whitespace(char32_t code_point) {
  if (code_point >= 0x09 && code_point <= 0x0D) return true;
  switch (code_point) {
    case 0x20: case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000:
      return true;
    default:
      return code_point >= 0x2000 && code_point <= 0x200A;
  }
}

const std::array<char32_t, 256>& byte_to_unicode() {
  static const std::array<char32_t, 256> table = [] {
    std::array<char32_t, 256> map{};
    char32_t next_extra = 256;
    for (int byte = 0; byte < 256; ++byte) {
      const bool printable = (byte >= '!' && byte <= '~') || (byte >= 0xA1 && byte <= 0xAC) || (byte >= 0xAE && byte <= 0xFF);
      map[byte] = printable ? static_cast<char32_t>(byte) : next_extra++;
    }
    return map;
  }();
  return table;
}

int unicode_to_byte(char32_t code_point) {
  static const std::array<int16_t, 324> inverse = [] {
    std::array<int16_t, 324> map{};
    map.fill(-1);
    const auto& forward = byte_to_unicode();
    for (int byte = 0; byte < 256; ++byte) map[forward[byte]] = static_cast<int16_t>(byte);
    return map;
  }();
  return code_point < inverse.size() ? inverse[code_point] : -1;
}

std::string Utf8Stream::push(std::string_view bytes) {
  pending_.append(bytes);
  std::string out;
  out.reserve(pending_.size());
  size_t position = 0;
  while (position < pending_.size()) {
    if (static_cast<unsigned char>(pending_[position]) < 0x80) {
      out.push_back(pending_[position++]);
      continue;
    }
    int length = 0;
    const Scan scan = scan_sequence(pending_, position, length);
    if (scan == Scan::Truncated) break;
    if (scan == Scan::Whole) out.append(pending_, position, length);
    else out.append(kReplacement);
    position += length;
  }
  pending_.erase(0, position);
  return out;
}

std::string Utf8Stream::finish() {
  std::string out = pending_.empty() ? "" : std::string(kReplacement);
  pending_.clear();
  return out;
}

}  // namespace ls::text
