// Drafter-only micro-benchmark: block pass and Markov scan time per stream count and depth, bf16 vs int8 on the CPU,
// bf16 on the CUDA device (--device cuda: streams 1..64, device time by CUDA events), plus load time and memory.
// Prints a table and writes JSON; tables, not assertions.
//
//   drafter_bench [--shape lfm2.5-1.2b|lfm2.5-8b-a1b|small] [--layers N] [--threads T] [--context ROWS]
//                 [--repeats R] [--bits 0|8|both] [--device cpu|cuda] [--json PATH] [--dir SCRATCH_DIR]
//                 (cuda: --bits 8 loads int8 copies beside the bf16 weights; rounds' ":iN" / ":i0" settings pick them)
//   cuda kernels: --int8-kernels [--rows 1,9,16,27,32]: the drafter's GEMMs alone, bf16 against int8
//   cuda only:    [--graphs on|off|both] [--attention auto|warp,tile,split,cooperative,head]
//                 [--scan auto|fused|gemm|persistent|counter|flags|handoff|both|all]
//                 [--engine-gemms off|on|both] [--tuned-gemms off|on|both] [--skinny auto|on|off|both]
//                 [--launch tuned|plain|both] [--profile] [--buckets on|off|both] [--streams 1,4,8,16,32,64]
//                 [--pick single|split|both] [--attention-chunks 0,8,16] [--skinny-parts 0,2,10]
//                 [--loads serial|batched|both]
//                 (--loads: the split attention's and the residual norms' loads one at a time or batched,
//                 set_batched_loads; the same bits; default: the drafter's own)
//                 (--skinny-parts: skinny_gemm per GEMM kind, a mask per variant: 1 q/k/v and head, 2 gate/up + SwiGLU,
//                 8 o/down then the norm launch; overrides --skinny)
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
//                 set_short_context_head, ":s256" for set_head_stage_keys(256), ":split" for set_sampled_split,
//                 ":samp" / ":topp" for sampled requests) in B interleaved blocks of N rounds
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
#include "drafter_bench_setup.h"
#ifdef LS_HAVE_CUDA
#include "drafter_rounds.h"
#endif

using ls::bench::BenchTarget;
using ls::bench::bench_taps;
using ls::bench::kShapes;
using ls::bench::median;
using ls::bench::parse_list;
using ls::bench::Shape;
#ifdef LS_HAVE_CUDA
using ls::bench::RoundOptions;
#endif

namespace {

using namespace ls;
using json = nlohmann::json;

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

#ifdef LS_HAVE_CUDA
  if (std::any_of(argv + 1, argv + argc, [](const char* arg) { return std::strcmp(arg, "--int8-kernels") == 0; })) {
    json kernels = {{"shape", shape.name}, {"int8_kernels", json::array()}};
    const int code = run_int8_kernels(shape, parse_list(flag(argc, argv, "--rows", "1,9,16,27,32")), repeats, kernels);
    if (code != 0) return code;
    std::filesystem::create_directories(std::filesystem::path(json_path).parent_path());
    std::ofstream(json_path) << kernels.dump(2) << "\n";
    return 0;
  }
#endif
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
                              flag(argc, argv, "--loads", ""), rounds > 0 ? &round_options : nullptr,
                              flag(argc, argv, "--bits", "0") == "8" ? 8 : 0, results);
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
