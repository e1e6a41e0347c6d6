// `lanespark inspect DIR`: prints a checkpoint's parsed config, tensor count and bytes by dtype, or why it is refused.
#include <cstdio>
#include <optional>
#include <map>
#include <string>

#include "cli/commands.h"
#include "cli/options.h"
#include "io/model_config.h"
#include "io/safetensors.h"

namespace ls::cli {

namespace {

void print_config(const io::ModelConfig& config) {
  int attention_layers = 0;
  std::string pattern;
  for (io::LayerKind kind : config.layer_kinds) {
    attention_layers += kind == io::LayerKind::Attention;
    pattern += kind == io::LayerKind::Attention ? 'A' : 'c';
  }
  std::printf("model_type      %s\n", config.model_type.c_str());
  std::printf("sizes           vocab %d, hidden %d, heads %d / kv %d, head_dim %d\n", config.vocab_size,
              config.hidden_size, config.num_heads, config.num_kv_heads, config.head_dim);
  std::printf("layers          %d (%d conv, %d attention)\n", config.num_layers, config.num_layers - attention_layers,
              attention_layers);
  std::printf("layer pattern   %s  (c conv, A attention)\n", pattern.c_str());
  std::printf("ffn width       %d%s\n", config.ffn_size, config.moe ? " (dense layers)" : "");
  if (config.moe) {
    const io::MoeConfig& moe = *config.moe;
    std::printf("moe             %d experts, top %d, expert ffn %d, dense layers %d, norm_topk_prob %s, expert bias %s, "
                "routed scale %g\n",
                moe.num_experts, moe.experts_per_token, moe.expert_ffn_size, moe.num_dense_layers,
                moe.norm_topk_prob ? "yes" : "no", moe.use_expert_bias ? "yes" : "no", moe.routed_scaling_factor);
  }
  std::string eos;
  for (int id : config.eos_token_ids) eos += (eos.empty() ? "" : ",") + std::to_string(id);
  std::printf("conv            kernel %d, bias %s\n", config.conv_kernel, config.conv_bias ? "yes" : "no");
  std::printf("rope / norm     theta %g, norm eps %g, max position %ld\n", config.rope_theta, config.norm_eps,
              config.max_position);
  std::printf("tokens          bos %d, eos %s, pad %d; embeddings %s\n", config.bos_token_id, eos.c_str(),
              config.pad_token_id, config.tie_embeddings ? "tied" : "untied");
}

}  // namespace

int run_inspect(int argc, char** argv) {
  Options opts(argc, argv);
  const std::string directory = opts.positional(0, "DIR", "checkpoint directory (config.json + safetensors)");
  if (std::optional<int> code = opts.conclude("lanespark inspect", "Prints a checkpoint's parsed config, tensors by dtype, and any refusal."))
    return *code;
  std::printf("checkpoint      %s\n", directory.c_str());
  Result<io::ModelConfig> config = io::read_model_config(directory);
  if (config.ok()) print_config(*config);
  Result<std::unique_ptr<io::Checkpoint>> checkpoint = io::Checkpoint::open(directory);
  if (checkpoint.ok()) {
    std::map<std::string, std::pair<size_t, size_t>> by_dtype;  // dtype -> (tensors, bytes)
    size_t total_bytes = 0;
    for (const io::TensorInfo& tensor : (*checkpoint)->tensors()) {
      auto& entry = by_dtype[std::string(io::dtype_name(tensor.dtype))];
      entry.first += 1;
      entry.second += tensor.bytes;
      total_bytes += tensor.bytes;
    }
    std::printf("tensors         %zu, %.1f MiB\n", (*checkpoint)->tensors().size(), total_bytes / 1048576.0);
    for (const auto& [dtype, entry] : by_dtype)
      std::printf("  %-13s %zu tensors, %zu bytes (%.1f MiB)\n", dtype.c_str(), entry.first, entry.second,
                  entry.second / 1048576.0);
  }
  Status verdict = !config.ok() ? config.status() : !checkpoint.ok() ? checkpoint.status()
                                                                     : io::check_target_tensors(**checkpoint, *config);
  if (!verdict.ok()) {
    std::printf("refused         %s\n", verdict.to_string().c_str());
    return 1;
  }
  std::printf("check           ok: every tensor the config implies is present with its shape\n");
  return 0;
}

}  // namespace ls::cli
