// The bundled nano pair (models/nano/target + models/nano/drafter) for tests: where it is, loading it on the CPU, and
// the drafted == plain check of a lanes run against each stream's plain reply run alone.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "draft/load.h"
#include "lanes/lanes.h"
#include "lanes/testing/harness.h"
#include "model/load.h"

namespace ls {

// The repository root: the configured source dir, or the working directory when the binary was carried elsewhere
// (the GPU machine's Xeon runs the staged test binaries from its own copy of the tree).
inline std::string nano_repo_root() {
  const std::string configured = LS_SOURCE_DIR;
  if (std::filesystem::exists(configured + "/models/nano/target/config.json")) return configured;
  return std::filesystem::current_path().string();
}
inline std::string nano_target_dir() { return nano_repo_root() + "/models/nano/target"; }
inline std::string nano_drafter_dir() { return nano_repo_root() + "/models/nano/drafter"; }
inline bool nano_pair_present() {
  return std::filesystem::exists(nano_target_dir() + "/config.json") &&
         std::filesystem::exists(nano_drafter_dir() + "/config.json");
}

// The nano pair on the CPU: 2 threads each, windows of up to 64 rows, up to 16 drafting streams.
struct NanoPair {
  std::unique_ptr<Target> target;
  std::unique_ptr<Drafter> drafter;
};

// Loads the nano pair into `pair`; a failed load is a test failure (call it under ASSERT_NO_FATAL_FAILURE, after
// GTEST_SKIP when !nano_pair_present()); `drafter_bits` is the drafter's --drafter-bits (-1 auto).
inline void load_nano_pair(NanoPair& pair, int drafter_bits = 0) {
  LoadOptions load;
  load.threads = 2;
  load.max_rows = 64;
  auto target = load_target(nano_target_dir(), load);
  ASSERT_TRUE(target.ok()) << target.status().to_string();
  DrafterOptions drafter_options;
  drafter_options.threads = 2;
  drafter_options.max_streams = 16;
  drafter_options.bits = drafter_bits;
  auto drafter = load_drafter(nano_drafter_dir(), **target, drafter_options);
  ASSERT_TRUE(drafter.ok()) << drafter.status().to_string();
  pair.target = std::move(*target);
  pair.drafter = std::move(*drafter);
}

// Every reply of a lanes run equals that stream's plain reply run alone (tokens and finish), and none is empty.
inline void expect_replies_equal_alone(const std::vector<Reply>& replies, const std::vector<Reply>& alone) {
  ASSERT_EQ(replies.size(), alone.size());
  for (size_t index = 0; index < alone.size(); ++index) {
    EXPECT_FALSE(alone[index].tokens.empty()) << "stream " << index;
    EXPECT_EQ(replies[index].tokens, alone[index].tokens) << "stream " << index;
    EXPECT_EQ(replies[index].finish, alone[index].finish) << "stream " << index;
  }
}

}  // namespace ls
