// short_block_bench --spec-depths 0,3,5,7: what the engine gives at 1 stream when every round drafts, independent of
// the lanes' pricing. For each prompt every arm decodes the same --tokens greedily after the prompt: depth 0 plain
// (one row a forward), depth d a fixed policy (a full-width pass asked for d drafts, a verify of the anchor + d rows,
// the greedy prefix kept, every kept row's taps absorbed before the next pass: a whole context, never restarted).
// The arms take turns prompt by prompt, --spec-repeats times; decode wall time only (the prompt's forward and absorb
// left out). Every arm's tokens must equal plain's (exit 1 otherwise). Part of short_block_bench (not a test).
#pragma once

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "draft/dspark/dspark_drafter.h"
#include "model/target.h"
#include "text/tokenizer.h"

namespace ls::bench {

struct SpecArmTotals {
  double ms = 0, verify_ms = 0, pass_ms = 0, absorb_ms = 0;
  int64_t tokens = 0, rounds = 0, drafts_kept = 0;
};

// Decodes `tokens` greedy tokens after `prompt` with drafts of `depth` every round (0: plain); returns the tokens and
// adds the decode's wall ms, rounds and drafts kept to `totals`.
inline std::vector<int32_t> spec_decode(Target& target, dspark::DsparkDrafter& drafter, const std::vector<int32_t>& prompt,
                                        int tokens, int depth, int64_t tap_width, SpecArmTotals& totals) {
  const StreamId stream = 5u << 20;
  auto check = [](const Status& status, const char* what) {
    if (status.ok()) return;
    std::fprintf(stderr, "spec rounds: %s failed: %s\n", what, status.to_string().c_str());
    std::exit(1);
  };
  Window window;
  window.stream = stream;
  window.tokens = prompt;
  window.first_drawn_row = static_cast<int>(prompt.size()) - 1;
  window.want_taps = depth > 0;
  Result<Verified> first = target.forward(std::span<const Window>(&window, 1));
  check(first.status(), "prompt forward");
  const int64_t length = static_cast<int64_t>(prompt.size());
  check(target.commit(stream, static_cast<int>(length)), "prompt commit");
  if (depth > 0)
    check(drafter.absorb(stream, 0, static_cast<int>(length),
                         std::span<const float>(first->taps.data(), static_cast<size_t>(length * tap_width))),
          "prompt absorb");
  std::vector<int32_t> out = {first->draws[length - 1]};
  int64_t position = length;  // of out.back(), the next anchor
  std::vector<int32_t> rows;
  const auto start = std::chrono::steady_clock::now();
  using SteadyClock = std::chrono::steady_clock;
  auto ms_between = [](SteadyClock::time_point a, SteadyClock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
  };
  while (static_cast<int>(out.size()) < tokens) {
    rows.assign(1, out.back());
    const SteadyClock::time_point t0 = SteadyClock::now();
    if (depth > 0) {
      DraftRequest request;
      request.stream = stream;
      request.anchor_token = out.back();
      request.anchor_position = position;
      request.depth = depth;
      const Draft draft = drafter.draft(std::span<const DraftRequest>(&request, 1))[0];
      check(draft.status, "draft");
      rows.insert(rows.end(), draft.tokens.begin(), draft.tokens.begin() + std::min<size_t>(depth, draft.tokens.size()));
    }
    const SteadyClock::time_point t1 = SteadyClock::now();
    window.tokens = rows;
    window.first_drawn_row = 0;
    Result<Verified> verified = target.forward(std::span<const Window>(&window, 1));
    check(verified.status(), "verify");
    const SteadyClock::time_point t2 = SteadyClock::now();
    int kept = 0;  // drafts equal to the target's pick at the row before them
    while (kept + 1 < static_cast<int>(rows.size()) && rows[kept + 1] == verified->draws[kept]) ++kept;
    check(target.commit(stream, kept + 1), "commit");
    if (depth > 0)
      check(drafter.absorb(stream, position, kept + 1,
                           std::span<const float>(verified->taps.data(), static_cast<size_t>((kept + 1) * tap_width))),
            "absorb");
    const SteadyClock::time_point t3 = SteadyClock::now();
    totals.pass_ms += ms_between(t0, t1);
    totals.verify_ms += ms_between(t1, t2);
    totals.absorb_ms += ms_between(t2, t3);
    for (int i = 1; i <= kept; ++i) out.push_back(rows[i]);
    out.push_back(verified->draws[kept]);
    position += kept + 1;
    ++totals.rounds;
    totals.drafts_kept += kept;
  }
  totals.ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  out.resize(static_cast<size_t>(tokens));
  totals.tokens += tokens - 1;  // the first came from the prompt's forward
  target.release(stream);
  drafter.release(stream);
  return out;
}

// One drafter of the comparison and its label (e.g. "bits 8").
struct SpecDrafter {
  dspark::DsparkDrafter* drafter;
  std::string label;
};

// Arms: plain (depth 0 in `depths`) once, and every other depth with every drafter; all on the same tokens.
inline nlohmann::json spec_rounds(Target& target, const std::vector<SpecDrafter>& drafters,
                                  const std::vector<std::vector<int32_t>>& prompts, const std::vector<int>& depths,
                                  int tokens, int repeats, int64_t tap_width) {
  struct Arm {
    int depth;
    size_t drafter;
    std::string name() const { return "depth " + std::to_string(depth); }
  };
  std::vector<Arm> arms;
  for (int depth : depths)
    for (size_t index = 0; index < (depth == 0 ? 1 : drafters.size()); ++index) arms.push_back({depth, index});
  std::vector<SpecArmTotals> totals(arms.size());
  for (int repeat = 0; repeat < repeats; ++repeat)
    for (size_t index = 0; index < prompts.size(); ++index) {
      std::vector<std::vector<int32_t>> got(arms.size());
      for (size_t step = 0; step < arms.size(); ++step) {
        const size_t arm = (step + index + repeat) % arms.size();  // a different arm first each time
        got[arm] = spec_decode(target, *drafters[arms[arm].drafter].drafter, prompts[index], tokens, arms[arm].depth,
                               tap_width, totals[arm]);
      }
      for (size_t arm = 1; arm < arms.size(); ++arm)
        if (got[arm] != got[0]) {
          std::fprintf(stderr, "spec rounds: depth %d's tokens differ from depth %d's on prompt %zu\n",
                       arms[arm].depth, arms[0].depth, index);
          std::exit(1);
        }
    }
  nlohmann::json result;
  double plain_ms_per_token = 0;
  for (size_t arm = 0; arm < arms.size(); ++arm)
    if (arms[arm].depth == 0) plain_ms_per_token = totals[arm].ms / std::max<int64_t>(1, totals[arm].tokens);
  std::printf("spec rounds (%zu prompts x %d repeats, %d tokens each, every round drafting; decode ms a token):\n",
              prompts.size(), repeats, tokens);
  for (size_t arm = 0; arm < arms.size(); ++arm) {
    const SpecArmTotals& t = totals[arm];
    const double per_token = t.ms / std::max<int64_t>(1, t.tokens);
    const double kept = t.rounds > 0 ? double(t.drafts_kept) / t.rounds : 0;
    const double round_ms = t.rounds > 0 ? t.ms / t.rounds : 0;
    const std::string label = arms[arm].depth == 0 ? "plain" : drafters[arms[arm].drafter].label;
    const double rounds = std::max<double>(1, t.rounds);
    std::printf("  depth %d %-7s: %.4f ms a token (%.3fx plain), %.3f ms a round (verify %.3f, pass %.3f, absorb "
                "%.3f), %.2f drafts kept a round\n",
                arms[arm].depth, label.c_str(), per_token, per_token > 0 ? plain_ms_per_token / per_token : 0.0,
                round_ms, t.verify_ms / rounds, t.pass_ms / rounds, t.absorb_ms / rounds, kept);
    result[arms[arm].depth == 0 ? "plain" : label][std::to_string(arms[arm].depth)] = {
        {"ms_per_token", per_token}, {"round_ms", round_ms}, {"kept_per_round", kept}, {"rounds", t.rounds},
        {"tokens", t.tokens},        {"verify_ms", t.verify_ms / rounds}, {"pass_ms", t.pass_ms / rounds},
        {"absorb_ms", t.absorb_ms / rounds}};
  }
  return result;
}

// cpu_bench --spec-depths: the first `prompts` "code" prompts of `prompts_path` (cut to `prompt_tokens`), a drafter of
// `bits` loaded beside `target`, then spec_rounds.
struct SpecPlan {
  std::string model, drafter, prompts_path;
  int prompts = 6, prompt_tokens = 192;
  std::vector<int> bits = {-1};  // one drafter per --drafter-bits value, arms of the same run
  compute::NumericMode mode = compute::NumericMode::Bf16;
  int threads = 2;
  std::vector<int> depths;
  int tokens = 128, repeats = 2;
};

inline nlohmann::json spec_rounds_from_files(const SpecPlan& plan, Target& target) {
  auto fail = [](const Status& status, const char* what) {
    std::fprintf(stderr, "%s failed: %s\n", what, status.to_string().c_str());
    std::exit(1);
  };
  Result<text::Tokenizer> tokenizer = text::Tokenizer::load(plan.model);
  if (!tokenizer.ok()) fail(tokenizer.status(), "tokenizer");
  std::ifstream file(plan.prompts_path);
  const nlohmann::json prompts = nlohmann::json::parse(file, nullptr, false);
  if (prompts.is_discarded() || !prompts.contains("code"))
    fail(Status(ErrorCode::InvalidArgument, plan.prompts_path + " has no \"code\" prompts"), "prompts");
  std::vector<std::vector<int32_t>> encoded;
  for (const auto& entry : prompts["code"]) {
    if (static_cast<int>(encoded.size()) >= plan.prompts) break;
    Result<std::vector<int32_t>> ids = tokenizer->encode(entry.value("prompt", ""), true);
    if (!ids.ok()) fail(ids.status(), "encode");
    if (static_cast<int>(ids->size()) > plan.prompt_tokens) ids->resize(plan.prompt_tokens);
    if (!ids->empty()) encoded.push_back(std::move(ids).value());
  }
  std::vector<std::unique_ptr<dspark::DsparkDrafter>> held;
  std::vector<SpecDrafter> drafters;
  for (int bits : plan.bits) {
    DrafterOptions options;
    options.threads = plan.threads;
    options.max_streams = 1;
    options.bits = bits;
    options.mode = plan.mode;
    auto drafter = dspark::DsparkDrafter::load(plan.drafter, target, options);
    if (!drafter.ok()) fail(drafter.status(), "drafter load");
    held.push_back(std::move(*drafter));
    drafters.push_back({held.back().get(), "bits " + std::to_string(held.back()->bits())});
  }
  if (Status status = target.set_taps(held[0]->facts().tap_layers); !status.ok()) fail(status, "set_taps");
  const int64_t tap_width = static_cast<int64_t>(held[0]->facts().tap_layers.size()) * target.facts().hidden_size;
  std::printf("threads %d: ", plan.threads);
  nlohmann::json result = spec_rounds(target, drafters, encoded, plan.depths, plan.tokens, plan.repeats, tap_width);
  return result;
}

}  // namespace ls::bench
