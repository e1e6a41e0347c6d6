// Loading what the generating commands run (generate, serve): the target, an optional drafter, the tokenizer.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "compute/ops.h"
#include "draft/drafter.h"
#include "model/load.h"
#include "model/target.h"
#include "text/tokenizer.h"

namespace ls::cli {

struct ModelSetup {
  std::string model_dir;
  std::string drafter_dir;  // "" = plain decoding
  Device device = Device::Cpu;
  compute::NumericMode mode = compute::NumericMode::Bf16;
  int threads = 1;
  int drafter_bits = -1;    // 0 = bf16 as stored, 8 = int8 per row, -1 = auto
  int max_streams = 1;      // streams the drafter reserves block scratch for, and the target's stream slots
  int max_rows = 8192;      // most rows one target forward accepts
  int kv_pages = 0;         // CUDA: the target's KV pool in pages (0: its default, LoadOptions::kv_pages)
};

struct LoadedModels {
  std::unique_ptr<Target> target;
  std::unique_ptr<Drafter> drafter;  // null without --drafter
};

// The target (with the exact verify width measured when a drafter comes), then the drafter; refusals by name.
Result<LoadedModels> load_models(const ModelSetup& setup);

// `<model_dir>/tokenizer.json` when the directory has one, else nothing.
Result<std::optional<text::Tokenizer>> load_tokenizer_if_present(const std::string& model_dir);

// The ids that end a reply: the target's eos, then the tokenizer's stop ids.
std::vector<int32_t> reply_eos_ids(const Target& target, const text::Tokenizer* tokenizer);

}  // namespace ls::cli
