// The pipeline decode GEMM's configurations, plans, routing and launches (m <= 16; 17..32 one-slice, non-SwiGLU;
// sm_90; the kernel: gemm_decode_pipe.cuh; the weight maps of its tensor copies: gemm_decode_tma.cu). Session 8 (row
// copies), session 9 (3D tensor boxes of the weights), session 10 (one kernel for both; x copied once per CTA;
// multi-row launches), session 13 (the spread, 17..32 rows).
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string>

#include "compute/cuda/gemm_decode_pipe.cuh"

namespace ls::cuda::gemm_detail {
namespace {

// The configurations (warps per CTA x 8-column tiles per item): kPlainConfigs plain ones, then the SwiGLU ones.
struct PipeShape {
  int warps, tiles;
  const char* name;
};
constexpr int kPlainConfigs = 5;
constexpr PipeShape kPipeShapes[kPipeConfigs] = {{4, 1, "pipe 4w 8c"},     {4, 2, "pipe 4w 16c"},
                                                 {2, 1, "pipe 2w 8c"},     {8, 1, "pipe 8w 8c"},
                                                 {8, 2, "pipe 8w 16c"},    {4, 2, "pipe 4w swiglu"},
                                                 {8, 2, "pipe 8w swiglu"}};

int optin_bytes_granted = 0;
int device_sms = 132;
int env_int(const char* name, int unset) {
  const char* value = std::getenv(name);
  return value == nullptr || value[0] == 0 ? unset : std::atoi(value);
}
// The switch starts from LS_DECODE_PIPE (set and not "0": on), so whole runs (lanes_bench, tests) can take it.
bool pipe_from_env() {
  const char* value = std::getenv("LS_DECODE_PIPE");
  return value != nullptr && value[0] != 0 && std::string(value) != "0";
}
std::atomic<bool> pipe_on{pipe_from_env()};
// The automatic narrow pick (batch s8B, us at m = 1, the streaming kernels -> the pipeline, chunk 16: 2048->2048
// 8.84 -> 5.92, 2048->3072 9.13 -> 6.44; wider and sliced shapes no better): one-row, one-slice GEMMs of N <= 4096
// (o_proj, conv out_proj, q / k / v) take the pipeline; LS_DECODE_PIPE=0 or set_decode_pipe_narrow(false): none.
bool narrow_from_env() {
  const char* value = std::getenv("LS_DECODE_PIPE");
  return value == nullptr || std::string(value) != "0";
}
std::atomic<bool> pipe_narrow{narrow_from_env()};
constexpr int kNarrowMaxN = 4096;
std::atomic<int> pipe_pinned{-1}, pipe_ring_kb{0}, pipe_chunk{16};
constexpr int kDefaultRingBytes = 128 * 1024;
// Tensor copies of the weights (session 9): LS_DECODE_TMA=1 one 3D box a stage, =0 row copies, for every pipeline
// launch; unset (-1): launches of the classes in tma_classes take 3D boxes (and the pipeline, with the automatic picks
// on), the others row copies.
int tma_from_env() {
  const char* value = std::getenv("LS_DECODE_TMA");
  if (value == nullptr || value[0] == 0) return -1;
  return std::string(value) == "1" ? 1 : 0;
}
std::atomic<int> pipe_tma{tma_from_env()};
// The classes taking 3D boxes by default (kDecodeTma* bits, kernels.h; LS_DECODE_TMA_CLASSES overrides): one-row
// wide and sliced launches (batch s9A, us at m = 1, old -> 3D boxes: 2048->6144 10.96 -> 9.32, 8192->2048 9.78 ->
// 9.56); narrow ones keep row copies (2048->2048 5.92 against 6.66 at best), SwiGLU the streaming kernel (17.50
// against 17.62).
int tma_classes_from_env() {
  const int classes = env_int("LS_DECODE_TMA_CLASSES", -1);
  return classes < 0 ? kDecodeTmaWide | kDecodeTmaSliced : classes & 15;
}
std::atomic<int> tma_classes{tma_classes_from_env()};
constexpr int kDefaultTmaRingBytes = 192 * 1024;
// The automatic picks take 2..16 rows of one slice and no SwiGLU by class as they take one row (session 10; batch
// s10A, cuda_gemm_bench --pipe-rows, us at m = 2 / 8 / 16, streaming -> pipeline: 2048->2048 8.86 / 9.56 / 11.43 ->
// 5.63 / 6.74 / 8.24, 2048->3072 9.17 / 10.42 / 11.34 -> 6.14 / 7.41 / 8.94, 2048->6144 11.07 / 11.94 / 12.15 ->
// 9.73 / 10.86 / 11.82; s10B interleaved, the 1.2B step 0.963 -> 0.930 ms, verify 8 / 16 rows 1.076 / 1.219 -> 1.000
// / 1.104, so session 11 removed the one-row-only switch); sliced K and SwiGLU above one row stay on the streaming
// kernels (8192->2048 at 16 rows 10.3 against 17.4).
// x copied once per CTA (set_decode_pipe_x, tests only): 0 per stage, 1 once wherever it fits, -1 (the picks) once
// with row copies and with boxes above two rows (s10A: 2048->2048 at one row 7.1 -> 4.6 us, the step 0.98-0.99 ->
// 0.963-0.967 ms; one-row boxes lose with x once, 2048->6144 9.2 -> 9.8, and two-row ones 9.7 -> 10.1; s11A
// interleaved, x once everywhere against the picks: the 1.2B step 0.906-0.910 against 0.894-0.898 ms, so
// LS_DECODE_PIPE_X is gone and 1 / 0 stay only for the tests of every configuration).
std::atomic<int> pipe_x{-1};
// set_decode_pipe_fault_for_test: gemm_decode_pipe's launches with x once walk each unit's K tiles backwards.
std::atomic<bool> pipe_fault{false};

// The copies a launch of m rows x K -> rows (SwiGLU: 2F) outputs takes: 0 rows, 1 3D boxes.
int copies_of(int m, int k, int64_t rows, bool swiglu) {
  const int mode = pipe_tma.load(std::memory_order_relaxed);
  if (mode >= 0) return mode;
  const int shape_class = swiglu                ? kDecodeTmaSwiglu
                          : slice_count(k) > 1  ? kDecodeTmaSliced
                          : rows > kNarrowMaxN ? kDecodeTmaWide
                                               : kDecodeTmaNarrow;
  return (tma_classes.load(std::memory_order_relaxed) & shape_class) != 0 ? 1 : 0;
}
int ring_bytes(int copies) {
  const int kb = pipe_ring_kb.load(std::memory_order_relaxed);
  return kb > 0 ? kb * 1024 : copies != 0 ? kDefaultTmaRingBytes : kDefaultRingBytes;
}
int item_cols_of(int config) { return config >= kPlainConfigs ? 8 : 8 * kPipeShapes[config].tiles; }

// Launches of 2..32 rows spread over about SMs / spread CTAs (session 13; set_decode_pipe_spread, 1 = one CTA an SM):
// every CTA copies its m x rows whole (m x 4 KB at K = 2048, as many bytes as its weights at 16 rows), so fewer CTAs
// with more active warps each read less x from L2; never more groups a CTA than it has warps (no warp walks a second
// chain). Which CTA computes a column never changes its chain: the same bits. 2 is the default since H200 batch s13A,
// confirmed in s13B (synth 1.2B, gpu_bench --arms, three interleaved rounds, verify 2 / 8 / 10 / 16 rows 0.908 / 0.951
// / 1.055 / 1.111 ms against 0.918 / 0.963 / 1.066 / 1.122; per shape at 2 / 10 / 16 rows 2048->2048 5.76 / 7.64 /
// 8.17 -> 4.60 / 6.88 / 7.49 us, 2048->6144 9.68 / 11.4 / 11.8 -> 9.08 / 10.0 / 10.5, 2048->3072 6.27 -> 6.72 at 2
// rows, even above); the env half went in session 14, the setter stays for the tests.
std::atomic<int> pipe_spread{2};
// Verify windows of 17..32 rows on the pipeline (session 13; set_decode_pipe_rows32(false): the streamed windows and
// tiles): one-slice, non-SwiGLU launches with x once, two m16 tiles on each weight fragment (the streamed windows and
// the 64x64 tiles there read 2048->2048 in ~19-24 us where 16 rows take 8 us on the pipeline). The default since H200
// batch s13A, confirmed in s13B (synth 1.2B, gpu_bench --arms, three interleaved rounds: verify 24 / 32 rows 1.457 /
// 1.636 ms against 1.655 / 1.702); the env half went in session 14, the setter stays for the tests. (33..64-row
// windows as two launches lost in the lanes in s13B and were removed in session 14; the code is at dc6afb9.)
std::atomic<bool> pipe_rows32{true};
constexpr int kPipeMaxRows = 32;
// Session 14's 9..16-row picks and the weights primed around x's copy lost in H200 batches s14A0 / s14A / s14B and
// were removed but for the 4-warp SwiGLU at 9..16 rows (gemm_decode_stream.cu); docs/cuda.md, session 14.

// Column groups per CTA for `columns` output columns (SwiGLU: F) of an m-row launch: about one CTA per SM (per
// spread SMs above one row, up to one group a warp).
int groups_for(int config, int64_t columns, int m) {
  const int64_t groups = (columns + item_cols_of(config) - 1) / item_cols_of(config);
  const int64_t per_sm = std::max<int64_t>(1, (groups + device_sms - 1) / device_sms);
  const int spread = pipe_spread.load(std::memory_order_relaxed);
  if (m <= 1 || spread <= 1) return static_cast<int>(per_sm);
  const int64_t ctas = std::max(1, device_sms / spread);
  const int64_t spread_groups = std::min<int64_t>((groups + ctas - 1) / ctas, kPipeShapes[config].warps);
  return static_cast<int>(std::max(per_sm, spread_groups));
}

// A launch's shared memory, stages per warp, K tiles a stage and where x lives.
struct PipePlan {
  int smem, stages, chunk;
  bool x_once;
};
PipePlan plan_with(const PipeShape& shape, bool boxes, bool x_once, int m, int k, int groups) {
  const int slices = slice_count(k);
  const int active = std::min(shape.warps, groups * slices);  // warps with items (the others have no ring)
  const int a_rows = m <= 8 ? 8 : m <= 16 ? 16 : 32;
  const int partial = slices == 1 ? 0 : slices * a_rows * groups * 8 * shape.tiles * 4;
  const int fixed = 1024 + (x_once ? pipe_x_once_bytes(m, k) : 0) + kPipeBarrierBytes + partial;
  // x once: the rings get what x leaves of the device's shared memory, at most their usual bytes.
  const int ring = x_once ? std::min(ring_bytes(boxes), optin_bytes_granted - fixed) : ring_bytes(boxes);
  // Row copies: the chunk asked; boxes: the largest of 16 / 8 / 4 (at most the one asked) giving every warp 2 stages.
  const int asked = pipe_chunk.load(std::memory_order_relaxed);
  int chunk = boxes ? (asked >= 16 ? 16 : asked >= 8 ? 8 : 4) : asked;
  while (boxes && chunk > 4 && 2 * active * pipe_stage_bytes(true, x_once, shape.tiles, chunk, m) > ring) chunk /= 2;
  // Row copies: a smaller chunk only where two stages a warp would not fit at all (32 x rows beside four rings).
  while (!boxes && chunk > 4 &&
         fixed + 2 * active * pipe_stage_bytes(false, x_once, shape.tiles, chunk, m) > optin_bytes_granted)
    chunk /= 2;
  const int stage = pipe_stage_bytes(boxes, x_once, shape.tiles, chunk, m);
  const int stages = std::clamp(ring / (active * stage), 2, kPipeMaxStages);
  return {fixed + active * stages * stage, stages, chunk, x_once};
}
// x once where the switch asks for it and it fits, else per stage.
PipePlan plan_for(int config, int m, int k, int groups, int copies) {
  const PipeShape& shape = kPipeShapes[config];
  const int x_mode = pipe_x.load(std::memory_order_relaxed);
  if (m > 16) return plan_with(shape, copies != 0, true, m, k, groups);  // 17..32 rows: x once or nothing
  if (x_mode == 1 || (x_mode < 0 && (copies == 0 || m > 2))) {
    const PipePlan once = plan_with(shape, copies != 0, true, m, k, groups);
    if (once.smem <= optin_bytes_granted) return once;
  }
  return plan_with(shape, copies != 0, false, m, k, groups);
}

template <bool BOXES, bool X_ONCE, int WARPS, int TILES, bool SWIGLU>
Status launch_shape(const PipeLaunch<BOXES>& group, int groups, const PipePlan& plan, cudaStream_t stream) {
  const int ctas = group.first_block[group.count];
  if (group.args[0].m <= 8)
    return launch_programmatic(decode_pipe_kernel<BOXES, X_ONCE, WARPS, TILES, 8, SWIGLU>, ctas, 32 * WARPS, plan.smem,
                               stream, group, groups, plan.stages, plan.chunk);
  if (group.args[0].m <= 16)
    return launch_programmatic(decode_pipe_kernel<BOXES, X_ONCE, WARPS, TILES, 16, SWIGLU>, ctas, 32 * WARPS,
                               plan.smem, stream, group, groups, plan.stages, plan.chunk);
  if constexpr (X_ONCE && !SWIGLU)
    return launch_programmatic(decode_pipe_kernel<BOXES, X_ONCE, WARPS, TILES, 32, SWIGLU>, ctas, 32 * WARPS,
                               plan.smem, stream, group, groups, plan.stages, plan.chunk);
  return Status(ErrorCode::Internal, "decode pipeline: 17..32 rows copy x once and run no SwiGLU");
}
template <bool BOXES, bool X_ONCE>
Status launch_copies(int config, const PipeLaunch<BOXES>& group, int groups, const PipePlan& plan,
                     cudaStream_t stream) {
  switch (config) {
    case 0: return launch_shape<BOXES, X_ONCE, 4, 1, false>(group, groups, plan, stream);
    case 1: return launch_shape<BOXES, X_ONCE, 4, 2, false>(group, groups, plan, stream);
    case 2: return launch_shape<BOXES, X_ONCE, 2, 1, false>(group, groups, plan, stream);
    case 3: return launch_shape<BOXES, X_ONCE, 8, 1, false>(group, groups, plan, stream);
    case 4: return launch_shape<BOXES, X_ONCE, 8, 2, false>(group, groups, plan, stream);
    case 5: return launch_shape<BOXES, X_ONCE, 4, 2, true>(group, groups, plan, stream);
    default: return launch_shape<BOXES, X_ONCE, 8, 2, true>(group, groups, plan, stream);
  }
}

template <bool BOXES, bool X_ONCE, int WARPS, int TILES, bool SWIGLU>
void allow_shape(int optin) {
  cudaFuncSetAttribute(decode_pipe_kernel<BOXES, X_ONCE, WARPS, TILES, 8, SWIGLU>,
                       cudaFuncAttributeMaxDynamicSharedMemorySize, optin);
  cudaFuncSetAttribute(decode_pipe_kernel<BOXES, X_ONCE, WARPS, TILES, 16, SWIGLU>,
                       cudaFuncAttributeMaxDynamicSharedMemorySize, optin);
  if constexpr (X_ONCE && !SWIGLU)
    cudaFuncSetAttribute(decode_pipe_kernel<BOXES, X_ONCE, WARPS, TILES, 32, SWIGLU>,
                         cudaFuncAttributeMaxDynamicSharedMemorySize, optin);
}
template <bool BOXES, bool X_ONCE>
void allow_copies(int optin) {
  allow_shape<BOXES, X_ONCE, 4, 1, false>(optin);
  allow_shape<BOXES, X_ONCE, 4, 2, false>(optin);
  allow_shape<BOXES, X_ONCE, 2, 1, false>(optin);
  allow_shape<BOXES, X_ONCE, 8, 1, false>(optin);
  allow_shape<BOXES, X_ONCE, 8, 2, false>(optin);
  allow_shape<BOXES, X_ONCE, 4, 2, true>(optin);
  allow_shape<BOXES, X_ONCE, 8, 2, true>(optin);
}

// The automatic configuration. Row copies: SwiGLU 4 warps; sliced K 8 warps x 8 columns; one slice 16 columns an
// item from 8192 outputs, else 8. Tensor copies (batch s9A, cuda_gemm_bench --pipe, us at m = 1 against the old
// kernels): SwiGLU 8 warps (17.6 / 17.5), sliced K 8 warps x 16 columns (8192->2048 9.56 / 9.78), one slice above
// 4096 outputs 4 warps x 16 columns (2048->6144 9.32 / 10.96, 2048->8192 9.62 / 11.82), narrower 4 x 8.
int auto_config(bool swiglu, int slices, int64_t rows, int copies) {
  if (copies != 0) {
    if (swiglu) return kPlainConfigs + 1;
    if (slices > 1) return 4;
    return rows > kNarrowMaxN ? 1 : 0;
  }
  if (swiglu) return kPlainConfigs;
  if (slices > 1) return 3;
  return rows >= 8192 ? 1 : 0;
}

bool shape_fits(int config, int m, int k, int64_t n) {
  if (config < 0 || config >= kPipeConfigs || m < 1 || m > kPipeMaxRows || k % kBlockK != 0 || k < kBlockK || n < 1)
    return false;
  if (config >= kPlainConfigs && slice_count(k) > 1) return false;
  if (m > 16 && (!pipe_rows32.load(std::memory_order_relaxed) || config >= kPlainConfigs || slice_count(k) > 1))
    return false;
  if (!cuda_features().tma || !cuda_features().pdl) return false;
  const bool swiglu = config >= kPlainConfigs;
  const int groups = groups_for(config, swiglu ? n / 2 : n, m);
  return plan_for(config, m, k, groups, copies_of(m, k, n, swiglu)).smem <= optin_bytes_granted;
}

Status launch_config(int config, const PipeGroup& group, int groups, cudaStream_t stream) {
  const GemmArgs& a = group.args[0];
  int64_t rows = 0;
  for (int i = 0; i < group.count; ++i) rows += group.args[i].n;
  const bool swiglu = config >= kPlainConfigs;
  const PipePlan plan = plan_for(config, a.m, a.k, groups, copies_of(a.m, a.k, rows, swiglu));
  if (copies_of(a.m, a.k, rows, swiglu) == 0)
    return plan.x_once ? launch_copies<false, true>(config, group, groups, plan, stream)
                       : launch_copies<false, false>(config, group, groups, plan, stream);
  BoxGroup boxes{};
  static_cast<PipeGroup&>(boxes) = group;
  LS_RETURN_IF_ERROR(pipe_weight_maps(boxes.w, group.args, group.count, 8 * kPipeShapes[config].tiles / (swiglu ? 2 : 1),
                                      plan.chunk));
  return plan.x_once ? launch_copies<true, true>(config, boxes, groups, plan, stream)
                     : launch_copies<true, false>(config, boxes, groups, plan, stream);
}

// Tensor copies: whether the driver makes the weight map(s) configuration `config` reads for `args` (cached).
bool maps_ok(int config, const GemmArgs* args, int count) {
  const bool swiglu = config >= kPlainConfigs;
  int64_t rows = 0;
  for (int i = 0; i < count; ++i) rows += args[i].n;
  const int copies = copies_of(args[0].m, args[0].k, rows, swiglu);
  if (copies == 0) return true;
  const PipePlan plan =
      plan_for(config, args[0].m, args[0].k, groups_for(config, swiglu ? rows / 2 : rows, args[0].m), copies);
  CUtensorMap maps[kPipeGroupMax];
  return pipe_weight_maps(maps, args, count, 8 * kPipeShapes[config].tiles / (swiglu ? 2 : 1), plan.chunk).ok();
}

// The configuration a launch takes: the pinned one (when it fits and is of the launch's kind), else the automatic.
int config_for(bool swiglu, int m, int k, int64_t rows) {
  const int pinned = pipe_pinned.load(std::memory_order_relaxed);
  if (pinned >= 0 && (pinned >= kPlainConfigs) == swiglu && shape_fits(pinned, m, k, rows)) return pinned;
  const int config = auto_config(swiglu, slice_count(k), rows, copies_of(m, k, rows, swiglu));
  // Many rows: a 16-column configuration whose stages no longer fit (down with x per stage) gives way to its
  // 8-column twin of the same warps.
  const int twin = config == 4 ? 3 : config == 1 ? 0 : -1;
  if (m > 1 && twin >= 0 && !shape_fits(config, m, k, rows) && shape_fits(twin, m, k, rows)) return twin;
  return config;
}

// Whether the launch config_for picks for `args` copies x once.
bool routed_x_once(const GemmArgs& args, bool swiglu) {
  const int config = config_for(swiglu, args.m, args.k, args.n);
  return plan_for(config, args.m, args.k, groups_for(config, swiglu ? args.n / 2 : args.n, args.m),
                  copies_of(args.m, args.k, args.n, swiglu))
      .x_once;
}

}  // namespace

bool pipe_fault_on() { return pipe_fault.load(std::memory_order_relaxed); }

const char* pipe_config_name(int config) {
  return config >= 0 && config < kPipeConfigs ? kPipeShapes[config].name : "?";
}

void allow_pipe_shared(int optin_bytes) {
  optin_bytes_granted = optin_bytes;
  int device = 0, sms = 0;
  if (cudaGetDevice(&device) == cudaSuccess &&
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) == cudaSuccess && sms > 0)
    device_sms = sms;
  allow_copies<false, false>(optin_bytes);
  allow_copies<false, true>(optin_bytes);
  allow_copies<true, false>(optin_bytes);
  allow_copies<true, true>(optin_bytes);
}

bool pipe_enabled() { return pipe_on.load(std::memory_order_relaxed) || pipe_narrow.load(std::memory_order_relaxed); }

// The automatic picks (set_decode_pipe_narrow): launches of up to 16 rows of one slice and at most
// kNarrowMaxN outputs, and with tensor copies by default those of the classes in tma_classes (above one row only one
// slice and no SwiGLU).
bool auto_pick(int m, int k, int64_t rows, bool swiglu) {
  if (!pipe_narrow.load(std::memory_order_relaxed) || m > kPipeMaxRows) return false;
  if (m > 16 && !pipe_rows32.load(std::memory_order_relaxed)) return false;
  if (m > 1 && (swiglu || slice_count(k) > 1)) return false;
  if (!swiglu && slice_count(k) == 1 && rows <= kNarrowMaxN) return true;
  return pipe_tma.load(std::memory_order_relaxed) < 0 && copies_of(m, k, rows, swiglu) != 0;
}

bool pipe_fits(const GemmArgs& args, bool swiglu) {
  if (args.reverse_k || (args.m > 16 && !pipe_rows32.load(std::memory_order_relaxed))) return false;
  if (!pipe_on.load(std::memory_order_relaxed) && !auto_pick(args.m, args.k, args.n, swiglu)) return false;
  const int config = config_for(swiglu, args.m, args.k, args.n);
  return shape_fits(config, args.m, args.k, args.n) && maps_ok(config, &args, 1);
}

bool pipe_takes_window(const GemmArgs& args) {
  return args.m > 16 && args.m <= kPipeMaxRows && pipe_rows32.load(std::memory_order_relaxed) && pipe_enabled() &&
         pipe_fits(args, false);
}

Status launch_pipe(int config, const GemmArgs& args, cudaStream_t stream) {
  const bool swiglu = config >= kPlainConfigs;
  if (config < 0) config = config_for(false, args.m, args.k, args.n);
  const int out_n = swiglu ? args.n / 2 : args.n;
  if (!shape_fits(config, args.m, args.k, args.n) || (swiglu && args.n % 2 != 0))
    return Status(ErrorCode::InvalidArgument, std::string("decode pipeline ") + pipe_config_name(config) +
                                                  " does not take m " + std::to_string(args.m) + ", N " +
                                                  std::to_string(args.n) + ", K " + std::to_string(args.k) +
                                                  " (1..16 rows, 17..32 of one slice without SwiGLU, K a multiple "
                                                  "of 64, SwiGLU one slice and an even N, sm_90)");
  PipeGroup group{};
  group.args[0] = args;
  group.count = 1;
  const int groups = groups_for(config, out_n, args.m);
  const int cols = groups * item_cols_of(config);
  group.first_block[1] = (out_n + cols - 1) / cols;
  return launch_config(config, group, groups, stream);
}

Status launch_pipe_swiglu(const GemmArgs& args, cudaStream_t stream) {
  return launch_pipe(config_for(true, args.m, args.k, args.n), args, stream);
}

bool pipe_group_fits(const GemmArgs* args, int count) {
  if (count < 1 || count > kPipeGroupMax) return false;
  if (args[0].m > 16 && !pipe_rows32.load(std::memory_order_relaxed)) return false;
  int64_t rows = 0;
  for (int i = 0; i < count; ++i) rows += args[i].n;
  if (!pipe_on.load(std::memory_order_relaxed) && !auto_pick(args[0].m, args[0].k, rows, false)) return false;
  const int config = config_for(false, args[0].m, args[0].k, rows);
  return shape_fits(config, args[0].m, args[0].k, rows) && slice_count(args[0].k) == 1 && maps_ok(config, args, count);
}

Status launch_pipe_group(const GemmArgs* args, int count, cudaStream_t stream) {
  PipeGroup group{};
  group.count = count;
  int64_t rows = 0;
  for (int i = 0; i < count; ++i) rows += args[i].n;
  const int config = config_for(false, args[0].m, args[0].k, rows);
  const int groups = groups_for(config, rows, args[0].m);
  const int cols = groups * item_cols_of(config);
  for (int i = 0; i < count; ++i) {
    group.args[i] = args[i];
    group.first_block[i + 1] = group.first_block[i] + (args[i].n + cols - 1) / cols;
  }
  return launch_config(config, group, groups, stream);
}

}  // namespace ls::cuda::gemm_detail

namespace ls::cuda {

void set_decode_pipeline(bool on, int pinned_config, int ring_kb) {
  gemm_detail::pipe_on.store(on, std::memory_order_relaxed);
  gemm_detail::pipe_pinned.store(pinned_config, std::memory_order_relaxed);
  gemm_detail::pipe_ring_kb.store(std::clamp(ring_kb, 0, 200), std::memory_order_relaxed);
}

bool decode_pipeline_on() { return gemm_detail::pipe_on.load(std::memory_order_relaxed); }

void set_decode_pipe_narrow(bool on) { gemm_detail::pipe_narrow.store(on, std::memory_order_relaxed); }
bool decode_pipe_narrow_on() { return gemm_detail::pipe_narrow.load(std::memory_order_relaxed); }

bool decode_pipe_fits(int config, int64_t m, const DeviceMatrix& w) {
  return m >= 1 && m <= gemm_detail::kPipeMaxRows && w.rows >= 1 && w.rows <= (1LL << 30) && w.cols <= (1LL << 24) &&
         gemm_detail::shape_fits(config, static_cast<int>(m), static_cast<int>(w.cols), w.rows);
}

void set_decode_pipe_tma(int mode) {
  gemm_detail::pipe_tma.store(mode == 0 || mode == 1 ? mode : -1, std::memory_order_relaxed);
}
int decode_pipe_tma() { return gemm_detail::pipe_tma.load(std::memory_order_relaxed); }
void set_decode_pipe_tma_classes(int classes) { gemm_detail::tma_classes.store(classes & 15, std::memory_order_relaxed); }
int decode_pipe_tma_classes() { return gemm_detail::tma_classes.load(std::memory_order_relaxed); }

void set_decode_pipe_x(int mode) { gemm_detail::pipe_x.store(std::clamp(mode, -1, 1), std::memory_order_relaxed); }
int decode_pipe_x() { return gemm_detail::pipe_x.load(std::memory_order_relaxed); }

void set_decode_pipe_chunk(int tiles) {
  gemm_detail::pipe_chunk.store(tiles == 4 || tiles == 8 ? tiles : 16, std::memory_order_relaxed);
}

int decode_pipe_config_count() { return gemm_detail::kPipeConfigs; }

const char* decode_pipe_config_name(int config) { return gemm_detail::pipe_config_name(config); }

Status gemm_decode_pipe(const GemmEngine& engine, int config, const bf16* x, int64_t m, const DeviceMatrix& w,
                        bf16* y_b16, float* y_f32, cudaStream_t stream) {
  (void)engine;  // made first: its constructor set the kernels' shared-memory opt-ins
  const bool swiglu = config >= gemm_detail::kPlainConfigs;
  if (config < -1 || config >= gemm_detail::kPipeConfigs)
    return Status(ErrorCode::InvalidArgument, "decode pipeline config " + std::to_string(config) + " of " +
                                                  std::to_string(gemm_detail::kPipeConfigs));
  if ((y_b16 == nullptr) == (y_f32 == nullptr) || (swiglu && y_f32 != nullptr) || m < 1 ||
      m > gemm_detail::kPipeMaxRows ||
      w.rows < 1 || w.rows > (1LL << 30) || w.cols > (1LL << 24))
    return Status(ErrorCode::InvalidArgument, "decode pipeline: one output (bf16 for SwiGLU), 1..32 rows, got m " +
                                                  std::to_string(m));
  if ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(w.w)) % 16 != 0)
    return Status(ErrorCode::InvalidArgument, "decode pipeline: x and W 16-byte aligned");
  if (m > 16 && config >= 0)  // 17..32 rows take the automatic configuration only
    return Status(ErrorCode::InvalidArgument, std::string("decode pipeline ") + gemm_detail::pipe_config_name(config) +
                                                  " does not take m " + std::to_string(m) + " (pinned: 1..16 rows)");
  gemm_detail::GemmArgs args{reinterpret_cast<const __nv_bfloat16*>(x), reinterpret_cast<const __nv_bfloat16*>(w.w),
                             w.bias, reinterpret_cast<__nv_bfloat16*>(y_b16), y_f32, static_cast<int>(m),
                             static_cast<int>(w.rows), static_cast<int>(w.cols),
                             gemm_detail::pipe_fault.load(std::memory_order_relaxed) ? 1 : 0};
  return gemm_detail::launch_pipe(config, args, stream);
}

void set_decode_pipe_spread(int spread) {
  gemm_detail::pipe_spread.store(std::clamp(spread, 1, 16), std::memory_order_relaxed);
}
int decode_pipe_spread() { return gemm_detail::pipe_spread.load(std::memory_order_relaxed); }

void set_decode_pipe_rows32(bool on) { gemm_detail::pipe_rows32.store(on, std::memory_order_relaxed); }
bool decode_pipe_rows32() { return gemm_detail::pipe_rows32.load(std::memory_order_relaxed); }

void set_decode_pipe_fault_for_test(bool on) { gemm_detail::pipe_fault.store(on, std::memory_order_relaxed); }

bool decode_pipe_routes(int64_t m, const DeviceMatrix& w, bool swiglu, bool* x_once) {
  if (x_once) *x_once = false;
  if (m < 1 || m > gemm_detail::kPipeMaxRows || w.rows < 1 || w.rows > (1LL << 30) || w.cols > (1LL << 24) ||
      !gemm_detail::pipe_enabled())
    return false;
  const gemm_detail::GemmArgs args{nullptr, reinterpret_cast<const __nv_bfloat16*>(w.w), nullptr, nullptr, nullptr,
                                   static_cast<int>(m), static_cast<int>(w.rows), static_cast<int>(w.cols), 0};
  if (!gemm_detail::pipe_fits(args, swiglu)) return false;
  if (x_once) *x_once = gemm_detail::routed_x_once(args, swiglu);
  return true;
}

}  // namespace ls::cuda
