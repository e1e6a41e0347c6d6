// The CUDA target: parity with the golden references, bitwise batch invariance over widths and many streams,
// exact rollback, refusals, and exact replies through the lanes. Every test skips without a CUDA device.
#include <gtest/gtest.h>

#include "cli/options.h"

// `--device` (generate): cpu and cuda parse, anything else is refused by name (no device needed).
TEST(DeviceFlag, AcceptsCpuAndCudaAndRefusesOtherNamesByName) {
  EXPECT_EQ(*ls::cli::parse_device("cpu"), ls::Device::Cpu);
  EXPECT_EQ(*ls::cli::parse_device("cuda"), ls::Device::Cuda);
  const ls::Result<ls::Device> refused = ls::cli::parse_device("gpu");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), ls::ErrorCode::InvalidArgument);
  EXPECT_NE(refused.status().message().find("'gpu'"), std::string::npos);
}

#ifdef LS_HAVE_CUDA
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>

#include "compute/cuda/cuda_util.h"
#include "cuda_test_util.h"
#include "io/safetensors.h"
#include "lanes/lanes.h"
#include "lanes/testing/harness.h"
#include "lanes/testing/recorded_drafter.h"
#include "lfm2_test_util.h"
#include "model/lfm2/cuda/cuda_target.h"
#include "model/lfm2/cuda/state_kernels.h"
#include "model/load.h"

namespace ls::lfm2 {
namespace {


// The repository root: the configured source dir, or the working directory when the binary was carried elsewhere.
std::string source_dir() {
  const std::string configured = LS_SOURCE_DIR;
  if (std::filesystem::exists(configured + "/tests/golden")) return configured;
  return std::filesystem::current_path().string();
}

uint64_t bits_hash(const float* values, size_t count) {
  uint64_t hash = 1469598103934665603ull;
  const auto* bytes = reinterpret_cast<const unsigned char*>(values);
  for (size_t i = 0; i < count * sizeof(float); ++i) hash = (hash ^ bytes[i]) * 1099511628211ull;
  return hash;
}

// One row's outputs as bit fingerprints (logits and taps) plus its draw.
struct RowBits {
  uint64_t logits = 0, taps = 0;
  int32_t draw = -1;
  bool operator==(const RowBits&) const = default;
};

RowBits row_bits(const Verified& v, int64_t row, int64_t V, int64_t tap_width) {
  return RowBits{bits_hash(v.logits.data() + row * V, V), bits_hash(v.taps.data() + row * tap_width, tap_width),
                 v.draws[row]};
}

LoadOptions cuda_options(int max_rows = 512) {
  LoadOptions options;
  options.device = Device::Cuda;
  options.max_rows = max_rows;
  options.max_streams = 64;
  options.kv_pages = 2048;
  options.kv_page_size = 16;
  options.exact_width_probe = 16;
  return options;
}

std::unique_ptr<CudaTarget> small_cuda_target(bool moe, int max_rows = 512) {
  const io::ModelConfig config = testing::small_config(moe);
  auto made = CudaTarget::create(config, random_weights(config, NumericMode::Bf16, 7), cuda_options(max_rows));
  EXPECT_TRUE(made.ok()) << made.status().to_string();
  if (!made.ok()) return nullptr;
  const int taps[] = {0, 2, 4};
  EXPECT_TRUE((*made)->set_taps(taps).ok());
  return std::move(made).value();
}

std::unique_ptr<Target> nano_cuda_target(int max_rows = 512) {
  const std::string dir = source_dir() + "/models/nano/target";
  if (!std::filesystem::exists(dir + "/config.json")) return nullptr;
  auto loaded = load_target(dir, cuda_options(max_rows));
  EXPECT_TRUE(loaded.ok()) << loaded.status().to_string();
  if (!loaded.ok()) return nullptr;
  const int taps[] = {1, 4, 7};
  EXPECT_TRUE((*loaded)->set_taps(taps).ok());
  return std::move(loaded).value();
}

Sampling stream_sampling(int index) {
  Sampling s;
  if (index % 2 == 1) {
    s.temperature = 0.8f;
    s.top_k = index % 4 == 1 ? 40 : 0;
    s.top_p = 0.9f;
    s.seed = 1000 + index;
  }
  return s;
}

// Every row of `tokens` fed one at a time: the oracle.
std::vector<RowBits> one_row_oracle(Target& target, StreamId stream, const std::vector<int32_t>& tokens,
                                    const Sampling& sampling) {
  const int64_t V = target.facts().vocab_size;
  std::vector<RowBits> rows;
  target.release(stream);
  for (size_t i = 0; i < tokens.size(); ++i) {
    Window window;
    window.stream = stream;
    window.tokens = std::span<const int32_t>(&tokens[i], 1);
    window.want_logits = true;
    window.sampling = sampling;
    Result<Verified> v = target.forward(std::span<const Window>(&window, 1));
    EXPECT_TRUE(v.ok()) << v.status().to_string();
    if (!v.ok()) return rows;
    const int64_t tap_width = static_cast<int64_t>(v->taps.size());
    rows.push_back(row_bits(*v, 0, V, tap_width));
    EXPECT_TRUE(target.commit(stream, 1).ok());
  }
  target.release(stream);
  return rows;
}

// Streams fed in rounds of windows (all max_width, then ragged (s + round) % max_width + 1), one forward per round; every row
// must equal the oracle's bits. Returns the widest forward seen.
int64_t check_many_streams(Target& target, int streams, int tokens_per_stream, int max_width) {
  const int64_t V = target.facts().vocab_size;
  std::vector<std::vector<int32_t>> tokens(streams);
  std::vector<std::vector<RowBits>> oracle(streams);
  for (int s = 0; s < streams; ++s) {
    tokens[s] = testing::random_tokens(tokens_per_stream, 100 + s, target.facts().vocab_size);
    oracle[s] = one_row_oracle(target, 500 + s, tokens[s], stream_sampling(s));
  }
  std::vector<int> done(streams, 0);
  int64_t widest = 0;
  for (int round = 0;; ++round) {
    std::vector<Window> windows;
    std::vector<int> owner;
    for (int s = 0; s < streams; ++s) {
      if (done[s] == tokens_per_stream) continue;
      // Round 0: every stream takes max_width rows (the widest forward); later rounds are ragged.
      const int width = std::min(round == 0 ? max_width : (s + round) % max_width + 1, tokens_per_stream - done[s]);
      Window window;
      window.stream = 900 + s;
      window.tokens = std::span<const int32_t>(tokens[s].data() + done[s], width);
      window.want_logits = true;
      window.sampling = stream_sampling(s);
      windows.push_back(window);
      owner.push_back(s);
    }
    if (windows.empty()) break;
    Result<Verified> v = target.forward(windows);
    EXPECT_TRUE(v.ok()) << v.status().to_string();
    if (!v.ok()) return widest;
    widest = std::max(widest, v->row_begin.back());
    const int64_t tap_width = static_cast<int64_t>(v->taps.size()) / v->row_begin.back();
    for (size_t w = 0; w < windows.size(); ++w) {
      const int s = owner[w];
      for (int64_t r = v->row_begin[w]; r < v->row_begin[w + 1]; ++r) {
        const int64_t at = done[s] + (r - v->row_begin[w]);
        EXPECT_EQ(row_bits(*v, r, V, tap_width), oracle[s][at])
            << "stream " << s << " row " << at << " (window of " << windows[w].tokens.size() << ", forward of "
            << v->row_begin.back() << " rows)";
      }
      EXPECT_TRUE(target.commit(windows[w].stream, static_cast<int>(windows[w].tokens.size())).ok());
      done[s] += static_cast<int>(windows[w].tokens.size());
    }
  }
  for (int s = 0; s < streams; ++s) target.release(900 + s);
  return widest;
}

TEST(CudaTarget, EveryWindowWidthUpTo16GivesTheOneRowBitsOnDenseAndMoe) {
  LS_SKIP_WITHOUT_DEVICE();
  for (bool moe : {false, true}) {
    auto target = small_cuda_target(moe);
    ASSERT_NE(target, nullptr);
    const std::vector<int32_t> tokens = testing::random_tokens(40, 3);
    const std::vector<RowBits> oracle = one_row_oracle(*target, 1, tokens, stream_sampling(1));
    for (int width = 2; width <= 16; ++width) {
      target->release(2);
      for (size_t begin = 0; begin < tokens.size(); begin += width) {
        const size_t rows = std::min<size_t>(width, tokens.size() - begin);
        Window window;
        window.stream = 2;
        window.tokens = std::span<const int32_t>(tokens.data() + begin, rows);
        window.want_logits = true;
        window.sampling = stream_sampling(1);
        Result<Verified> v = target->forward(std::span<const Window>(&window, 1));
        ASSERT_TRUE(v.ok()) << v.status().to_string();
        const int64_t tap_width = static_cast<int64_t>(v->taps.size() / rows);
        for (size_t r = 0; r < rows; ++r)
          EXPECT_EQ(row_bits(*v, r, 97, tap_width), oracle[begin + r])
              << (moe ? "moe" : "dense") << " width " << width << " row " << begin + r;
        ASSERT_TRUE(target->commit(2, static_cast<int>(rows)).ok());
      }
    }
  }
}

TEST(CudaTarget, ForwardsOfManyStreamsUpTo256RowsGiveTheOneRowBitsOnDenseAndMoe) {
  LS_SKIP_WITHOUT_DEVICE();
  for (bool moe : {false, true}) {
    auto target = small_cuda_target(moe);
    ASSERT_NE(target, nullptr);
    EXPECT_EQ(check_many_streams(*target, 16, 40, 16), 256) << (moe ? "moe" : "dense");
  }
}

TEST(CudaTarget, NanoTargetIsBatchInvariantAcrossWidthsAndStreams) {
  LS_SKIP_WITHOUT_DEVICE();
  auto target = nano_cuda_target();
  if (!target) GTEST_SKIP() << "no nano target";
  EXPECT_EQ(target->facts().exact_width, 16) << "the load-time probe must find every width up to 16 exact";
  EXPECT_EQ(check_many_streams(*target, 16, 24, 16), 256);
}

// step10's launch switches, all on (the ShortConv's and the attention tiles' early loads; the last residual add in
// the draw's final norm): the default launches' one-row bits, then every row of 16 streams in
// windows up to 16 rows (256-row forwards) equal to the one-row run, on the small dense and MoE targets (head_dim 16:
// the KV write's two-launch fallback), the nano target (head_dim 64: the one launch) and a small dense target
// without taps (the final norm fused: taps of the last layer keep the add's launch). Graphs dropped at each
// switch (a captured graph keeps the launches it was captured with).
TEST(CudaTarget, TheStep10LaunchSwitchesGiveTheDefaultOneRowBitsAtEveryWidthAndStream) {
  LS_SKIP_WITHOUT_DEVICE();
  struct Switches {
    Switches(CudaTarget& target, bool on)
        : target(target), conv_before(gpu::short_conv_early()), attention_before(gpu::attention_tiles_early()),
          final_before(CudaTarget::final_norm_fused()) {
      set(on, on, on);
    }
    ~Switches() { set(conv_before, attention_before, final_before); }
    void set(bool conv, bool attention, bool final_norm) {
      gpu::set_short_conv_early(conv);
      gpu::set_attention_tiles_early(attention);
      CudaTarget::set_final_norm_fused(final_norm);
      target.set_graphs(false);
      target.set_graphs(true);
    }
    CudaTarget& target;
    bool conv_before, attention_before, final_before;
  };
  std::vector<std::unique_ptr<Target>> targets;
  targets.push_back(small_cuda_target(false));
  targets.push_back(small_cuda_target(true));
  targets.push_back(nano_cuda_target());
  {  // no taps: the last residual add goes into the draw's final norm
    const io::ModelConfig config = testing::small_config(false);
    auto made = CudaTarget::create(config, random_weights(config, NumericMode::Bf16, 9), cuda_options());
    ASSERT_TRUE(made.ok()) << made.status().to_string();
    targets.push_back(std::move(made).value());
  }
  int checked = 0;
  for (const std::unique_ptr<Target>& target : targets) {
    auto* cuda_target = dynamic_cast<CudaTarget*>(target.get());
    if (cuda_target == nullptr) continue;  // no nano target in this checkout
    const std::vector<int32_t> tokens = testing::random_tokens(24, 5, target->facts().vocab_size);
    std::vector<RowBits> oracle;
    {
      const Switches off(*cuda_target, false);
      oracle = one_row_oracle(*target, 1, tokens, stream_sampling(1));
    }
    const Switches on(*cuda_target, true);
    EXPECT_TRUE(one_row_oracle(*target, 1, tokens, stream_sampling(1)) == oracle) << "target " << checked;
    EXPECT_EQ(check_many_streams(*target, 16, 24, 16), 256) << "target " << checked;
    ++checked;
  }
  EXPECT_GE(checked, 3);
}

// The lanes split a long prompt by the rows other streams leave (lanes_steps.cpp): any split must give the same bits.
TEST(CudaTarget, APromptSplitIntoAnyChunksGivesTheBitsOfOneWholeWindow) {
  LS_SKIP_WITHOUT_DEVICE();
  for (bool moe : {false, true}) {
    auto target = small_cuda_target(moe);
    ASSERT_NE(target, nullptr);
    const std::vector<int32_t> prompt = testing::random_tokens(300, 21);
    std::vector<std::vector<RowBits>> runs;
    for (const std::vector<int>& split : {std::vector<int>{300}, std::vector<int>{37, 200, 63}, std::vector<int>{129, 171}}) {
      std::vector<RowBits> rows;
      size_t begin = 0;
      for (int chunk : split) {
        Window w;
        w.stream = 3;
        w.tokens = std::span<const int32_t>(prompt.data() + begin, chunk);
        w.want_logits = true;
        Result<Verified> v = target->forward(std::span<const Window>(&w, 1));
        ASSERT_TRUE(v.ok()) << v.status().to_string();
        const int64_t tap_width = static_cast<int64_t>(v->taps.size()) / chunk;
        for (int r = 0; r < chunk; ++r) rows.push_back(row_bits(*v, r, 97, tap_width));
        ASSERT_TRUE(target->commit(3, chunk).ok());
        begin += chunk;
      }
      target->release(3);
      runs.push_back(rows);
    }
    EXPECT_TRUE(runs[0] == runs[1]) << (moe ? "moe" : "dense");
    EXPECT_TRUE(runs[0] == runs[2]) << (moe ? "moe" : "dense");
  }
}

TEST(CudaTarget, CommitOfThreeOfEightRowsEqualsHavingRunOnlyThoseThree) {
  LS_SKIP_WITHOUT_DEVICE();
  for (bool moe : {false, true}) {
    auto target = small_cuda_target(moe);
    ASSERT_NE(target, nullptr);
    const std::vector<int32_t> prefix = testing::random_tokens(5, 11), window = testing::random_tokens(8, 12),
                               after = testing::random_tokens(6, 13);
    for (int kept = 1; kept <= 8; ++kept) {
      // Stream 1 runs 8 rows and keeps `kept`; stream 2 runs only the kept rows; both continue with `after`.
      std::vector<int32_t> path = prefix;
      path.insert(path.end(), window.begin(), window.begin() + kept);
      path.insert(path.end(), after.begin(), after.end());
      const std::vector<RowBits> expected = one_row_oracle(*target, 2, path, stream_sampling(1));
      target->release(1);
      Window w;
      w.stream = 1;
      w.tokens = prefix;
      ASSERT_TRUE(target->forward(std::span<const Window>(&w, 1)).ok());
      ASSERT_TRUE(target->commit(1, static_cast<int>(prefix.size())).ok());
      w.tokens = window;
      ASSERT_TRUE(target->forward(std::span<const Window>(&w, 1)).ok());
      ASSERT_TRUE(target->commit(1, kept).ok());
      EXPECT_EQ(target->committed_length(1), static_cast<int64_t>(prefix.size()) + kept);
      for (size_t i = 0; i < after.size(); ++i) {
        w.tokens = std::span<const int32_t>(&after[i], 1);
        w.want_logits = true;
        w.sampling = stream_sampling(1);
        Result<Verified> v = target->forward(std::span<const Window>(&w, 1));
        ASSERT_TRUE(v.ok());
        EXPECT_EQ(row_bits(*v, 0, 97, static_cast<int64_t>(v->taps.size())), expected[prefix.size() + kept + i])
            << (moe ? "moe" : "dense") << " kept " << kept << " step " << i;
        ASSERT_TRUE(target->commit(1, 1).ok());
      }
      target->release(1);
    }
  }
}

// Steady-state forwards replay captured CUDA graphs: draws and taps must equal the eager launches bit for bit.
TEST(CudaTarget, GraphReplaysGiveTheEagerBitsForDrawsAndTaps) {
  LS_SKIP_WITHOUT_DEVICE();
  for (bool moe : {false, true}) {
    auto target = small_cuda_target(moe);
    ASSERT_NE(target, nullptr);
    std::vector<std::vector<RowBits>> runs;
    for (bool graphs : {false, true}) {
      target->set_graphs(graphs);
      std::vector<RowBits> rows;
      std::vector<std::vector<int32_t>> tokens;
      for (int s = 0; s < 4; ++s) tokens.push_back(testing::random_tokens(60, 40 + s));
      std::vector<int> done(4, 0);
      for (int round = 0; round < 14; ++round) {
        std::vector<Window> windows;
        for (int s = 0; s < 4; ++s) {
          Window w;
          w.stream = 10 + s;
          w.tokens = std::span<const int32_t>(tokens[s].data() + done[s], round == 0 ? 8 : 1 + (round + s) % 3);
          w.sampling = stream_sampling(s);
          windows.push_back(w);
        }
        Result<Verified> v = target->forward(windows);
        ASSERT_TRUE(v.ok()) << v.status().to_string();
        const int64_t tap_width = static_cast<int64_t>(v->taps.size()) / v->row_begin.back();
        for (int64_t r = 0; r < v->row_begin.back(); ++r)
          rows.push_back(RowBits{0, bits_hash(v->taps.data() + r * tap_width, tap_width), v->draws[r]});
        for (int s = 0; s < 4; ++s) {
          const int kept = 1 + (round * 7 + s) % static_cast<int>(windows[s].tokens.size());  // rollbacks too
          ASSERT_TRUE(target->commit(10 + s, kept).ok());
          done[s] += kept;
        }
      }
      if (graphs) {
        EXPECT_GT(target->graph_count(), 0);
      }
      for (int s = 0; s < 4; ++s) target->release(10 + s);
      runs.push_back(rows);
    }
    ASSERT_EQ(runs[0].size(), runs[1].size());
    for (size_t i = 0; i < runs[0].size(); ++i) EXPECT_EQ(runs[0][i], runs[1][i]) << (moe ? "moe" : "dense") << " row " << i;
  }
}

TEST(CudaTarget, RefusesFp32UncommittedWindowsAndAFullKvPoolByName) {
  LS_SKIP_WITHOUT_DEVICE();
  const io::ModelConfig config = testing::small_config(false);
  LoadOptions fp32 = cuda_options();
  fp32.mode = NumericMode::Fp32;
  auto refused = CudaTarget::create(config, random_weights(config, NumericMode::Bf16, 7), fp32);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), ErrorCode::InvalidArgument);

  LoadOptions tight = cuda_options();
  tight.kv_pages = 2;  // 32 positions
  tight.kv_page_size = 16;
  auto target = CudaTarget::create(config, random_weights(config, NumericMode::Bf16, 7), tight);
  ASSERT_TRUE(target.ok()) << target.status().to_string();
  const std::vector<int32_t> tokens = testing::random_tokens(40, 5);
  Window a;
  a.stream = 1;
  a.tokens = std::span<const int32_t>(tokens.data(), 20);
  ASSERT_TRUE((*target)->forward(std::span<const Window>(&a, 1)).ok());
  Window b;
  b.stream = 2;
  b.tokens = std::span<const int32_t>(tokens.data(), 4);
  Result<Verified> uncommitted = (*target)->forward(std::span<const Window>(&b, 1));
  ASSERT_FALSE(uncommitted.ok());
  EXPECT_EQ(uncommitted.status().code(), ErrorCode::InvalidArgument);
  ASSERT_TRUE((*target)->commit(1, 20).ok());
  b.tokens = std::span<const int32_t>(tokens.data(), 20);  // needs 2 pages, 0 free
  Result<Verified> full = (*target)->forward(std::span<const Window>(&b, 1));
  ASSERT_FALSE(full.ok());
  EXPECT_EQ(full.status().code(), ErrorCode::OutOfMemory);
  EXPECT_NE(full.status().message().find("KV pages"), std::string::npos) << full.status().to_string();
  (*target)->release(1);
  EXPECT_EQ((*target)->free_pages(), 2);
  EXPECT_TRUE((*target)->forward(std::span<const Window>(&b, 1)).ok());
}

// Golden parity: the GPU vs transformers bf16 (H200) within the CPU bf16 tolerance; argmax vs the fp32 reference
// wherever its top-two gap is clear; MoE experts vs the CPU bf16 run.
void check_golden(const std::string& model) {
  const std::string dir = source_dir() + "/tests/golden/" + model;
  std::ifstream file(dir + "/golden.json");
  ASSERT_TRUE(file) << dir;
  const nlohmann::json meta = nlohmann::json::parse(file);
  auto tensors = io::Checkpoint::open_file(dir + "/golden.safetensors");
  ASSERT_TRUE(tensors.ok());
  auto read = [&](const std::string& name) {
    const io::TensorInfo* info = (*tensors)->find(name);
    std::vector<float> values(info ? info->elements() : 0);
    if (info) {
      EXPECT_TRUE((*tensors)->read_f32(name, info->shape, values).ok());
    }
    return values;
  };
  LoadOptions options = cuda_options(256);
  auto gpu = load_target(dir, options);
  ASSERT_TRUE(gpu.ok()) << gpu.status().to_string();
  LoadOptions cpu_options;
  cpu_options.threads = 2;
  auto cpu = load_target(dir, cpu_options);
  ASSERT_TRUE(cpu.ok());
  auto* cuda_target = dynamic_cast<CudaTarget*>(gpu->get());
  auto* cpu_target = dynamic_cast<Lfm2Target*>(cpu->get());
  ASSERT_TRUE(cuda_target && cpu_target);
  std::vector<int32_t> gpu_experts, cpu_experts;
  cuda_target->set_expert_trace(&gpu_experts);
  cpu_target->model().set_expert_trace(&cpu_experts);
  const int64_t V = cuda_target->facts().vocab_size;
  double worst = 0;
  int argmax_checked = 0, fp32_checked = 0, fp32_flips = 0, rerouted_rows = 0;
  StreamId stream = 1;
  for (const auto& c : meta["cases"]) {
    const std::string name = c["name"];
    const std::vector<int32_t> prompt = c["prompt"], decode = c["decode"];
    const std::vector<float> bf16_prefill = read(name + ".bf16.prefill_logits"),
                             fp32_prefill = read(name + ".fp32.prefill_logits");
    const size_t gpu_mark = gpu_experts.size(), cpu_mark = cpu_experts.size();
    std::optional<Verified> v;
    for (Target* target : {static_cast<Target*>(cuda_target), static_cast<Target*>(cpu_target)}) {
      Window window;
      window.stream = stream;
      window.tokens = prompt;
      window.want_logits = true;
      Result<Verified> forward = target->forward(std::span<const Window>(&window, 1));
      ASSERT_TRUE(forward.ok()) << forward.status().to_string();
      if (target == cuda_target) v = std::move(*forward);
    }
    // A row routed to another expert than the CPU bf16 run chose (a near tie tipped by rounding: the count is bounded
    // below) moves by far more than rounding, so its logits are not held to the bounds; every other row is.
    std::vector<bool> rerouted(prompt.size(), false);
    const size_t k = static_cast<size_t>(cuda_target->config().moe ? cuda_target->config().moe->experts_per_token : 1);
    ASSERT_EQ(gpu_experts.size() - gpu_mark, cpu_experts.size() - cpu_mark);
    for (size_t i = 0; i < gpu_experts.size() - gpu_mark; ++i) {
      if (gpu_experts[gpu_mark + i] != cpu_experts[cpu_mark + i]) rerouted[(i % (prompt.size() * k)) / k] = true;
    }
    for (size_t t = 0; t < prompt.size(); ++t) {
      if (rerouted[t]) {
        ++rerouted_rows;
        continue;
      }
      const float* ours = v->logits.data() + t * V;
      double diff = 0, scale = 0;
      for (int64_t i = 0; i < V; ++i) {
        diff = std::max(diff, double(std::abs(ours[i] - bf16_prefill[t * V + i])));
        scale = std::max(scale, double(std::abs(bf16_prefill[t * V + i])));
      }
      worst = std::max(worst, diff / scale);
      EXPECT_LE(diff / scale, 0.03) << model << " " << name << " row " << t;
      // Argmax where the reference's top two are clearly apart: 0.15 for transformers bf16 (twice the CPU bf16
      // op's measured error), 0.3 for fp32 (bf16 vs fp32 drift; MoE routing flips may move a few rows).
      auto gap_and_argmax = [&](const float* ref) {
        std::vector<float> sorted(ref, ref + V);
        std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
        return std::pair<float, int64_t>(sorted[0] - sorted[1], std::max_element(ref, ref + V) - ref);
      };
      const int64_t ours_argmax = std::max_element(ours, ours + V) - ours;
      const auto [bf16_gap, bf16_argmax] = gap_and_argmax(bf16_prefill.data() + t * V);
      if (bf16_gap > 0.15f) {
        ++argmax_checked;
        EXPECT_EQ(ours_argmax, bf16_argmax) << model << " " << name << " row " << t << " (bf16 gap " << bf16_gap << ")";
      }
      const auto [fp32_gap, fp32_argmax] = gap_and_argmax(fp32_prefill.data() + t * V);
      if (fp32_gap > 0.3f) {
        ++fp32_checked;
        fp32_flips += ours_argmax != fp32_argmax;
      }
    }
    ASSERT_TRUE(cuda_target->commit(stream, static_cast<int>(prompt.size())).ok());
    ASSERT_TRUE(cpu_target->commit(stream, static_cast<int>(prompt.size())).ok());
    ++stream;
  }
  ASSERT_EQ(gpu_experts.size(), cpu_experts.size());
  int differ = 0;
  for (size_t i = 0; i < gpu_experts.size(); ++i) differ += gpu_experts[i] != cpu_experts[i];
  EXPECT_LE(differ * 50, static_cast<int>(gpu_experts.size())) << "chosen experts differ in " << differ;
  EXPECT_GT(argmax_checked, 0);
  EXPECT_GT(fp32_checked, 0);
  EXPECT_LE(fp32_flips, model == "lfm2_moe" ? 2 : 0) << "argmax differs from fp32 on clear rows";
  std::printf("[cuda golden] %s: max rel err vs transformers bf16 %.3g; argmax checked %d rows (bf16), %d (fp32, %d "
              "differ); experts %d/%zu differ; %d rows rerouted, left out of the bounds\n",
              model.c_str(), worst, argmax_checked, fp32_checked, fp32_flips, differ, gpu_experts.size(), rerouted_rows);
}

TEST(CudaTarget, DenseLogitsMatchTheGoldenWithinBf16ToleranceAndArgmaxWhereClear) {
  LS_SKIP_WITHOUT_DEVICE();
  check_golden("lfm2_dense");
}

TEST(CudaTarget, MoeLogitsMatchTheGoldenWithinBf16ToleranceArgmaxWhereClearAndTheSameExperts) {
  LS_SKIP_WITHOUT_DEVICE();
  check_golden("lfm2_moe");
}

TEST(CudaTarget, EmbedAndHeadMatchTheCpuTargetsOnBf16Rows) {
  LS_SKIP_WITHOUT_DEVICE();
  const std::string dir = source_dir() + "/tests/golden/lfm2_dense";
  auto gpu = load_target(dir, cuda_options(64));
  LoadOptions cpu_options;
  auto cpu = load_target(dir, cpu_options);
  ASSERT_TRUE(gpu.ok() && cpu.ok());
  EXPECT_NE((*gpu)->device_embedding(), nullptr);
  const int64_t D = (*gpu)->facts().hidden_size, V = (*gpu)->facts().vocab_size;
  const std::vector<int32_t> tokens = {1, 5, 77, 200, 3};
  std::vector<float> a(tokens.size() * D, NAN), b(tokens.size() * D, NAN);
  ASSERT_TRUE((*gpu)->embed(tokens, a).ok());
  ASSERT_TRUE((*cpu)->embed(tokens, b).ok());
  EXPECT_TRUE(testing::same_bits(a, b));
  std::vector<float> la(tokens.size() * V, NAN), lb(tokens.size() * V, NAN);
  ASSERT_TRUE((*gpu)->head(a, static_cast<int>(tokens.size()), la).ok());
  ASSERT_TRUE((*cpu)->head(b, static_cast<int>(tokens.size()), lb).ok());
  for (size_t i = 0; i < la.size(); ++i) ASSERT_NEAR(la[i], lb[i], 1e-3f * (1 + std::abs(lb[i]))) << i;
}

// Exactness through the lanes: drafted replies on the GPU equal the GPU's plain replies run alone.
class CudaLanes : public ::testing::TestWithParam<std::pair<int, bool>> {};

TEST_P(CudaLanes, DraftedRepliesOnTheGpuEqualPlainRepliesRunAlone) {
  LS_SKIP_WITHOUT_DEVICE();
  auto target = nano_cuda_target(128);
  if (!target) GTEST_SKIP() << "no nano target";
  const auto [streams, sampled] = GetParam();
  const std::vector<Arrival> arrivals = staggered_arrivals(streams, sampled, target->facts().vocab_size, 12);
  std::vector<Reply> alone = run_each_alone_plain(*target, arrivals);
  RecordedDrafterOptions drafter_options;
  drafter_options.tap_layers = {1, 4};
  drafter_options.vocab_size = target->facts().vocab_size;
  drafter_options.hidden_size = target->facts().hidden_size;
  drafter_options.wrong_rate = 0.3;
  RecordedDrafter drafter(drafter_options);
  for (size_t index = 0; index < arrivals.size(); ++index) {
    std::vector<int32_t> sequence = arrivals[index].request.prompt;
    sequence.insert(sequence.end(), alone[index].tokens.begin(), alone[index].tokens.end());
    drafter.expect(static_cast<StreamId>(index + 1), sequence);
  }
  FixedClock clock;
  LanesOptions options;
  options.measure_width = 8;
  options.max_streams = 16;
  options.calibration.repeats = 1;
  auto lanes = Lanes::create(*target, &drafter, options, clock);
  ASSERT_TRUE(lanes.ok()) << lanes.status().to_string();
  ASSERT_GE((*lanes)->width(), 2);
  auto replies = run_arrivals(**lanes, arrivals);
  ASSERT_TRUE(replies.ok()) << replies.status().to_string();
  for (size_t index = 0; index < arrivals.size(); ++index) {
    EXPECT_FALSE(alone[index].tokens.empty());
    EXPECT_EQ((*replies)[index].tokens, alone[index].tokens) << "stream " << index;
  }
  EXPECT_GT((*lanes)->stats().drafts_accepted, 0);
}

INSTANTIATE_TEST_SUITE_P(Nano, CudaLanes,
                         ::testing::Values(std::pair{1, false}, std::pair{1, true}, std::pair{4, false},
                                           std::pair{4, true}, std::pair{16, false}, std::pair{16, true}));

}  // namespace
}  // namespace ls::lfm2
#endif  // LS_HAVE_CUDA
