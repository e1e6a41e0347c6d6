// The CUDA MoE target under the session-6 MoE launches (the combine inside the streamed down launch: level 3 of
// set_moe_fused_launches; the router preloaded whole before route + plan waits: set_moe_router_preload) against the
// session-5 launches, on the small random MoE model with the streamed experts pinned: every row's logits, taps and
// draw bitwise the one-row run of the old launches, at window widths 1..16 and 4 streams x 16 rows per forward. (The
// planted faults are in cuda_expert_combine_test.cpp: this model's K is one 64-wide tile, so a reversed K walk is
// the same walk here.) Also the lean streamed experts (moe7), and their down launch combining at 1 and 2 rows, and the
// lean route + plan (moe8; up to 16 rows a forward, the old kernel past that) with the residual add + ffn norm
// inside it (step10; the norm launch past 16 rows and under the old kernel).
#ifdef LS_HAVE_CUDA

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "lfm2_test_util.h"
#include "model/lfm2/cuda/cuda_target.h"
#include "model/lfm2/cuda/state_kernels.h"

namespace ls::lfm2 {
namespace {

struct MoeMode {
  int level;
  bool preload;
  gpu::ExpertFfnPath path = gpu::ExpertFfnPath::Streamed;
  bool lean_route = false;  // moe8: the lean route + plan (set_moe_route_lean; with the ffn norm inside since step10)
};

// The streamed experts pinned (the small model's K is below the automatic tensor-core pick) and the MoE launches of
// `mode`, for one scope.
struct ModeScope {
  explicit ModeScope(MoeMode mode)
      : level_before(gpu::moe_fused_launches()), preload_before(gpu::moe_router_preload()),
        lean_before(gpu::moe_route_lean()) {
    gpu::pin_expert_ffn_path_for_test(mode.path);
    gpu::set_moe_route_lean(mode.lean_route);
    gpu::set_moe_fused_launches(mode.level);
    gpu::set_moe_router_preload(mode.preload);
  }
  ~ModeScope() {
    gpu::pin_expert_ffn_path_for_test(gpu::ExpertFfnPath::Automatic);
    gpu::set_moe_fused_launches(level_before);
    gpu::set_moe_router_preload(preload_before);
    gpu::set_moe_route_lean(lean_before);
  }
  int level_before;
  bool preload_before, lean_before;
};

std::unique_ptr<CudaTarget> moe_target() {
  const io::ModelConfig config = testing::small_config(true);
  LoadOptions options;
  options.device = Device::Cuda;
  options.max_rows = 256;
  options.max_streams = 16;
  options.kv_pages = 256;
  options.kv_page_size = 16;
  options.exact_width_probe = 0;
  auto made = CudaTarget::create(config, random_weights(config, NumericMode::Bf16, 11), options);
  EXPECT_TRUE(made.ok()) << made.status().to_string();
  if (!made.ok()) return nullptr;
  const int taps[] = {0, 2, 4};
  EXPECT_TRUE((*made)->set_taps(taps).ok());
  return std::move(made).value();
}

uint64_t bits_hash(const float* values, size_t count, uint64_t hash) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(values);
  for (size_t i = 0; i < count * sizeof(float); ++i) hash = (hash ^ bytes[i]) * 1099511628211ull;
  return hash;
}

// `streams` streams of `count` tokens fed in windows of `width` rows (one window per stream per forward, seeded
// sampling on odd streams); per stream, each row's fingerprint of its logits, taps and draw.
std::vector<std::vector<uint64_t>> run(CudaTarget& target, int streams, int count, int width) {
  const int64_t V = target.facts().vocab_size;
  std::vector<std::vector<int32_t>> tokens(streams);
  for (int s = 0; s < streams; ++s) tokens[s] = testing::random_tokens(count, 40 + s);
  std::vector<std::vector<uint64_t>> rows(streams);
  for (int done = 0; done < count; done += width) {
    const int w = std::min(width, count - done);
    std::vector<Window> windows(streams);
    for (int s = 0; s < streams; ++s) {
      windows[s].stream = 300 + s;
      windows[s].tokens = std::span<const int32_t>(tokens[s].data() + done, w);
      windows[s].want_logits = true;
      if (s % 2 == 1) {
        windows[s].sampling.temperature = 0.8f;
        windows[s].sampling.seed = 77 + s;
      }
    }
    Result<Verified> v = target.forward(windows);
    EXPECT_TRUE(v.ok()) << v.status().to_string();
    if (!v.ok()) return rows;
    const int64_t total = v->row_begin.back(), tap_width = static_cast<int64_t>(v->taps.size()) / total;
    for (int s = 0; s < streams; ++s) {
      for (int64_t r = v->row_begin[s]; r < v->row_begin[s + 1]; ++r) {
        uint64_t h = bits_hash(v->logits.data() + r * V, V, 1469598103934665603ull);
        h = bits_hash(v->taps.data() + r * tap_width, tap_width, h);
        rows[s].push_back(h * 31 + static_cast<uint64_t>(v->draws[r] + 1));
      }
      EXPECT_TRUE(target.commit(300 + s, w).ok());
    }
  }
  for (int s = 0; s < streams; ++s) target.release(300 + s);
  return rows;
}

int differing(const std::vector<std::vector<uint64_t>>& a, const std::vector<std::vector<uint64_t>>& b) {
  int differ = 0;
  for (size_t s = 0; s < a.size(); ++s)
    for (size_t r = 0; r < a[s].size(); ++r) differ += s >= b.size() || r >= b[s].size() || a[s][r] != b[s][r];
  return differ;
}

TEST(CudaMoeTarget, TheCombineInTheDownLaunchAndThePreloadedRouterGiveTheOneRowBitsOfTheOldLaunches) {
  LS_SKIP_WITHOUT_DEVICE();
  std::unique_ptr<CudaTarget> target = moe_target();
  ASSERT_NE(target, nullptr);
  std::vector<std::vector<uint64_t>> oracle_one, oracle_four;
  {
    const ModeScope old_launches(MoeMode{2, false});
    oracle_one = run(*target, 1, 32, 1);
    oracle_four = run(*target, 4, 32, 1);
  }
  ASSERT_EQ(oracle_four.size(), 4u);
  // moe7: the lean streamed experts, and their down launch combining (1 and 2 rows; wider windows combine apart)
  for (const MoeMode mode : {MoeMode{3, false}, MoeMode{2, true}, MoeMode{3, true},
                             MoeMode{2, true, gpu::ExpertFfnPath::StreamedLean},
                             MoeMode{2, true, gpu::ExpertFfnPath::StreamedLeanCombine},
                             MoeMode{3, true, gpu::ExpertFfnPath::StreamedLeanCombine},
                             MoeMode{2, true, gpu::ExpertFfnPath::StreamedLeanCombine, true},
                             MoeMode{3, true, gpu::ExpertFfnPath::StreamedLean, true}}) {
    const ModeScope scope(mode);
    for (int width : {1, 2, 5, 8, 16}) {
      EXPECT_EQ(differing(run(*target, 1, 32, width), oracle_one), 0)
          << "level " << mode.level << " preload " << mode.preload << " " << gpu::expert_ffn_path_name(mode.path)
          << " lean route " << mode.lean_route << ", windows of " << width << ", one stream";
    }
    // 4 streams x 16 rows: 64 rows a forward, the most route + plan and the combine in the down launch take
    EXPECT_EQ(differing(run(*target, 4, 32, 16), oracle_four), 0)
        << "level " << mode.level << " preload " << mode.preload << " " << gpu::expert_ffn_path_name(mode.path)
        << " lean route " << mode.lean_route << ", 4 streams of 16-row windows";
  }
}

}  // namespace
}  // namespace ls::lfm2

#endif  // LS_HAVE_CUDA
