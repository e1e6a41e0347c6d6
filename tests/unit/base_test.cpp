// Tests for src/base: Status/Result, bf16 rounding, SHA-256, the thread pool's fixed split.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "base/bf16.h"
#include "base/hash.h"
#include "base/status.h"
#include "base/thread_pool.h"

namespace ls {
namespace {

Result<int> parse_positive(int value) {
  if (value <= 0) return Status(ErrorCode::InvalidArgument, "want > 0, got " + std::to_string(value));
  return value;
}

Status twice_positive(int value, int& out) {
  LS_ASSIGN_OR_RETURN(int parsed, parse_positive(value));
  out = 2 * parsed;
  return ok_status();
}

TEST(Status, ErrorCarriesItsNameAndMessage) {
  Status status(ErrorCode::BadSafetensors, "tensor x ends past the file");
  EXPECT_FALSE(status.ok());
  EXPECT_EQ(status.to_string(), "BadSafetensors: tensor x ends past the file");
}

TEST(Status, AssignOrReturnPropagatesTheFirstError) {
  int out = 0;
  EXPECT_TRUE(twice_positive(4, out).ok());
  EXPECT_EQ(out, 8);
  Status status = twice_positive(-1, out);
  EXPECT_EQ(status.code(), ErrorCode::InvalidArgument);
  EXPECT_EQ(out, 8);
}

TEST(Bf16, RoundsToNearestEvenLikeTorch) {
  EXPECT_EQ(float_to_bf16(1.0f).bits, 0x3f80);
  // 1 + 2^-8 is a tie between 1 and 1 + 2^-7: goes to the even mantissa (1.0).
  EXPECT_EQ(float_to_bf16(1.0f + std::ldexp(1.0f, -8)).bits, 0x3f80);
  // 1 + 3*2^-8 ties between 1+2^-7 and 1+2^-6: goes to the even one (1+2^-6).
  EXPECT_EQ(float_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)).bits, 0x3f82);
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(NAN))));
  EXPECT_EQ(bf16_to_float(float_to_bf16(INFINITY)), INFINITY);
  EXPECT_EQ(f16_to_float(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_float(0xc000), -2.0f);
}

TEST(Hash, Sha256MatchesKnownDigests) {
  EXPECT_EQ(sha256_hex({}), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  const std::string abc = "abc";
  EXPECT_EQ(sha256_hex({reinterpret_cast<const uint8_t*>(abc.data()), abc.size()}),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const std::string two_blocks = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  EXPECT_EQ(sha256_hex({reinterpret_cast<const uint8_t*>(two_blocks.data()), two_blocks.size()}),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST(ThreadPool, EveryIndexIsVisitedOnceWhateverTheThreadCount) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    for (int64_t count : {1, 2, 7, 100}) {
      std::vector<std::atomic<int>> visits(count);
      for (int repeat = 0; repeat < 20; ++repeat)
        pool.parallel_for(count, [&](int, int64_t begin, int64_t end) {
          for (int64_t index = begin; index < end; ++index) visits[index]++;
        });
      for (auto& visit : visits) EXPECT_EQ(visit.load(), 20);
    }
  }
}

}  // namespace
}  // namespace ls
