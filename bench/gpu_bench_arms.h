// gpu_bench --arms (gpu_bench_arms.cpp): the decode step and verify windows under the target's switches, the arms
// alternating in one process, each on a fresh stream after the same prompt, so drift shows as drift.
#pragma once

#include <string>
#include <vector>

#include "model/lfm2/cuda/cuda_target.h"

namespace ls::gpu_bench {

struct ArmsOptions {
  std::vector<std::string> arms;  // each a '+' list on top of the process's settings: default,
                                  // spreadN, taps (wanted), tapnorm / tapcopy, rows32 / norows32
  std::vector<int> rows = {1, 2, 4, 8, 10, 16};
  std::vector<int> taps;          // the layers tapped by arms with "taps" (a drafter's target_layer_ids)
  int rounds = 3, context = 128, decode_tokens = 64, repeats = 20;
};

// gpu_bench's flags for the arms: --arms a,b+c (the arms; any arm at all makes gpu_bench run them and stop), --arms-rows
// 1,8,10, --taps 2,5,8 (the tapped layers), --rounds N. Returns false for other flags.
bool parse_arms_flag(const std::string& flag, const std::string& value, ArmsOptions& options);

// Prints one line per (round, arm) and a summary (median of the rounds per arm); leaves every switch as it found it.
void run_arms(lfm2::CudaTarget& target, const ArmsOptions& options);

}  // namespace ls::gpu_bench
