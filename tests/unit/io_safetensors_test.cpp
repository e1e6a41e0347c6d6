// Tests for src/io/safetensors: every refusal via crafted bytes, round trips (single and sharded), exact conversions.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "base/bf16.h"
#include "io/safetensors.h"
#include "io_test_util.h"

namespace ls::io {
namespace {

using testing::TempDir;

// Opens `bytes` written as a file and returns the refusal (expected to fail).
Status open_crafted(const TempDir& dir, const std::string& bytes) {
  const std::string path = dir.file("crafted.safetensors");
  testing::write_bytes(path, bytes);
  auto checkpoint = Checkpoint::open_file(path);
  EXPECT_FALSE(checkpoint.ok()) << "expected a refusal";
  return checkpoint.ok() ? Status() : checkpoint.status();
}

void expect_refusal(const Status& status, ErrorCode code, const std::string& fragment) {
  EXPECT_EQ(status.code(), code) << status.to_string();
  EXPECT_NE(status.message().find(fragment), std::string::npos) << status.to_string() << "\n  lacks: " << fragment;
}

const std::string kEightZeroBytes(8, '\0');

TEST(SafetensorsRefusal, AFileShorterThanTheLengthPrefixIsRefused) {
  TempDir dir;
  expect_refusal(open_crafted(dir, "abc"), ErrorCode::BadSafetensors, "3 bytes, shorter than the 8-byte header length");
}

TEST(SafetensorsRefusal, AHeaderLengthBeyondTheFileIsRefused) {
  TempDir dir;
  expect_refusal(open_crafted(dir, testing::craft_safetensors("{}", "", 64)), ErrorCode::BadSafetensors,
                 "header length 64 runs past the file (10 bytes)");
}

TEST(SafetensorsRefusal, AnAbsurdHeaderLengthIsRefused) {
  TempDir dir;
  expect_refusal(open_crafted(dir, testing::craft_safetensors("{}", "", uint64_t{1} << 40)), ErrorCode::BadSafetensors,
                 "header length 1099511627776 is above the limit 100000000");
}

TEST(SafetensorsRefusal, ANonJsonHeaderIsRefused) {
  TempDir dir;
  expect_refusal(open_crafted(dir, testing::craft_safetensors("{not json", "")), ErrorCode::BadSafetensors,
                 "header (9 bytes) is not valid JSON");
  expect_refusal(open_crafted(dir, testing::craft_safetensors("[1, 2]", "")), ErrorCode::BadSafetensors,
                 "header is JSON but not an object");
}

TEST(SafetensorsRefusal, ADtypeOutsideBf16F16F32IsRefusedByName) {
  TempDir dir;
  const std::string header = R"({"ids":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})";
  expect_refusal(open_crafted(dir, testing::craft_safetensors(header, kEightZeroBytes)), ErrorCode::BadSafetensors,
                 "tensor ids: dtype I64 is not one of BF16, F16, F32");
}

TEST(SafetensorsRefusal, ANegativeDimensionIsRefused) {
  TempDir dir;
  const std::string header = R"({"w":{"dtype":"F32","shape":[2,-1],"data_offsets":[0,8]}})";
  expect_refusal(open_crafted(dir, testing::craft_safetensors(header, kEightZeroBytes)), ErrorCode::BadSafetensors,
                 "tensor w: shape -1 in [2,-1] is not a dimension");
}

TEST(SafetensorsRefusal, DataOffsetsThatAreNotBeginEndAreRefused) {
  TempDir dir;
  const std::string three = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,4,8]}})";
  expect_refusal(open_crafted(dir, testing::craft_safetensors(three, kEightZeroBytes)), ErrorCode::BadSafetensors,
                 "tensor w: data_offsets [0,4,8] is not [begin, end]");
  const std::string reversed = R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})";
  expect_refusal(open_crafted(dir, testing::craft_safetensors(reversed, kEightZeroBytes)), ErrorCode::BadSafetensors,
                 "tensor w: data_offsets [8,0] is not [begin, end] with 0 <= begin <= end");
}

TEST(SafetensorsRefusal, AnEndPastTheDataSectionIsRefused) {
  TempDir dir;
  const std::string header = R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})";
  expect_refusal(open_crafted(dir, testing::craft_safetensors(header, kEightZeroBytes)), ErrorCode::BadSafetensors,
                 "tensor w: data_offsets end 16 is past the data section (8 bytes)");
}

TEST(SafetensorsRefusal, ASizeThatDisagreesWithShapeTimesDtypeIsRefused) {
  TempDir dir;
  const std::string header = R"({"w":{"dtype":"BF16","shape":[3],"data_offsets":[0,8]}})";
  expect_refusal(open_crafted(dir, testing::craft_safetensors(header, kEightZeroBytes)), ErrorCode::BadSafetensors,
                 "tensor w: holds 8 bytes but shape [3] x BF16 needs 6");
}

TEST(SafetensorsRefusal, OverlappingTensorsAreRefused) {
  TempDir dir;
  const std::string header =
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})";
  expect_refusal(open_crafted(dir, testing::craft_safetensors(header, kEightZeroBytes)), ErrorCode::BadSafetensors,
                 "tensor b [4, 8) overlaps tensor a ending at 8");
}

TEST(SafetensorsRefusal, ANameListedTwiceInOneHeaderIsRefused) {
  TempDir dir;
  const std::string header =
      R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})";
  expect_refusal(open_crafted(dir, testing::craft_safetensors(header, kEightZeroBytes)), ErrorCode::BadSafetensors,
                 "tensor a is listed twice in the header");
}

TEST(SafetensorsRefusal, MetadataIsAllowedButMustBeAnObject) {
  TempDir dir;
  const std::string good = R"({"__metadata__":{"format":"pt"},"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  testing::write_bytes(dir.file("ok.safetensors"), testing::craft_safetensors(good, kEightZeroBytes));
  auto checkpoint = Checkpoint::open_file(dir.file("ok.safetensors"));
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status().to_string();
  EXPECT_EQ((*checkpoint)->tensors().size(), 1u);
  const std::string bad = R"({"__metadata__":"pt"})";
  expect_refusal(open_crafted(dir, testing::craft_safetensors(bad, "")), ErrorCode::BadSafetensors,
                 "__metadata__ is not an object");
}

TEST(SafetensorsRefusal, ADirectoryWithoutWeightsIsNotFound) {
  TempDir dir;
  auto checkpoint = Checkpoint::open(dir.path());
  ASSERT_FALSE(checkpoint.ok());
  expect_refusal(checkpoint.status(), ErrorCode::NotFound, "neither model.safetensors nor model.safetensors.index.json");
}

// Writes a one-tensor F32 shard named `file` holding `name` = {value}.
void write_one_tensor_shard(const TempDir& dir, const std::string& file, const std::string& name, float value) {
  std::vector<std::byte> bytes(4);
  std::memcpy(bytes.data(), &value, 4);
  TensorToWrite tensor{name, DType::F32, {1}, bytes};
  ASSERT_TRUE(write_safetensors(dir.file(file), std::span<const TensorToWrite>(&tensor, 1)).ok());
}

TEST(SafetensorsSharded, ATensorStoredInTwoShardsIsRefused) {
  TempDir dir;
  write_one_tensor_shard(dir, "a.safetensors", "w", 1.0f);
  testing::write_bytes(dir.file("model.safetensors.index.json"),
                       R"({"weight_map":{"w":"a.safetensors","x":"b.safetensors"}})");
  // b holds x, as the index says, and also a second w.
  std::vector<std::byte> bytes(8);
  std::vector<TensorToWrite> tensors = {{"w", DType::F32, {1}, std::span(bytes).first(4)},
                                        {"x", DType::F32, {1}, std::span(bytes).last(4)}};
  ASSERT_TRUE(write_safetensors(dir.file("b.safetensors"), tensors).ok());
  auto checkpoint = Checkpoint::open(dir.path());
  ASSERT_FALSE(checkpoint.ok());
  expect_refusal(checkpoint.status(), ErrorCode::BadSafetensors, "tensor w is stored in more than one shard");
}

TEST(SafetensorsSharded, AnIndexEntryWhoseFileIsMissingIsRefused) {
  TempDir dir;
  write_one_tensor_shard(dir, "a.safetensors", "w", 1.0f);
  testing::write_bytes(dir.file("model.safetensors.index.json"),
                       R"({"weight_map":{"w":"a.safetensors","v":"gone.safetensors"}})");
  auto checkpoint = Checkpoint::open(dir.path());
  ASSERT_FALSE(checkpoint.ok());
  expect_refusal(checkpoint.status(), ErrorCode::BadSafetensors, "tensor v is mapped to gone.safetensors, which does not exist");
}

TEST(SafetensorsSharded, AnIndexEntryWhoseFileLacksTheTensorIsRefused) {
  TempDir dir;
  write_one_tensor_shard(dir, "a.safetensors", "w", 1.0f);
  testing::write_bytes(dir.file("model.safetensors.index.json"), R"({"weight_map":{"w":"a.safetensors","v":"a.safetensors"}})");
  auto checkpoint = Checkpoint::open(dir.path());
  ASSERT_FALSE(checkpoint.ok());
  expect_refusal(checkpoint.status(), ErrorCode::BadSafetensors, "tensor v is mapped to a.safetensors, which does not contain it");
}

TEST(SafetensorsSharded, AMalformedIndexIsRefused) {
  TempDir dir;
  testing::write_bytes(dir.file("model.safetensors.index.json"), "{oops");
  auto not_json = Checkpoint::open(dir.path());
  ASSERT_FALSE(not_json.ok());
  expect_refusal(not_json.status(), ErrorCode::BadSafetensors, "is not a JSON object");
  testing::write_bytes(dir.file("model.safetensors.index.json"), R"({"metadata":{}})");
  auto no_map = Checkpoint::open(dir.path());
  ASSERT_FALSE(no_map.ok());
  expect_refusal(no_map.status(), ErrorCode::BadSafetensors, "has no weight_map object");
  testing::write_bytes(dir.file("model.safetensors.index.json"), R"({"weight_map":{"w":"../a.safetensors"}})");
  auto escaping = Checkpoint::open(dir.path());
  ASSERT_FALSE(escaping.ok());
  expect_refusal(escaping.status(), ErrorCode::BadSafetensors, "not a file in the directory");
}

TEST(SafetensorsSharded, AShardedIndexRoundTripsEveryTensorFromItsShard) {
  TempDir dir;
  std::vector<float> first = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f, -0.5f};
  std::vector<bf16> second = {float_to_bf16(0.1f), float_to_bf16(-8.0f)};
  std::vector<TensorToWrite> shard_one = {{"model.a", DType::F32, {2, 3}, std::as_bytes(std::span(first))}};
  std::vector<TensorToWrite> shard_two = {{"model.b", DType::BF16, {2}, std::as_bytes(std::span(second))},
                                          {"model.c", DType::F32, {1, 1}, std::as_bytes(std::span(first).first(1))}};
  ASSERT_TRUE(write_safetensors(dir.file("model-00001-of-00002.safetensors"), shard_one).ok());
  ASSERT_TRUE(write_safetensors(dir.file("model-00002-of-00002.safetensors"), shard_two).ok());
  std::vector<std::pair<std::string, std::string>> map = {{"model.a", "model-00001-of-00002.safetensors"},
                                                          {"model.b", "model-00002-of-00002.safetensors"},
                                                          {"model.c", "model-00002-of-00002.safetensors"}};
  ASSERT_TRUE(write_safetensors_index(dir.path(), map, 6 * 4 + 2 * 2 + 4).ok());
  auto checkpoint = Checkpoint::open(dir.path());
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status().to_string();
  ASSERT_EQ((*checkpoint)->tensors().size(), 3u);
  EXPECT_EQ((*checkpoint)->find("model.b")->shape, (std::vector<int64_t>{2}));
  EXPECT_EQ((*checkpoint)->find("nope"), nullptr);
  std::vector<float> read(6, NAN);
  const int64_t shape_a[] = {2, 3};
  ASSERT_TRUE((*checkpoint)->read_f32("model.a", shape_a, read).ok());
  EXPECT_EQ(0, std::memcmp(read.data(), first.data(), 6 * 4));
  std::vector<bf16> read_b(2, bf16{0xffff});
  const int64_t shape_b[] = {2};
  ASSERT_TRUE((*checkpoint)->read_bf16("model.b", shape_b, read_b).ok());
  EXPECT_EQ(read_b[0].bits, second[0].bits);
  EXPECT_EQ(read_b[1].bits, second[1].bits);
}

TEST(SafetensorsWrite, TheHeaderIsPaddedWithSpacesToEightBytes) {
  TempDir dir;
  std::vector<uint16_t> values = {1, 2, 3};
  TensorToWrite tensor{"odd_name_x", DType::F16, {3}, std::as_bytes(std::span(values))};
  ASSERT_TRUE(write_safetensors(dir.file("m.safetensors"), std::span<const TensorToWrite>(&tensor, 1)).ok());
  const std::string bytes = testing::read_bytes(dir.file("m.safetensors"));
  uint64_t header_length = 0;
  std::memcpy(&header_length, bytes.data(), 8);
  EXPECT_EQ(header_length % 8, 0u);
  EXPECT_EQ(bytes.size(), 8 + header_length + 6);
  const std::string header = bytes.substr(8, header_length);
  EXPECT_EQ(header.find_last_not_of(' '), header.rfind('}'));
  EXPECT_EQ(0, std::memcmp(bytes.data() + 8 + header_length, values.data(), 6));
}

TEST(SafetensorsRead, AShapeOtherThanTheStoredOneIsRefused) {
  TempDir dir;
  std::vector<float> values(6, 1.0f);
  TensorToWrite tensor{"w", DType::F32, {2, 3}, std::as_bytes(std::span(values))};
  ASSERT_TRUE(write_safetensors(dir.file("model.safetensors"), std::span<const TensorToWrite>(&tensor, 1)).ok());
  auto checkpoint = Checkpoint::open(dir.path());
  ASSERT_TRUE(checkpoint.ok());
  std::vector<float> out(6);
  const int64_t transposed[] = {3, 2};
  expect_refusal((*checkpoint)->read_f32("w", transposed, out), ErrorCode::BadSafetensors, "tensor w has shape [2, 3], expected [3, 2]");
  const int64_t shape[] = {2, 3};
  expect_refusal((*checkpoint)->read_f32("missing", shape, out), ErrorCode::NotFound, "tensor missing is missing");
}

// Opens a file holding one tensor of `dtype` with the raw `bits`, placed at an odd address in the mapping.
std::unique_ptr<Checkpoint> unaligned_tensor(const TempDir& dir, DType dtype, const std::string& raw, int64_t count) {
  std::string header = std::string(R"({"t":{"dtype":")") + std::string(dtype_name(dtype)) + R"(","shape":[)" +
                       std::to_string(count) + R"(],"data_offsets":[1,)" + std::to_string(1 + raw.size()) + "]}}";
  header.append((8 - header.size() % 8) % 8, ' ');  // data section 8-aligned, so offset 1 is odd
  testing::write_bytes(dir.file("u.safetensors"), testing::craft_safetensors(header, "x" + raw));
  auto checkpoint = Checkpoint::open_file(dir.file("u.safetensors"));
  EXPECT_TRUE(checkpoint.ok()) << checkpoint.status().to_string();
  if (!checkpoint.ok()) return nullptr;
  EXPECT_NE(reinterpret_cast<uintptr_t>((*checkpoint)->find("t")->data) % 2, 0u);
  return std::move(checkpoint).value();
}

TEST(SafetensorsConvert, Bf16ToF32IsExactForEveryFiniteBitPattern) {
  TempDir dir;
  std::vector<uint16_t> bits;
  for (uint32_t pattern = 0; pattern < 65536; ++pattern)
    if ((pattern & 0x7f80u) != 0x7f80u) bits.push_back(static_cast<uint16_t>(pattern));
  const std::string raw(reinterpret_cast<const char*>(bits.data()), bits.size() * 2);
  auto checkpoint = unaligned_tensor(dir, DType::BF16, raw, static_cast<int64_t>(bits.size()));
  ASSERT_NE(checkpoint, nullptr);
  std::vector<float> out(bits.size(), NAN);
  const int64_t shape[] = {static_cast<int64_t>(bits.size())};
  ASSERT_TRUE(checkpoint->read_f32("t", shape, out).ok());
  for (size_t index = 0; index < bits.size(); ++index) {
    uint32_t got;
    std::memcpy(&got, &out[index], 4);
    ASSERT_EQ(got, static_cast<uint32_t>(bits[index]) << 16) << "pattern " << bits[index];
  }
}

TEST(SafetensorsConvert, F32ToBf16RoundsToNearestEven) {
  TempDir dir;
  // 1 + half an ulp ties to 1 (even); 1 + 3 half-ulps ties up to 1 + 2 ulps; just above a tie rounds up.
  std::vector<uint32_t> bits = {0x3f808000u, 0x3f818000u, 0x3f808001u, 0xbf80ffffu, 0x00000001u, 0x7f7fffffu};
  const std::vector<uint16_t> expected = {0x3f80, 0x3f82, 0x3f81, 0xbf81, 0x0000, 0x7f80};
  std::mt19937 random(7);
  std::vector<float> random_values(4096);
  for (float& value : random_values) value = std::uniform_real_distribution<float>(-100.0f, 100.0f)(random);
  const size_t fixed = bits.size();
  for (float value : random_values) {
    uint32_t raw;
    std::memcpy(&raw, &value, 4);
    bits.push_back(raw);
  }
  const std::string raw(reinterpret_cast<const char*>(bits.data()), bits.size() * 4);
  auto checkpoint = unaligned_tensor(dir, DType::F32, raw, static_cast<int64_t>(bits.size()));
  ASSERT_NE(checkpoint, nullptr);
  std::vector<bf16> out(bits.size(), bf16{0x7fc1});
  const int64_t shape[] = {static_cast<int64_t>(bits.size())};
  ASSERT_TRUE(checkpoint->read_bf16("t", shape, out).ok());
  for (size_t index = 0; index < fixed; ++index) EXPECT_EQ(out[index].bits, expected[index]) << "case " << index;
  for (size_t index = fixed; index < bits.size(); ++index) {
    // Independent rounding: the nearer of the two bf16 neighbours, ties to the even one.
    const uint32_t low = bits[index] & 0xffff0000u, high = low + 0x10000u;
    float low_value, high_value, value;
    std::memcpy(&low_value, &low, 4);
    std::memcpy(&high_value, &high, 4);
    std::memcpy(&value, &bits[index], 4);
    const double below = std::fabs(static_cast<double>(value) - low_value), above = std::fabs(static_cast<double>(high_value) - value);
    const uint32_t chosen = below < above ? low : above < below ? high : (((low >> 16) & 1u) ? high : low);
    ASSERT_EQ(out[index].bits, chosen >> 16) << "value " << value;
  }
}

TEST(SafetensorsConvert, F16ConvertsExactlyToF32AndRoundsToBf16) {
  TempDir dir;
  std::vector<uint16_t> bits;
  for (uint32_t pattern = 0; pattern < 65536; ++pattern) bits.push_back(static_cast<uint16_t>(pattern));
  const std::string raw(reinterpret_cast<const char*>(bits.data()), bits.size() * 2);
  auto checkpoint = unaligned_tensor(dir, DType::F16, raw, 65536);
  ASSERT_NE(checkpoint, nullptr);
  std::vector<float> as_f32(65536, NAN);
  std::vector<bf16> as_bf16(65536, bf16{0x7fc1});
  const int64_t shape[] = {65536};
  ASSERT_TRUE(checkpoint->read_f32("t", shape, as_f32).ok());
  ASSERT_TRUE(checkpoint->read_bf16("t", shape, as_bf16).ok());
  for (uint32_t pattern = 0; pattern < 65536; ++pattern) {
    const uint32_t exponent = (pattern >> 10) & 0x1f, mantissa = pattern & 0x3ff;
    const double sign = (pattern & 0x8000) ? -1.0 : 1.0;
    if (exponent == 31) {
      EXPECT_EQ(std::isnan(as_f32[pattern]), mantissa != 0) << pattern;
      if (!mantissa) {
        EXPECT_EQ(as_f32[pattern], sign * INFINITY);
      }
      continue;
    }
    const double expected = exponent == 0 ? sign * std::ldexp(mantissa, -24) : sign * std::ldexp(1024 + mantissa, exponent - 25);
    ASSERT_EQ(static_cast<double>(as_f32[pattern]), expected) << "f16 pattern " << pattern;
    ASSERT_EQ(std::signbit(as_f32[pattern]), sign < 0) << "f16 pattern " << pattern;
    ASSERT_EQ(as_bf16[pattern].bits, float_to_bf16(as_f32[pattern]).bits) << "f16 pattern " << pattern;
  }
}

}  // namespace
}  // namespace ls::io
