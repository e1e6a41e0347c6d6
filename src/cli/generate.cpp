// lanespark generate: one request through the lanes (plain, or drafted with --drafter), printing tokens as they come.
#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/model_setup.h"
#include "cli/options.h"
#include "compute/ops.h"
#include "base/clock.h"
#include "compute/sampling.h"
#include "draft/synthetic/synthetic_acceptance_drafter.h"
#include "lanes/lanes.h"
#include "text/chat_template.h"
#include "text/detokenizer.h"
#include "text/tokenizer.h"

namespace ls::cli {
namespace {

int fail(const Status& status) {
  std::fprintf(stderr, "lanespark generate: %s\n", status.to_string().c_str());
  return 1;
}

// "1,2,3" -> ids; InvalidArgument naming the piece that is not an integer.
Result<std::vector<int32_t>> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  std::stringstream stream(text);
  std::string piece;
  while (std::getline(stream, piece, ',')) {
    int64_t value = -1;
    const auto [end, error] = std::from_chars(piece.data(), piece.data() + piece.size(), value);
    if (error != std::errc() || end != piece.data() + piece.size() || value < 0 || value > INT32_MAX)
      return Status(ErrorCode::InvalidArgument, "--prompt-ids: '" + piece + "' is not a token id");
    ids.push_back(static_cast<int32_t>(value));
  }
  if (ids.empty()) return Status(ErrorCode::InvalidArgument, "--prompt-ids holds no ids");
  return ids;
}

// --synthetic-acceptance: the request run alone without a drafter; prompt + reply is what the decorator replays.
Result<std::vector<int32_t>> record_plain_sequence(Target& target, const Request& request, Clock& clock) {
  LanesOptions options;
  options.max_streams = 1;
  LS_ASSIGN_OR_RETURN(std::unique_ptr<Lanes> lanes, Lanes::create(target, nullptr, options, clock));
  std::vector<int32_t> sequence = request.prompt;
  lanes->submit(request);
  while (!lanes->idle()) {
    LS_RETURN_IF_ERROR(lanes->round());
    for (const StreamEvent& event : lanes->take_events()) {
      if (event.finish == FinishReason::Error) return Status(ErrorCode::Internal, event.error);
      sequence.insert(sequence.end(), event.tokens.begin(), event.tokens.end());
    }
  }
  return sequence;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int run_generate(int argc, char** argv) {
  Options opts(argc, argv);
  const std::string model_dir = opts.require_string("--model", "model directory (config.json, safetensors)");
  const std::string prompt_text = opts.get_string("--prompt", "", "prompt text (needs tokenizer.json in --model)");
  const bool chat = opts.flag("--chat", "wrap --prompt as one user message with the model's chat template");
  const std::string prompt_ids = opts.get_string("--prompt-ids", "", "prompt as comma-separated token ids");
  const int64_t max_tokens = opts.get_int("--max-tokens", 64, "most tokens to generate");
  const std::string device_name = opts.get_string("--device", "cpu", "cpu (default) or cuda: where the target and drafter run");
  Sampling sampling;
  sampling.temperature = static_cast<float>(opts.get_double("--temperature", 0.0, "0 = greedy"));
  sampling.top_k = static_cast<int>(opts.get_int("--top-k", 0, "0 = off"));
  sampling.top_p = static_cast<float>(opts.get_double("--top-p", 1.0, "1 = off"));
  sampling.min_p = static_cast<float>(opts.get_double("--min-p", 0.0, "0 = off"));
  const bool has_seed = opts.has("--seed");
  const int64_t seed = opts.get_int("--seed", 0, "sampling seed (default: derived from the prompt ids)");
  const int64_t threads = opts.get_int("--threads", 1, "CPU threads");
  const std::string dtype = opts.get_string("--dtype", "bf16", "bf16 (weights as stored) or f32 (reference)");
  const std::string drafter_dir = opts.get_string("--drafter", "", "DSpark drafter directory (speculative decoding)");
  const int64_t drafter_bits =
      opts.get_int("--drafter-bits", -1,
                   "drafter weights: 0 = bf16 as stored, 8 = int8 per row (proposals only), -1 = auto (int8 on a "
                   "CPU drafter with AVX-512 VNNI, else bf16)");
  const int64_t max_draft = opts.get_int("--max-draft", -1, "most drafts per round (-1 = the drafter's block)");
  const bool draft_always = opts.flag("--draft-always",
                                          "testing: draft the full depth every round whatever pricing says (same "
                                          "tokens; speed may drop)");
  const double synthetic_acceptance = opts.get_double(
      "--synthetic-acceptance", 0.0,
      "BENCHMARKS ONLY: run plain first, then draft its recorded reply, right per draft at the rate whose mean "
      "accepted length (bonus included) is this; one low-variance draw a window, so a few hundred full-depth "
      "windows realize it within 1 % (needs --drafter; tokens stay exact)");
  if (std::optional<int> code = opts.conclude("lanespark generate", "lanespark generate: run a model on a prompt and print the reply"))
    return *code;
  if (prompt_text.empty() == prompt_ids.empty())
    return fail(Status(ErrorCode::InvalidArgument, "give exactly one of --prompt and --prompt-ids"));
  Result<Device> device = parse_device(device_name);
  if (!device.ok()) return fail(device.status());
  if (dtype != "bf16" && dtype != "f32")
    return fail(Status(ErrorCode::InvalidArgument, "--dtype must be bf16 or f32, got '" + dtype + "'"));
  if (max_tokens < 1 || threads < 1)
    return fail(Status(ErrorCode::InvalidArgument, "--max-tokens and --threads must be >= 1"));
  if (synthetic_acceptance != 0 && (synthetic_acceptance < 1 || drafter_dir.empty()))
    return fail(Status(ErrorCode::InvalidArgument, "--synthetic-acceptance needs --drafter and a mean >= 1, got " +
                                                       std::to_string(synthetic_acceptance)));

  // Tokenizer (optional for --prompt-ids: ids are printed when the model has none).
  Result<std::optional<text::Tokenizer>> loaded_tokenizer = load_tokenizer_if_present(model_dir);
  if (!loaded_tokenizer.ok()) return fail(loaded_tokenizer.status());
  const std::optional<text::Tokenizer>& tokenizer = *loaded_tokenizer;
  std::vector<int32_t> prompt;
  if (!prompt_ids.empty()) {
    Result<std::vector<int32_t>> ids = parse_ids(prompt_ids);
    if (!ids.ok()) return fail(ids.status());
    prompt = std::move(ids).value();
  } else {
    if (!tokenizer) return fail(Status(ErrorCode::NotFound, "--prompt needs " + model_dir + "/tokenizer.json"));
    std::string text = prompt_text;
    if (chat) {
      Result<text::ChatTemplate> chat_template = text::ChatTemplate::from_tokenizer(*tokenizer);
      if (!chat_template.ok()) return fail(chat_template.status());
      text::ChatRequest request;
      request.messages.push_back({{"role", "user"}, {"content", prompt_text}});
      Result<std::string> rendered = chat_template->render(request);
      if (!rendered.ok()) return fail(rendered.status());
      text = *rendered;
    }
    Result<std::vector<int32_t>> ids = tokenizer->encode(text, /*add_special_tokens=*/!chat);
    if (!ids.ok()) return fail(ids.status());
    prompt = std::move(ids).value();
  }
  sampling.seed = has_seed ? static_cast<uint64_t>(seed) : seed_from_prompt(prompt);

  ModelSetup setup;
  setup.model_dir = model_dir;
  setup.drafter_dir = drafter_dir;
  setup.device = *device;
  setup.mode = dtype == "bf16" ? compute::NumericMode::Bf16 : compute::NumericMode::Fp32;
  setup.threads = static_cast<int>(threads);
  setup.drafter_bits = static_cast<int>(drafter_bits);
  setup.max_rows = std::max<int>(setup.max_rows, static_cast<int>(prompt.size()));
  Result<LoadedModels> models = load_models(setup);
  if (!models.ok()) return fail(models.status());
  Target& target = *models->target;
  std::unique_ptr<Drafter>& drafter = models->drafter;
  std::unique_ptr<SyntheticAcceptanceDrafter> synthetic;
  if (synthetic_acceptance > 0) {
    Result<AcceptanceProfile> profile = profile_for_mean(synthetic_acceptance, drafter->facts().max_depth);
    if (!profile.ok()) return fail(profile.status());
    synthetic = std::make_unique<SyntheticAcceptanceDrafter>(
        *drafter, SyntheticAcceptanceOptions{*profile, sampling.seed, target.facts().vocab_size});
    std::fprintf(stderr, "synthetic acceptance (benchmarks only): mean %.2f, q = %.4f per draft\n",
                 synthetic_acceptance, profile->conditional[0]);
  }
  WallClock clock;
  LanesOptions lanes_options;
  lanes_options.max_streams = 1;
  lanes_options.pricing.always_draft = draft_always;
  Result<std::unique_ptr<Lanes>> created =
      Lanes::create(target, synthetic ? synthetic.get() : drafter.get(), lanes_options, clock);
  if (!created.ok()) return fail(created.status());
  Lanes& lanes = **created;

  Request request;
  request.prompt = prompt;
  request.sampling = sampling;
  request.has_seed = true;
  request.max_tokens = static_cast<int>(std::min<int64_t>(max_tokens, INT32_MAX));
  request.max_draft = static_cast<int>(max_draft);
  request.eos_ids = reply_eos_ids(target, tokenizer ? &*tokenizer : nullptr);
  const std::vector<int32_t> stop_ids = *request.eos_ids;
  std::optional<text::Detokenizer> detokenizer;
  if (tokenizer) detokenizer.emplace(*tokenizer, /*skip_special_tokens=*/false);

  std::vector<int32_t> record;
  if (synthetic) {
    Result<std::vector<int32_t>> recorded = record_plain_sequence(target, request, clock);
    if (!recorded.ok()) return fail(recorded.status());
    record = std::move(recorded).value();
  }

  const auto start = std::chrono::steady_clock::now();
  double first_token_s = 0;
  int64_t generated = 0;
  StreamStats stats;
  const StreamId stream = lanes.submit(std::move(request));
  if (synthetic) synthetic->expect(stream, std::move(record));
  while (!lanes.idle()) {
    if (Status status = lanes.round(); !status.ok()) return fail(status);
    for (const StreamEvent& event : lanes.take_events()) {
      for (int32_t token : event.tokens) {
        if (generated++ == 0) first_token_s = seconds_since(start);
        const bool stop = std::find(stop_ids.begin(), stop_ids.end(), token) != stop_ids.end();
        if (!detokenizer) std::printf("%d ", token);
        else if (!stop) std::fputs(detokenizer->push(token).c_str(), stdout);
      }
      std::fflush(stdout);
      stats = event.stats;
      if (event.finish == FinishReason::Error) return fail(Status(ErrorCode::Internal, event.error));
    }
  }
  if (detokenizer) std::fputs(detokenizer->flush().c_str(), stdout);
  std::printf("\n");
  const double total_s = seconds_since(start);
  const double decode_s = total_s - first_token_s;
  if (*device == Device::Cuda)
    std::fprintf(stderr, "device: cuda, %s\n", dtype.c_str());
  else
    std::fprintf(stderr, "matmul kernel: %s, %lld thread(s), %s\n", compute::matmul_kernel_name(),
                 static_cast<long long>(threads), dtype.c_str());
  std::fprintf(stderr, "prefill: %zu tokens, first token after %.3f s\n", prompt.size(), first_token_s);
  std::fprintf(stderr, "decode: %lld tokens in %.3f s = %.1f tok/s\n", static_cast<long long>(generated - 1),
               decode_s, generated > 1 ? (generated - 1) / decode_s : 0.0);
  if (drafter) {
    const double accepted_per_round = stats.rounds ? static_cast<double>(stats.drafts_accepted + stats.rounds) /
                                                         static_cast<double>(stats.rounds)
                                                   : 0.0;
    std::fprintf(stderr,
                 "drafting: %lld rounds, %lld drafts verified, %lld accepted, %.2f tokens per round, %lld faults\n",
                 static_cast<long long>(stats.rounds), static_cast<long long>(stats.drafts_verified),
                 static_cast<long long>(stats.drafts_accepted), accepted_per_round,
                 static_cast<long long>(stats.drafter_faults));
  }
  return 0;
}

}  // namespace ls::cli
