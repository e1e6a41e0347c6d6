// cpu_bench's pass profile: the drafter's 1-stream pass at full depth timed by op (dspark::PassProfile), per pass.
#pragma once

#include <cstdio>
#include <span>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/hash.h"
#include "draft/dspark/dspark_drafter.h"
#include "draft/dspark/forward.h"

namespace ls::bench {

// `passes` full-depth passes of one stream (its context absorbed at `position`) with the profile on; ms per pass by op.
inline nlohmann::json profile_pass(dspark::DsparkDrafter& drafter, StreamId stream, int64_t position, int vocab,
                                   int passes) {
  dspark::PassProfile profile;
  dspark::set_pass_profile(&profile);
  for (int repeat = 0; repeat < passes; ++repeat) {
    DraftRequest request;
    request.stream = stream;
    request.anchor_token = static_cast<int32_t>(splitmix64(repeat + 991) % vocab);
    request.anchor_position = position;
    request.depth = drafter.config().block_size;
    drafter.draft(std::span<const DraftRequest>(&request, 1));
  }
  dspark::set_pass_profile(nullptr);
  const std::pair<const char*, double> ops[] = {
      {"embed", profile.embed},   {"norms", profile.norms},         {"qkv", profile.qkv},
      {"q/k norm+rope", profile.rope}, {"attention", profile.attention}, {"o_proj", profile.o_proj},
      {"gate/up+swiglu", profile.ffn_in}, {"down", profile.ffn_down}, {"head", profile.head},
      {"scan W2", profile.scan_w2}, {"scan pick", profile.scan_pick}};
  nlohmann::json result = nlohmann::json::object();
  for (const auto& [name, ms] : ops) result[name] = ms / std::max(1, profile.passes);
  return result;
}

// One line: each op's ms per pass and share of their sum.
inline void print_pass_profile(const nlohmann::json& profile) {
  double total = 0;
  for (auto& [name, ms] : profile.items()) total += ms.get<double>();
  std::printf("  pass profile, full depth, ms per pass (sum %.3f):", total);
  for (auto& [name, ms] : profile.items())
    std::printf(" %s %.3f (%.0f%%);", name.c_str(), ms.get<double>(), 100.0 * ms.get<double>() / total);
  std::printf("\n");
}

}  // namespace ls::bench
