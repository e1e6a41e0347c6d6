// PCRE2 wrapper: compile once (UTF, UCP, JIT), match with per-thread match data and a large JIT stack.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "text/regex.h"

#include <pcre2.h>

#include <string>

namespace ls::text {

struct Regex::Code {
  pcre2_code* program = nullptr;
  bool jit = false;
  ~Code() { pcre2_code_free(program); }
};

namespace {

std::string pcre2_message(int error_code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(error_code, buffer, sizeof(buffer));
  return reinterpret_cast<const char*>(buffer);
}

// Per-thread scratch: match data for the overall match only, a JIT stack big enough for very long words.
struct ThreadScratch {
  pcre2_match_data* match_data = pcre2_match_data_create(1, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  pcre2_jit_stack* jit_stack = pcre2_jit_stack_create(64 * 1024, 64 * 1024 * 1024, nullptr);
  ThreadScratch() {
    pcre2_jit_stack_assign(context, nullptr, jit_stack);
    pcre2_set_heap_limit(context, 1024 * 1024);  // KiB: 1 GiB for the interpreter fallback
  }
  ~ThreadScratch() {
    pcre2_jit_stack_free(jit_stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(match_data);
  }
};

ThreadScratch& thread_scratch() {
  thread_local ThreadScratch scratch;
  return scratch;
}

// Hugging Face runs split patterns through oniguruma, whose Unicode tables are newer than PCRE2 10.42's and whose
// \s leaves out U+180E. These are the code points where the two disagree (found by matching every code point with
// both engines; tests/python/test_tokenizer_parity.py checks them); patterns are rewritten to oniguruma's classes.
constexpr std::string_view kOnigWhitespace =
    R"(\t\n\x{0B}\f\r\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";
constexpr std::string_view kOnigExtraLetters =
    R"(\x{1C89}-\x{1C8A}\x{A7CB}-\x{A7CD}\x{A7DA}-\x{A7DC}\x{105C0}-\x{105F3}\x{10D4A}-\x{10D65}\x{10D6F}-\x{10D85})"
    R"(\x{10EC2}-\x{10EC4}\x{1123F}-\x{11240}\x{11380}-\x{11389}\x{1138B}\x{1138E}\x{11390}-\x{113B5}\x{113B7})"
    R"(\x{113D1}\x{113D3}\x{11BC0}-\x{11BE0}\x{11F02}\x{11F04}-\x{11F10}\x{11F12}-\x{11F33}\x{1342F})"
    R"(\x{13441}-\x{13446}\x{13460}-\x{143FA}\x{16100}-\x{1611D}\x{16D40}-\x{16D6C}\x{18CFF}\x{1B132}\x{1B155})"
    R"(\x{1DF25}-\x{1DF2A}\x{1E030}-\x{1E06D}\x{1E4D0}-\x{1E4EB}\x{1E5D0}-\x{1E5ED}\x{1E5F0}\x{2B739})"
    R"(\x{2EBF0}-\x{2EE5D}\x{31350}-\x{323AF})";
constexpr std::string_view kOnigExtraNumbers =
    R"(\x{10D40}-\x{10D49}\x{116D0}-\x{116E3}\x{11BF0}-\x{11BF9}\x{11F50}-\x{11F59}\x{16130}-\x{16139})"
    R"(\x{16D70}-\x{16D79}\x{1CCF0}-\x{1CCF9}\x{1D2C0}-\x{1D2D3}\x{1E4F0}-\x{1E4F9}\x{1E5F1}-\x{1E5FA})";

// `pattern` with \s, \S, \p{L}, \p{N} replaced by oniguruma's sets (inside and outside character classes).
std::string onig_compatible(std::string_view pattern) {
  std::string out;
  bool in_class = false, class_start = false;
  for (size_t position = 0; position < pattern.size(); ++position) {
    const char current = pattern[position];
    if (current == '\\' && position + 1 < pattern.size()) {
      const char next = pattern[position + 1];
      const std::string_view rest = pattern.substr(position);
      class_start = false;
      if (next == 'Q') {  // literal section up to \E, copied untouched
        const size_t end = pattern.find("\\E", position + 2);
        const size_t stop = end == std::string_view::npos ? pattern.size() : end + 2;
        out.append(pattern.substr(position, stop - position));
        position = stop - 1;
      } else if (next == 's') {
        out += in_class ? std::string(kOnigWhitespace) : "[" + std::string(kOnigWhitespace) + "]";
        ++position;
      } else if (next == 'S' && !in_class) {
        out += "[^" + std::string(kOnigWhitespace) + "]";
        ++position;
      } else if (rest.starts_with("\\p{L}") || rest.starts_with("\\p{N}")) {
        const std::string extra(rest[3] == 'L' ? kOnigExtraLetters : kOnigExtraNumbers);
        out += in_class ? std::string(rest.substr(0, 5)) + extra : "[" + std::string(rest.substr(0, 5)) + extra + "]";
        position += 4;
      } else {
        out.append(pattern.substr(position, 2));
        ++position;
      }
      continue;
    }
    out.push_back(current);
    if (!in_class && current == '[') {
      in_class = class_start = true;
      if (position + 1 < pattern.size() && pattern[position + 1] == '^') out.push_back(pattern[++position]);
      continue;
    }
    if (in_class && current == '[' && position + 1 < pattern.size() && pattern[position + 1] == ':') {
      const size_t end = pattern.find(":]", position + 2);
      if (end != std::string_view::npos) {
        out.append(pattern.substr(position + 1, end + 1 - position));
        position = end + 1;
      }
    } else if (in_class && current == ']' && !class_start) {
      in_class = false;
    }
    class_start = false;
  }
  return out;
}

}  // namespace

Result<Regex> Regex::compile(std::string_view pattern) {
  const std::string rewritten = onig_compatible(pattern);
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* program = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(rewritten.data()), rewritten.size(),
                                      PCRE2_UTF | PCRE2_UCP, &error_code, &error_offset, nullptr);
  if (!program)
    return Status(ErrorCode::BadTokenizer, "regex '" + std::string(pattern) + "' does not compile at offset " +
                                               std::to_string(error_offset) + ": " + pcre2_message(error_code));
  auto code = std::make_shared<Code>();
  code->program = program;
  code->jit = pcre2_jit_compile(program, PCRE2_JIT_COMPLETE) == 0;
  Regex regex;
  regex.pattern_ = std::string(pattern);
  regex.code_ = std::move(code);
  return regex;
}

Result<Regex> Regex::literal(std::string_view literal) {
  std::string quoted = "\\Q";
  for (size_t position = 0; position < literal.size(); ++position) {
    if (literal.compare(position, 2, "\\E") == 0) {
      quoted += "\\E\\\\E\\Q";
      ++position;
    } else {
      quoted.push_back(literal[position]);
    }
  }
  quoted += "\\E";
  return compile(quoted);
}

Result<std::vector<Match>> Regex::find_all(std::string_view text) const {
  ThreadScratch& scratch = thread_scratch();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  std::vector<Match> matches;
  size_t start = 0;
  while (start <= text.size()) {
    int rc = code_->jit ? pcre2_jit_match(code_->program, subject, text.size(), start, PCRE2_NO_UTF_CHECK,
                                          scratch.match_data, scratch.context)
                        : PCRE2_ERROR_JIT_STACKLIMIT;
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
      rc = pcre2_match(code_->program, subject, text.size(), start, PCRE2_NO_UTF_CHECK, scratch.match_data,
                       scratch.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0)
      return Status(ErrorCode::InvalidArgument, "pre-tokenizer regex failed on a " + std::to_string(text.size()) +
                                                    "-byte text at offset " + std::to_string(start) + ": " +
                                                    pcre2_message(rc));
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(scratch.match_data);
    const Match match{ovector[0], ovector[1]};
    matches.push_back(match);
    if (match.end > match.begin) {
      start = match.end;
    } else {
      if (match.end >= text.size()) break;
      start = match.end + 1;
      while (start < text.size() && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) ++start;
    }
  }
  return matches;
}

}  // namespace ls::text
