// Short blocks (draft/dspark/forward.h ShortBlock) on a real pair: what each width costs in acceptance and saves in
// pass time, every arm in one process. A program, not a test.
//
//   short_block_bench --model models/nano/target --drafter models/nano/drafter --prompts models/nano/eval_prompts.json
//                     [--per-kind 12] [--prompt-tokens 192] [--tokens 64] [--threads 2] [--extras 0,1,2]
//                     [--temperature 0.8] [--json PATH] [--profile PASSES] [--drafter-bits 0|8]
//
// For each kind ("code" prompts, "chat" messages through the chat template) and mode (greedy; sampled at
// --temperature, seed 1000 + prompt), the target generates --tokens plain; then, teacher-forced along that reply, every
// anchor with 7 tokens after it is drafted at every depth d by each arm: the trained width ("full") and depth+N for N
// in --extras. A draft is accepted up to its first token that differs from the reply (the lanes verify exactly that:
// greedy argmax, or the keyed draw at that position). Per arm and depth: mean accepted drafts, the confidence head's
// expected accepted (sum of the draft's chances) and the pass's median ms (block pass + scan), arms interleaved anchor
// by anchor so they share the host's phase.
// --profile PASSES: first, the 1-stream pass by op (dspark::PassProfile, ms per pass) at depths 1, 2, 3, 7 with the
// trained width and with depth+0, PASSES passes each, alternated pass by pass; then the acceptance tables.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "draft/dspark/dspark_drafter.h"
#include "draft/dspark/forward.h"
#include "model/load.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"
#include "bench_util.h"
#include "spec_rounds.h"

using ls::bench::median;
using ls::bench::parse_list;

namespace {

using namespace ls;
using json = nlohmann::json;

struct Options {
  std::string model, drafter, prompts, json_path;
  int per_kind = 12, prompt_tokens = 192, tokens = 64, threads = 2;
  std::vector<int> extras = {0, 1, 2};
  std::vector<int> gaps;  // --gaps: full-width arms whose context misses the N positions before the anchor
  std::vector<int> spec_depths;  // --spec-depths 0,3,7: fixed-policy 1-stream decoding per depth (spec_rounds.h)
  int spec_repeats = 2;
  float temperature = 0.8f;
  int profile = 0;  // passes per (arm, depth) of the op profile; 0 = none
  int bits = 0;     // the drafter's --drafter-bits
};

void check(const Status& status, const char* what) {
  if (status.ok()) return;
  std::fprintf(stderr, "%s failed: %s\n", what, status.to_string().c_str());
  std::exit(1);
}

// The prompts of one kind as token ids, cut to their last `limit` tokens (chat) or first (code).
std::vector<std::vector<int32_t>> load_kind(const json& prompts, const std::string& kind, const text::Tokenizer& tok,
                                            const Options& options) {
  std::vector<std::vector<int32_t>> encoded;
  for (const auto& entry : prompts[kind]) {
    if (static_cast<int>(encoded.size()) >= options.per_kind) break;
    std::string text;
    bool special = true;
    if (kind == "chat") {
      Result<text::ChatTemplate> chat = text::ChatTemplate::from_tokenizer(tok);
      check(chat.status(), "chat template");
      text::ChatRequest request;
      request.messages = entry["messages"];
      Result<std::string> rendered = chat->render(request);
      check(rendered.status(), "chat render");
      text = *rendered;
      special = false;
    } else {
      text = entry.value("prompt", "");
    }
    Result<std::vector<int32_t>> ids = tok.encode(text, special);
    check(ids.status(), "encode");
    if (static_cast<int>(ids->size()) > options.prompt_tokens) {
      if (kind == "chat") ids->erase(ids->begin(), ids->end() - options.prompt_tokens);
      else ids->resize(options.prompt_tokens);
    }
    if (!ids->empty()) encoded.push_back(std::move(ids).value());
  }
  return encoded;
}

// The plain reply of `tokens` tokens after `prompt`, and the taps of every position it forwarded.
struct Plain {
  std::vector<int32_t> sequence;  // prompt + reply
  std::vector<float> taps;        // [sequence.size() - 1, tap_width]
};

Plain generate(Target& target, const std::vector<int32_t>& prompt, const Sampling& sampling, int tokens,
               int64_t tap_width) {
  const StreamId stream = 1u << 20;
  Plain plain;
  plain.sequence = prompt;
  Window window;
  window.stream = stream;
  window.sampling = sampling;
  std::vector<int32_t> row = prompt;
  for (int step = 0; step < tokens; ++step) {
    window.tokens = row;
    window.first_drawn_row = static_cast<int>(row.size()) - 1;
    Result<Verified> verified = target.forward(std::span<const Window>(&window, 1));
    check(verified.status(), "forward");
    check(target.commit(stream, static_cast<int>(row.size())), "commit");
    plain.taps.insert(plain.taps.end(), verified->taps.begin(), verified->taps.begin() + row.size() * tap_width);
    const int32_t next = verified->draws[row.size() - 1];
    plain.sequence.push_back(next);
    row.assign(1, next);
  }
  target.release(stream);
  return plain;
}

struct Cell {
  double accepted = 0, expected = 0;
  int64_t windows = 0;
  std::vector<double> ms;
};

// The 1-stream pass by op at depths 1, 2, 3 and gamma, trained width against depth+0, alternated pass by pass over a
// context of the first prompt's taps.
json profile_passes(dspark::DsparkDrafter& d, const Plain& plain, int64_t prompt_length, int64_t tap_width,
                    int passes) {
  const int gamma = d.config().block_size;
  const StreamId stream = 3u << 20;
  check(d.absorb(stream, 0, static_cast<int>(prompt_length),
                 std::span<const float>(plain.taps.data(), static_cast<size_t>(prompt_length * tap_width))),
        "profile absorb");
  const int depths[] = {1, 2, 3, gamma};
  dspark::PassProfile profiles[2][4];
  std::vector<double> wall[2][4];
  for (int pass = 0; pass < passes; ++pass) {
    for (int k = 0; k < 4; ++k) {
      for (int arm = 0; arm < 2; ++arm) {
        dspark::set_short_block(dspark::ShortBlock{arm == 1, 0});
        DraftRequest request;
        request.stream = stream;
        request.anchor_token = plain.sequence[prompt_length];
        request.anchor_position = prompt_length;
        request.depth = depths[k];
        dspark::set_pass_profile(&profiles[arm][k]);
        check(d.draft(std::span<const DraftRequest>(&request, 1))[0].status, "profile draft");
        dspark::set_pass_profile(nullptr);
        wall[arm][k].push_back(d.last_block_ms() + d.last_scan_ms());
      }
    }
  }
  d.release(stream);
  json result;
  for (int arm = 0; arm < 2; ++arm) {
    for (int k = 0; k < 4; ++k) {
      const dspark::PassProfile& p = profiles[arm][k];
      const double n = std::max(1, p.passes);
      const std::pair<const char*, double> ops[] = {
          {"embed", p.embed},         {"norms", p.norms},     {"qkv", p.qkv},         {"q/k norm+rope", p.rope},
          {"attention", p.attention}, {"o_proj", p.o_proj},   {"gate/up", p.ffn_in},  {"down", p.ffn_down},
          {"head", p.head},           {"scan W2", p.scan_w2}, {"scan pick", p.scan_pick}};
      const char* name = arm == 0 ? "full" : "depth+0";
      std::printf("  profile %-7s depth %d (rows %.0f, median pass+scan %.3f ms):", name, depths[k], p.rows / n,
                  median(wall[arm][k]));
      json row = {{"arm", name}, {"depth", depths[k]}, {"rows", p.rows / n}, {"median_ms", median(wall[arm][k])}};
      for (const auto& [op, ms] : ops) {
        std::printf(" %s %.4f", op, ms / n);
        row[op] = ms / n;
      }
      std::printf("\n");
      result.push_back(row);
    }
  }
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  using namespace ls::bench;
  const bool read = read_flags(
      argc, argv,
      {{"--model", text_flag(options.model)}, {"--drafter", text_flag(options.drafter)},
       {"--prompts", text_flag(options.prompts)}, {"--json", text_flag(options.json_path)},
       {"--per-kind", int_flag(options.per_kind)}, {"--prompt-tokens", int_flag(options.prompt_tokens)},
       {"--tokens", int_flag(options.tokens)}, {"--threads", int_flag(options.threads)},
       {"--extras", list_flag(options.extras)}, {"--drafter-bits", int_flag(options.bits)},
       {"--profile", int_flag(options.profile)}, {"--gaps", list_flag(options.gaps)},
       {"--spec-depths", list_flag(options.spec_depths)}, {"--spec-repeats", int_flag(options.spec_repeats, 1)},
       {"--temperature",
        [&](const std::string& value) { options.temperature = static_cast<float>(std::atof(value.c_str())); }}});
  if (!read) return 2;
  if (options.model.empty() || options.drafter.empty() || options.prompts.empty()) {
    std::fprintf(stderr, "usage: short_block_bench --model DIR --drafter DIR --prompts FILE [--per-kind N] "
                         "[--prompt-tokens N] [--tokens N] [--threads T] [--extras 0,1,2] [--gaps 2,5] [--spec-depths 0,3,7 "
                         "[--spec-repeats R]] [--temperature T] "
                         "[--json PATH]\n");
    return 2;
  }
  LoadOptions load;
  load.threads = options.threads;
  load.max_rows = std::max(256, options.prompt_tokens + 8);
  auto target = load_target(options.model, load);
  check(target.status(), "target load");
  DrafterOptions drafter_options;
  drafter_options.threads = options.threads;
  drafter_options.max_streams = 1;
  drafter_options.bits = options.bits;
  auto drafter = dspark::DsparkDrafter::load(options.drafter, **target, drafter_options);
  check(drafter.status(), "drafter load");
  check((*target)->set_taps((*drafter)->facts().tap_layers), "set_taps");
  Result<text::Tokenizer> tokenizer = text::Tokenizer::load(options.model);
  check(tokenizer.status(), "tokenizer");
  std::ifstream file(options.prompts);
  const json prompts = json::parse(file, nullptr, false);
  if (prompts.is_discarded()) {
    std::fprintf(stderr, "cannot read %s\n", options.prompts.c_str());
    return 1;
  }
  const int gamma = (*drafter)->config().block_size;
  const int64_t tap_width =
      static_cast<int64_t>((*drafter)->facts().tap_layers.size()) * (*target)->facts().hidden_size;
  // Arm 0: the trained width (one depth-gamma pass gives every depth: its prefixes are the shallower passes' bits);
  // arm 1 + k: depth + extras[k], one pass per depth whose width is short.
  std::vector<std::string> arms = {"full"};
  for (int extra : options.extras) arms.push_back("depth+" + std::to_string(extra));
  for (int gap : options.gaps) arms.push_back("gap " + std::to_string(gap));
  const dspark::ShortBlock saved = dspark::short_block();
  json result = {{"model", options.model}, {"drafter", options.drafter}, {"tokens", options.tokens},
                 {"prompt_tokens", options.prompt_tokens}, {"per_kind", options.per_kind},
                 {"drafter_bits", options.bits}, {"arms", arms}};
  dspark::DsparkDrafter& d = **drafter;
  if (options.profile > 0) {
    Options one = options;
    one.per_kind = 1;
    const std::vector<std::vector<int32_t>> first = load_kind(prompts, "code", *tokenizer, one);
    const Plain plain = generate(**target, first.at(0), Sampling{}, 2, tap_width);
    result["profile"] = profile_passes(d, plain, static_cast<int64_t>(first[0].size()), tap_width, options.profile);
  }
  if (!options.spec_depths.empty()) {
    for (const std::string kind : {"code", "chat"}) {
      const std::vector<std::vector<int32_t>> encoded = load_kind(prompts, kind, *tokenizer, options);
      if (encoded.empty()) continue;
      std::printf("%s: ", kind.c_str());
      result["spec"][kind] =
          bench::spec_rounds(**target, {{&d, "bits " + std::to_string(d.bits())}}, encoded, options.spec_depths,
                             options.tokens, options.spec_repeats, tap_width);
    }
    if (!options.json_path.empty()) std::ofstream(options.json_path) << result.dump(2) << "\n";
    return 0;
  }
  for (const std::string kind : {"code", "chat"}) {
    const std::vector<std::vector<int32_t>> encoded = load_kind(prompts, kind, *tokenizer, options);
    if (encoded.empty()) continue;
    for (const bool sampled : {false, true}) {
      std::map<std::pair<size_t, int>, Cell> cells;  // (arm, depth)
      for (size_t index = 0; index < encoded.size(); ++index) {
        Sampling sampling;
        if (sampled) sampling = {options.temperature, 0, 1.0f, 0.0f, 1000 + index};
        const Plain plain = generate(**target, encoded[index], sampling, options.tokens, tap_width);
        const int64_t prompt_length = static_cast<int64_t>(encoded[index].size());
        const int64_t end = static_cast<int64_t>(plain.sequence.size());
        const StreamId stream = 2u << 20;
        check(d.absorb(stream, 0, static_cast<int>(prompt_length),
                       std::span<const float>(plain.taps.data(), static_cast<size_t>(prompt_length * tap_width))),
              "prompt absorb");
        for (int64_t anchor = prompt_length; anchor + gamma < end; ++anchor) {
          DraftRequest request;
          request.stream = stream;
          request.anchor_token = plain.sequence[anchor];
          request.anchor_position = anchor;
          request.sampling = sampling;
          // Accepted drafts of `draft` at depth `depth`: its prefix equal to the reply.
          auto score = [&](const Draft& draft, size_t arm, int depth, double ms) {
            check(draft.status, "draft");
            int accepted = 0;
            while (accepted < depth && draft.tokens[accepted] == plain.sequence[anchor + 1 + accepted]) ++accepted;
            double expected = 0;
            for (int k = 0; k < depth; ++k) expected += draft.chances[k];
            Cell& cell = cells[{arm, depth}];
            cell.accepted += accepted;
            cell.expected += expected;
            ++cell.windows;
            cell.ms.push_back(ms);
          };
          dspark::set_short_block(dspark::ShortBlock{});
          request.depth = gamma;
          const Draft full = d.draft(std::span<const DraftRequest>(&request, 1))[0];
          const double full_ms = d.last_block_ms() + d.last_scan_ms();
          for (int depth = 1; depth <= gamma; ++depth) score(full, 0, depth, full_ms);
          for (size_t k = 0; k < options.extras.size(); ++k) {
            dspark::set_short_block(dspark::ShortBlock{true, options.extras[k]});
            for (int depth = 1; depth <= gamma; ++depth) {
              if (depth + options.extras[k] >= gamma) {  // the trained width: the full pass's prefix
                score(full, k + 1, depth, full_ms);
                continue;
              }
              request.depth = depth;
              const Draft shorter = d.draft(std::span<const DraftRequest>(&request, 1))[0];
              score(shorter, k + 1, depth, d.last_block_ms() + d.last_scan_ms());
            }
          }
          // --gaps: the full pass over a context restarted at the anchor, the `gap` positions before it never
          // absorbed (as the lanes' context after rounds that ran untapped).
          dspark::set_short_block(dspark::ShortBlock{});
          for (size_t g = 0; g < options.gaps.size(); ++g) {
            const StreamId gap_stream = 3u << 20;
            const int64_t held = std::max<int64_t>(1, anchor - options.gaps[g]);
            check(d.absorb(gap_stream, 0, static_cast<int>(held),
                           std::span<const float>(plain.taps.data(), static_cast<size_t>(held * tap_width))),
                  "gap absorb");
            check(d.restart(gap_stream, anchor), "gap restart");
            request.stream = gap_stream;
            request.depth = gamma;
            const Draft gapped = d.draft(std::span<const DraftRequest>(&request, 1))[0];
            for (int depth = 1; depth <= gamma; ++depth)
              score(gapped, 1 + options.extras.size() + g, depth, d.last_block_ms() + d.last_scan_ms());
            request.stream = stream;
            d.release(gap_stream);
          }
          const std::span<const float> row(plain.taps.data() + anchor * tap_width, static_cast<size_t>(tap_width));
          check(d.absorb(stream, anchor, 1, row), "absorb");
        }
        d.release(stream);
      }
      const std::string mode = sampled ? "sampled" : "greedy";
      std::printf("%s %s (%zu prompts, %lld windows per depth): accepted drafts by depth 1..%d (expected by the "
                  "confidences; pass ms)\n",
                  kind.c_str(), mode.c_str(), encoded.size(),
                  static_cast<long long>(cells[{0, 1}].windows), gamma);
      json table;
      for (size_t arm = 0; arm < arms.size(); ++arm) {
        std::printf("  %-8s", arms[arm].c_str());
        for (int depth = 1; depth <= gamma; ++depth) {
          const Cell& cell = cells[{arm, depth}];
          const double n = std::max<int64_t>(1, cell.windows);
          std::printf(" | %.3f (%.3f; %.3f)", cell.accepted / n, cell.expected / n, median(cell.ms));
          table[arms[arm]].push_back(
              {{"depth", depth}, {"accepted", cell.accepted / n}, {"expected", cell.expected / n},
               {"pass_ms", median(cell.ms)}, {"windows", cell.windows}});
        }
        std::printf("\n");
      }
      result[kind][mode] = table;
    }
  }
  dspark::set_short_block(saved);
  if (!options.json_path.empty()) std::ofstream(options.json_path) << result.dump(2) << "\n";
  return 0;
}
