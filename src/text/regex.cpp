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

}  // namespace

Result<Regex> Regex::compile(std::string_view pattern) {
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* program = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
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
