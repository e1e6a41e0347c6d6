// Model, drafter and tokenizer loading shared by generate and serve.
#include "cli/model_setup.h"

#include <cstdio>
#include <filesystem>

#include "draft/dspark/config.h"
#include "draft/load.h"

namespace ls::cli {

Result<LoadedModels> load_models(const ModelSetup& setup) {
  LoadOptions options;
  options.mode = setup.mode;
  options.threads = setup.threads;
  options.device = setup.device;
  options.max_rows = setup.max_rows;
  options.kv_pages = setup.kv_pages;
  // Drafting needs the exact verify width measured; plain decoding verifies one row at a time.
  options.exact_width_probe = setup.drafter_dir.empty() ? 0 : 16;
  LoadedModels models;
  LS_ASSIGN_OR_RETURN(models.target, load_target(setup.model_dir, options));
  if (setup.drafter_dir.empty()) return models;
  DrafterOptions drafter_options;
  drafter_options.bits = setup.drafter_bits;
  drafter_options.mode = setup.mode;
  drafter_options.device = setup.device;
  drafter_options.threads = setup.threads;
  drafter_options.max_streams = setup.max_streams;
  LS_ASSIGN_OR_RETURN(models.drafter, load_drafter(setup.drafter_dir, *models.target, drafter_options));
  const int bits = dspark::resolve_draft_bits(drafter_options.bits, drafter_options.device, drafter_options.mode);
  std::fprintf(stderr, "drafter: %s, %s weights%s, block %d\n", setup.drafter_dir.c_str(), bits == 8 ? "int8" : "bf16",
               setup.drafter_bits < 0 ? " (--drafter-bits auto)" : "", models.drafter->facts().max_depth);
  return models;
}

Result<std::optional<text::Tokenizer>> load_tokenizer_if_present(const std::string& model_dir) {
  if (!std::filesystem::exists(std::filesystem::path(model_dir) / "tokenizer.json"))
    return std::optional<text::Tokenizer>();
  LS_ASSIGN_OR_RETURN(text::Tokenizer tokenizer, text::Tokenizer::load(model_dir));
  return std::optional<text::Tokenizer>(std::move(tokenizer));
}

std::vector<int32_t> reply_eos_ids(const Target& target, const text::Tokenizer* tokenizer) {
  std::vector<int32_t> ids = {target.facts().eos_token_id};
  if (tokenizer)
    for (int32_t id : tokenizer->stop_token_ids()) ids.push_back(id);
  return ids;
}

}  // namespace ls::cli
