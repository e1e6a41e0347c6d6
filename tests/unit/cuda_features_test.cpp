// The runtime CUDA features (features.h): the rule for each device / code / LS_CUDA_PORTABLE combination, the
// probed features against this device and this binary, the portable GemmEngine never choosing a wgmma, TMA or
// split (cluster) configuration while the full one does, and the tiles that fit 99 KB of shared memory.
#ifdef LS_HAVE_CUDA

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "compute/cuda/features.h"
#include "compute/cuda/kernels.h"
#include "cuda_test_util.h"
#include "ops_test_util.h"

namespace ls::cuda {
namespace {

struct Expected {
  bool wgmma, tma, clusters, pdl;
};

void expect_features(const CudaFeatures& f, Expected e, const std::string& what) {
  EXPECT_EQ(f.wgmma, e.wgmma) << what << ": " << f.describe();
  EXPECT_EQ(f.tma, e.tma) << what << ": " << f.describe();
  EXPECT_EQ(f.clusters, e.clusters) << what << ": " << f.describe();
  EXPECT_EQ(f.pdl, e.pdl) << what << ": " << f.describe();
  EXPECT_EQ(f.portable(), !e.wgmma && !e.tma && !e.clusters && !e.pdl) << what;
}

TEST(CudaFeatures, EachDeviceAndCodeCombinationGetsExactlyTheFeaturesItCanRun) {
  expect_features(decide_features(9, 0, 900, true, false), {true, true, true, true}, "H200, sm_90a code");
  expect_features(decide_features(9, 0, 800, false, false), {false, false, false, false}, "H200, compute_80 PTX");
  expect_features(decide_features(9, 0, 900, false, false), {false, true, true, true}, "H200, plain sm_90 code");
  expect_features(decide_features(8, 0, 800, false, false), {false, false, false, false}, "A100");
  expect_features(decide_features(8, 9, 890, false, false), {false, false, false, false}, "L40S / RTX 40");
  expect_features(decide_features(8, 6, 800, false, false), {false, false, false, false}, "RTX 30, sm_80 PTX");
  expect_features(decide_features(10, 0, 800, false, false), {false, false, false, false}, "sm_100, sm_80 PTX");
  // wgmma is sm_90a only: a newer device running compute_90 PTX gets TMA, clusters and programmatic launch.
  expect_features(decide_features(10, 0, 900, false, false), {false, true, true, true}, "sm_100, compute_90 PTX");
  expect_features(decide_features(0, 0, 0, false, false), {false, false, false, false}, "no device");
}

TEST(CudaFeatures, LsCudaPortableTurnsEverySm90FeatureOffOnAHopperBinary) {
  const CudaFeatures forced = decide_features(9, 0, 900, true, true);
  expect_features(forced, {false, false, false, false}, "H200, sm_90a code, LS_CUDA_PORTABLE");
  EXPECT_TRUE(forced.forced_portable);
  EXPECT_NE(forced.describe().find("LS_CUDA_PORTABLE"), std::string::npos) << forced.describe();
  expect_features(portable_features(decide_features(9, 0, 900, true, false)), {false, false, false, false},
                  "portable_features of the H200");
}

// Sets LS_CUDA_PORTABLE (nullopt: unset) for the life of the object, then puts the old value back.
class ScopedPortableEnv {
 public:
  explicit ScopedPortableEnv(std::optional<std::string> value) {
    if (const char* old = std::getenv("LS_CUDA_PORTABLE")) old_ = old;
    if (value)
      setenv("LS_CUDA_PORTABLE", value->c_str(), 1);
    else
      unsetenv("LS_CUDA_PORTABLE");
  }
  ~ScopedPortableEnv() {
    if (old_)
      setenv("LS_CUDA_PORTABLE", old_->c_str(), 1);
    else
      unsetenv("LS_CUDA_PORTABLE");
  }

 private:
  std::optional<std::string> old_;
};

TEST(CudaFeatures, LsCudaPortableIsOnForAnyValueButEmptyAndZero) {
  const std::vector<std::pair<std::optional<std::string>, bool>> cases = {
      {std::nullopt, false}, {"", false}, {"0", false}, {"1", true}, {"yes", true}};
  for (const auto& [value, on] : cases) {
    ScopedPortableEnv env(value);
    EXPECT_EQ(portable_forced_by_env(), on) << "LS_CUDA_PORTABLE=" << value.value_or("(unset)");
  }
}

// Every (m, N, K) the models use and more: decode rows, verify windows, prefill; one slice, tails, sliced K, more
// slices than a cluster holds.
std::vector<std::string> tile_names(const GemmEngine& engine) {
  std::vector<std::string> names;
  const std::vector<int64_t> rows = {1, 2, 5, 8, 12, 16, 17, 32, 64, 65,
                                     100, 128, 129, 256, 300, 512, 1000, 2048, 4096};
  const std::vector<int64_t> outputs = {64, 512, 1000, 2048, 6144, 8192, 16384, 65536};
  const std::vector<int64_t> depths = {72, 1024, 2048, 2056, 4096, 8192, 9216};
  for (int tile = -1; tile < GemmEngine::tile_count(); ++tile) {
    GemmEngine pinned = engine;
    pinned.pin_tile_for_test(tile);
    for (int64_t m : rows)
      for (int64_t n : outputs)
        for (int64_t k : depths) names.push_back(pinned.tile_name(m, n, k));
  }
  return names;
}

bool sm90_only(const std::string& name) {
  return name.find("wgmma") != std::string::npos || name.find("tma") != std::string::npos ||
         name.find("split") != std::string::npos;
}

TEST(CudaFeatures, ThePortableEngineNeverPicksAWgmmaTmaOrSplitConfigurationAutomaticOrPinned) {
  const CudaFeatures full = decide_features(9, 0, 900, true, false);
  const GemmEngine portable(portable_features(full));
  int sm90 = 0;
  for (const std::string& name : tile_names(portable)) {
    EXPECT_FALSE(sm90_only(name)) << name;
    sm90 += sm90_only(name);
  }
  EXPECT_EQ(sm90, 0);
  // The same sweep under the full features does choose them (the check above can see them).
  int wgmma = 0, tma = 0, split = 0;
  for (const std::string& name : tile_names(GemmEngine(full))) {
    wgmma += name.find("wgmma") != std::string::npos;
    tma += name.find("tma") != std::string::npos;
    split += name.find("split") != std::string::npos;
  }
  EXPECT_GT(wgmma, 0);
  EXPECT_GT(tma, 0);
  EXPECT_GT(split, 0);
}

// The mma.sync tiles above 99 KB of shared memory (the opt-in limit of sm_86 / sm_89: L40S, RTX 30/40).
bool above_99_kb(const std::string& name) {
  for (const char* big : {"128x256x64 s3", "256x128x64 s3", "128x128x64 s4", "16x128x64 s6", "16x64x64 s12",
                          "64x64x64 s8"})
    if (name == big) return true;
  return false;
}

constexpr int kSm89SharedOptin = 101376, kSm90SharedOptin = 232448;

TEST(CudaFeatures, OnA99KbDeviceNoTileAskingForMoreSharedMemoryIsChosenAutomaticOrPinned) {
  CudaFeatures l40s = decide_features(8, 9, 890, false, false);
  l40s.shared_optin = kSm89SharedOptin;
  for (const std::string& name : tile_names(GemmEngine(l40s))) EXPECT_FALSE(above_99_kb(name)) << name;
  // With Hopper's 227 KB the same sweep picks them (the check above can see them).
  CudaFeatures roomy = l40s;
  roomy.shared_optin = kSm90SharedOptin;
  int big = 0;
  for (const std::string& name : tile_names(GemmEngine(roomy))) big += above_99_kb(name);
  EXPECT_GT(big, 0);
}

// Every pin on the 99 KB engine (its fallbacks: the decode kernel, 64x64 s4, 128x128 s3) gives the bits of the
// default engine, on shapes where the automatic pick is a streaming tile (12 rows, 8192 outputs) or 128x256 (512 rows
// of 17408 outputs), outputs poisoned first.
TEST(CudaFeatures, TheSmallSharedMemoryFallbacksGiveTheDefaultEnginesBits) {
  LS_SKIP_WITHOUT_DEVICE();
  CudaFeatures small = portable_features(cuda_features());
  small.shared_optin = kSm89SharedOptin;
  const GemmEngine reference;
  struct Shape {
    int64_t m, n, k;
  };
  for (const Shape shape : {Shape{12, 8192, 2048}, Shape{512, 17408, 1024}, Shape{100, 2048, 8192}}) {
    auto x = testing::upload(testing::to_bf16(compute::testing::random_values(shape.m * shape.k, 41)));
    auto w = testing::upload(testing::to_bf16(compute::testing::random_values(shape.n * shape.k, 42, 0.5f)));
    const DeviceMatrix matrix{w.data(), nullptr, shape.n, shape.k};
    const size_t count = static_cast<size_t>(shape.m * shape.n);
    auto y = testing::poisoned<float>(count);
    ASSERT_TRUE(reference.gemm(x.data(), shape.m, matrix, nullptr, y.data(), nullptr).ok());
    const std::vector<float> want = testing::download(y, count);
    for (int tile = -1; tile < GemmEngine::tile_count(); ++tile) {
      GemmEngine engine(small);
      engine.pin_tile_for_test(tile);
      const std::string name = engine.tile_name(shape.m, shape.n, shape.k);
      EXPECT_FALSE(above_99_kb(name)) << name;
      auto got = testing::poisoned<float>(count);
      ASSERT_TRUE(engine.gemm(x.data(), shape.m, matrix, nullptr, got.data(), nullptr).ok()) << name;
      const std::vector<float> have = testing::download(got, count);
      size_t differ = 0;
      for (size_t i = 0; i < count; ++i) differ += std::memcmp(&have[i], &want[i], sizeof(float)) != 0;
      EXPECT_EQ(differ, 0u) << "pin " << tile << " (" << name << ") m " << shape.m << " N " << shape.n << " K "
                            << shape.k << " vs " << reference.tile_name(shape.m, shape.n, shape.k);
    }
  }
}

TEST(CudaFeatures, TheProbedFeaturesFollowThisDeviceThisBinaryAndTheEnvVar) {
  LS_SKIP_WITHOUT_DEVICE();
  const CudaFeatures& f = cuda_features();
  std::printf("cuda features: %s\n", f.describe().c_str());
  int major = 0, minor = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0), cudaSuccess);
  EXPECT_EQ(f.major, major);
  EXPECT_EQ(f.minor, minor);
  // The probe ran: its code is for this device or older (PTX compiled forward), never newer.
  EXPECT_GE(f.code_arch, 800) << f.describe();
  EXPECT_LE(f.code_arch, major * 100 + minor * 10) << f.describe();
  EXPECT_EQ(f.forced_portable, portable_forced_by_env());
  int optin = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0), cudaSuccess);
  EXPECT_EQ(f.shared_optin, optin);
  const CudaFeatures rule = decide_features(major, minor, f.code_arch, f.code_sm90a, portable_forced_by_env());
  EXPECT_EQ(f.wgmma, rule.wgmma);
  EXPECT_EQ(f.tma, rule.tma);
  EXPECT_EQ(f.clusters, rule.clusters);
  EXPECT_EQ(f.pdl, rule.pdl);
  // What the build carried decides the code: without sm_90 SASS for a 9.0 device (e.g. LS_CUDA_ARCHS=80-ptx) the
  // device runs sm_80 code and gets no sm_90 feature; with sm_90a SASS it runs that and gets them all.
  const std::string built = std::string(",") + built_cuda_archs() + ",";
  if (major == 9 && minor == 0) {
    if (built.find(",90a,") != std::string::npos) {
      EXPECT_EQ(f.code_arch, 900) << built;
      EXPECT_TRUE(f.code_sm90a) << built;
      EXPECT_EQ(f.wgmma, !f.forced_portable);
    } else if (built.find(",90,") == std::string::npos && built.find("90-ptx") == std::string::npos) {
      EXPECT_LT(f.code_arch, 900) << built;
      EXPECT_TRUE(f.portable()) << f.describe();
    }
  }
  // The default engine follows the features: no split tile at 128 rows of sliced K without clusters, and one with
  // (up to 64 rows the streaming decode kernel serves sliced K since session 5, clusters or not).
  const std::string name = GemmEngine().tile_name(128, 2048, 8192);
  EXPECT_EQ(name.find("split") != std::string::npos, f.clusters) << name << " under " << f.describe();
  const std::string prefill = GemmEngine().tile_name(2048, 2048, 2048);
  EXPECT_EQ(prefill.find("wgmma") != std::string::npos, f.wgmma) << prefill << " under " << f.describe();
}

}  // namespace
}  // namespace ls::cuda

#endif  // LS_HAVE_CUDA
