// `lanespark synth`: writes a random-weight checkpoint with the exact config and tensor names of a real model shape.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>

#include "cli/commands.h"
#include "cli/options.h"
#include "draft/synthetic/synthetic_drafter_checkpoint.h"
#include "io/synthetic_checkpoint.h"
#include "model/shapes.h"

namespace ls::cli {

namespace {
std::string shape_names() {
  std::string names;
  for (const model::ModelShape& shape : model::model_shapes()) names += (names.empty() ? "" : ", ") + std::string(shape.name);
  return names;
}
}  // namespace

int run_synth(int argc, char** argv) {
  Options opts(argc, argv);
  const std::string shape_name = opts.require_string("--shape", "model shape: " + shape_names());
  const int64_t seed = opts.get_int("--seed", 0, "seed of the random weights (default 0)");
  const std::string out = opts.require_string("--out", "output directory (created)");
  const bool has_layers = opts.has("--layers");
  const int64_t layers = opts.get_int("--layers", 0, "keep only the first N layers of the shape's pattern (default: all)");
  const bool has_vocab = opts.has("--vocab");
  const int64_t vocab = opts.get_int("--vocab", 0, "vocabulary size (default: the shape's)");
  const std::string dtype = opts.get_string("--dtype", "bf16", "bf16 (default) or f32; expert_bias is always f32");
  const int64_t shard_mib = opts.get_int("--max-shard-mib", 2048, "largest shard in MiB (default 2048)");
  const std::string drafter_out =
      opts.get_string("--drafter-out", "", "also write a DSpark drafter for this target here (LiquidAI's layout)");
  const int64_t drafter_layers = opts.get_int("--drafter-layers", 5, "drafter decoder layers (default 5)");
  const int64_t drafter_block = opts.get_int("--drafter-block", 9, "drafts per drafter pass (default 9)");
  if (opts.help_requested()) {
    std::fputs(opts.usage("Writes config.json + sharded safetensors of a real LFM2 shape with random weights.").c_str(), stdout);
    return 0;
  }
  Status status = opts.finish();
  const model::ModelShape* shape = model::find_model_shape(shape_name);
  if (status.ok() && !shape)
    status = Status(ErrorCode::InvalidArgument, "unknown shape '" + shape_name + "'; known: " + shape_names());
  if (status.ok() && dtype != "bf16" && dtype != "f32")
    status = Status(ErrorCode::InvalidArgument, "--dtype " + dtype + " is not bf16 or f32");
  if (status.ok() && shard_mib < 1)
    status = Status(ErrorCode::InvalidArgument, "--max-shard-mib " + std::to_string(shard_mib) + " is below 1");
  if (!status.ok()) {
    std::fprintf(stderr, "lanespark synth: %s\n", status.to_string().c_str());
    return 2;
  }

  model::ShapeOverrides overrides;
  if (has_layers) overrides.num_layers = static_cast<int>(std::clamp<int64_t>(layers, -1, 1 << 20));
  if (has_vocab) overrides.vocab_size = static_cast<int>(std::clamp<int64_t>(vocab, -1, 1 << 30));
  overrides.torch_dtype = dtype == "f32" ? "float32" : "bfloat16";
  Result<std::string> config_json = model::shape_config_json(*shape, overrides);
  if (!config_json.ok()) {
    std::fprintf(stderr, "lanespark synth: %s\n", config_json.status().to_string().c_str());
    return 2;
  }
  io::SyntheticOptions options;
  options.seed = static_cast<uint64_t>(seed);
  options.dtype = dtype == "f32" ? io::DType::F32 : io::DType::BF16;
  options.max_shard_bytes = static_cast<size_t>(shard_mib) << 20;
  const auto start = std::chrono::steady_clock::now();
  Result<io::SyntheticSummary> summary = io::write_synthetic_checkpoint(out, *config_json, options);
  if (!summary.ok()) {
    std::fprintf(stderr, "lanespark synth: %s\n", summary.status().to_string().c_str());
    return 1;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("wrote %s: %s (%s), %zu tensors, %.1f MiB in %d shard(s), seed %lld, %.1f s\n", out.c_str(),
              std::string(shape->name).c_str(), dtype.c_str(), summary->tensors, summary->total_bytes / 1048576.0,
              summary->shards, static_cast<long long>(seed), seconds);
  if (drafter_out.empty()) return 0;
  dspark::SyntheticDrafterShape drafter_shape;
  drafter_shape.num_layers = static_cast<int>(std::clamp<int64_t>(drafter_layers, -1, 1 << 20));
  drafter_shape.block_size = static_cast<int>(std::clamp<int64_t>(drafter_block, -1, 1 << 20));
  options.dtype = io::DType::BF16;  // LiquidAI's drafters ship bf16
  Result<io::SyntheticSummary> drafter = dspark::write_synthetic_drafter(drafter_out, *config_json, drafter_shape, options);
  if (!drafter.ok()) {
    std::fprintf(stderr, "lanespark synth: %s\n", drafter.status().to_string().c_str());
    return drafter.status().code() == ErrorCode::InvalidArgument ? 2 : 1;
  }
  std::printf("wrote %s: DSpark drafter for %s (bf16, %d layers, block %d), %zu tensors, %.1f MiB\n",
              drafter_out.c_str(), std::string(shape->name).c_str(), drafter_shape.num_layers,
              drafter_shape.block_size, drafter->tensors, drafter->total_bytes / 1048576.0);
  return 0;
}

}  // namespace ls::cli
