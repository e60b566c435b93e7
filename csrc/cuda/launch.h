// Interface between the CUDA op (fused_add_rmsnorm_fp8_block_quant.cu: validation, launch
// table) and the kernels (kernel.cuh, instantiated once per dtype in kernel_<dtype>.cu).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "../common/fp8norm.h"

namespace fp8norm {
namespace cuda {

// More vectors per thread need more registers: 4 vectors per thread fit without spills only
// with at most 512 threads per CTA (128 registers per thread).
constexpr int max_threads_per_cta(int vpt) { return vpt == 1 ? 1024 : 512; }

// 32-bit registers per SM (sm_70 .. sm_90).
constexpr int kRegsPerSm = 65536;

// The lean kernel with several vectors per thread (LaunchConfig::lean_vpt > 1): kLeanVpt of
// them (rows of an odd number of blocks), kLeanVptEven (2-byte rows of whole warps) or
// kLeanVptFour (rows of whole warps of four vectors), in CTAs of at most kLeanVptMaxThreads
// threads (kLeanVptFourMaxThreads for kLeanVptFour: bf16 H = 32768 in 1024, benchmarks/NOTES.md
// v55-v56), at least kLeanVptMinCtas per SM (one for 1024 threads), so at most
// kLeanVptMaxRegs registers either way: lean_vpt_max_threads / lean_vpt_min_ctas.
constexpr int kLeanVpt = 3;
constexpr int kLeanVptEven = 2;
constexpr int kLeanVptFour = 4;
constexpr int kLeanVptMaxThreads = 256;
constexpr int kLeanVptMinCtas = 4;
constexpr int kLeanVptMaxRegs = kRegsPerSm / (kLeanVptMaxThreads * kLeanVptMinCtas);
constexpr int kLeanVptFourMaxThreads = 1024;
// The launch bounds of the lean kernel with `vpt` vectors per thread (vpt > 1): the most threads
// a CTA, and the fewest CTAs per SM, at kLeanVptMaxRegs registers.
constexpr int lean_vpt_max_threads(int vpt) { return vpt == kLeanVptFour ? kLeanVptFourMaxThreads : kLeanVptMaxThreads; }
constexpr int lean_vpt_min_ctas(int vpt) { return kRegsPerSm / (lean_vpt_max_threads(vpt) * kLeanVptMaxRegs); }
static_assert(lean_vpt_min_ctas(kLeanVpt) == kLeanVptMinCtas, "one register bound for every lean vpt");
// Whether the lean kernel of kLeanVptFour vectors per thread is built for this op and weight: the
// fused op's only with a weight of the input's dtype (a float32 weight with a 2-byte input
// spilled and was 3-5% slower than the 4-vector rows, benchmarks/NOTES.md v56). launch_config
// takes lean four rows only where it is; launch_one instantiates it only there.
constexpr bool lean_four_built(bool has_residual, bool weight_is_float, int64_t elem_size) {
  return !has_residual || !weight_is_float || elem_size == 4;
}

// Narrow vectors: the one-row CTAs of Layout::kRowVec1 may give each thread 8 bytes of its row
// instead of 16 (LaunchConfig::vec_bytes; 2-byte types: rows of an odd number of half-warps
// become whole warps).
constexpr int kNarrowVecBytes = 8;

// The most CTAs one row is split over (a thread-block cluster; 8 is the portable maximum).
constexpr int kMaxCluster = 8;

// The most warps (or half-warps) of one row in one CTA.
constexpr int kMaxWarpsPerRow = 32;

// Shared memory of a CTA before its stash: the warps' sums of squares,
// red[rows_per_cta][kMaxWarpsPerRow] (double), the slices' sums, cluster_red[kMaxCluster]
// (double), and the mbarrier of the cluster exchange (8 bytes, padded to 16 so that the stash
// that follows stays 16-byte aligned).
constexpr size_t reduction_smem_bytes(int rows_per_cta) {
  return sizeof(double) * (static_cast<size_t>(kMaxWarpsPerRow) * rows_per_cta + kMaxCluster) + 16;
}

// How a CTA's threads cover rows (one kernel instantiation each, so that no kernel carries
// code it never runs):
//   kWarpRows      each row (whole, one CTA) in whole warps, rows_per_cta rows per CTA
//   kHalfWarpRows  each row (whole, one CTA) in whole half-warps: a warp may hold the end of one
//                  row and the start of the next (2-byte types only)
//   kClusterSlices each row split into slices over the CTAs of a thread-block cluster (sm_90+)
//   kWarpRowsCta   as kWarpRows, but the rows of a CTA meet at the CTA-wide barrier: no
//                  per-row barrier code (kWarpRows has it in the plain-access kernels: row_barrier
//                  in kernel.cuh) and, in 4-vector rows, the residual's paired add; compiled for
//                  plain-access aligned rows only (launch_config picks it only for those, and
//                  the launcher only for aligned rows: unaligned ones take kWarpRows)
//   kRowVec1       one row per CTA, one 16-byte vector per thread (one tile), whole warps: its
//                  own lean kernel (row_vec1_kernel, kernel.cuh), for aligned rows (the launcher
//                  gives unaligned ones kWarpRows' kernel); the decode rows of one CTA, and
//                  the lean rows of grids of many rows (launch_config); with pair_rows two
//                  rows per CTA of an odd number of half-warps each; with lean_vpt 3 three
//                  vectors per thread
enum class Layout { kWarpRows, kHalfWarpRows, kClusterSlices, kWarpRowsCta, kRowVec1 };

// What the kernel needs to know about the launch, besides blockDim and RowArgs.
struct TileShape {
  int cluster = 1;          // CTAs per row: a row is split into `cluster` slices of whole 1x128
                            // blocks, one per CTA of a thread-block cluster (1: no cluster)
  int slice_vecs = 0;       // 16-byte vectors per slice (the whole row when cluster == 1)
  int ntiles = 1;           // tiles per slice (a tile is blockDim.x * vpt vectors)
  bool smem_stash = false;  // keep the tiles of a multi-tile slice in shared memory
  double inv_hidden = 0.0;  // 1.0 / H (for the mean of the squares, off the critical path)
  int prefetch_ctas = 0;    // ask L2 for the input and residual rows of the CTA this many CTAs
                            // ahead (0: off; cluster == 1 only; aligned rows only)
  bool prefetch_tiles = false;  // ask L2 for the later tiles of this CTA's slice at its start
                                // (ntiles > 1; aligned rows only)
  bool release_early = true;  // PDL: let the next grid launch as soon as this one has started
  bool weight_in_pass1 = true;  // load the weight of the last tile with the row (1-vector
                                // kernels; else in pass 2, after the reduction)
  int64_t scale_keep_rows = 0;    // CTAs whose rows are all below this store their block
                                  // scales with an L2 evict_last policy (scale_line_policy)
  int64_t scale_demote_rows = 0;  // row r demotes the scale lines of rows r - this - 31 ..
                                  // r - this to evict_normal
};

struct LaunchConfig {
  TileShape shape;
  int threads_x = 32;     // threads per row slice, a multiple of 32 (of 16 for half-warp rows),
                          // <= max_threads_per_cta(vpt)
  int rows_per_cta = 1;   // rows per CTA (1 when cluster > 1 or ntiles > 1)
  int vpt = 1;            // 16-byte vectors per thread per tile: 1 or 4
  size_t smem_bytes = 0;  // dynamic shared memory per CTA
  bool pdl = false;       // programmatic dependent launch (sm_90+)
  int release = -1;       // PDL: 1 release the next grid at the start, 0 at exit, -1 by occupancy
  int device = 0;         // the CUDA device launched on, and its multiprocessors (for the
  int sms = 1;            // occupancy-based choices made at launch)
  int demote_pct = 0;     // block-scale lines: rows kept evict_last until demoted this many
                          // percent of a wave later (-1: the launcher's default; 0: off)
  int prefetch_pct = -1;  // L2 prefetch distance in percent of the CTAs resident at once (the
                          // launcher turns it into shape.prefetch_ctas; 0: off; -1: by the
                          // number of waves, off in the plain-access kernels)
  bool cta_barrier = false;  // CTAs of plain-access rows in whole warps take
                             // Layout::kWarpRowsCta (launch_config's rule; the launcher still
                             // needs aligned rows for it)
  bool row_vec1 = false;  // one-vector one-tile one-row CTAs take Layout::kRowVec1
                          // (launch_config's rule; the launcher still needs aligned rows)
  bool full_rows = false; // the row is whole warps (its vectors == threads_x) and, in
                          // Layout::kRowVec1, takes the FULL kernel, without the `valid`
                          // predicate (launch_config's rule)
  bool pair_rows = false; // Layout::kRowVec1 with two rows per CTA (rows_per_cta 2, threads_x
                          // the row's vectors / lean_vpt, an odd multiple of 16: 2-byte types;
                          // the launcher still needs aligned rows)
  int lean_vpt = 1;       // Layout::kRowVec1 lean rows (not FULL): 16-byte vectors per thread
                          // (1, kLeanVpt or kLeanVptEven), tx, tx + threads_x, ... (the row
                          // exactly lean_vpt * threads_x vectors, threads_x a multiple of a 1x128
                          // block's lanes)
  int vec_bytes = 16;     // Layout::kRowVec1 FULL one-row CTAs: bytes of the row per thread (16,
                          // or kNarrowVecBytes in 2-byte types: threads_x twice the row's 16-byte
                          // vectors; launch_config's rule)
  bool one_stride = false;  // input, residual, normed_out (written) and out have one row stride
                           // in elements: Layout::kRowVec1 one-vector one-row CTAs (16-byte
                           // vectors) form one row offset for all four (run()'s rule)
  bool hinted = true;     // streaming / read-only cache hints on the 16-byte accesses; false:
                          // plain accesses (compiled for aligned rows of one CTA only: other
                          // kernels keep their hints)
  // Half-warp rows: threads_x an odd multiple of 16, so a warp may hold the end of one row and
  // the start of the next (2-byte types only).
  bool half_warp_rows() const { return threads_x % 32 != 0; }
  Layout layout() const {
    return shape.cluster > 1      ? Layout::kClusterSlices
           : pair_rows            ? Layout::kRowVec1
           : half_warp_rows()     ? Layout::kHalfWarpRows
           : rows_per_cta == 1 && vpt == 1 && shape.ntiles == 1 && row_vec1 ? Layout::kRowVec1
           : cta_barrier          ? Layout::kWarpRowsCta
                                  : Layout::kWarpRows;
  }
};

// T is __nv_bfloat16, __half or float. aligned: every row start of input, residual, weight and
// normed is 16-byte aligned and every fp8 row start is VEC-byte aligned.
template <typename T>
void launch(const RowArgs& a, const LaunchConfig& cfg, bool aligned, cudaStream_t stream);

}  // namespace cuda
}  // namespace fp8norm
