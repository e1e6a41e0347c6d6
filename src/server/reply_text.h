// A reply's text as the client sees it: ids through the streaming detokenizer, cut before the first stop string.
//
// The same ReplyText runs twice per request: inside the lanes' StopHook (engine thread; it decides when the stream
// ends) and in the HTTP handler (it decides what text goes out). Both see the same ids, so both cut at the same place.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "lanes/stream.h"
#include "text/detokenizer.h"
#include "text/tokenizer.h"

namespace ls::server {

// Text in, text out, never any part of a stop string: the longest tail that could still begin a stop string is held
// back until the next piece decides it (OpenAI's rule: the stop string itself is not returned).
class StopMatcher {
 public:
  // `stops` must not hold an empty string (requests are validated first).
  explicit StopMatcher(std::vector<std::string> stops);

  // The text `piece` releases; after a stop string was found, only the text before it, then nothing.
  std::string push(std::string_view piece);
  // Everything still held (the reply ended without a stop string).
  std::string finish();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
};

class ReplyText {
 public:
  // Borrows the tokenizer, which must outlive it. Ids in `eos_ids` end the reply and give no text.
  ReplyText(const text::Tokenizer& tokenizer, std::vector<std::string> stops, std::vector<int32_t> eos_ids);

  // The text `id` releases ("" while a character or a possible stop string is incomplete).
  std::string push(int32_t id);
  // What is still held, at the end of the reply ("" after a stop string).
  std::string finish();
  bool stopped() const { return matcher_.stopped(); }

 private:
  text::Detokenizer detokenizer_;
  StopMatcher matcher_;
  std::vector<int32_t> eos_ids_;
};

// The lanes' StopHook for a request with stop strings: true once the generated ids' text holds one.
StopHook make_stop_hook(const text::Tokenizer& tokenizer, std::vector<std::string> stops,
                        std::vector<int32_t> eos_ids);

}  // namespace ls::server
