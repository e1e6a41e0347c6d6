// lanes_bench's A/B switches (see lanes_bench.cpp's usage for what each flag selects).
#include "lanes_bench_switches.h"

#include <cstdlib>

namespace ls::bench {

bool LanesSwitches::parse(const std::string& flag, const std::string& value) {
  if (flag == "--taps") device_taps = value != "host";
  else if (flag == "--admit") {
    const bool whole = value.rfind("whole", 0) == 0;
    whole_contexts_priced = value == "priced" ? 1 : 0;
    scout_prompt_only = value != "all" && !whole;
    const size_t colon = value.find(':');
    if (whole) whole_context_share = colon == std::string::npos ? 0.10 : std::atof(value.c_str() + colon + 1);
    if (value == "all") whole_context_share = 0;  // wherever the prior pays at all (the fifth session's)
  }
  else if (flag == "--quiet-reprice") quiet_reprice_every = std::atoi(value.c_str());
  else if (flag == "--explore-gate") {
    explore_repay = std::atof(value.c_str());
    const size_t comma = value.find(',');
    if (comma != std::string::npos) explore_repay_if_right = std::atof(value.c_str() + comma + 1);
  }
  else if (flag == "--pass-timing") pass_after_forward = value == "after-forward" ? 1 : 0;
  else if (flag == "--sampled-streams") sampled_most_streams = std::atoi(value.c_str());
  else if (flag == "--loss-stop") stop_on_measured_loss = value == "on" ? 1 : 0;
  else if (flag == "--scout-gate") scout_gate_if_right = value == "right" ? 1 : 0;
  else if (flag == "--sampled-prior") sampled_prior = value == "off" ? 0.0 : std::atof(value.c_str());
  else if (flag == "--scout-probes") scout_probes = std::atoi(value.c_str());
  else if (flag == "--overhead") overhead_without_absorbs = value == "with-absorbs" ? 0 : 1;
  else if (flag == "--wake-needs-landed") wake_needs_landed = value == "off" ? 0 : 1;
  else if (flag == "--scout-vote") scout_vote = value == "off" ? 0 : 1;
  else if (flag == "--scout-depth") scout_depth = std::atoi(value.c_str());
  else if (flag == "--alone-whole") alone_keeps_context = value == "on" ? 1 : 0;
  else if (flag == "--calibration-start") calibration_mean_start = value == "mean" ? 1 : 0;
  else return false;
  return true;
}

void LanesSwitches::apply(LanesOptions& options) const {
  PricingOptions& pricing = options.pricing;
  options.device_taps = device_taps;
  options.scout_prompt_only = scout_prompt_only;
  if (whole_context_share >= 0) pricing.whole_context_share = whole_context_share;
  if (whole_contexts_priced >= 0) pricing.whole_contexts_priced = whole_contexts_priced == 1;
  if (quiet_reprice_every > 0) pricing.quiet_reprice_every = quiet_reprice_every;
  if (explore_repay >= 0) pricing.explore_repay = explore_repay;
  if (explore_repay_if_right >= 0) pricing.explore_repay_if_right = explore_repay_if_right;
  if (pass_after_forward >= 0) options.calibration.pass_after_forward = pass_after_forward == 1;
  if (sampled_most_streams >= 0) pricing.sampled_most_streams = sampled_most_streams;
  if (stop_on_measured_loss >= 0) pricing.stop_on_measured_loss = stop_on_measured_loss == 1;
  if (scout_gate_if_right >= 0) pricing.scout_gate_if_right = scout_gate_if_right == 1;
  if (sampled_prior == 0) pricing.sampled_prior.clear();
  if (sampled_prior > 0) pricing.sampled_prior.assign(pricing.depth_prior.size(), sampled_prior);
  if (scout_probes > 0) pricing.scout_probes = scout_probes;
  if (overhead_without_absorbs >= 0) pricing.overhead_without_absorbs = overhead_without_absorbs == 1;
  if (wake_needs_landed >= 0) pricing.wake_needs_landed = wake_needs_landed == 1;
  if (scout_vote >= 0) pricing.scout_vote = scout_vote == 1;
  if (scout_depth >= 0) pricing.scout_depth = scout_depth;
  if (alone_keeps_context >= 0) options.alone_keeps_context = alone_keeps_context == 1;
  if (calibration_mean_start >= 0) pricing.calibration_mean_start = calibration_mean_start == 1;
}

const char* lanes_switches_usage() {
  return "[--taps device|host] [--admit scout|all|whole[:SHARE]|priced] "
         "[--quiet-reprice N] "
         "[--explore-gate X[,Y]] "
         "[--pass-timing alone|after-forward] "
         "[--sampled-streams N] [--loss-stop off|on] "
         "[--sampled-prior X|off] [--scout-gate prior|right] [--scout-probes N] "
         "[--overhead with-absorbs|without-absorbs] [--wake-needs-landed on|off] [--scout-vote on|off] "
         "[--scout-depth N] [--alone-whole on|off] [--calibration-start mean|ema]";
}

}  // namespace ls::bench
