// drafter_bench --rounds: the drafter's side of a lanes round (absorb of the accepted rows' device taps, then one
// graphed pass), timed piece by piece, with settings compared block by block (interleaved).
#ifdef LS_HAVE_CUDA
#include "drafter_rounds.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <map>
#include <string>
#include <utility>

#include "base/hash.h"
#include "bench_util.h"
#include "compute/cuda/cuda_util.h"
#include "draft/dspark/cuda/scan_phases.h"
#include "draft/dspark/cuda/scan_pick.h"

namespace ls::bench {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// Rows each round absorbs (the accepted tokens' taps; lanes_1.2b at 1 stream absorbed 6.6 rows a call).
constexpr int kRowPattern[] = {6, 4, 8, 5, 7, 3, 9, 6};
constexpr int kPatternLength = sizeof(kRowPattern) / sizeof(kRowPattern[0]);
constexpr int kMaxRoundRows = 16;
constexpr int kUntimedRounds = 2;

struct Samples {
  std::vector<double> absorb_call;  // absorb_device()'s host ms (it returns without waiting)
  std::vector<double> draft_wall;   // draft() right after the absorb (the lanes' order): it waits for the absorb too
  std::vector<double> absorb_wait;  // settle() right after the absorb: the rest of the absorb's device work
  std::vector<double> draft_alone;  // draft() after that settle
  std::vector<double> block, scan;  // device ms of the pass's block and scan (every round)
  int failed = 0;
  dspark::cuda::ScanPhaseClocks phases;  // ":ph": the persistent scan's phase clocks over the timed rounds
  std::vector<std::pair<std::string, double>> profile;  // ":prof": device ms per launch label of one eager pass
};

// ":prof": one eager pass of the setting's streams at `depth` with an event after every launch (after the last
// block's rounds): device ms per launch label.
std::vector<std::pair<std::string, double>> profile_pass(dspark::cuda::CudaDsparkDrafter& drafter,
                                                         const std::vector<StreamId>& ids,
                                                         const std::vector<int64_t>& positions, int depth) {
  std::vector<DraftRequest> requests(ids.size());
  for (size_t s = 0; s < ids.size(); ++s) {
    requests[s].stream = ids[s];
    requests[s].anchor_token = 100 + static_cast<int32_t>(s);
    requests[s].anchor_position = positions[s];
    requests[s].depth = depth;
  }
  drafter.set_profile(true);
  drafter.draft(requests);
  drafter.draft(requests);
  std::vector<std::pair<std::string, double>> totals = drafter.last_profile();
  drafter.set_profile(false);
  return totals;
}

void add_phases(dspark::cuda::ScanPhaseClocks& to, const dspark::cuda::ScanPhaseClocks& from) {
  for (int p = 0; p < dspark::cuda::kScanPhases; ++p) {
    to.sums[p] += from.sums[p];
    to.largest[p] = std::max(to.largest[p], from.largest[p]);
  }
  to.ctas += from.ctas;
  to.slots += from.slots;
  to.launches += from.launches;
}

// Per setting with ":ph": each phase's us a slot (the prologue and CTA 0's tail phases per launch) on the average CTA
// and on the slowest CTA, at the device's clock rate.
void print_phases(const std::map<std::string, Samples>& by_setting, const std::vector<std::string>& settings) {
  int khz = 0, device = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, device);
  const double us_per_cycle = khz > 0 ? 1e3 / khz : 0;
  bool header = false;
  for (const std::string& setting : settings) {
    const dspark::cuda::ScanPhaseClocks& c = by_setting.at(setting).phases;
    if (c.launches == 0 || c.ctas == 0 || c.slots == 0) continue;
    if (!header) {
      std::printf("\nscan phases (us; per slot, prologue and CTA 0's tail per launch; average CTA / slowest; "
                  "clock %d MHz)\n| setting | launches | slots a launch |",
                  khz / 1000);
      for (const char* name : dspark::cuda::kScanPhaseNames) std::printf(" %s |", name);
      std::printf("\n|---|---|---|");
      for (int p = 0; p < dspark::cuda::kScanPhases; ++p) std::printf("---|");
      std::printf("\n");
      header = true;
    }
    const double slots = static_cast<double>(c.slots) / c.launches, ctas = static_cast<double>(c.ctas) / c.launches;
    std::printf("| %s | %llu | %.1f |", setting.c_str(), static_cast<unsigned long long>(c.launches), slots);
    for (int p = 0; p < dspark::cuda::kScanPhases; ++p) {
      const bool tail = p >= dspark::cuda::kFirstTailPhase;  // CTA 0's, once a launch
      const double per = p == 0 || tail ? 1 : slots;
      const double runs = tail ? c.launches : c.launches * ctas;
      std::printf(" %.2f / %.2f |", c.sums[p] / runs / per * us_per_cycle, c.largest[p] / per * us_per_cycle);
    }
    std::printf("\n");
  }
}

}  // namespace

int run_drafter_rounds(dspark::cuda::CudaDsparkDrafter& drafter, const RoundOptions& options, nlohmann::json& json) {
  const int64_t width = options.tap_width;
  std::vector<bf16> host_rows(static_cast<size_t>(kMaxRoundRows * width));
  for (size_t i = 0; i < host_rows.size(); ++i) {
    host_rows[i] = float_to_bf16(static_cast<float>(2 * uniform_open01(splitmix64(i + 11)) - 1));
  }
  cuda::DeviceBuffer<bf16> device_rows;
  if (Status status = device_rows.allocate(host_rows.size()); !status.ok()) {
    std::fprintf(stderr, "%s\n", status.to_string().c_str());
    return 1;
  }
  if (cudaMemcpy(device_rows.data(), host_rows.data(), host_rows.size() * sizeof(bf16), cudaMemcpyHostToDevice) !=
      cudaSuccess) {
    std::fprintf(stderr, "rounds: tap upload failed\n");
    return 1;
  }
  DeviceTaps taps;
  taps.data = device_rows.data();
  cudaGetDevice(&taps.device);
  taps.rows = kMaxRoundRows;
  taps.row_values = width;
  std::vector<float> context_taps(static_cast<size_t>(options.context * width));
  for (size_t i = 0; i < context_taps.size(); ++i) {
    context_taps[i] = static_cast<float>(2 * uniform_open01(splitmix64(i + 5)) - 1);
  }
  const int64_t loaded_prefetch = drafter.l2_prefetch();
  const bool loaded_head = drafter.short_context_head();
  const int loaded_stage = drafter.head_stage_keys();
  const bool loaded_split = drafter.sampled_split();
  const bool loaded_keyed = drafter.keyed_scan_on();
  const int loaded_row = drafter.row_attention();
  const bool loaded_staged = dspark::cuda::draft_pick_staged();
  const bool loaded_broadcast = drafter.scan_broadcast();
  const bool loaded_helpers = drafter.scan_confidence_helpers();
  const int loaded_backoff = drafter.scan_handoff_backoff();
  const int loaded_parts = drafter.skinny_parts();
  const bool loaded_one_graph = drafter.one_graph();
  const int loaded_group = drafter.row_group();
  const int loaded_int8_rows = drafter.int8_rows();
  const int loaded_int8_splits = drafter.int8_splits();
  const bool loaded_int8_x_l1 = drafter.int8_x_l1();
  const bool loaded_absorb_in_pass = drafter.absorb_in_pass();
  std::map<std::string, Samples> by_setting;
  StreamId next_stream = 5000;
  for (int block = 0; block < options.blocks; ++block) {
    for (const std::string& setting : options.settings) {
      drafter.set_l2_prefetch(static_cast<int64_t>(std::atoi(setting.c_str())) << 20);
      drafter.set_short_context_head(setting.find(":head") != std::string::npos);
      drafter.set_head_stage_keys(setting.find(":s256") != std::string::npos ? 256 : 128);
      drafter.set_sampled_split(setting.find(":split") != std::string::npos);
      drafter.set_keyed_scan(setting.find(":keyed") != std::string::npos);
      // ":row" the row attention at one request, ":rowN" up to N requests (":rows" / ":rowsN" the same: the staged
      // kernel, the only one since session 13).
      const size_t row = setting.find(":row");
      const bool rows = setting.find(":rows") != std::string::npos;
      drafter.set_row_attention(
          row == std::string::npos ? 0 : std::max(1, std::atoi(setting.c_str() + row + (rows ? 5 : 4))));
      dspark::cuda::set_draft_pick_staged(setting.find(":staged") != std::string::npos);
      // ":bc" the persistent scan's broadcast dot (session 14).
      drafter.set_scan_broadcast(setting.find(":bc") != std::string::npos);
      // ":ch" its confidence helpers (session 14).
      drafter.set_scan_confidence_helpers(setting.find(":ch") != std::string::npos);
      // ":boN" the flagged handoff's sleep of N ns between polls (session 14).
      const size_t backoff = setting.find(":bo");
      drafter.set_scan_handoff_backoff(backoff == std::string::npos ? 0 : std::atoi(setting.c_str() + backoff + 3));
      // Session 15: ":partsN" the skinny GEMMs' parts mask (set_skinny_parts; default the drafter's).
      const size_t parts = setting.find(":parts");
      drafter.set_skinny_parts(parts == std::string::npos ? loaded_parts : std::atoi(setting.c_str() + parts + 6));
      // Session 16: ":g1" the block pass and the scan in one graph (":g0" two graphs; neither: the drafter's own).
      drafter.set_one_graph(setting.find(":g1") != std::string::npos   ? true
                            : setting.find(":g0") != std::string::npos ? false
                                                                       : loaded_one_graph);
      // Session 19: ":rgN" the row attention with N query heads a CTA (set_row_group; ":rg0" the row kernel; neither:
      // the drafter's own).
      const size_t group = setting.find(":rg");
      drafter.set_row_group(group == std::string::npos ? loaded_group : std::atoi(setting.c_str() + group + 3));
      // Session 19: ":ap1" the absorb inside the next pass's graph (set_absorb_in_pass; ":ap0" off).
      drafter.set_absorb_in_pass(setting.find(":ap1") != std::string::npos   ? true
                                 : setting.find(":ap0") != std::string::npos ? false
                                                                             : loaded_absorb_in_pass);
      // Session 20: ":iN" the int8 GEMMs up to N rows (set_int8_rows; ":i0" bf16 everywhere; neither: the drafter's
      // own; without --bits 8 there are no int8 copies and nothing changes).
      const size_t int8 = setting.find(":i");
      drafter.set_int8_rows(int8 == std::string::npos ? loaded_int8_rows : std::atoi(setting.c_str() + int8 + 2));
      // ":ksN" the narrow int8 GEMMs with K split over CTAs (set_int8_splits(N); ":ks0" off).
      const size_t splits = setting.find(":ks");
      drafter.set_int8_splits(splits == std::string::npos ? loaded_int8_splits
                                                          : std::atoi(setting.c_str() + splits + 3));
      // ":xl1" every int8 GEMM's x through L1 too (set_int8_x_l1; ":xl0" off).
      drafter.set_int8_x_l1(setting.find(":xl1") != std::string::npos   ? true
                            : setting.find(":xl0") != std::string::npos ? false
                                                                        : loaded_int8_x_l1);
      // Sampled requests: ":samp" as lanes_bench's first sampled request (T 0.6), ":topp" T 0.8 with top-p 0.9,
      // ":topk" T 0.7 with top-k 8, ":minp" T 0.9 with min-p 0.05, ":mix" lanes_bench's sampled mix over the streams.
      Sampling sampling;
      if (setting.find(":samp") != std::string::npos) sampling.temperature = 0.6f;
      if (setting.find(":topp") != std::string::npos) sampling = Sampling{0.8f, 0, 0.9f, 0.0f, 0};
      if (setting.find(":topk") != std::string::npos) sampling = Sampling{0.7f, 8, 1.0f, 0.0f, 0};
      if (setting.find(":minp") != std::string::npos) sampling = Sampling{0.9f, 0, 1.0f, 0.05f, 0};
      const bool mix = setting.find(":mix") != std::string::npos;
      const bool phases = setting.find(":ph") != std::string::npos;
      drafter.capture_bucket_graphs();  // outside the timed rounds, as at load
      Samples& samples = by_setting[setting];
      std::vector<StreamId> ids;
      std::vector<int64_t> positions;
      for (int s = 0; s < options.streams; ++s) {
        ids.push_back(next_stream++);
        positions.push_back(options.context);
        if (Status status = drafter.absorb(ids.back(), 0, options.context, context_taps); !status.ok()) {
          std::fprintf(stderr, "%s\n", status.to_string().c_str());
          return 1;
        }
      }
      for (int round = -kUntimedRounds; round < options.rounds; ++round) {
        const int rows = kRowPattern[(round + kUntimedRounds) % kPatternLength];
        const bool timed = round >= 0, split = timed && round % 2 == 1;
        if (round == 0) dspark::cuda::set_scan_phase_clocks(phases);  // zeroed after the untimed rounds
        std::vector<TapRows> pieces;
        for (int s = 0; s < options.streams; ++s) pieces.push_back(TapRows{ids[s], positions[s], 0, rows});
        const Clock::time_point absorb_start = Clock::now();
        const Status absorbed = drafter.absorb_device(pieces, taps);
        const double absorb_ms = ms_since(absorb_start);
        double wait_ms = 0;
        if (split) {
          const Clock::time_point wait_start = Clock::now();
          if (!drafter.settle().ok()) ++samples.failed;
          wait_ms = ms_since(wait_start);
        }
        if (!absorbed.ok()) {
          std::fprintf(stderr, "%s\n", absorbed.to_string().c_str());
          return 1;
        }
        std::vector<DraftRequest> requests(options.streams);
        for (int s = 0; s < options.streams; ++s) {
          positions[s] += rows;
          requests[s].stream = ids[s];
          requests[s].anchor_token = 100 + s;
          requests[s].anchor_position = positions[s];
          requests[s].depth = options.depth;
          requests[s].sampling = sampling;
          if (mix) {  // lanes_bench's sampled mix (make_fake_request): T, then top-k, top-p, min-p by stream
            requests[s].sampling.temperature = 0.6f + 0.1f * static_cast<float>(s % 6);
            if (s % 3 == 1) requests[s].sampling.top_k = 8;
            if (s % 4 == 2) requests[s].sampling.top_p = 0.9f;
            if (s % 5 == 3) requests[s].sampling.min_p = 0.05f;
          }
          requests[s].sampling.seed = static_cast<uint64_t>(round + 1000 * s);
        }
        const Clock::time_point draft_start = Clock::now();
        const std::vector<Draft> drafts = drafter.draft(requests);
        const double draft_ms = ms_since(draft_start);
        for (const Draft& draft : drafts) samples.failed += draft.status.ok() ? 0 : 1;
        if (!drafter.settle().ok()) ++samples.failed;
        if (!timed) continue;
        samples.absorb_call.push_back(absorb_ms);
        (split ? samples.draft_alone : samples.draft_wall).push_back(draft_ms);
        if (split) samples.absorb_wait.push_back(wait_ms);
        samples.block.push_back(drafter.last_block_ms());
        samples.scan.push_back(drafter.last_scan_ms());
      }
      if (block + 1 == options.blocks && setting.find(":prof") != std::string::npos) {
        samples.profile = profile_pass(drafter, ids, positions, options.depth);
      }
      if (phases) add_phases(samples.phases, dspark::cuda::take_scan_phase_clocks());
      dspark::cuda::set_scan_phase_clocks(false);
      for (StreamId id : ids) drafter.release(id);
    }
  }
  drafter.set_l2_prefetch(loaded_prefetch);
  drafter.set_short_context_head(loaded_head);
  drafter.set_head_stage_keys(loaded_stage);
  drafter.set_sampled_split(loaded_split);
  drafter.set_keyed_scan(loaded_keyed);
  drafter.set_row_attention(loaded_row);
  dspark::cuda::set_draft_pick_staged(loaded_staged);
  drafter.set_scan_broadcast(loaded_broadcast);
  drafter.set_scan_confidence_helpers(loaded_helpers);
  drafter.set_scan_handoff_backoff(loaded_backoff);
  drafter.set_skinny_parts(loaded_parts);
  drafter.set_one_graph(loaded_one_graph);
  drafter.set_row_group(loaded_group);
  drafter.set_absorb_in_pass(loaded_absorb_in_pass);
  drafter.set_int8_rows(loaded_int8_rows);
  drafter.set_int8_splits(loaded_int8_splits);
  drafter.set_int8_x_l1(loaded_int8_x_l1);
  std::printf("\nrounds: %d streams, context %d + ~5.5 rows a round, depth %d, %d blocks x %d rounds per setting "
              "(interleaved), medians in ms\n",
              options.streams, options.context, options.depth, options.blocks, options.rounds);
  std::printf("| setting (L2 prefetch MiB[:head][:s256][:samp/:topp/:topk/:minp/:mix][:split][:keyed][:staged][:row[s][N]][:bc][:ch][:boN][:partsN][:g0/:g1][:rgN][:ap0/:ap1][:iN][:ksN][:xl0/:xl1][:prof]) | absorb call | draft() after absorb | absorb wait (settled) | draft() alone | "
              "block pass (device) | scan (device) | host + gaps (alone - block - scan) | failed |\n"
              "|---|---|---|---|---|---|---|---|---|\n");
  for (const std::string& setting : options.settings) {
    const Samples& s = by_setting[setting];
    const double gaps = median(s.draft_alone) - median(s.block) - median(s.scan);
    std::printf("| %s | %.4f | %.4f | %.4f | %.4f | %.4f | %.4f | %.4f | %d |\n", setting.c_str(), median(s.absorb_call),
                median(s.draft_wall), median(s.absorb_wait), median(s.draft_alone), median(s.block), median(s.scan),
                gaps, s.failed);
    json["rounds"].push_back({{"setting", setting},
                              {"streams", options.streams},
                              {"context", options.context},
                              {"depth", options.depth},
                              {"absorb_call_ms", median(s.absorb_call)},
                              {"draft_after_absorb_ms", median(s.draft_wall)},
                              {"absorb_wait_ms", median(s.absorb_wait)},
                              {"draft_alone_ms", median(s.draft_alone)},
                              {"block_ms", median(s.block)},
                              {"scan_ms", median(s.scan)},
                              {"failed", s.failed}});
  }
  print_phases(by_setting, options.settings);
  for (const std::string& setting : options.settings) {
    const Samples& s = by_setting[setting];
    if (s.profile.empty()) continue;
    std::printf("\nprofile %s (eager, an event after every launch; device ms a pass):", setting.c_str());
    double sum = 0;
    for (const auto& [label, ms] : s.profile) {
      std::printf(" %s %.4f,", label.c_str(), ms);
      sum += ms;
    }
    std::printf(" sum %.4f\n", sum);
  }
  return 0;
}

}  // namespace ls::bench
#endif  // LS_HAVE_CUDA
