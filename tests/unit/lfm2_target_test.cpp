// The LFM2 Target seam: draws and logits per row, refusals by name, release, embed/head, load refusals.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "compute/sampling.h"
#include "lfm2_test_util.h"
#include "io/safetensors.h"
#include "model/load.h"

namespace ls::lfm2 {
namespace {
using namespace testing;

Window make_window(StreamId stream, const std::vector<int32_t>& tokens, int first_drawn_row = 0) {
  Window window;
  window.stream = stream;
  window.tokens = tokens;
  window.first_drawn_row = first_drawn_row;
  window.want_logits = true;
  return window;
}

TEST(Lfm2Target, DrawnRowsGetKeyedDrawsOfTheirLogitsAndUndrawnRowsGetNoDrawAndNanLogits) {
  auto target = small_target(false, NumericMode::Bf16);
  const std::vector<int32_t> tokens = random_tokens(6, 1);
  Window window = make_window(1, tokens, 2);
  window.sampling.temperature = 0.8f;
  window.sampling.seed = 1234;
  Result<Verified> verified = target->forward(std::span<const Window>(&window, 1));
  ASSERT_TRUE(verified.ok());
  const int64_t V = target->facts().vocab_size;
  for (int r = 0; r < 6; ++r) {
    const std::span<const float> logits(verified->logits.data() + r * V, V);
    if (r < 2) {
      EXPECT_EQ(verified->draws[r], -1);
      EXPECT_TRUE(std::isnan(logits[0]));
    } else {
      EXPECT_TRUE(std::isfinite(logits[0]));
      EXPECT_EQ(verified->draws[r], draw_token(logits, window.sampling, r + 1)) << "row " << r;
    }
  }
  ASSERT_TRUE(target->commit(1, 6).ok());
  // Greedy: the draw is the argmax, and positions continue from the committed length.
  const std::vector<int32_t> next = {5};
  Window step = make_window(1, next);
  Result<Verified> greedy = target->forward(std::span<const Window>(&step, 1));
  ASSERT_TRUE(greedy.ok());
  const auto top = std::max_element(greedy->logits.begin(), greedy->logits.end()) - greedy->logits.begin();
  EXPECT_EQ(greedy->draws[0], top);
}

TEST(Lfm2Target, RefusesMalformedWindowsByNameAndKeepsServing) {
  auto target = small_target(false, NumericMode::Fp32);
  const std::vector<int32_t> good = {1, 2, 3}, out_of_vocab = {1, 97}, negative = {-1}, empty;
  auto refused = [&](std::vector<Window> windows, const char* what) {
    Result<Verified> verified = target->forward(windows);
    ASSERT_FALSE(verified.ok()) << what;
    EXPECT_EQ(verified.status().code(), ErrorCode::InvalidArgument) << what;
  };
  refused({make_window(1, out_of_vocab)}, "token past the vocabulary");
  refused({make_window(1, negative)}, "negative token");
  refused({make_window(1, empty)}, "empty window");
  refused({make_window(1, good), make_window(1, good)}, "one stream twice");
  refused({make_window(1, good, 4)}, "first_drawn_row past the rows");
  Window wrong_start = make_window(1, good);
  wrong_start.start_position = 3;
  refused({wrong_start}, "start position differs from the committed length");
  std::vector<int32_t> too_many(257, 1);
  refused({make_window(1, too_many)}, "more rows than max_rows");
  EXPECT_EQ(target->stream_count(), 0);  // refusals create no stream state
  // A window awaiting commit refuses the next forward on that stream; commit refuses bad lengths.
  ASSERT_TRUE(target->forward(std::vector<Window>{make_window(1, good)}).ok());
  refused({make_window(1, good)}, "uncommitted window");
  EXPECT_EQ(target->commit(1, 0).code(), ErrorCode::InvalidArgument);
  EXPECT_EQ(target->commit(1, 4).code(), ErrorCode::InvalidArgument);
  EXPECT_EQ(target->commit(9, 1).code(), ErrorCode::InvalidArgument);
  EXPECT_TRUE(target->commit(1, 2).ok());
  EXPECT_EQ(target->commit(1, 1).code(), ErrorCode::InvalidArgument);  // nothing left to commit
  EXPECT_EQ(target->committed_length(1), 2);
  Window right_start = make_window(1, good);
  right_start.start_position = 2;
  EXPECT_TRUE(target->forward(std::vector<Window>{right_start}).ok());
  const int bad_taps[] = {5};
  EXPECT_EQ(target->set_taps(bad_taps).code(), ErrorCode::InvalidArgument);
}

TEST(Lfm2Target, ReleaseForgetsTheStreamAndReleasingAnUnknownStreamIsANoOp) {
  auto target = small_target(true, NumericMode::Fp32);
  const std::vector<int32_t> tokens = random_tokens(4, 2);
  const RowOutputs first = one_row_steps(*target, 1, tokens, 3);
  EXPECT_EQ(target->committed_length(1), 4);
  target->release(1);
  target->release(42);
  EXPECT_EQ(target->committed_length(1), 0);
  EXPECT_EQ(target->stream_count(), 0);
  const RowOutputs again = one_row_steps(*target, 1, tokens, 3);  // starts from scratch: same bits
  EXPECT_TRUE(same_bits(first.logits.back(), again.logits.back()));
}

TEST(Lfm2Target, EmbedReturnsEmbeddingRowsAndHeadIsTheTiedProjection) {
  auto target = small_target(false, NumericMode::Bf16);
  const Weights& weights = target->model().weights();
  const int64_t D = 64, V = 97;
  const std::vector<int32_t> tokens = {3, 96};
  std::vector<float> embedded(2 * D, NAN);
  ASSERT_TRUE(target->embed(tokens, embedded).ok());
  const compute::Matrix table = weights.embedding.view();
  for (int64_t i = 0; i < D; ++i) EXPECT_EQ(embedded[D + i], bf16_to_float(table.b16[96 * D + i]));
  std::vector<float> logits(2 * V, NAN);
  ASSERT_TRUE(target->head(embedded, 2, logits).ok());
  double dot = 0;
  for (int64_t i = 0; i < D; ++i) dot += double(embedded[i]) * bf16_to_float(table.b16[7 * D + i]);
  EXPECT_NEAR(logits[7], dot, 1e-4);
  std::vector<float> short_out(V);
  EXPECT_EQ(target->head(embedded, 2, short_out).code(), ErrorCode::InvalidArgument);
  EXPECT_EQ(target->embed(tokens, short_out).code(), ErrorCode::InvalidArgument);
  const std::vector<int32_t> bad = {97};
  std::vector<float> one(D);
  EXPECT_EQ(target->embed(bad, one).code(), ErrorCode::InvalidArgument);
}

TEST(Lfm2Target, ALongPromptRunsAsOneWindowAndOnlyItsLastRowIsDrawn) {
  const io::ModelConfig config = small_config(false);
  auto target = std::make_unique<Lfm2Target>(std::make_unique<Model>(config, random_weights(config, NumericMode::Bf16, 7), 2),
                                             4096, 512);
  const std::vector<int32_t> prompt = random_tokens(1100, 3);
  Window window = make_window(1, prompt, 1099);
  Result<Verified> verified = target->forward(std::span<const Window>(&window, 1));
  ASSERT_TRUE(verified.ok());
  EXPECT_EQ(verified->draws[1098], -1);
  EXPECT_GE(verified->draws[1099], 0);
  ASSERT_TRUE(target->commit(1, 1100).ok());
  EXPECT_EQ(target->committed_length(1), 1100);
}

// A model directory copied from the dense golden with config.json edited by `edit`.
std::string edited_model_dir(const std::string& name, const std::function<void(nlohmann::json&)>& edit) {
  namespace fs = std::filesystem;
  const fs::path source = fs::path(LS_SOURCE_DIR) / "tests/golden/lfm2_dense";
  const fs::path dir = fs::temp_directory_path() / ("lanespark_model_test_" + name + "_" + std::to_string(getpid()));
  fs::create_directories(dir);
  fs::copy_file(source / "model.safetensors", dir / "model.safetensors", fs::copy_options::overwrite_existing);
  nlohmann::json config = nlohmann::json::parse(std::ifstream(source / "config.json"));
  edit(config);
  std::ofstream(dir / "config.json") << config.dump();
  return dir.string();
}

TEST(Lfm2Load, RefusesAnUnknownArchitectureAndMissingTensorsByNameBeforeServing) {
  const std::string llama = edited_model_dir("arch", [](nlohmann::json& c) { c["model_type"] = "llama"; });
  Result<std::unique_ptr<Target>> refused = load_target(llama, LoadOptions{});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), ErrorCode::UnsupportedArchitecture);
  const std::string deeper = edited_model_dir("layers", [](nlohmann::json& c) {
    c["num_hidden_layers"] = 7;
    c["layer_types"].push_back("conv");
  });
  refused = load_target(deeper, LoadOptions{});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), ErrorCode::BadSafetensors) << refused.status().to_string();
  LoadOptions no_threads;
  no_threads.threads = 0;
  EXPECT_EQ(load_target(llama, no_threads).status().code(), ErrorCode::InvalidArgument);
  std::filesystem::remove_all(llama);
  std::filesystem::remove_all(deeper);
}

TEST(Lfm2Load, LoadsTheGoldenCheckpointInBothModesAndMeasuresItsExactWidth) {
  for (NumericMode mode : kModes) {
    LoadOptions options;
    options.mode = mode;
    options.exact_width_probe = 8;
    Result<std::unique_ptr<Target>> loaded = load_target(std::string(LS_SOURCE_DIR) + "/tests/golden/lfm2_dense", options);
    ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
    EXPECT_EQ((*loaded)->facts().vocab_size, 320);
    EXPECT_EQ((*loaded)->facts().num_layers, 6);
    EXPECT_EQ((*loaded)->facts().eos_token_id, 7);
    EXPECT_EQ((*loaded)->facts().exact_width, 8);
  }
}

TEST(Lfm2Load, ABf16CheckpointIsUsedInPlaceAndGivesTheBitsOfTheRoundedFp32Checkpoint) {
  namespace fs = std::filesystem;
  const fs::path golden = fs::path(LS_SOURCE_DIR) / "tests/golden/lfm2_dense";
  const fs::path dir = fs::temp_directory_path() / ("lanespark_model_test_bf16_" + std::to_string(getpid()));
  fs::create_directories(dir);
  fs::copy_file(golden / "config.json", dir / "config.json", fs::copy_options::overwrite_existing);
  // Write every tensor of the fp32 golden as BF16 (round to nearest even, as read_bf16 converts).
  Result<std::unique_ptr<io::Checkpoint>> fp32 = io::Checkpoint::open(golden.string());
  ASSERT_TRUE(fp32.ok());
  std::vector<std::vector<bf16>> storage;
  std::vector<io::TensorToWrite> tensors;
  for (const io::TensorInfo& info : (*fp32)->tensors()) {
    storage.emplace_back(info.elements());
    ASSERT_TRUE((*fp32)->read_bf16(info.name, info.shape, storage.back()).ok());
  }
  for (size_t i = 0; i < storage.size(); ++i) {
    const io::TensorInfo& info = (*fp32)->tensors()[i];
    tensors.push_back({info.name, io::DType::BF16, info.shape,
                       std::as_bytes(std::span<const bf16>(storage[i].data(), storage[i].size()))});
  }
  ASSERT_TRUE(io::write_safetensors((dir / "model.safetensors").string(), tensors).ok());

  LoadOptions options;
  options.mode = NumericMode::Bf16;
  Result<std::unique_ptr<Target>> mapped = load_target(dir.string(), options);
  Result<std::unique_ptr<Target>> rounded = load_target(golden.string(), options);
  ASSERT_TRUE(mapped.ok() && rounded.ok());
  const Weights& mapped_weights = dynamic_cast<Lfm2Target&>(**mapped).model().weights();
  EXPECT_NE(mapped_weights.embedding.mapped_b16, nullptr);
  EXPECT_TRUE(mapped_weights.embedding.b16.empty());  // no copy
  EXPECT_EQ(dynamic_cast<Lfm2Target&>(**rounded).model().weights().embedding.mapped_b16, nullptr);
  const std::vector<int32_t> prompt = {1, 40, 41, 200, 7};
  const RowOutputs a = one_row_steps(**mapped, 1, prompt, 0);
  const RowOutputs b = one_row_steps(**rounded, 1, prompt, 0);
  ASSERT_EQ(a.logits.size(), 5u);
  for (size_t i = 0; i < a.logits.size(); ++i) EXPECT_TRUE(same_bits(a.logits[i], b.logits[i])) << "row " << i;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ls::lfm2
