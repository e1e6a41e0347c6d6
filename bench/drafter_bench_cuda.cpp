// drafter_bench --device cuda: the CUDA drafter's load, absorb and passes by streams, depth and pinned variants
// (--profile per launch), or lanes-like rounds (drafter_rounds.cpp).
#ifdef LS_HAVE_CUDA
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "bench_util.h"
#include "draft/dspark/cuda/cuda_drafter.h"
#include "draft/load.h"
#include "drafter_bench_setup.h"

namespace ls::bench {
namespace {

using json = nlohmann::json;

// "warp,split" -> the attention pins (auto = the drafter's own choice).
std::vector<std::pair<std::string, std::optional<dspark::cuda::BlockAttentionKernel>>> parse_attention(
    const std::string& text) {
  using Kernel = dspark::cuda::BlockAttentionKernel;
  std::vector<std::pair<std::string, std::optional<Kernel>>> out;
  std::stringstream stream(text);
  for (std::string item; std::getline(stream, item, ',');) {
    if (item == "warp") out.emplace_back(item, Kernel::Warp);
    else if (item == "tile") out.emplace_back(item, Kernel::Tile);
    else if (item == "split") out.emplace_back(item, Kernel::Split);
    else if (item == "cooperative") out.emplace_back(item, Kernel::Cooperative);
    else if (item == "head") out.emplace_back(item, Kernel::Head);
    else if (item == "row") out.emplace_back(item, Kernel::Row);
    else out.emplace_back("auto", std::nullopt);
  }
  return out;
}

// A scan choice: its name, the fused-step pin, the persistent-scan pin and its handoff (nullopt: the default).
struct ScanPin {
  std::string name;
  std::optional<bool> fused;
  std::optional<bool> persistent;
  std::optional<dspark::cuda::PersistentHandoff> handoff;
};

// "auto", "fused", "gemm", "persistent", "counter" / "flags" (the persistent scan with that handoff), "handoff"
// (counter, flags), "both" (fused, gemm) or "all" (persistent, fused, gemm) -> the scan pins.
std::vector<ScanPin> parse_scan(const std::string& text) {
  using dspark::cuda::PersistentHandoff;
  const ScanPin persistent{"persistent", std::nullopt, true, std::nullopt}, fused{"fused", true, false, std::nullopt},
      gemm{"gemm", false, false, std::nullopt};
  const ScanPin counter{"counter", std::nullopt, true, PersistentHandoff::Counter},
      flags{"flags", std::nullopt, true, PersistentHandoff::Flags};
  if (text == "all") return {persistent, fused, gemm};
  if (text == "both") return {fused, gemm};
  if (text == "fused") return {fused};
  if (text == "gemm") return {gemm};
  if (text == "persistent") return {persistent};
  if (text == "counter") return {counter};
  if (text == "flags") return {flags};
  if (text == "handoff") return {counter, flags};
  return {{"auto", std::nullopt, std::nullopt, std::nullopt}};
}

// --profile: one eager pass per (streams, attention, scan) at full depth with an event after every launch; device
// ms per launch label.
void profile_cuda(dspark::cuda::CudaDsparkDrafter& drafter, int depth, const std::string& attention,
                  json& results) {
  std::printf("\n| streams | attention | scan | per-launch device ms (eager pass, depth %d) | sum ms |\n|---|---|---|---|---|\n",
              depth);
  for (int streams : {1, 8, 64}) {
    std::vector<DraftRequest> requests(streams);
    for (int stream = 0; stream < streams; ++stream) {
      requests[stream].stream = stream;
      requests[stream].anchor_token = 100 + stream;
      requests[stream].anchor_position = drafter.context_length(stream);
      requests[stream].depth = depth;
    }
    for (const auto& [name, pin] : parse_attention(attention)) {
      for (const ScanPin& scan : parse_scan("all")) {
        drafter.set_attention_kernel(pin);
        drafter.set_fused_scan(scan.fused);
        drafter.set_persistent_scan(scan.persistent);
        drafter.set_profile(true);
        drafter.draft(requests);
        drafter.draft(requests);
        const std::vector<std::pair<std::string, double>> totals = drafter.last_profile();
        drafter.set_profile(false);
        std::string cells;
        double sum = 0;
        json entry = {{"streams", streams}, {"attention", name}, {"scan", scan.name}};
        for (const auto& [label, ms] : totals) {
          char cell[96];
          std::snprintf(cell, sizeof cell, "%s%s %.3f", cells.empty() ? "" : ", ", label.c_str(), ms);
          cells += cell;
          sum += ms;
          entry["ms"][label] = ms;
        }
        std::printf("| %d | %s | %s | %s | %.3f |\n", streams, name.c_str(), scan.name.c_str(), cells.c_str(),
                    sum);
        results["profile"].push_back(entry);
      }
    }
  }
  drafter.set_attention_kernel(std::nullopt);
  drafter.set_fused_scan(std::nullopt);
  drafter.set_persistent_scan(std::nullopt);
}

// "both" -> {true, false}; else whether `text` is `on_name`.
std::vector<bool> parse_switch(const std::string& text, const char* on_name) {
  if (text == "both") return {true, false};
  return {text == on_name};
}

}  // namespace

// graphs: "on", "off" or "both" (each (streams, depth) timed eagerly and through CUDA graphs, after 2 untimed passes).
// attention: the variants to time ("auto" or a list of warp, tile, split); scan: "fused", "gemm" or "both".

int run_cuda(const Shape& shape, const std::string& dir, BenchTarget& target, int context, int repeats,
             const std::string& graphs, const std::string& attention, const std::string& scan,
             const std::string& engine_gemms, const std::string& tuned_gemms, const std::string& skinny,
             const std::string& launch, bool profile, const std::string& buckets, const std::string& pick,
             const std::vector<int>& attention_chunks, const std::vector<int>& skinny_parts,
             const std::vector<int>& stream_counts, const std::string& loads_pin, const RoundOptions* rounds,
             int bits, json& results) {
  if (Status status = target.upload_embedding(); !status.ok()) {
    std::fprintf(stderr, "%s\n", status.to_string().c_str());
    return 1;
  }
  DrafterOptions options;
  options.device = Device::Cuda;
  options.max_streams = 64;
  options.bits = bits;  // --bits 8: int8 copies for the GEMMs of few rows (session 20)
  const auto start = std::chrono::steady_clock::now();
  Result<std::unique_ptr<Drafter>> loaded = load_drafter(dir, target, options);
  const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!loaded.ok()) {
    std::fprintf(stderr, "%s\n", loaded.status().to_string().c_str());
    return 1;
  }
  auto& drafter = dynamic_cast<dspark::cuda::CudaDsparkDrafter&>(**loaded);
  const int64_t device_bytes = dspark::cuda::drafter_device_bytes();
  std::printf("\n| device | load s | device MiB (weights + scratch for 64 streams) |\n|---|---|---|\n");
  std::printf("| cuda | %.2f | %.1f |\n", load_s, device_bytes / 1048576.0);
  std::printf("\ngraphs captured at load: %d (every request bucket up to %d: block pass, scans of every depth) + %d "
              "(absorb row buckets) in %.1f ms\n", drafter.bucket_graphs_captured(), options.max_streams,
              drafter.absorb_graphs_captured(), drafter.bucket_capture_ms());
  if (rounds) {
    RoundOptions options = *rounds;
    options.context = context;
    options.tap_width = static_cast<int>(shape.taps.size()) * shape.hidden;
    return ls::bench::run_drafter_rounds(drafter, options, results);
  }
  results["loads"].push_back({{"device", "cuda"}, {"load_s", load_s}, {"device_bytes", device_bytes},
                              {"bucket_graphs", drafter.bucket_graphs_captured()},
                              {"absorb_graphs", drafter.absorb_graphs_captured()},
                              {"bucket_capture_ms", drafter.bucket_capture_ms()}});
  const std::vector<float> taps = bench_taps(context, static_cast<int64_t>(shape.taps.size()) * shape.hidden);
  std::vector<double> absorb_ms;
  std::vector<std::string> table;
  std::map<std::pair<int, int>, std::vector<Draft>> reference_drafts;  // (streams, depth) -> the first variant's
  // Pins applied only when they change (each setter drops the captured graphs); bucket graphs captured again then.
  std::optional<std::tuple<int, int, int, bool, int, bool, bool, bool, bool, int, bool, int>> applied;
  const dspark::cuda::PersistentHandoff default_handoff = drafter.persistent_handoff();
  const int loaded_parts = drafter.skinny_parts();
  const bool default_batched = drafter.batched_loads();
  for (int streams : stream_counts) {
    for (int stream = 0; stream < streams; ++stream) {
      if (drafter.context_length(stream) == context) continue;
      const auto absorb_start = std::chrono::steady_clock::now();
      if (Status status = drafter.absorb(stream, 0, context, taps); !status.ok()) {
        std::fprintf(stderr, "%s\n", status.to_string().c_str());
        return 1;
      }
      absorb_ms.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - absorb_start).count());
    }
    for (const auto& [attention_name, pin] : parse_attention(attention))
    for (const auto& [scan_name, fused, persistent, handoff] : parse_scan(scan))
    for (const bool engine : engine_gemms == "both" ? std::vector<bool>{false, true}
                                                    : std::vector<bool>{engine_gemms == "on"})
    for (const bool tuned_on : parse_switch(tuned_gemms, "on"))
    for (const int parts : !skinny_parts.empty() ? skinny_parts
                           : skinny == "both"    ? std::vector<int>{11, 0}
                           : skinny == "on"      ? std::vector<int>{11}
                           : skinny == "off"     ? std::vector<int>{0}
                                                 : std::vector<int>{loaded_parts})
    for (const bool tuned : parse_switch(launch, "tuned"))
    for (const bool bucketed : parse_switch(buckets, "on"))
    for (const bool split : parse_switch(pick, "split"))
    for (const int chunks : attention_chunks)
    for (const bool batched : loads_pin.empty() ? std::vector<bool>{default_batched}
                                                       : parse_switch(loads_pin, "batched"))
    for (int depth : {1, 3, shape.block}) for (const bool graphed : {false, true}) {
      if ((graphed && graphs == "off") || (!graphed && graphs == "on")) continue;
      drafter.set_graphs(graphed);
      const bool skinny_on = parts != 0;
      const auto pins = std::make_tuple(pin ? static_cast<int>(*pin) : -1, fused ? int{*fused} : -1,
                                        persistent ? int{*persistent} : -1, engine, parts, tuned_on, tuned,
                                        bucketed, split, chunks, batched,
                                        static_cast<int>(handoff.value_or(default_handoff)));
      if (!applied || *applied != pins) {
        applied = pins;
        drafter.set_attention_kernel(pin);
        drafter.set_fused_scan(fused);
        drafter.set_persistent_scan(persistent);
        drafter.set_persistent_handoff(handoff.value_or(default_handoff));
        drafter.set_engine_gemms(engine);
        drafter.set_skinny_parts(parts);
        drafter.set_tuned_gemms(tuned_on);
        drafter.set_launch_tuning(tuned, tuned);
        drafter.set_request_buckets(bucketed);
        drafter.set_split_pick(split);
        drafter.set_attention_chunks(chunks);
        drafter.set_batched_loads(batched);
        drafter.set_graphs(true);
        drafter.capture_bucket_graphs();  // none when buckets are off: then the second sighting captures
        drafter.set_graphs(graphed);
      }
      std::vector<DraftRequest> requests(streams);
      for (int stream = 0; stream < streams; ++stream) {
        requests[stream].stream = stream;
        requests[stream].anchor_token = 100 + stream;
        requests[stream].anchor_position = context;
        requests[stream].depth = depth;
      }
      std::vector<double> block_ms, scan_ms, wall_ms;
      // Every pass drafts the same requests: a failed draft or tokens unlike the first pass's are counted (a
      // variant under test must not fail or drift), not fatal.
      const auto first_start = std::chrono::steady_clock::now();
      std::vector<Draft> first = drafter.draft(requests);
      const auto second_start = std::chrono::steady_clock::now();
      drafter.draft(requests);  // without buckets, a graph is captured at the second sighting
      const auto second_end = std::chrono::steady_clock::now();
      const double first_ms = std::chrono::duration<double, std::milli>(second_start - first_start).count();
      const double second_ms = std::chrono::duration<double, std::milli>(second_end - second_start).count();
      {
        // Variants against the first one timed for this (streams, depth): drafts with other tokens or chance bits
        // (the persistent scan must give the fused step's bits; the GEMM scan may differ at near-ties).
        std::vector<Draft>& reference = reference_drafts[{streams, depth}];
        if (reference.empty()) {
          reference = first;
        } else {
          int unlike = 0;
          for (size_t i = 0; i < first.size(); ++i) {
            const bool same_chances =
                first[i].chances.size() == reference[i].chances.size() &&
                std::memcmp(first[i].chances.data(), reference[i].chances.data(),
                            first[i].chances.size() * sizeof(float)) == 0;
            if (first[i].tokens != reference[i].tokens || !same_chances) ++unlike;
          }
          if (unlike) {
            std::printf("note: streams %d depth %d scan %s graphs %d: %d of %zu drafts unlike the first variant's\n",
                        streams, depth, scan_name.c_str(), graphed ? 1 : 0, unlike, first.size());
          }
        }
      }
      int failed = 0, drifted = 0;
      for (int repeat = 0; repeat < repeats; ++repeat) {
        const auto pass_start = std::chrono::steady_clock::now();
        const std::vector<Draft> drafts = drafter.draft(requests);
        wall_ms.push_back(
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - pass_start).count());
        for (size_t i = 0; i < drafts.size(); ++i) {
          if (!drafts[i].status.ok()) {
            if (failed++ == 0) std::fprintf(stderr, "%s\n", drafts[i].status.to_string().c_str());
          } else if (drafts[i].tokens != first[i].tokens) {
            ++drifted;
          }
        }
        block_ms.push_back(drafter.last_block_ms());
        scan_ms.push_back(drafter.last_scan_ms());
      }
      if (failed || drifted) {
        std::printf("!! streams %d depth %d graphs %d skinny %d: %d failed drafts, %d drafts unlike the first pass\n",
                    streams, depth, graphed ? 1 : 0, skinny_on ? 1 : 0, failed, drifted);
      }
      char row[320];
      const std::string gemm_name = engine ? "engine"
                                    : (skinny_on && streams * shape.block <= 16
                                           ? "skinny" + std::to_string(parts)
                                                                 : (tuned_on ? "tuned" : "cublas"));
      const char* gemms = gemm_name.c_str();
      const std::string scan_cell = scan_name + (split ? " split" : "");
      const std::string attention_cell =
          attention_name + (chunks > 0 ? " /" + std::to_string(chunks) : "") + (batched ? " batched" : "");
      std::snprintf(row, sizeof row, "| cuda | %s | %s | %s | %s | %s | %s | %d | %d | %.3f | %.3f | %.3f | %.3f / %.3f |",
                    graphed ? "on" : "off", bucketed ? "on" : "off", attention_cell.c_str(), scan_cell.c_str(),
                    gemms, tuned ? "tuned" : "plain", streams, depth, median(block_ms), median(scan_ms),
                    median(wall_ms), first_ms, second_ms);
      table.push_back(row);
      results["runs"].push_back({{"device", "cuda"},
                                 {"graphs", graphed},
                                 {"attention", attention_name},
                                 {"scan", scan_name},
                                 {"gemms", gemms},
                                 {"launch", tuned ? "tuned" : "plain"},
                                 {"streams", streams},
                                 {"depth", depth},
                                 {"block_ms", median(block_ms)},
                                 {"scan_ms", median(scan_ms)},
                                 {"wall_ms", median(wall_ms)},
                                 {"buckets", bucketed},
                                 {"split_pick", split},
                                 {"attention_chunks", chunks},
                                 {"batched_loads", batched},
                                 {"first_wall_ms", first_ms},
                                 {"second_wall_ms", second_ms}});
    }
  }
  std::printf("\nabsorb of %d context rows: median %.3f ms (wall, host taps to device K/V)\n", context,
              median(absorb_ms));
  results["absorb_ms"] = median(absorb_ms);
  std::printf("\ngraph replays %lld, graph capture failures %lld\n",
              static_cast<long long>(drafter.graph_replays()), static_cast<long long>(drafter.graph_failures()));
  std::printf("\n| device | graphs | buckets | attention | scan | GEMMs | launch | streams | depth | block pass ms | "
              "Markov scan ms | draft() wall ms | 1st / 2nd wall ms |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  if (drafter.tuned_gemm_shapes() > 0) {
    const auto [tuned_us, default_us] = drafter.tuned_gemm_us();
    std::printf("\ntuned GEMMs: %zu shapes, summed device us of the picks %.1f vs cublasLt's first candidate %.1f\n",
                drafter.tuned_gemm_shapes(), tuned_us, default_us);
  }
  drafter.set_engine_gemms(false);
  drafter.set_tuned_gemms(tuned_gemms == "on");  // the profile below: tuned GEMMs where asked for
  // The profile below: skinny GEMMs where asked for, else the parts at load.
  drafter.set_skinny_parts(skinny == "on" ? 11 : skinny == "off" ? 0 : loaded_parts);
  drafter.set_launch_tuning(true, true);
  drafter.set_request_buckets(true);
  drafter.set_attention_chunks(0);
  for (const std::string& row : table) std::printf("%s\n", row.c_str());
  if (profile) profile_cuda(drafter, shape.block, attention, results);
  return 0;
}

}  // namespace ls::bench
#endif  // LS_HAVE_CUDA
