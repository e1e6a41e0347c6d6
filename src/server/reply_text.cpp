// Stop strings on detokenized text: the matcher, the reply text, and the lanes' stop hook built from them.
#include "server/reply_text.h"

#include <algorithm>
#include <memory>

#include "base/check.h"

namespace ls::server {

StopMatcher::StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {
  for (const std::string& stop : stops_) LS_CHECK(!stop.empty(), "an empty stop string matches everywhere");
}

std::string StopMatcher::push(std::string_view piece) {
  if (stopped_) return "";
  held_.append(piece);
  // The earliest stop string in what is held ends the reply there. Nothing released earlier can be part of it: a
  // match that starts at p keeps text[p..) a prefix of that stop string, so it stays held until the match completes.
  size_t cut = std::string::npos;
  for (const std::string& stop : stops_) cut = std::min(cut, held_.find(stop));
  if (cut != std::string::npos) {
    stopped_ = true;
    std::string out = held_.substr(0, cut);
    held_.clear();
    return out;
  }
  // Hold the longest tail that is a proper prefix of some stop string.
  size_t keep = 0;
  for (const std::string& stop : stops_) {
    for (size_t length = std::min(stop.size() - 1, held_.size()); length > keep; --length) {
      if (held_.compare(held_.size() - length, length, stop, 0, length) == 0) {
        keep = length;
        break;
      }
    }
  }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopMatcher::finish() {
  std::string out;
  out.swap(held_);
  return stopped_ ? std::string() : out;
}

ReplyText::ReplyText(const text::Tokenizer& tokenizer, std::vector<std::string> stops, std::vector<int32_t> eos_ids)
    : detokenizer_(tokenizer, /*skip_special_tokens=*/true), matcher_(std::move(stops)), eos_ids_(std::move(eos_ids)) {}

std::string ReplyText::push(int32_t id) {
  if (std::find(eos_ids_.begin(), eos_ids_.end(), id) != eos_ids_.end()) return "";
  return matcher_.push(detokenizer_.push(id));
}

std::string ReplyText::finish() {
  std::string out = matcher_.push(detokenizer_.flush());
  return out + matcher_.finish();
}

StopHook make_stop_hook(const text::Tokenizer& tokenizer, std::vector<std::string> stops,
                        std::vector<int32_t> eos_ids) {
  // The hook is called with every generated id so far after each new one; the state remembers how many it has read.
  struct State {
    ReplyText text;
    size_t seen = 0;
  };
  // shared_ptr: StopHook is a std::function, which must be copyable; the copies share one reading position.
  auto state = std::make_shared<State>(State{ReplyText(tokenizer, std::move(stops), std::move(eos_ids))});
  return [state](std::span<const int32_t> generated) {
    for (; state->seen < generated.size(); ++state->seen) state->text.push(generated[state->seen]);
    return state->text.stopped();
  };
}

}  // namespace ls::server
