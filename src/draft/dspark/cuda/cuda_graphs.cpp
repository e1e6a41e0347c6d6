// The CUDA drafter's graphs: what a block pass, scan or one-graph pass holds (the absorb branch under
// set_absorb_in_pass), the inputs' upload and the records' copy back, and the graphs' capture at load.
#include <chrono>

#include "draft/dspark/cuda/absorb_kernels.h"
#include "draft/dspark/cuda/cuda_drafter.h"

namespace ls::dspark::cuda {

size_t CudaDsparkDrafter::upload_bytes(int padded) const {
  return scratch_.offsets[DeviceBlockScratch::kRecords] + static_cast<size_t>(padded) * sizeof(DeviceScanRecord);
}

Status CudaDsparkDrafter::upload_inputs(int padded) {
  return ls::cuda::cuda_status(cudaMemcpyAsync(scratch_.inputs.data(), staging_.data(), upload_bytes(padded),
                                               cudaMemcpyHostToDevice, stream_.get()),
                               "draft upload");
}

Status CudaDsparkDrafter::download_records(int count) {
  return ls::cuda::cuda_status(cudaMemcpyAsync(staging_.data() + scratch_.offsets[DeviceBlockScratch::kRecords],
                                               scratch_.records.data(), count * sizeof(DeviceScanRecord),
                                               cudaMemcpyDeviceToHost, stream_.get()),
                               "draft results copy");
}

Status CudaDsparkDrafter::block_graph(int count, int absorb_bucket) {
  if (absorb_bucket > 0) LS_RETURN_IF_ERROR(fork_absorb_branch(absorb_bucket));
  return block_pass(count);
}

Status CudaDsparkDrafter::scan_graph(int count, int depth) { return markov_scan(count, depth); }

Status CudaDsparkDrafter::one_graph_body(int count, int absorb_bucket, int depth) {
  LS_RETURN_IF_ERROR(block_graph(count, absorb_bucket));
  return one_graph_planted_ ? ok_status() : markov_scan(count, depth);
}

int CudaDsparkDrafter::capture_bucket_graphs() {
  // Exact counts (the old path) keep the capture at a shape's second sighting; tuned GEMMs time their picks eagerly.
  if (!graphs_on_ || profile_.on() || tuned_gemms_ || !request_buckets_) return 0;
  const auto start = std::chrono::steady_clock::now();
  const bool all_greedy = scan_all_greedy_, all_plain = scan_all_plain_;
  const int gamma = config_.block_size;
  int captured = 0;
  // Exactly the keys draft() asks for: the block pass per bucket; the persistent scan (one graph for every depth)
  // where a bucket of greedy requests takes it, else the step scans per (bucket, depth), for greedy and sampled.
  const bool long_context = long_context_;
  for (int bucket = 1; bucket <= scratch_.requests; bucket = request_bucket(bucket + 1)) {
    long_context_ = false;
    captured += capture_shape({bucket, 0}, [&] { return block_graph(bucket, 0); });
    const bool long_differs = block_pass_key(bucket, true) != 0;
    if (long_differs) {
      long_context_ = true;
      captured += capture_shape({bucket, kLongContextBlockKey}, [&] { return block_graph(bucket, 0); });
    }
    // A depth-independent scan's graph, and under set_one_graph its block pass and scan graphs of both contexts.
    auto capture_scan = [&](int scan_key) {
      int made = capture_shape({bucket, scan_key}, [&] { return scan_graph(bucket, gamma); });
      if (!one_graph_pass(scan_key)) return made;
      for (const bool long_keys : {false, true}) {
        if (long_keys && !long_differs) continue;
        long_context_ = long_keys;
        made += capture_shape({bucket, one_graph_key(long_keys ? kLongContextBlockKey : 0, scan_key)},
                              [&] { return one_graph_body(bucket, 0, gamma); });
      }
      return made;
    };
    for (const bool greedy : {true, false}) {
      scan_all_greedy_ = greedy;
      if (persistent_scan(bucket, greedy)) {
        captured += capture_scan(kPersistentScanKey);
        continue;
      }
      scan_all_plain_ = true;  // sampled requests without cuts may take the keyed persistent scan
      if (keyed_scan(bucket)) captured += capture_scan(kKeyedScanKey);
      scan_all_plain_ = false;
      for (int depth = 1; depth <= gamma; ++depth) {
        captured += capture_shape({bucket, depth}, [&] { return scan_graph(bucket, depth); });
      }
    }
  }
  // Session 19: a pass of one request with an absorb of each row bucket inside (set_absorb_in_pass), under each of
  // its block keys, and under set_one_graph with its persistent or keyed scan too.
  if (absorb_in_pass_ && absorb_.sink.size() > 0 && ready_absorb_branch().ok()) {
    const bool long_differs = block_pass_key(1, true) != 0;
    for (int rows = 1; rows <= kAbsorbPassRows; rows = request_bucket(rows + 1)) {
      for (const bool long_keys : {false, true}) {
        if (long_keys && !long_differs) continue;
        long_context_ = long_keys;
        const int block_key = block_pass_key(1, long_keys);
        captured += capture_shape({absorb_pass_first(1, rows), block_key}, [&] { return block_graph(1, rows); });
        for (const bool greedy : {true, false}) {
          scan_all_greedy_ = greedy;
          scan_all_plain_ = true;
          const int scan_key = persistent_scan(1, greedy) ? kPersistentScanKey
                               : keyed_scan(1)            ? kKeyedScanKey
                                                          : gamma;
          if (!one_graph_pass(scan_key)) continue;
          captured += capture_shape({absorb_pass_first(1, rows), one_graph_key(block_key, scan_key)},
                                    [&] { return one_graph_body(1, rows, gamma); });
        }
      }
    }
  }
  scan_all_greedy_ = all_greedy;
  scan_all_plain_ = all_plain;
  long_context_ = long_context;
  if (absorb_.sink.size() > 0) capture_absorb_graphs();
  bucket_graphs_captured_ = captured;
  bucket_capture_ms_ =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return captured;
}

}  // namespace ls::dspark::cuda
