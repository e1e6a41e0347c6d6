// The 1.2B decode step under each decode-launch mode (streaming / pipeline GEMMs, staged picks, norm prologues):
// every mode draws the tokens the default draws (steps and verify windows), and (LS_DECODE_STEP_MODEL set to a synth
// checkpoint) its ms a step and a window of 4 / 8 / 16 rows.
#ifdef LS_HAVE_CUDA

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "base/hash.h"
#include "compute/cuda/kernels.h"
#include "cuda_test_util.h"
#include "model/lfm2/cuda/cuda_target.h"
#include "model/load.h"

namespace ls::lfm2 {
namespace {

// A decode-launch mode: the staged pick (set_decode_staged_pick: -1 automatic, -2 streaming only), norms fused into
// the mixers' / FFN's GEMM prologues and the staged configuration those launches take.
struct DecodeMode {
  const char* name;
  int staged_pick;
  bool fuse_mixers = false, fuse_ffn = false;
  int norm_config = 0;  // swiglu config * 10 + group config (set_decode_norm_configs; swiglu 0: 2)
  int narrow_variant = -1;  // set_decode_narrow_pick: the variant, and N up to narrow_max_n (negative: N = -max only)
  int narrow_max_n = 0;
  bool pipeline = false;  // cuda::set_decode_pipeline: the weight-streaming pipeline decode GEMM, its ring's KB
  int pipe_ring_kb = 0;
  bool no_narrow = false;  // set_decode_pipe_narrow(false): not even the automatic narrow pick (the old path)
  int tma = -1;  // set_decode_pipe_tma: the pipeline's weights as row copies (0) or 3D tensor boxes (1)
  int tma_classes = cuda::kDecodeTmaWide | cuda::kDecodeTmaSliced;  // with tma -1: the one-row shape classes
                                                                     // (kDecodeTma*) taking 3D boxes automatically
  int pipe_x = -1;     // set_decode_pipe_x: x per stage (0), once (1), by default (-1)
};

// Puts the process-wide switches back however the test ends.
struct DefaultSwitchesAtExit {
  ~DefaultSwitchesAtExit() {
    cuda::set_decode_staged_pick(-1);
    cuda::set_decode_norm_configs(0, 2);
    cuda::set_decode_narrow_pick(-1, 0);
    cuda::set_decode_pipeline(false);
    cuda::set_decode_pipe_narrow(true);
    cuda::set_decode_pipe_tma(-1);
    cuda::set_decode_pipe_tma_classes(cuda::kDecodeTmaWide | cuda::kDecodeTmaSliced);
    cuda::set_decode_pipe_x(-1);
  }
};

// Draws of `steps` one-token decode steps on a fresh stream after a `context`-token prompt, and ms per step over the
// steps after the first 8 (graphs captured by then).
struct StepRun {
  std::vector<int32_t> draws;      // the steps' draws, then each window's (its first forward)
  double ms = 0;                   // per decode step
  std::vector<double> window_ms;   // per verify window of 4, 8, 16 rows
};

StepRun run_steps(CudaTarget& target, StreamId stream, int context, int steps) {
  StepRun run;
  const int V = target.facts().vocab_size;
  std::vector<int32_t> prompt(context), tokens(steps);
  for (int i = 0; i < context; ++i) prompt[i] = static_cast<int32_t>(splitmix64(11 + i) % V);
  for (int i = 0; i < steps; ++i) tokens[i] = static_cast<int32_t>(splitmix64(977 + i) % V);
  Window w;
  w.stream = stream;
  w.tokens = prompt;
  w.first_drawn_row = context - 1;
  Result<Verified> v = target.forward(std::span<const Window>(&w, 1));
  EXPECT_TRUE(v.ok()) << v.status().to_string();
  if (!v.ok()) return run;
  EXPECT_TRUE(target.commit(stream, context).ok());
  w.first_drawn_row = 0;
  std::chrono::steady_clock::time_point start;
  for (int i = 0; i < steps; ++i) {
    if (i == 8) start = std::chrono::steady_clock::now();
    w.tokens = std::span<const int32_t>(&tokens[i], 1);
    Result<Verified> step = target.forward(std::span<const Window>(&w, 1));
    EXPECT_TRUE(step.ok()) << step.status().to_string();
    if (!step.ok()) return run;
    run.draws.push_back(step->draws[0]);
    EXPECT_TRUE(target.commit(stream, 1).ok());
  }
  run.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() / (steps - 8);
  // Verify windows of 4, 8 and 16 rows (one row committed after each, as the bench does): median ms of 16 after 4.
  for (const int rows : {4, 8, 16}) {
    w.tokens = std::span<const int32_t>(tokens.data(), rows);
    std::vector<double> times;
    for (int i = 0; i < 20; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      Result<Verified> window = target.forward(std::span<const Window>(&w, 1));
      EXPECT_TRUE(window.ok()) << window.status().to_string();
      if (!window.ok()) return run;
      if (i >= 4) times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      if (i == 0) run.draws.insert(run.draws.end(), window->draws.begin(), window->draws.end());
      EXPECT_TRUE(target.commit(stream, 1).ok());
    }
    std::sort(times.begin(), times.end());
    run.window_ms.push_back(times[times.size() / 2]);
  }
  target.release(stream);
  return run;
}

TEST(CudaDecodeStep, EveryDecodeLaunchModeDrawsTheDefaultsTokensOnTheSynthModel) {
  LS_SKIP_WITHOUT_DEVICE();
  const char* dir = std::getenv("LS_DECODE_STEP_MODEL");
  if (!dir) GTEST_SKIP() << "LS_DECODE_STEP_MODEL (a synth checkpoint, e.g. lfm2.5-1.2b) not set";
  const DefaultSwitchesAtExit defaults;
  LoadOptions options;
  options.device = Device::Cuda;
  options.max_rows = 256;
  options.max_streams = 64;
  auto loaded = load_target(dir, options);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  auto* target = dynamic_cast<CudaTarget*>(loaded->get());
  ASSERT_NE(target, nullptr);
  // Batches s6A / s6B: every staged pick, norm prologue and narrow pick lost or tied end to end (1.05-1.35 ms
  // against 1.057); session 7's decode tails lost too and are gone (docs/cuda.md). Session 8: the pipeline decode
  // GEMM (set_decode_pipeline); session 10: its picks up to 16 rows (session 9's one-row picks lost in s10B and are
  // gone) and x once (set_decode_pipe_x; x once everywhere lost in s11A, the mode stays as a check of its kernels).
  const DecodeMode modes[] = {
      {"default picks (one-slice launches up to 16 rows, x once with row copies)", -1, false, false, 0},
      {"no pipeline (the streaming kernels)", -1, false, false, 0, -1, 0, false, 0, true},
      {.name = "up to 16 rows, x per stage", .staged_pick = -1, .pipe_x = 0},
      {.name = "up to 16 rows, x once everywhere", .staged_pick = -1, .pipe_x = 1},
      {"pipeline decode GEMM everywhere, ring 128 KB", -1, false, false, 0, -1, 0, true, 128},
      {"pipeline everywhere, 3D tensor copies", -1, false, false, 0, -1, 0, true, 0, false, 1},
      {"default + 3D boxes for every class", -1, false, false, 0, -1, 0, false, 0, false, -1, 15},
      {"session 8 classes (row copies only)", -1, false, false, 0, -1, 0, false, 0, false, -1, 0},
      {"default picks (again)", -1, false, false, 0},
      {"no pipeline (again)", -1, false, false, 0, -1, 0, false, 0, true},
      {"streaming picks only (the old path)", -2, false, false, 0},
      {"default picks (third)", -1, false, false, 0},
  };

  const int context = 128, steps = 72;
  std::vector<int32_t> want;
  StreamId stream = 1;
  for (const DecodeMode& mode : modes) {
    cuda::set_decode_staged_pick(mode.staged_pick);
    cuda::set_decode_narrow_pick(mode.narrow_variant, mode.narrow_max_n);
    cuda::set_decode_norm_configs(mode.norm_config % 10, mode.norm_config >= 10 ? mode.norm_config / 10 : 2);
    cuda::set_decode_pipeline(mode.pipeline, -1, mode.pipe_ring_kb);
    cuda::set_decode_pipe_narrow(!mode.no_narrow);
    cuda::set_decode_pipe_tma(mode.tma);
    cuda::set_decode_pipe_tma_classes(mode.tma_classes);
    cuda::set_decode_pipe_x(mode.pipe_x);
    target->set_decode_norm_fusion(mode.fuse_mixers, mode.fuse_ffn);  // drops the graphs of the other mode
    const StepRun run = run_steps(*target, stream++, context, steps);
    ASSERT_EQ(run.draws.size(), static_cast<size_t>(steps + 4 + 8 + 16)) << mode.name;
    ASSERT_EQ(run.window_ms.size(), 3u) << mode.name;
    if (want.empty()) want = run.draws;
    EXPECT_EQ(run.draws, want) << mode.name << " draws other tokens than the default";
    std::printf("decode step mode %-52s %.3f ms; verify 4 / 8 / 16 rows %.3f / %.3f / %.3f ms\n", mode.name, run.ms,
                run.window_ms[0], run.window_ms[1], run.window_ms[2]);
  }
}

}  // namespace
}  // namespace ls::lfm2

#endif  // LS_HAVE_CUDA
