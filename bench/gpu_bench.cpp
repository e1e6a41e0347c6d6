// GPU benchmark of the CUDA target (e.g. on `lanespark synth --shape lfm2.5-1.2b`): plain decode at 1 stream vs the
// memory floor, prefill vs cuBLAS on the model's GEMM shapes, verify-window time by rows. A program, not a test.
//
//   gpu_bench --model DIR [--decode-tokens 128] [--context 128] [--prefill 2048] [--verify 1,2,4,8,16]
//             [--streams 16] [--json PATH]
//   gpu_bench --decode-gemm     (the decode GEMM kernel's variants on the 1.2B decode shapes; no model)
//   --decode-staged 0,1,..      also time the decode step with the narrow decode GEMMs on each staged configuration
//   --decode-only               stop after the decode rows
//   --attention-splits N        pin the target's decode attention splits (1 = never split; same bits)
//   --decode-fused              also time the decode step with the norms in the staged GEMMs' prologues
//   MoE models: the decode step is also timed with the routed experts on each expert_ffn path (same bits)
//   --decode-norm-configs 0,12  also time it with the norm launches on staged configurations g * 10 + s (group g,
//                               SwiGLU s; set_decode_norm_configs)
//   --l2-prefetch-ab            also time the decode step with the streaming decode GEMMs' L2 weight prefetch on
//   --pipe-ab                   also time the decode step (and the verify windows) on the pipeline decode GEMM
//   --verify-tiles-ab           also time the verify windows with the older 17..64-row picks, the verify tiles and
//                               every window streamed (set_decode_rows 16 / set_verify_tiles / set_decode_rows 64)
//   --verify-profile            device ms by op kind (GEMMs by role) of each --verify window (events around every op)
//   --arms A,B+C [--arms-rows 1,8,10] [--taps 2,5,8] [--rounds 3]   switches' arms alternating, then stop (gpu_bench_arms.h)
//
// Memory floor: weight bytes read per decode token (every dense tensor once, the tied embedding as the head; for
// MoE only the k routed experts of each MoE layer) over the device-to-device copy bandwidth measured here (bytes
// read + written). Prefill floor: cuBLAS bf16 GEMMs (fp32 compute) of every projection at m = prefill tokens
// (experts at m * k / E rows each, E launches), timed here.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/lfm2/cuda/cuda_target.h"
#include "model/lfm2/cuda/state_kernels.h"
#include "model/load.h"
#include "bench_util.h"
#include "gpu_bench_arms.h"
#include "gpu_bench_kernels.h"

using ls::bench::median;
using ls::bench::parse_list;
using ls::gpu_bench::check;
using ls::gpu_bench::copy_bandwidth;
using ls::gpu_bench::cublas_prefill;
using ls::gpu_bench::decode_gemm_table;
using ls::gpu_bench::ms_since;
using ls::gpu_bench::tokens_for;

namespace {

using namespace ls;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string model, json_path;
  int decode_tokens = 128, context = 128, prefill = 2048, streams = 16, repeats = 5;
  std::vector<int> verify = {1, 2, 4, 8, 16};
  bool decode_gemm = false;  // time the decode GEMM variants only (no model)
  std::vector<int> decode_staged;  // staged decode GEMM configurations to time the decode step with (A/B)
  bool decode_only = false;        // stop after the decode rows
  int attention_splits = 0;        // 0 = automatic
  bool decode_fused = false;       // also time the decode step with the norms in the GEMM prologues (mixers; all)
  std::vector<int> decode_norm_configs;  // norm launch configurations g * 10 + s to time the decode step with
  bool l2_prefetch_ab = false;           // also time the decode step with the L2 weight prefetch
  bool verify_tiles_ab = false;          // also time the verify windows with the older 17..64-row picks
  bool pipe_ab = false;                  // also time the decode step and verify windows on the pipeline decode GEMM
  bool verify_profile = false;           // device ms by op kind of each verify window
  ls::gpu_bench::ArmsOptions arms;       // --arms: run them and stop
};

// Milliseconds of one forward of `windows` then a commit of every row, median of `repeats`.
double time_forward(Target& target, std::vector<Window> windows, int repeats, bool commit_all) {
  std::vector<double> times;
  for (int i = 0; i < repeats; ++i) {
    const Clock::time_point start = Clock::now();
    Result<Verified> v = target.forward(windows);
    check(v.status(), "forward");
    times.push_back(ms_since(start));
    for (const Window& w : windows) check(target.commit(w.stream, commit_all ? static_cast<int>(w.tokens.size()) : 1), "commit");
  }
  return median(times);
}

// Milliseconds of a prefill of `prompt` on stream 7 (released after each), median of 3.
double time_prefill(Target& target, const std::vector<int32_t>& prompt) {
  std::vector<double> times;
  for (int i = 0; i < 3; ++i) {
    Window pw;
    pw.stream = 7;
    pw.tokens = prompt;
    pw.first_drawn_row = static_cast<int>(prompt.size()) - 1;
    const Clock::time_point start = Clock::now();
    check(target.forward(std::span<const Window>(&pw, 1)).status(), "prefill");
    times.push_back(ms_since(start));
    target.release(7);
  }
  return median(times);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (arg == "--model") o.model = next();
    else if (arg == "--json") o.json_path = next();
    else if (arg == "--decode-tokens") o.decode_tokens = std::atoi(next().c_str());
    else if (arg == "--context") o.context = std::atoi(next().c_str());
    else if (arg == "--prefill") o.prefill = std::atoi(next().c_str());
    else if (arg == "--streams") o.streams = std::atoi(next().c_str());
    else if (arg == "--verify") o.verify = parse_list(next());
    else if (arg == "--decode-gemm") o.decode_gemm = true;
    else if (arg == "--decode-staged") o.decode_staged = parse_list(next());
    else if (arg == "--decode-only") o.decode_only = true;
    else if (arg == "--attention-splits") o.attention_splits = std::atoi(next().c_str());
    else if (arg == "--decode-fused") o.decode_fused = true;
    else if (arg == "--decode-norm-configs") o.decode_norm_configs = parse_list(next());
    else if (arg == "--l2-prefetch-ab") o.l2_prefetch_ab = true;
    else if (arg == "--pipe-ab") o.pipe_ab = true;
    else if (arg == "--verify-tiles-ab") o.verify_tiles_ab = true;
    else if (arg == "--verify-profile") o.verify_profile = true;
    else if (arg.rfind("--", 0) == 0 && i + 1 < argc && ls::gpu_bench::parse_arms_flag(arg, argv[i + 1], o.arms)) ++i;
    else {
      std::fprintf(stderr, "usage: gpu_bench --model DIR [--decode-tokens N] [--context N] [--prefill N] "
                           "[--verify 1,2,4] [--streams N] [--json PATH] [--decode-staged 0,1] [--decode-only] "
                           "[--decode-fused] [--attention-splits N] [--l2-prefetch-ab] [--verify-tiles-ab] [--pipe-ab] "
                           "[--verify-profile] | "
                           "gpu_bench --decode-gemm\n");
      return 2;
    }
  }
  if (o.decode_gemm) {
    decode_gemm_table(copy_bandwidth());
    return 0;
  }
  if (o.model.empty()) {
    std::fprintf(stderr, "gpu_bench: --model DIR is required\n");
    return 2;
  }
  lfm2::gpu::set_attention_splits_for_bench(o.attention_splits);
  LoadOptions load;
  load.device = Device::Cuda;
  load.max_rows = std::max(o.prefill, 256);
  load.max_streams = 64;
  const Clock::time_point load_start = Clock::now();
  Result<std::unique_ptr<Target>> loaded = load_target(o.model, load);
  check(loaded.status(), "load");
  const double load_s = ms_since(load_start) / 1e3;
  auto* target = dynamic_cast<lfm2::CudaTarget*>(loaded->get());
  const io::ModelConfig& c = target->config();
  const int V = c.vocab_size;

  // Bytes per decode token.
  int64_t per_token = target->weight_bytes();
  if (c.moe) {
    const int64_t expert = 3 * int64_t{c.moe->expert_ffn_size} * c.hidden_size * 2;
    int moe_layers = 0;
    for (int l = 0; l < c.num_layers; ++l) moe_layers += c.is_moe_layer(l);
    per_token -= int64_t{moe_layers} * (c.moe->num_experts - c.moe->experts_per_token) * expert;
  }
  const double bandwidth = copy_bandwidth();
  const double floor_ms = per_token / bandwidth * 1e3;
  if (!o.arms.arms.empty()) {
    o.arms.context = o.context;
    ls::gpu_bench::run_arms(*target, o.arms);
    return 0;
  }

  // Plain decode at 1 stream after a prompt of `context` tokens.
  const std::vector<int32_t> prompt = tokens_for(o.context, 1, V), steps = tokens_for(o.decode_tokens, 2, V);
  Window w;
  w.stream = 1;
  w.tokens = prompt;
  w.first_drawn_row = o.context - 1;
  check(target->forward(std::span<const Window>(&w, 1)).status(), "prompt");
  check(target->commit(1, o.context), "commit");
  w.first_drawn_row = 0;
  // ms per decode step over the first `count` steps (one token each), as the target is set now.
  const auto time_steps = [&](int count) {
    const Clock::time_point start = Clock::now();
    for (int i = 0; i < count; ++i) {
      w.tokens = std::span<const int32_t>(&steps[i], 1);
      check(target->forward(std::span<const Window>(&w, 1)).status(), "decode");
      check(target->commit(1, 1), "commit");
    }
    return ms_since(start) / count;
  };
  const double decode_ms = time_steps(o.decode_tokens);
  const int step_kernels = target->last_graph_kernels();  // the decode step's graph (captured by now)
  // The same steps without CUDA graphs (every op launched from the host).
  target->set_graphs(false);
  const double eager_ms = time_steps(o.decode_tokens);
  target->set_graphs(true);
  // The same steps (graphs) with the streaming decode GEMMs' L2 weight prefetch on (same bits), then off again.
  double prefetch_ms = 0;
  if (o.l2_prefetch_ab) {
    cuda::set_decode_l2_prefetch(true);
    target->set_graphs(false);  // drops the graphs captured without it
    target->set_graphs(true);
    prefetch_ms = time_steps(o.decode_tokens);
    cuda::set_decode_l2_prefetch(false);
    target->set_graphs(false);
    target->set_graphs(true);
  }
  // The same steps (graphs) on the pipeline decode GEMM (set_decode_pipeline; same bits) at rings of 128 / 64 / 192
  // KB and chunks of 8 / 4 / 16 K tiles, interleaved with the streaming kernels so drift shows; printed as measured.
  if (o.pipe_ab) {
    struct PipeMode {
      const char* name;
      bool on, narrow;
      int ring_kb, chunk;
    };
    const PipeMode modes[] = {{"streaming kernels (old)", false, false, 0, 0},
                              {"default: pipeline one-row narrow", false, true, 0, 0},
                              {"pipeline everywhere, chunk 16", true, true, 128, 0},
                              {"pipeline everywhere, chunk 8", true, true, 128, 8},
                              {"streaming kernels (old, again)", false, false, 0, 0},
                              {"default (again)", false, true, 0, 0}};
    for (const PipeMode& mode : modes) {
      cuda::set_decode_pipeline(mode.on, -1, mode.ring_kb);
      cuda::set_decode_pipe_narrow(mode.narrow);
      cuda::set_decode_pipe_chunk(mode.chunk);
      target->set_graphs(false);  // drops the graphs captured under the other mode
      target->set_graphs(true);
      time_steps(4);
      const double ms = time_steps(o.decode_tokens);
      std::printf("pipe A/B: decode step, %-32s %.3f ms (ratio %.2f)\n", mode.name, ms, floor_ms / ms);
    }
    cuda::set_decode_pipeline(false);
    cuda::set_decode_pipe_narrow(true);
    cuda::set_decode_pipe_chunk(0);
    target->set_graphs(false);
    target->set_graphs(true);
  }
  // The same steps (graphs) with the narrow decode GEMMs on each staged configuration asked for (same bits).
  std::vector<std::pair<int, double>> staged_ms;
  for (const int config : o.decode_staged) {
    cuda::set_decode_staged_pick(config);
    target->set_graphs(false);  // drops the graphs captured with the other picks
    target->set_graphs(true);
    staged_ms.push_back({config, time_steps(o.decode_tokens)});
  }
  cuda::set_decode_staged_pick(-1);
  target->set_graphs(false);
  target->set_graphs(true);
  std::vector<std::pair<int, double>> norm_config_ms;
  for (const int gs : o.decode_norm_configs) {
    cuda::set_decode_norm_configs(gs / 10, gs % 10);
    target->set_decode_norm_fusion(true);
    target->set_graphs(false);
    target->set_graphs(true);
    norm_config_ms.push_back({gs, time_steps(o.decode_tokens)});
  }
  cuda::set_decode_norm_configs(0, 2);
  target->set_decode_norm_fusion(false);
  target->set_graphs(false);
  target->set_graphs(true);
  double fused_ms = 0, mixers_fused_ms = 0;
  if (o.decode_fused) {
    for (const bool ffn : {false, true}) {
      target->set_decode_norm_fusion(true, ffn);
      (ffn ? fused_ms : mixers_fused_ms) = time_steps(o.decode_tokens);
    }
    target->set_decode_norm_fusion(false);
  }
  // MoE: the same steps (graphs) with the routed experts and route + plan on each path (same bits): the A/B. moe8:
  // the lean route + plan (the default since s8A) against the old kernel, interleaved (A/B/A/B); the
  // router kept in L2 (s8) and the variants that never won are gone (docs/cuda.md has their numbers).
  std::vector<std::pair<std::string, double>> expert_path_ms;
  if (c.moe) {
    using lfm2::gpu::ExpertFfnPath;
    struct MoeRow {
      const char* name;
      ExpertFfnPath path;
      bool lean_route;
    };
    const MoeRow moe_rows[] = {{"auto (route lean)", ExpertFfnPath::Automatic, true},
                               {"auto, route as before", ExpertFfnPath::Automatic, false},
                               {"auto again", ExpertFfnPath::Automatic, true},
                               {"auto, route as before again", ExpertFfnPath::Automatic, false}};
    for (const MoeRow& row : moe_rows) {
      lfm2::gpu::pin_expert_ffn_path_for_test(row.path);
      lfm2::gpu::set_moe_route_lean(row.lean_route);
      target->set_graphs(false);  // drops the graphs captured with the other path
      target->set_graphs(true);
      expert_path_ms.push_back({row.name, time_steps(o.decode_tokens)});
    }
    lfm2::gpu::pin_expert_ffn_path_for_test(ExpertFfnPath::Automatic);
    lfm2::gpu::set_moe_route_lean(true);
    target->set_graphs(false);
    target->set_graphs(true);
  }
  // The same steps again with every op bracketed by events: device ms per token by op kind.
  target->set_profiling(true);
  target->reset_profile();
  const int profiled = std::min(32, o.decode_tokens);
  const double profiled_ms = time_steps(profiled);
  std::vector<std::pair<std::string, double>> decode_profile = target->profile();
  target->set_profiling(false);
  if (o.decode_only) {
    std::printf("gpu_bench %s: decode step %.3f ms (floor %.3f ms, ratio %.2f), without graphs %.3f ms, %d kernels\n",
                o.model.c_str(), decode_ms, floor_ms, floor_ms / decode_ms, eager_ms, step_kernels);
    if (o.l2_prefetch_ab)
      std::printf("  decode step, L2 weight prefetch %.3f ms (ratio %.2f)\n", prefetch_ms, floor_ms / prefetch_ms);
    if (o.decode_fused)
      std::printf("  decode step, norms in the staged GEMMs' prologues %.3f ms; the mixers' only %.3f ms\n", fused_ms,
                  mixers_fused_ms);
    for (auto [gs, ms] : norm_config_ms)
      std::printf("  decode step, norm launches on %s / %s: %.3f ms\n",
                  cuda::decode_variant_name(cuda::decode_variant_count() - cuda::decode_staged_config_count() + gs / 10),
                  cuda::decode_variant_name(cuda::decode_variant_count() - cuda::decode_staged_config_count() + gs % 10),
                  ms);
    for (auto [config, ms] : staged_ms)
      std::printf("  decode step, narrow GEMMs %-16s %.3f ms (ratio %.2f)\n",
                  cuda::decode_variant_name(cuda::decode_variant_count() - cuda::decode_staged_config_count() + config),
                  ms, floor_ms / ms);
    for (const auto& [path, ms] : expert_path_ms)
      std::printf("  decode step, experts %-22s %.3f ms (ratio %.2f)\n", path.c_str(), ms, floor_ms / ms);
    for (const auto& [kind, ms] : decode_profile) std::printf("  profile %-24s %8.3f ms\n", kind.c_str(), ms / profiled);
    return 0;
  }

  // Verify windows of r rows on the same stream, vs one row.
  std::vector<std::pair<int, double>> verify_ms;
  for (int rows : o.verify) {
    const std::vector<int32_t> window = tokens_for(rows, 3 + rows, V);
    w.tokens = window;
    verify_ms.push_back({rows, time_forward(*target, {w}, o.repeats * 4, false)});
  }
  // Where each window's time goes (--verify-profile): device ms by op kind, events around every op, 8 windows.
  for (int rows : o.verify_profile ? o.verify : std::vector<int>{}) {
    const std::vector<int32_t> window = tokens_for(rows, 3 + rows, V);
    w.tokens = window;
    target->set_profiling(true);
    target->set_profile_roles(true);
    target->reset_profile();
    const double ms = time_forward(*target, {w}, 8, false);
    std::string line;
    for (const auto& [kind, kind_ms] : target->profile()) {
      char cell[64];
      std::snprintf(cell, sizeof cell, " %s %.3f;", kind.c_str(), kind_ms / 8);
      line += cell;
    }
    target->set_profiling(false);
    target->set_profile_roles(false);
    std::printf("verify profile, %d-row window (%.3f ms with events):%s\n", rows, ms, line.c_str());
  }
  // The same windows on the pipeline decode GEMM (up to 16 rows; same bits).
  if (o.pipe_ab) {
    cuda::set_decode_pipeline(true);
    target->set_graphs(false);
    target->set_graphs(true);
    for (int rows : o.verify) {
      const std::vector<int32_t> window = tokens_for(rows, 3 + rows, V);
      w.tokens = window;
      std::printf("pipe A/B: verify window %d rows, pipeline %.3f ms\n", rows,
                  time_forward(*target, {w}, o.repeats * 4, false));
    }
    cuda::set_decode_pipeline(false);
    target->set_graphs(false);
    target->set_graphs(true);
  }
  // The windows under the other 17..64-row picks (same bits): the older picks (no streamed windows), the verify
  // tiles, every window streamed (set_decode_rows(64): its GEMMs, fused SwiGLU and q / k / v).
  struct VerifyPicks {
    const char* name;
    int decode_rows;
    bool verify_tiles;
  };
  const VerifyPicks other_picks[] = {{"older picks", 16, false}, {"verify tiles", 16, true}, {"all streamed", 64, false}};
  std::vector<std::pair<std::string, std::vector<std::pair<int, double>>>> verify_other_ms;
  for (const VerifyPicks& picks : other_picks) {
    if (!o.verify_tiles_ab) break;
    cuda::set_decode_rows(picks.decode_rows);
    cuda::set_verify_tiles(picks.verify_tiles);
    target->set_graphs(false);
    target->set_graphs(true);
    verify_other_ms.push_back({picks.name, {}});
    for (int rows : o.verify) {
      const std::vector<int32_t> window = tokens_for(rows, 3 + rows, V);
      w.tokens = window;
      verify_other_ms.back().second.push_back({rows, time_forward(*target, {w}, o.repeats * 4, false)});
    }
    cuda::set_decode_rows(32);
    cuda::set_verify_tiles(false);
    target->set_graphs(false);
    target->set_graphs(true);
  }
  target->release(1);

  // Decode of many streams at once (one row each).
  std::vector<std::vector<int32_t>> stream_tokens;
  std::vector<Window> many;
  for (int s = 0; s < o.streams; ++s) stream_tokens.push_back(tokens_for(o.context, 100 + s, V));
  for (int s = 0; s < o.streams; ++s) {
    Window sw;
    sw.stream = 100 + s;
    sw.tokens = stream_tokens[s];
    sw.first_drawn_row = o.context - 1;
    many.push_back(sw);
  }
  check(target->forward(many).status(), "streams prompt");
  for (const Window& sw : many) check(target->commit(sw.stream, o.context), "commit");
  for (int s = 0; s < o.streams; ++s) {
    many[s].tokens = std::span<const int32_t>(stream_tokens[s].data() + s % 7, 1);
    many[s].first_drawn_row = 0;
  }
  const double streams_ms = time_forward(*target, many, o.repeats * 4, true);
  for (const Window& sw : many) target->release(sw.stream);

  // Prefill of `prefill` tokens vs cuBLAS on the same projections.
  const std::vector<int32_t> long_prompt = tokens_for(o.prefill, 4, V);
  const double prefill_ms = time_prefill(*target, long_prompt);
  target->set_profiling(true);
  target->reset_profile();
  Window pw;
  pw.stream = 7;
  pw.tokens = long_prompt;
  pw.first_drawn_row = o.prefill - 1;
  check(target->forward(std::span<const Window>(&pw, 1)).status(), "prefill");
  std::vector<std::pair<std::string, double>> prefill_profile = target->profile();
  target->set_profiling(false);
  // Decode after the long prompt: attention over `prefill` keys.
  check(target->commit(7, o.prefill), "commit");
  const Clock::time_point long_start = Clock::now();
  for (int i = 0; i < 32; ++i) {
    pw.tokens = std::span<const int32_t>(&steps[i % steps.size()], 1);
    pw.first_drawn_row = 0;
    check(target->forward(std::span<const Window>(&pw, 1)).status(), "long decode");
    check(target->commit(7, 1), "commit");
  }
  const double long_decode_ms = ms_since(long_start) / 32;
  target->release(7);
  const ls::gpu_bench::CublasPrefill cublas = cublas_prefill(c, o.prefill);
  const double cublas_s = cublas.seconds, flops = cublas.flops;

  std::printf("gpu_bench %s (%s, %d layers, D %d, vocab %d), load %.1f s, exact width %d\n", o.model.c_str(),
              c.model_type.c_str(), c.num_layers, c.hidden_size, V, load_s, target->facts().exact_width);
  std::printf("%-34s %12s %12s %8s\n", "measure", "value", "floor", "ratio");
  std::printf("%-34s %9.1f tok/s %8.1f tok/s %7.2f\n", "decode, 1 stream", 1e3 / decode_ms, 1e3 / floor_ms,
              floor_ms / decode_ms);
  std::printf("%-34s %9.3f ms %9.3f ms   (bytes/token %.1f MB, copy bw %.0f GB/s)\n", "decode step", decode_ms,
              floor_ms, per_token / 1e6, bandwidth / 1e9);
  std::printf("%-34s %9.3f ms %9.3f ms %7.2f\n", "decode step without graphs", eager_ms, floor_ms, floor_ms / eager_ms);
  std::printf("%-34s %9d\n", "kernels per decode step (graph)", step_kernels);
  if (o.l2_prefetch_ab)
    std::printf("%-34s %9.3f ms %9.3f ms %7.2f\n", "decode step, L2 weight prefetch", prefetch_ms, floor_ms,
                floor_ms / prefetch_ms);
  if (o.decode_fused)
    std::printf("%-34s %9.3f ms %9.3f ms %7.2f\n", "decode step, norms in GEMM prologues", fused_ms, floor_ms,
                floor_ms / fused_ms);
  for (auto [config, ms] : staged_ms)
    std::printf("%-34s %9.3f ms %9.3f ms %7.2f\n",
                (std::string("decode step, ") +
                 cuda::decode_variant_name(cuda::decode_variant_count() - cuda::decode_staged_config_count() + config))
                    .c_str(),
                ms, floor_ms, floor_ms / ms);
  for (const auto& [path, ms] : expert_path_ms)
    std::printf("%-34s %9.3f ms %9.3f ms %7.2f\n", ("decode step, experts " + path).c_str(), ms, floor_ms,
                floor_ms / ms);
  std::printf("%-34s %9.1f tok/s\n", ("decode, " + std::to_string(o.streams) + " streams (total)").c_str(),
              o.streams * 1e3 / streams_ms);
  std::printf("%-34s %9.1f ms %9.1f ms %7.2f   (cuBLAS %.0f TFLOP/s)\n",
              ("prefill " + std::to_string(o.prefill)).c_str(), prefill_ms, cublas_s * 1e3, cublas_s * 1e3 / prefill_ms,
              flops / cublas_s / 1e12);
  std::printf("%-34s %9.1f ms %9.1f ms %7.2f   (cuBLAS on random operands, %.0f TFLOP/s)\n", "prefill, random-data floor",
              prefill_ms, cublas.random_seconds * 1e3, cublas.random_seconds * 1e3 / prefill_ms,
              flops / cublas.random_seconds / 1e12);
  std::printf("%-34s %9.3f ms\n", ("decode step at context " + std::to_string(o.prefill)).c_str(), long_decode_ms);
  for (auto [rows, ms] : verify_ms)
    std::printf("%-34s %9.3f ms %12s %7.2f x one row\n", ("verify window " + std::to_string(rows)).c_str(), ms, "",
                ms / verify_ms.front().second);
  for (const auto& [name, times] : verify_other_ms)
    for (auto [rows, ms] : times)
      std::printf("%-34s %9.3f ms %12s %7.2f x one row\n", ("verify window " + std::to_string(rows) + ", " + name).c_str(),
                  ms, "", ms / verify_ms.front().second);
  double device_ms = 0;
  for (const auto& [kind, ms] : decode_profile) device_ms += ms / profiled;
  std::printf("decode step by op kind (device ms per token; %.3f ms device of %.3f ms wall with events):\n", device_ms,
              profiled_ms);
  for (const auto& [kind, ms] : decode_profile) std::printf("  %-24s %8.3f ms\n", kind.c_str(), ms / profiled);
  std::printf("prefill %d by op kind (device ms):\n", o.prefill);
  for (const auto& [kind, ms] : prefill_profile) std::printf("  %-24s %8.2f ms\n", kind.c_str(), ms);
  if (!o.json_path.empty()) {
    json out = {{"model", o.model}, {"model_type", c.model_type}, {"load_s", load_s},
                {"exact_width", target->facts().exact_width}, {"bytes_per_token", per_token},
                {"copy_bandwidth_gbs", bandwidth / 1e9}, {"decode_ms", decode_ms}, {"floor_ms", floor_ms},
                {"decode_tok_s", 1e3 / decode_ms}, {"decode_eager_ms", eager_ms}, {"long_context_decode_ms", long_decode_ms}, {"streams", o.streams}, {"streams_step_ms", streams_ms},
                {"prefill_tokens", o.prefill}, {"prefill_ms", prefill_ms}, {"cublas_prefill_ms", cublas_s * 1e3},
                {"cublas_tflops", flops / cublas_s / 1e12}, {"cublas_random_prefill_ms", cublas.random_seconds * 1e3}};
    for (auto [rows, ms] : verify_ms) out["verify_ms"][std::to_string(rows)] = ms;
    for (const auto& [kind, ms] : decode_profile) out["decode_profile_ms"][kind] = ms / profiled;
    for (auto [config, ms] : staged_ms) out["decode_staged_ms"][std::to_string(config)] = ms;
    for (const auto& [path, ms] : expert_path_ms) out["decode_expert_path_ms"][path] = ms;
    for (const auto& [kind, ms] : prefill_profile) out["prefill_profile_ms"][kind] = ms;
    std::ofstream(o.json_path) << out.dump(2) << "\n";
  }
  return 0;
}
