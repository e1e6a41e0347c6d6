// The weight maps of the pipeline decode GEMM's tensor copies (gemm_decode_pipe.cuh, BOXES; issue 8, session 9): a 3D
// view {64, N, K / 64} of W (strides 2K and 128 bytes, 128-byte swizzle), so a box [64, rows, chunk] lands as a
// stage's [chunk tiles][rows][128 bytes] and one copy brings a stage's weights. Made once per (matrix, box) and kept.
#include <map>
#include <mutex>
#include <tuple>

#include "compute/cuda/gemm_decode_pipe.cuh"

namespace ls::cuda::gemm_detail {
namespace {

// A map is a function of the address, the shape and the box alone, so an entry stays right for any later matrix at
// the same address and shape.
using MapKey = std::tuple<const void*, int, int, int, int>;  // W, rows, K, box rows, chunk
std::mutex map_mutex;
std::map<MapKey, CUtensorMap> map_cache;

Status weight_map(CUtensorMap* out, const GemmArgs& args, int box_rows, int chunk) {
  const MapKey key{args.w, args.n, args.k, box_rows, chunk};
  std::lock_guard<std::mutex> lock(map_mutex);
  const auto found = map_cache.find(key);
  if (found != map_cache.end()) {
    *out = found->second;
    return ok_status();
  }
  CUtensorMap map;
  const cuuint64_t row_bytes = static_cast<cuuint64_t>(args.k) * 2;
  // [K / 64 tiles][rows][64]: a box lands as [chunk][box rows][128 bytes]
  const cuuint64_t dims[3] = {kBlockK, static_cast<cuuint64_t>(args.n), static_cast<cuuint64_t>(args.k / kBlockK)};
  const cuuint64_t strides[2] = {row_bytes, kBlockK * 2};
  const cuuint32_t box[3] = {kBlockK, static_cast<cuuint32_t>(box_rows), static_cast<cuuint32_t>(chunk)};
  LS_RETURN_IF_ERROR(encode_bf16_map(&map, args.w, 3, dims, strides, box));
  map_cache.emplace(key, map);
  *out = map;
  return ok_status();
}

}  // namespace

Status pipe_weight_maps(CUtensorMap* maps, const GemmArgs* args, int count, int box_rows, int chunk) {
  for (int i = 0; i < count; ++i) LS_RETURN_IF_ERROR(weight_map(&maps[i], args[i], box_rows, chunk));
  return ok_status();
}

}  // namespace ls::cuda::gemm_detail
