// The routed experts of a MoE layer after the plan (expert_ffn): which path runs (four launches on the grouped
// tensor-core tiles, or the streamed decode kernels), the path pin, and the four-launch path.
#include <atomic>
#include <cstdint>

#include "compute/cuda/cuda_util.h"
#include "compute/cuda/kernels.h"
#include "model/lfm2/cuda/expert_launch.h"

namespace ls::lfm2::gpu {
namespace {

std::atomic<int> g_pinned_path{static_cast<int>(ExpertFfnPath::Automatic)};

// The streamed kernels up to this many rows, four launches above (H200 batch A of session 5, one 8B layer with its
// plan launch, us at 1 / 4 / 8 / 16 rows: streamed 32.2 / 86.5 / 127.4 / 166.5, narrow down 32.5 / 98.7 / 147.1 /
// 190.2, two launches 46.4 / 110.3 / 160.1 / 210.3, four 47.3 / 107.2 / 156.1 / 200.6; the 8B decode step 2.002 ms
// streamed, 2.367 four launches, 2.510 two launches; batch B at 32 / 64 rows: streamed 182.2 / 223.7, four launches
// 210.4 / 216.9). The variants that never won (two launches, narrow down items, 2-warp CTAs, 6 stages, the lean
// down-weight L2 prefetch, evict-first loads) were removed in session 8.
constexpr int64_t kStreamedMaxRows = 32;
// Which streamed path (moe7, H200 batch s7A: one 8B layer, plan + experts + combine, eager, us at 1 / 2 / 4 / 16 /
// 32 rows: streamed + combine launch 35.0 / 56.3 / 87.7 / 169.6 / 183.6, lean + combine launch 34.7 / 55.3 / 85.4 /
// 165.9 / 180.5, lean combining in its down launch at 1 row 32.7; the 8B decode step 1.734 ms lean combining, 1.736
// lean, 1.748 streamed): the lean kernels, whose down launch combines where one row chunk a warp covers the forward.
constexpr ExpertFfnPath kStreamedPick = ExpertFfnPath::StreamedLeanCombine;

bool aligned(const void* p, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// Gather, gate|up GEMM, SwiGLU, down GEMM (through f.gathered and f.gate_up).
Status four_launches(const ExpertFfn& f, cudaStream_t stream) {
  const int64_t slots = f.rows * f.top_k, D = f.hidden, I = f.inter;
  LS_RETURN_IF_ERROR(gather_rows(f.x, f.order, slots, static_cast<int>(D), f.top_k, f.gathered, stream));
  LS_RETURN_IF_ERROR(expert_gemm(f.gathered, f.offsets, f.experts, f.rows, f.w_gate_up, 2 * I, D, f.gate_up, stream));
  LS_RETURN_IF_ERROR(cuda::swiglu(f.gate_up, f.gate_up + I, slots, static_cast<int>(I), 2 * I, f.act, stream));
  return expert_gemm(f.act, f.offsets, f.experts, f.rows, f.w_down, D, I, f.out, stream);
}

}  // namespace

void pin_expert_ffn_path_for_test(ExpertFfnPath path) { g_pinned_path = static_cast<int>(path); }

ExpertFfnPath chosen_expert_ffn_path(int64_t rows) {
  const auto pinned = static_cast<ExpertFfnPath>(g_pinned_path.load());
  if (pinned != ExpertFfnPath::Automatic) return pinned;
  return rows <= kStreamedMaxRows ? kStreamedPick : ExpertFfnPath::FourLaunches;
}

const char* expert_ffn_path_name(ExpertFfnPath path) {
  switch (path) {
    case ExpertFfnPath::Automatic: return "automatic";
    case ExpertFfnPath::FourLaunches: return "four launches";
    case ExpertFfnPath::Streamed: return "streamed";
    case ExpertFfnPath::StreamedLean: return "streamed lean";
    case ExpertFfnPath::StreamedLeanCombine: return "streamed lean, combine in down";
  }
  return "?";
}

namespace {

// The path expert_ffn runs (the pin or the automatic pick, moved to four launches where the others do not fit).
ExpertFfnPath path_of(const ExpertFfn& f) {
  const int64_t D = f.hidden, I = f.inter;
  const ExpertKernel up_kernel = expert_kernel_for(f.rows, f.experts, D);
  const ExpertKernel down_kernel = expert_kernel_for(f.rows, f.experts, I);
  const bool fits = f.experts >= 1 && f.experts <= kMaxTensorExperts && D % 8 == 0 && I % 8 == 0 &&
                    D <= (1 << 24) && I <= (1 << 24) && aligned(f.x, 16) && aligned(f.act, 16) &&
                    aligned(f.w_gate_up, 16) && aligned(f.w_down, 16) && aligned(f.out, 4);
  const bool pinned = g_pinned_path.load() != static_cast<int>(ExpertFfnPath::Automatic);
  ExpertFfnPath path = fits ? chosen_expert_ffn_path(f.rows) : ExpertFfnPath::FourLaunches;
  // the streamed paths run where both GEMMs would be on the tensor-core kernels (the automatic picks keep small K on
  // the scalar kernel) or under a pin
  const bool tensor = up_kernel != ExpertKernel::Scalar && down_kernel != ExpertKernel::Scalar;
  if (path != ExpertFfnPath::FourLaunches && !pinned && !tensor) path = ExpertFfnPath::FourLaunches;
  return path;
}

}  // namespace

bool expert_ffn_combines(const ExpertFfn& f) {
  const ExpertFfnPath path = path_of(f);
  if (path == ExpertFfnPath::StreamedLeanCombine) return expert_lean_combine_fits(f);
  return f.rows > 0 && f.y && f.weights && f.tickets && expert_stream_combine_fits(f.rows, f.top_k) &&
         path == ExpertFfnPath::Streamed;
}

Status expert_ffn(const ExpertFfn& f, cudaStream_t stream) {
  if (f.rows == 0) return ok_status();
  expert_launch_setup();
  const ExpertFfnPath path = path_of(f);
  const int fault = expert_fault_for_test() && f.rows > 1 ? 1 : 0;
  switch (path) {
    case ExpertFfnPath::Streamed: return expert_ffn_streamed(f, expert_ffn_combines(f), fault, stream);
    case ExpertFfnPath::StreamedLean: return expert_ffn_lean(f, false, fault, stream);
    case ExpertFfnPath::StreamedLeanCombine: return expert_ffn_lean(f, true, fault, stream);
    default: return four_launches(f, stream);
  }
}

}  // namespace ls::lfm2::gpu
