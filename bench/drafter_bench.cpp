// Drafter-only micro-benchmark: block pass and Markov scan time per stream count and depth, bf16 vs int8 on the CPU,
// bf16 on the CUDA device (--device cuda: streams 1..64, device time by CUDA events), plus load time and memory.
// Prints a table and writes JSON; tables, not assertions.
//
//   drafter_bench [--shape lfm2.5-1.2b|lfm2.5-8b-a1b|small] [--layers N] [--threads T] [--context ROWS]
//                 [--repeats R] [--bits 0|8|both] [--device cpu|cuda] [--json PATH] [--dir SCRATCH_DIR]
//   cuda only:    [--graphs on|off|both] [--attention auto|warp,tile,split,cooperative,head]
//                 [--scan auto|fused|gemm|persistent|counter|flags|handoff|both|all]
//                 [--engine-gemms off|on|both] [--tuned-gemms off|on|both] [--skinny auto|on|off|both]
//                 [--launch tuned|plain|both] [--profile] [--buckets on|off|both] [--streams 1,4,8,16,32,64]
//                 [--pick single|split|both] [--attention-chunks 0,8,16] [--skinny-parts 0,2,10]
//                 [--loads serial|batched|both]
//                 (--loads: the split attention's and the residual norms' loads one at a time or batched,
//                 set_batched_loads; the same bits; default: the drafter's own)
//                 (--skinny-parts: skinny_gemm per GEMM kind, a mask per variant: 1 q/k/v and head, 2 gate/up + SwiGLU,
//                 4 o/down + residual norm epilogue, 8 o/down then the norm launch; overrides --skinny)
//                 (--attention-chunks: the split attention's key chunks per request and KV head, 0 = automatic)
//                 (--pick: the GEMM scan's pick in one CTA per request, or split over vocab chunks then a CTA)
//                 (--buckets: request counts padded to request_bucket() with every bucket's graphs captured at
//                 load (on), or exact counts with graphs captured at a shape's second sighting (off); the table's
//                 "1st / 2nd wall" columns are the first two draft() calls of a shape, where captures land)
//                 (--tuned-gemms: cublasLt GEMMs with each shape's algorithm picked by timing at its first pass)
//                 (--skinny: GEMMs of <= 16 rows through skinny_gemm or cuBLAS; --launch: programmatic launches and the
//                 scan's W2 L2 hint on (tuned) or off (plain))
//                 (--profile: per-launch device ms of an eager pass at 1, 8, 64 streams for each variant)
//                 [--rounds N [--round-blocks B] [--round-depth D] [--round-settings 0,40,0:head]]: instead of
//                 the table, lanes-like rounds at the first --streams count (absorb_device of ~5.5 rows, then a
//                 pass), timed piece by piece, each setting ("MiB" of set_l2_prefetch, ":head" for
//                 set_short_context_head, ":s256" for set_head_stage_keys(256), ":fold" for set_fold_heads, ":held"
//                 for set_held_norms) in B interleaved blocks of N rounds
// Memory: "loader peak" is the loader's own byte count (final weights + the one staged matrix); "peak anon RSS"
// samples RssAnon every millisecond during the load (file pages of the mapped checkpoint excluded); run one
// --bits per process for a clean RSS baseline.
#include <algorithm>
#include <atomic>
#include <thread>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <tuple>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/hash.h"
#include "base/log.h"
#include "base/thread_pool.h"
#include "compute/ops.h"
#include "draft/dspark/dspark_drafter.h"
#include "io/safetensors.h"
#ifdef LS_HAVE_CUDA
#include "compute/cuda/cuda_util.h"
#include "draft/dspark/cuda/cuda_drafter.h"
#include "draft/load.h"
#endif

#include "bench_util.h"
#ifdef LS_HAVE_CUDA
#include "drafter_rounds.h"
#endif

using ls::bench::median;
using ls::bench::parse_list;
#ifdef LS_HAVE_CUDA
using ls::bench::RoundOptions;
#endif

namespace {

using namespace ls;
using json = nlohmann::json;

struct Shape {
  std::string name;
  int vocab, hidden, layers, heads, kv_heads, head_dim, ffn, block, rank, target_layers;
  std::vector<int> taps;
};

const Shape kShapes[] = {
    {"lfm2.5-1.2b", 65536, 2048, 5, 32, 8, 64, 6144, 9, 256, 16, {2, 5, 8, 11, 14}},
    {"lfm2.5-8b-a1b", 128000, 2048, 5, 32, 8, 64, 6144, 9, 256, 24, {2, 6, 10, 14, 18}},
    {"small", 16384, 512, 2, 8, 4, 64, 1536, 9, 64, 16, {2, 5, 8, 11, 14}},
};

// The target's tied embedding/head as bf16 (what a served target holds), on its own thread pool.
class BenchTarget final : public Target {
 public:
  BenchTarget(const Shape& shape, int threads) : pool_(threads > 1 ? std::make_unique<ThreadPool>(threads) : nullptr) {
    facts_.vocab_size = shape.vocab;
    facts_.hidden_size = shape.hidden;
    facts_.num_layers = shape.target_layers;
    embedding_.resize(static_cast<size_t>(shape.vocab) * shape.hidden);
    for (size_t i = 0; i < embedding_.size(); ++i)
      embedding_[i] = float_to_bf16(static_cast<float>(uniform_open01(splitmix64(i + 77)) * 0.2 - 0.1));
  }
  const TargetFacts& facts() const override { return facts_; }
#ifdef LS_HAVE_CUDA
  // Puts E on the CUDA device, as a CUDA target holds it (the drafter shares it through device_embedding()).
  Status upload_embedding() {
    LS_RETURN_IF_ERROR(device_embedding_.allocate(embedding_.size()));
    LS_CUDA_TRY(cudaMemcpy(device_embedding_.data(), embedding_.data(), embedding_.size() * sizeof(bf16),
                           cudaMemcpyHostToDevice));
    return ok_status();
  }
  const void* device_embedding() const override { return device_embedding_.data(); }
#endif
  Status set_taps(std::span<const int>) override { return ok_status(); }
  Result<Verified> forward(std::span<const Window>) override { return Status(ErrorCode::Internal, "no forward"); }
  Status commit(StreamId, int) override { return ok_status(); }
  int64_t committed_length(StreamId) const override { return 0; }
  void release(StreamId) override {}
  Status embed(std::span<const int32_t> tokens, std::span<float> out) const override {
    const size_t d = static_cast<size_t>(facts_.hidden_size);
    for (size_t row = 0; row < tokens.size(); ++row)
      for (size_t j = 0; j < d; ++j) out[row * d + j] = bf16_to_float(embedding_[tokens[row] * d + j]);
    return ok_status();
  }
  Status head(std::span<const float> hidden, int rows, std::span<float> out) const override {
    const compute::Matrix matrix{nullptr, embedding_.data(), nullptr, facts_.vocab_size, facts_.hidden_size};
    compute::matmul(compute::OpContext{pool_.get(), compute::NumericMode::Fp32}, hidden.data(), rows, matrix,
                    out.data());
    return ok_status();
  }

 private:
  std::unique_ptr<ThreadPool> pool_;
  TargetFacts facts_;
  std::vector<bf16> embedding_;
#ifdef LS_HAVE_CUDA
  cuda::DeviceBuffer<bf16> device_embedding_;
#endif
};

// Writes config.json + model.safetensors for `shape`, streaming one tensor at a time (pseudo-random bf16).
Status write_drafter(const std::string& dir, const Shape& shape) {
  std::filesystem::create_directories(dir);
  json config = {{"architectures", {"Lfm2DSparkDraftModel"}},
                 {"model_type", "qwen3"},
                 {"hidden_size", shape.hidden},
                 {"num_hidden_layers", shape.layers},
                 {"num_attention_heads", shape.heads},
                 {"num_key_value_heads", shape.kv_heads},
                 {"head_dim", shape.head_dim},
                 {"intermediate_size", shape.ffn},
                 {"hidden_act", "silu"},
                 {"rms_norm_eps", 1e-5},
                 {"vocab_size", shape.vocab},
                 {"rope_theta", 1e6},
                 {"block_size", shape.block},
                 {"dflash_config",
                  {{"mask_token_id", shape.vocab - 2},
                   {"target_layer_ids", shape.taps},
                   {"num_target_layers", shape.target_layers}}},
                 {"markov_rank", shape.rank},
                 {"markov_head_type", "vanilla"},
                 {"rope_is_neox_style", false},
                 {"enable_confidence_head", true}};
  std::ofstream(dir + "/config.json") << config.dump(2);
  LS_ASSIGN_OR_RETURN(dspark::DsparkConfig parsed, dspark::parse_dspark_config(config.dump()));
  std::vector<io::TensorHeader> headers;
  for (const dspark::ManifestEntry& entry : dspark::draft_manifest(parsed))
    headers.push_back(io::TensorHeader{entry.name, io::DType::BF16, entry.shape});
  LS_ASSIGN_OR_RETURN(std::unique_ptr<io::SafetensorsWriter> writer,
                      io::SafetensorsWriter::open(dir + "/model.safetensors", headers));
  uint64_t counter = 1;
  for (const io::TensorHeader& header : headers) {
    const bool gain = header.shape.size() == 1;
    const double scale = header.shape.size() == 2 ? 1.5 / std::sqrt(static_cast<double>(header.shape[1])) : 0.1;
    std::vector<bf16> values(header.bytes() / 2);
    for (bf16& value : values)
      value = float_to_bf16(
          static_cast<float>((gain ? 1.0 : 0.0) + (2 * uniform_open01(splitmix64(counter++)) - 1) * scale));
    LS_RETURN_IF_ERROR(writer->append(std::as_bytes(std::span<const bf16>(values))));
  }
  return writer->finish();
}

// A field of /proc/self/status in KiB (VmRSS, VmHWM, RssAnon, RssFile).
int64_t status_kib(const char* field) {
  std::ifstream file("/proc/self/status");
  std::string line;
  while (std::getline(file, line))
    if (line.rfind(field, 0) == 0) return std::stoll(line.substr(std::strlen(field) + 1));
  return -1;
}

void reset_peak_rss() { std::ofstream("/proc/self/clear_refs") << "5"; }

std::string flag(int argc, char** argv, const char* name, const char* fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return argv[i + 1];
  return fallback;
}

std::vector<float> bench_taps(int64_t rows, int64_t width) {
  std::vector<float> taps(static_cast<size_t>(rows * width));
  for (size_t i = 0; i < taps.size(); ++i) taps[i] = static_cast<float>(2 * uniform_open01(splitmix64(i + 5)) - 1);
  return taps;
}

#ifdef LS_HAVE_CUDA
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

// The CUDA drafter: load, absorb of the context, then draft passes by streams (1..64) and depth, device times.
// graphs: "on", "off" or "both" (each (streams, depth) timed eagerly and through CUDA graphs, after 2 untimed passes).
// attention: the variants to time ("auto" or a list of warp, tile, split); scan: "fused", "gemm" or "both".
// "both" -> {true, false}; else whether `text` is `on_name`.
std::vector<bool> parse_switch(const std::string& text, const char* on_name) {
  if (text == "both") return {true, false};
  return {text == on_name};
}

int run_cuda(const Shape& shape, const std::string& dir, BenchTarget& target, int context, int repeats,
             const std::string& graphs, const std::string& attention, const std::string& scan,
             const std::string& engine_gemms, const std::string& tuned_gemms, const std::string& skinny,
             const std::string& launch, bool profile, const std::string& buckets, const std::string& pick,
             const std::vector<int>& attention_chunks, const std::vector<int>& skinny_parts,
             const std::vector<int>& stream_counts, const std::string& loads_pin, const RoundOptions* rounds,
             json& results) {
  if (Status status = target.upload_embedding(); !status.ok()) {
    std::fprintf(stderr, "%s\n", status.to_string().c_str());
    return 1;
  }
  DrafterOptions options;
  options.device = Device::Cuda;
  options.max_streams = 64;
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
                           : skinny == "both"    ? std::vector<int>{7, 0}
                           : skinny == "on"      ? std::vector<int>{7}
                           : skinny == "off"     ? std::vector<int>{0}
                                                 : std::vector<int>{dspark::cuda::CudaDsparkDrafter::kDefaultSkinnyParts})
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
  // The profile below: skinny GEMMs where asked for, else the default parts.
  drafter.set_skinny_parts(skinny == "on" ? 7 : skinny == "off" ? 0 : dspark::cuda::CudaDsparkDrafter::kDefaultSkinnyParts);
  drafter.set_launch_tuning(true, true);
  drafter.set_request_buckets(true);
  drafter.set_attention_chunks(0);
  for (const std::string& row : table) std::printf("%s\n", row.c_str());
  if (profile) profile_cuda(drafter, shape.block, attention, results);
  return 0;
}
#endif

}  // namespace

int main(int argc, char** argv) {
  set_log_level(LogLevel::Warn);
  const std::string shape_name = flag(argc, argv, "--shape", "lfm2.5-1.2b");
  const int threads = std::stoi(flag(argc, argv, "--threads", "2"));
  const int context = std::stoi(flag(argc, argv, "--context", "128"));
  const int repeats = std::stoi(flag(argc, argv, "--repeats", "3"));
  const std::string json_path = flag(argc, argv, "--json", "bench/results/drafter_bench.json");
  const std::string dir = flag(argc, argv, "--dir", "/tmp/lanespark_drafter_bench");
  const Shape* found = nullptr;
  for (const Shape& shape : kShapes)
    if (shape.name == shape_name) found = &shape;
  if (!found) {
    std::fprintf(stderr, "unknown --shape %s (lfm2.5-1.2b, lfm2.5-8b-a1b, small)\n", shape_name.c_str());
    return 2;
  }
  Shape shape = *found;
  shape.layers = std::stoi(flag(argc, argv, "--layers", std::to_string(shape.layers).c_str()));

  if (Status status = write_drafter(dir, shape); !status.ok()) {
    std::fprintf(stderr, "%s\n", status.to_string().c_str());
    return 1;
  }
  BenchTarget target(shape, threads);
  const std::string device = flag(argc, argv, "--device", "cpu");
  json results = {{"shape", shape.name},
                  {"device", device},
                  {"layers", shape.layers},
                  {"threads", threads},
                  {"context", context},
                  {"matmul_kernel", compute::matmul_kernel_name()},
                  {"runs", json::array()},
                  {"loads", json::array()}};
  std::printf("drafter bench: %s (%d layers, vocab %d, block %d, rank %d), %d threads, context %d rows, kernel %s\n",
              shape.name.c_str(), shape.layers, shape.vocab, shape.block, shape.rank, threads, context,
              compute::matmul_kernel_name());
  if (device == "cuda") {
#ifdef LS_HAVE_CUDA
    const bool profile = std::any_of(argv + 1, argv + argc, [](const char* arg) { return std::strcmp(arg, "--profile") == 0; });
    const int rounds = std::stoi(flag(argc, argv, "--rounds", "0"));
    RoundOptions round_options;
    round_options.rounds = rounds;
    round_options.blocks = std::stoi(flag(argc, argv, "--round-blocks", "3"));
    round_options.depth = std::stoi(flag(argc, argv, "--round-depth", std::to_string(shape.block).c_str()));
    round_options.streams = parse_list(flag(argc, argv, "--streams", "1")).front();
    round_options.settings.clear();
    std::stringstream settings(flag(argc, argv, "--round-settings", "0"));
    for (std::string item; std::getline(settings, item, ',');) round_options.settings.push_back(item);
    const int code = run_cuda(shape, dir, target, context, repeats, flag(argc, argv, "--graphs", "both"),
                              flag(argc, argv, "--attention", "auto"), flag(argc, argv, "--scan", "auto"),
                              flag(argc, argv, "--engine-gemms", "off"), flag(argc, argv, "--tuned-gemms", "off"),
                              flag(argc, argv, "--skinny", "auto"),
                              flag(argc, argv, "--launch", "tuned"), profile, flag(argc, argv, "--buckets", "on"),
                              flag(argc, argv, "--pick", "split"),
                              parse_list(flag(argc, argv, "--attention-chunks", "0")),
                              flag(argc, argv, "--skinny-parts", "").empty()
                                  ? std::vector<int>{}
                                  : parse_list(flag(argc, argv, "--skinny-parts", "")),
                              parse_list(flag(argc, argv, "--streams", "1,4,8,16,32,64")),
                              flag(argc, argv, "--loads", ""), rounds > 0 ? &round_options : nullptr, results);
    if (code != 0) return code;
    std::filesystem::create_directories(std::filesystem::path(json_path).parent_path());
    std::ofstream(json_path) << results.dump(2) << "\n";
    std::printf("\nwrote %s\n", json_path.c_str());
    std::filesystem::remove_all(dir);
    return 0;
#else
    std::fprintf(stderr, "--device cuda: this build has no CUDA backend\n");
    return 2;
#endif
  }
  std::printf("\n| bits | load s | weights MiB | loader peak MiB | anon RSS before MiB | peak anon RSS MiB | "
              "anon RSS after MiB | peak RSS (with file pages) MiB |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  std::vector<std::string> table;
  const int depths[] = {1, 3, shape.block};
  const std::string bits_flag = flag(argc, argv, "--bits", "both");
  std::vector<int> bit_modes;
  if (bits_flag != "8") bit_modes.push_back(0);
  if (bits_flag != "0") bit_modes.push_back(8);
  for (int bits : bit_modes) {
    ls::DrafterOptions options;
    options.bits = bits;
    options.threads = threads;
    const int64_t rss_before = status_kib("VmRSS");
    const int64_t anon_before = status_kib("RssAnon");
    reset_peak_rss();
    std::atomic<bool> loading{true};
    std::atomic<int64_t> anon_peak{anon_before};
    std::thread sampler([&] {
      while (loading) {
        anon_peak = std::max<int64_t>(anon_peak, status_kib("RssAnon"));
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    });
    const auto start = std::chrono::steady_clock::now();
    Result<std::unique_ptr<dspark::DsparkDrafter>> loaded = dspark::DsparkDrafter::load(dir, target, options);
    const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    loading = false;
    sampler.join();
    if (!loaded.ok()) {
      std::fprintf(stderr, "%s\n", loaded.status().to_string().c_str());
      return 1;
    }
    dspark::DsparkDrafter& drafter = **loaded;
    const int64_t peak = status_kib("VmHWM"), anon = status_kib("RssAnon");
    std::printf("| %d | %.2f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f |\n", bits, load_s,
                drafter.weight_bytes() / 1048576.0, drafter.loader_peak_bytes() / 1048576.0, anon_before / 1024.0,
                anon_peak / 1024.0, anon / 1024.0, peak / 1024.0);
    results["loads"].push_back({{"bits", bits},
                                {"load_s", load_s},
                                {"weight_bytes", drafter.weight_bytes()},
                                {"loader_peak_bytes", drafter.loader_peak_bytes()},
                                {"rss_before_kib", rss_before}, {"anon_before_kib", anon_before},
                                {"anon_peak_kib", anon_peak.load()},
                                {"peak_rss_kib", peak},
                                {"anon_rss_after_kib", anon}});
    const std::vector<float> taps = bench_taps(context, static_cast<int64_t>(shape.taps.size()) * shape.hidden);
    for (int streams : {1, 4, 8, 16}) {
      for (int stream = 0; stream < streams; ++stream) {
        if (drafter.context_length(stream) == context) continue;
        if (Status status = drafter.absorb(stream, 0, context, taps); !status.ok()) {
          std::fprintf(stderr, "%s\n", status.to_string().c_str());
          return 1;
        }
      }
      for (int depth : depths) {
        std::vector<DraftRequest> requests(streams);
        for (int stream = 0; stream < streams; ++stream) {
          requests[stream].stream = stream;
          requests[stream].anchor_token = 100 + stream;
          requests[stream].anchor_position = context;
          requests[stream].depth = depth;
        }
        std::vector<double> block_ms, scan_ms;
        for (int repeat = 0; repeat < repeats; ++repeat) {
          const std::vector<Draft> drafts = drafter.draft(requests);
          if (!drafts[0].status.ok()) {
            std::fprintf(stderr, "%s\n", drafts[0].status.to_string().c_str());
            return 1;
          }
          block_ms.push_back(drafter.last_block_ms());
          scan_ms.push_back(drafter.last_scan_ms());
        }
        char row[256];
        std::snprintf(row, sizeof row, "| %d | %d | %d | %.1f | %.2f | %.1f |", bits, streams, depth, median(block_ms),
                      median(scan_ms), median(block_ms) + median(scan_ms));
        table.push_back(row);
        results["runs"].push_back({{"bits", bits},
                                   {"streams", streams},
                                   {"depth", depth},
                                   {"block_ms", median(block_ms)},
                                   {"scan_ms", median(scan_ms)}});
      }
    }
  }
  std::printf("\n| bits | streams | depth | block pass ms | Markov scan ms | total ms |\n|---|---|---|---|---|---|\n");
  for (const std::string& row : table) std::printf("%s\n", row.c_str());
  std::filesystem::create_directories(std::filesystem::path(json_path).parent_path());
  std::ofstream(json_path) << results.dump(2) << "\n";
  std::printf("\nwrote %s\n", json_path.c_str());
  std::filesystem::remove_all(dir);
  return 0;
}
