// CUDA kernels of the .out ops: validation (shared with CPU), device guard, current stream,
// and the launch configuration table.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <string>
#include <unordered_map>

#include "../common/numerics.h"
#include "launch.h"

namespace fp8norm {
namespace cuda {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

int pow2_at_least(int64_t n) {
  int p = 1;
  while (p < n) p *= 2;
  return p;
}

struct DeviceInfo {
  int device = 0;    // CUDA device index
  int sms = 0;       // multiprocessors
  int max_smem = 0;  // shared memory per CTA (opt-in maximum), bytes
  int major = 0;     // compute capability major (9: Hopper; PDL and clusters from 9 on)
  int64_t l2_bytes = 0;  // L2 cache size, bytes
};

// Per-device facts, queried once per device.
const DeviceInfo& device_info(int device) {
  static std::mutex mu;
  static std::unordered_map<int, DeviceInfo> cache;
  const std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(device);
  if (it != cache.end()) return it->second;
  auto attribute = [&](cudaDeviceAttr attr) {
    int value = 0;
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&value, attr, device));
    return value;
  };
  DeviceInfo d;
  d.device = device;
  d.sms = attribute(cudaDevAttrMultiProcessorCount);
  d.max_smem = attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin);
  d.major = attribute(cudaDevAttrComputeCapabilityMajor);
  d.l2_bytes = attribute(cudaDevAttrL2CacheSize);
  return cache.emplace(device, d).first->second;
}

// Switches read once from the environment (README, "Environment variables").
//   FP8NORM_PDL=0              launch without programmatic dependent launch (default: with,
//                              on sm_90+)
//   FP8NORM_TUNE=key=v,...     override the launch table, for benchmarks (benchmarks/NOTES.md):
//                              slice=<vectors> (decode split of rows over 256 vectors; 0: no
//                              split, one CTA per row; the long-row split too),
//                              cluster=<1..8>, vpt=<1|4>,
//                              stash=0 (no shared-memory stash: multi-tile slices re-read the
//                              residual),
//                              cta=<threads> (rows per CTA: aim for this many threads;
//                              default: by the grid's depth),
//                              prefetch=<percent> (L2 prefetch of the rows that many percent of
//                              a wave of CTAs ahead; 0: off; default: by the number of waves,
//                              off for plain accesses),
//                              half=0 (rows in whole warps only, no half-warp rows),
//                              threads=<multiple of 32> (threads per row slice: a slice longer
//                              than threads x vpt vectors takes several tiles; no half-warp rows),
//                              release=<0|1> (PDL: 1 lets the next grid launch at this one's
//                              start, 0 as its CTAs exit; default: by occupancy),
//                              weight=<1|2> (the pass that loads the weight of a slice's last
//                              tile, 1-vector kernels only; default: the table's),
//                              tiles=<0|1> (L2 prefetch of a slice's later tiles at the CTA's
//                              start: 0 off, 1 in every grid; default: in grids of at most one
//                              CTA per SM or of streams over 1 GiB each),
//                              hints=<0|1> (cache hints on the 16-byte accesses: 0 plain in
//                              every grid of aligned one-CTA rows, 1 hinted in every grid;
//                              default: plain where the call's bytes fit in L2),
//                              demote=<percent> (block-scale lines kept in L2 with an
//                              evict_last policy until demoted that many percent of a wave of
//                              rows later; 0: off; default 200, where the scale columns are whole
//                              128-byte lines),
//                              row1=<0|1|2> (CTAs of plain rows in whole warps in the kernel
//                              without the per-row barrier code and with the paired add,
//                              Layout::kWarpRowsCta: 0 never, they take kWarpRows' (4-vector
//                              rows: its float add); 1 one-row CTAs, in every grid; 2 every
//                              CTA; default: 1-vector rows always, 4-vector rows in one-row
//                              CTAs in grids of at most 3 rows per SM; named for its first
//                              rule, one-row CTAs),
//                              rowvec1=<0|1> (one-vector one-tile one-row CTAs of aligned rows
//                              in their own kernel, Layout::kRowVec1: 0 never, they take
//                              kWarpRows' kernel; 1 always; default: without PDL, or with
//                              CTAs of 512 threads or more, or more rows than SMs),
//                              lean=<vectors> (grids of many rows: aligned rows of 128 up to
//                              that many 16-byte vectors as one-vector one-row CTAs, in
//                              Layout::kRowVec1, with PDL in L2 too; 0: none, they take
//                              4-vector rows; default 512, not with PDL where the
//                              hinted call's bytes fit in L2, except rows of at most 384
//                              vectors not a multiple of 64; lean four rows up to their
//                              length; at most 4096, rows over 1024 only as lean four rows),
//                              full=0 / 1 (Layout::kRowVec1 rows of whole warps in the kernel
//                              for rows with idle lanes, with its `valid` predicate / in their
//                              own FULL kernel, without it, in every launch; default: FULL
//                              except the hinted lean rows of grids of many rows),
//                              pair=0 (lean rows of an odd number of half-warps one per CTA,
//                              with idle lanes, instead of two per CTA),
//                              narrow=<0|1> (one-row CTAs of 2-byte rows of an odd number of
//                              half-warps in 8-byte vectors, whole warps: 0 never, they keep
//                              16-byte vectors with idle lanes; 1 in every grid; default: in
//                              grids of at most two rows per SM),
//                              leanvpt=<0|1|2|3|4> (lean rows of several vectors per thread: 0
//                              by launch_config's rules, 3 for an odd number of 1x128 blocks
//                              dividing by three, 2 for 2-byte rows of whole warps, 4 for rows
//                              of whole warps (the fused op: with a weight of the input's
//                              dtype); 1 never; 3 / 2 / 4 that count wherever it fits; default 0),
//                              fourres=<0|1> (the fused op's lean four rows: 0 none; 1 by the
//                              rule of the op without a residual with normed_out, 64..512
//                              threads, any number of rows; default: 128..256 threads, at most
//                              2048..16384 rows),
//                              fourrows=N (the fused op's lean four rows by the default rule in
//                              grids of at most N rows instead of the table's 2048..16384),
//                              onestride=0 (kRowVec1 one-vector rows form each stream's row
//                              offset from its own stride even where all four strides are equal;
//                              default: one offset where they are, in calls writing normed_out)
struct Switches {
  bool pdl = true;
  int slice_vecs = 128;  // decode split: aim for at most this many vectors per CTA
  int cluster = 0;       // 0: from the table
  int vpt = 0;           // 0: from the table
  bool stash = true;
  int cta_threads = 0;  // 0: from the table
  int prefetch_pct = -1;
  bool half_warps = true;
  int row_threads = 0;  // 0: from the table
  int release = -1;     // -1: from the occupancy rule
  int weight_pass = 0;  // 0: from the table
  int tile_prefetch = -1;  // -1: from the table (one CTA per SM at most, or streams over 1 GiB)
  int hints = -1;          // -1: from the table (plain where the call's bytes fit in L2)
  int row1 = -1;           // -1: from the table (Layout::kWarpRowsCta)
  int demote_pct = -1;     // -1: the launcher's default (two waves)
  int row_vec1 = -1;       // -1: from the table (Layout::kRowVec1)
  int lean_vecs = -1;      // -1: from the table (lean one-vector rows in grids of many rows)
  int full_rows = -1;      // -1: from the table (kRowVec1 rows of whole warps: FULL kernel)
  bool pair_rows = true;   // two lean rows per CTA where a row is an odd number of half-warps
  int narrow = -1;         // one-row CTAs of 2-byte rows of an odd number of half-warps in 8-byte
                           // vectors: -1 by the table's rule, 0 never, 1 wherever they fit
  int four_res = -1;       // lean four rows in the fused op: -1 by the table's rule, 0 never, 1 by
                           // the rule of the op without a residual (rows of 64..512 threads)
  int four_rows = -1;      // the fused op's lean four rule's row bound: -1 from the table
  bool one_stride = true;  // kRowVec1 one-vector rows whose four row streams share a row stride
                           // form one row offset in calls writing normed_out
                           // (LaunchConfig::one_stride); false: never
  int lean_vpt = 0;        // lean rows of several vectors per thread: 0 by the table's rules,
                           // 1 never, kLeanVpt / kLeanVptEven that count in every lean grid it
                           // fits and the other never (benchmarks/NOTES.md, v40-41, v47);
                           // kLeanVptFour: four, in every grid of many rows of whole warps of
                           // four vectors (the table: see launch_config)
};

int tune_value(const std::string& spec, const char* key, int fallback) {
  const std::string k = std::string(key) + "=";
  size_t at = 0;
  while ((at = spec.find(k, at)) != std::string::npos) {
    if (at == 0 || spec[at - 1] == ',') return std::atoi(spec.c_str() + at + k.size());
    at += k.size();
  }
  return fallback;
}

const Switches& switches() {
  static const Switches sw = [] {
    Switches s;
    if (const char* pdl = std::getenv("FP8NORM_PDL")) s.pdl = std::string(pdl) != "0";
    if (const char* tune = std::getenv("FP8NORM_TUNE")) {
      const std::string spec(tune);
      s.slice_vecs = tune_value(spec, "slice", s.slice_vecs);
      s.cluster = std::clamp(tune_value(spec, "cluster", s.cluster), 0, kMaxCluster);
      s.vpt = tune_value(spec, "vpt", s.vpt);
      if (s.vpt != 1 && s.vpt != 4) s.vpt = 0;
      s.stash = tune_value(spec, "stash", 1) != 0;
      s.cta_threads = std::clamp(tune_value(spec, "cta", s.cta_threads), 0, 1024);
      if (s.cta_threads > 0) s.cta_threads = std::max(s.cta_threads, 32);
      s.prefetch_pct = std::clamp(tune_value(spec, "prefetch", s.prefetch_pct), -1, 1000);
      s.half_warps = tune_value(spec, "half", 1) != 0;
      s.row_threads = std::clamp(tune_value(spec, "threads", 0), 0, 1024) / 32 * 32;
      s.release = std::clamp(tune_value(spec, "release", -1), -1, 1);
      s.weight_pass = std::clamp(tune_value(spec, "weight", 0), 0, 2);
      s.tile_prefetch = std::clamp(tune_value(spec, "tiles", -1), -1, 1);
      s.hints = std::clamp(tune_value(spec, "hints", -1), -1, 1);
      s.row1 = std::clamp(tune_value(spec, "row1", -1), -1, 2);
      s.demote_pct = std::clamp(tune_value(spec, "demote", -1), -1, 1000);
      s.row_vec1 = std::clamp(tune_value(spec, "rowvec1", -1), -1, 1);
      // Over 1024 vectors: lean four rows only.
      s.lean_vecs = std::clamp(tune_value(spec, "lean", -1), -1, kLeanVptFour * kLeanVptFourMaxThreads);
      s.full_rows = std::clamp(tune_value(spec, "full", -1), -1, 1);
      s.pair_rows = tune_value(spec, "pair", 1) != 0;
      s.narrow = std::clamp(tune_value(spec, "narrow", -1), -1, 1);
      s.four_res = std::clamp(tune_value(spec, "fourres", -1), -1, 1);
      s.four_rows = std::max(tune_value(spec, "fourrows", -1), -1);
      s.one_stride = tune_value(spec, "onestride", 1) != 0;
      s.lean_vpt = tune_value(spec, "leanvpt", s.lean_vpt);
      if (s.lean_vpt != 0 && s.lean_vpt != kLeanVpt && s.lean_vpt != kLeanVptEven && s.lean_vpt != kLeanVptFour)
        s.lean_vpt = 1;
    }
    return s;
  }();
  return sw;
}

// Launch table, by the number of 16-byte vectors in a row (nvec = H * sizeof(T) / 16) and the
// number of rows M (measurements: benchmarks/NOTES.md).
//   cluster (CTAs per row, sm_90+, at most 8; each takes a slice of whole 1x128 blocks):
//                       while M * cluster <= SMs (decode sizes: one wave), enough to bring a
//                       slice down to ~128 vectors, so that one SM no longer does a whole long
//                       row (M = 1, H = 16384: 6.8 -> 2.5 µs, v3, with ~256), for rows of more
//                       than 256 vectors (M = 1, H = 2048 in two slices: 1.48 -> 1.52 µs; v12).
//                       128 rather than 256 since the exchange no longer waits for the global
//                       stores (v12: 1 x 4096 1.80 -> 1.64 µs, 1 x 8192 1.88 -> 1.75, 16 x 4096
//                       1.97 -> 1.77). Not beyond one wave: M = 128,
//                       H = 16384 with 2 CTAs per row (two waves) took 10.0 µs, one CTA per row
//                       6.7; M = 16384, H = 32768 with 2 CTAs per row reached 79% of copy, one
//                       CTA per row over two tiles (v2.1) 88%. Rows the decode rule leaves
//                       whole and longer than 4096 vectors (bf16 H = 65536) take the fewest CTAs
//                       that bring a slice to at most 4096 (two tiles, a 64 KiB stash: two
//                       CTAs per SM instead of one): 16384 x 65536 2811 -> 2611 µs, 2048 x 65536
//                       367 -> 329 (v9); not for 4096 or fewer (H = 32768: 1274 -> 1411 µs
//                       with 2 CTAs per row). Rows of at most 896 vectors the rule would split
//                       in two stay one CTA (its kernel: row_vec1 below), and without PDL
//                       (sm_90+, FP8NORM_PDL=0) so do all rows of at most 512 vectors (the
//                       lean kernel), and with PDL rows of at most 1536 elements (float32 H <=
//                       1536: 384 vectors of 4 elements each, where a slice gains less than in
//                       2-byte types; v38: 1 x 1152 1.41 -> 1.24, 24 x 1152 1.57 -> 1.44, 32 x
//                       1536 1.66 -> 1.57; bf16 rows of 288..384 vectors stay split: 1 x 2304
//                       -1.4%, 16 x 2560 -0.8%, 1 x 3072 +3.2%, 16 x 3072 +3.6%, though 32 x 2560
//                       -6.9%). v37, one binary, against the old split, µs: without
//                       PDL bf16 64 x 3072 2.88 -> 2.45, 64 x 4096 3.04 -> 2.70, 64 x 7168
//                       3.51 -> 3.38, 1 x 2560 2.41 -> 2.10, 1 x 4096 2.38 -> 2.32, 16 x 4096
//                       2.45 -> 2.44, float32 64 x 1152 2.69 -> 2.12, 16 x 2048 2.39 -> 2.22;
//                       with PDL (pairs only) 64 x 2560 2.00 -> 1.91, 40 x 4096 2.11 -> 2.06,
//                       64 x 4096 2.26 -> 2.12, 48 x 5120 2.29 -> 2.27, 64 x 7168 2.72 -> 2.72,
//                       float32 64 x 2048 1.99 -> 1.87; but with PDL clusters of 4 stay (1 x
//                       4096 1.55 -> 1.75, 16 x 3072 1.66 -> 1.73, float32 1 x 2048 1.44 ->
//                       1.54). Not rows of 1024 in two (v36, no PDL: 64 x 8192 3.67 -> 3.57
//                       but 40 x 8192 3.40 -> 3.50) nor longer rows or more slices (1 x 7168
//                       2.45 -> 2.99, 32 x 8192 3.18 -> 3.47)
//   vectors per thread: 4 for slices longer than 1024 vectors. For shorter ones, 4 when the
//                       rows do not fit in one wave with 1 (at ~64 registers, 1024 threads per
//                       SM) and a row then takes fewer threads (not for H = 128: one warp either
//                       way): rows in flight per SM and bytes in flight per thread decide, even
//                       with idle lanes (H = 1152, 144 vectors in 64 x 4 lanes: 80% of copy at
//                       M = 16384 against 68% with 160 x 1, v4; M = 512, H = 8192: 4 waves of
//                       one 1024-thread CTA per SM with 1, v4 full grid); else 1 (one wave:
//                       latency decides, so spread each row over more threads). 1 vector per
//                       thread at M = 16384 (v3): 54-64% of copy, against 90-93% with 4;
//                       but in the lean one-row kernel (v33) rows of 128..512 vectors are
//                       faster with 1 (lean rows, below).
//                       Clustered slices of more than 512 vectors take 4 too: a cluster of
//                       1024-thread CTAs (one per SM) needs that many whole SMs of one GPC, and
//                       M = 16, H = 65536 (16 clusters of 8) ran in two waves (8.3 µs, M = 1:
//                       3.9; v4 full grid); only when the clusters take over half the SMs
//                       (M = 1, H = 65536, one cluster: 3.94 µs with 1, 4.39 with 4; v4)
//   threads per slice:  round_up(slice / vpt, 32), at most 1024 (vpt 1) or 512 (vpt 4); longer
//                       slices take several tiles, kept in shared memory if they fit.
//                       round_up(slice / vpt, 16) instead when that is fewer (half-warp rows:
//                       H = 1152 in 48 threads of 3 vectors, not 64 of 2 or 3), the row is one tile
//                       of one CTA, a 1x128 block is at most 16 lanes (2-byte types), a row at
//                       most 256 threads and a CTA holds two rows or more
//   rows per CTA:       enough to make ~256 threads per CTA, when a row is one tile of one CTA
//                       (an even number with half-warp rows: two rows share a warp); ~512 in
//                       deep grids (at least 12 times the threads all SMs hold at 1024 each),
//                       for rows of whole warps when the op writes normed_out: 0-2% faster
//                       there (16384 x 8192 313.8 -> 309.9 µs, 32768 x 2048 156.6 -> 154.1,
//                       float32 16384 x 4096 289.6 -> 286.3), within the run's spread at 8192 x
//                       7168 / 8192 (13.6 / 15.5 times), not faster below (8192 x 4096, 7.8
//                       times: 80.5 -> 80.9) and 2-27% slower at M <= 2048. Not without
//                       normed_out (0-3% slower: 8192 x 7168 110.5 -> 114.0 µs, 16384 x 5120
//                       156.0 -> 158.7) nor for half-warp rows (the op level, 7% slower without
//                       normed_out at 65536 x 1152; v8). ~512 also when ~256 would make one
//                       wave of 4-vector rows over 15/16 of the CTA slots (at 1024 threads per
//                       SM; the band where the PDL release stays early): 1-4% faster at 94-97%
//                       of the slots (512 x 8192 10.63 -> 10.20 µs, 1024 x 4096 10.62 -> 10.21,
//                       2048 x 2048 10.20 -> 9.86, 2000 x 2048 10.48 -> 10.26), level at
//                       98-100% (within +-1%); with normed_out only (without: -5..+6%; v15)
//   weight pass:        1-vector kernels load the weight of the last tile with the row (pass 1,
//                       so that its latency overlaps the reduction: M = 1, H = 2048 1.65 ->
//                       1.46 µs; 128 x 2048 2.10 -> 2.02), except where a row is one CTA of
//                       more than 512 threads (one wave of 67..132 rows, bf16 H 4224..8192):
//                       there in pass 2 (128 x 8192 3.88 -> 3.79 µs, 100 x 8192 3.71 -> 3.53;
//                       128 x 5120: level; 128 x 4096, 512 threads: level either way; v11)
constexpr int kDeepGrid = 12;  // rows per CTA: see the table above
// Threads one SM holds at ~64 registers (the 4-vector kernels' cap; the 1-vector kernels use
// about as many): the table's estimate of the CTA slots, before the launcher knows the kernel.
constexpr int64_t kThreadsPerSm = 1024;
constexpr int64_t kWholeRow = 256;    // cluster: see the table above
constexpr int64_t kLongSlice = 4096;  // cluster: see the table above
constexpr int64_t kPairVecs = 896;        // cluster of two: see the table above
constexpr int64_t kNoPdlWholeVecs = 512;  // cluster without PDL: see the table above
constexpr int64_t kWholeElems = 1536;     // cluster (elements, not vectors): see the table above
constexpr int64_t kHugeStreamBytes = int64_t{1} << 30;  // tile prefetch: see below
constexpr int64_t kRow1MaxRowsPerSm = 3;                 // kWarpRowsCta (4-vector rows): see below
constexpr int64_t kLeanMinVecs = 128;                    // lean one-vector rows: see below
constexpr int64_t kLeanMaxVecs = 512;
constexpr int64_t kLeanFourMinThreads = 2 * 32;          // lean four rows: see below
constexpr int64_t kLeanFourNormedMaxThreads = 512;
constexpr int64_t kLeanFourResMinThreads = 128;
constexpr int64_t kLeanFourResMaxThreads = 256;
constexpr int64_t kLeanFourResMaxRows = 2048;          // rows of 128 threads with normed_out,
constexpr int64_t kLeanFourResNoNormedMaxRows = 3072;  // without it,
constexpr int64_t kLeanFourResWideMaxRows = 6144;      // rows of more than 128 threads with it,
constexpr int64_t kLeanFourResWideNoNormedMaxRows = 16384;  // without it
constexpr int64_t kLeanL2MaxVecs = 384;                  // lean rows in L2 with PDL: see below
constexpr int64_t kLeanPairMaxThreads = 512;             // two lean rows per CTA: see below
constexpr int64_t kLeanVptNoNormedMaxL2s = 2;            // three vectors per thread: see below
constexpr int64_t kNarrowMaxThreads = 512;               // narrow vectors: see below
constexpr int64_t kNarrowMaxRowsPerSm = 2;
// Cache hints: see below.
constexpr int64_t kL2PlainMinBytes = int64_t{3} << 19;  // 1.5 MiB
constexpr int64_t kL2PlainMaxPercent = 72;

LaunchConfig launch_config(int64_t rows, int64_t hidden, int64_t elem_size, bool has_residual,
                           bool writes_normed, bool aligned, const DeviceInfo& dev, const Switches& sw,
                           bool weight_is_float) {
  const int64_t nvec = hidden * elem_size / 16;
  const int64_t lanes_per_block = kBlock * elem_size / 16;
  const int64_t nblocks = hidden / kBlock;
  LaunchConfig c;
  int cluster = 1;
  if (dev.major >= 9) {
    if (sw.slice_vecs > 0) {
      if (nvec > kWholeRow) cluster = std::min(kMaxCluster, pow2_at_least(ceil_div(nvec, sw.slice_vecs)));
      while (cluster > 1 && rows * cluster > int64_t{dev.sms}) cluster /= 2;
      if ((cluster == 2 && nvec <= kPairVecs) || (!sw.pdl && nvec <= kNoPdlWholeVecs) || hidden <= kWholeElems)
        cluster = 1;
      if (cluster == 1 && nvec > kLongSlice) cluster = static_cast<int>(ceil_div(nvec, kLongSlice));
    }
    if (sw.cluster > 0) cluster = sw.cluster;
    cluster = static_cast<int>(std::min<int64_t>({cluster, kMaxCluster, nblocks}));
  }
  const int64_t blocks_per_slice = ceil_div(nblocks, cluster);
  c.shape.cluster = static_cast<int>(ceil_div(nblocks, blocks_per_slice));  // no empty slice
  c.shape.slice_vecs = static_cast<int>(blocks_per_slice * lanes_per_block);
  const int64_t svec = c.shape.slice_vecs;
  const int64_t ctas_per_wave = rows * c.shape.cluster;

  auto threads_for = [&](int vpt) {
    return std::min<int64_t>(max_threads_per_cta(vpt), ceil_div(ceil_div(svec, vpt), 32) * 32);
  };
  // CTAs one wave holds with 1 vector per thread.
  const int64_t wave_vpt1 = int64_t{dev.sms} * std::max<int64_t>(1, kThreadsPerSm / threads_for(1));
  // The GPU's CTA slots for lean rows of several vectors per thread in CTAs of `cta_threads`
  // threads, at the kernel's kLeanVptMaxRegs registers (registers are held per whole warp).
  auto lean_vpt_slots = [&](int64_t cta_threads) {
    return int64_t{dev.sms} * (kRegsPerSm / (kLeanVptMaxRegs * ceil_div(cta_threads, 32) * 32));
  };
  const bool many_rows = ctas_per_wave > wave_vpt1;
  const bool clustered_long = c.shape.cluster > 1 && svec > 512 && ctas_per_wave > dev.sms / 2;
  // Cache hints: the streaming (evict-first) hints keep a large call from flushing L2, but
  // where the call's buffers (input, residual, normed_out, out) take 1.5 MiB .. 72% of L2 (v42),
  // plain accesses are faster when the call runs again on the same buffers (the benchmark's
  // back-to-back calls; v18 map, H200, 60 MiB of L2, footprint 7 bytes per element in bf16):
  // 14 MiB 6-8% faster (512 x 4096 5.70 -> 5.31 µs), 21-28 MiB 16-21% (2048 x 2048 9.95 ->
  // 8.14, 1024 x 4096 10.43 -> 8.29, float32 512 x 4096 9.01 -> 7.03), 35 MiB 12-14%, 42 MiB
  // 2-6%; level or slower at 7 MiB and below (-0.3..+4.4%: 512 x 2048 3.40 -> 3.46, 1 x 2048
  // 1.54 -> 1.61) and from 47 MiB (6144 x 1152 +7%, 56 MiB +10-11%: 2048 x 4096 20.48 ->
  // 22.69), and at large M (16384 x 2048 +2.0-2.5%). v19, plain now without the row prefetch:
  // 2-3% faster at 7.9 MiB (576 x 2048 5.07 -> 4.95, 1024 x 1152 4.16 -> 4.10), 9-10% at
  // 39-42 MiB, 4% at 45.5 MiB in bf16; -2..+3% at 45.5-49 MiB otherwise (float32 896 x 4096
  // at 45.5 MiB +3.3%, bf16 896 x 8192 at 49 MiB +2.7%). v42, the band from 1.5 MiB instead of
  // 7.5 (same binary, hints=0 against the table, two passes, with PDL, µs): the calls without
  // normed_out whose footprint fell under 7.5 MiB while the full op's did not were 15-20%
  // slower than the full op and are 15-20% faster plain (bf16 1024 x 1152 4.06 -> 3.46, 1024 x
  // 1280 4.40 -> 3.66, 768 x 1536 4.32 -> 3.46; float16 1024 x 1152 3.91 -> 3.32; float32 640 x
  // 1152 3.89 -> 3.42), bf16 896 x 1152 (6.9 MiB) 4.03 -> 3.19, and level to 6% faster at 1.75-7
  // MiB (128 x 2048 1.85 -> 1.82, 128 x 7168 3.12 -> 3.09, 512 x 1152 2.49 -> 2.43, 512 x 2048
  // 3.10 -> 3.06, float32 256 x 2048 2.83 -> 2.66, 128 x 8192 level; without PDL 0.6-1.4% at
  // M = 128, 128 x 8192 level). Under 1.5 MiB hinted: plain was 7-9% slower at bf16 1 / 128 x
  // 1152 with PDL (1.43 -> 1.55, 1.76 -> 1.89; level without PDL), 0-2.6% faster at 1 / 16 x
  // 2048..16384.
  const int64_t footprint = rows * hidden * (elem_size * (1 + int64_t{has_residual} + int64_t{writes_normed}) + 1);
  c.hinted = sw.hints >= 0 ? sw.hints == 1
                           : !(footprint >= kL2PlainMinBytes && 100 * footprint <= kL2PlainMaxPercent * dev.l2_bytes);
  // Lean rows: in grids of many rows, aligned one-CTA rows of 128..512 vectors keep 1 vector per
  // thread, one row per CTA, in the lean one-row kernel (Layout::kRowVec1, with the block-scale
  // line policy), instead of 4-vector rows several to a CTA. Same binary, two passes (v33), bf16
  // µs, with PDL: 1024 x 2048 5.16 -> 4.62, 8192 x 2048 40.4 -> 38.9, 16384 x 2048 78.3 -> 76.5,
  // 32768 x 2048 151.9 -> 151.1, 16384 x 1152 45.3 -> 43.8, 16384 x 1024 40.6 -> 38.9, 4096 x
  // 4096 40.7 -> 39.3, 8192 x 4096 79.1 -> 77.0 (0.4-10.6% faster; 16384 x 4096 level); float32
  // 16384 x 1024 1.8% faster; without PDL 0.4-11.7% faster at all of these. Not with PDL where
  // the hinted call's bytes fit in L2 (footprint between the plain-access band and the L2 size):
  // there the 4-vector rows reach 108-113% of copy and the lean ones were 3-6% slower (bf16 4096
  // x 2048 18.3 -> 18.9, 2048 x 4096 18.4 -> 18.9, float16 4096 x 2048 18.0 -> 18.8, float32
  // 4096 x 1024 16.0 -> 17.0), though 4% faster without PDL (bf16; the others not measured
  // without PDL; a release at exit slowed both kinds of rows there, v34). Float32 rows of 512
  // vectors (H = 2048), with PDL: 8192 x 2048 1.1-1.4% faster (73.5 -> 72.5, 73.1 -> 72.3 µs, two
  // runs), 16384 x 2048 level (-0.1 / +0.4%; v33, v34). Rows under 128 vectors: none (not
  // measured). In that band with PDL, rows of at most 384 vectors that are not a multiple of 64 are
  // lean again: in 2-byte types exactly the rows whose 4-vector rows (whole half-warps) leave idle
  // lanes. Float32 4-vector rows are whole warps, so 320 vectors (H = 1280: 80 lanes of 96) leave
  // idle lanes too but keep them: lean rows measured level there (3584 x 1280, below, under
  // lean=512). v44, same binary, with PDL, µs, 4-vector rows -> lean: bf16 6144 x 1152 (36 of 48
  // lanes) 16.76 -> 15.63, 7000 x 1152 19.37 -> 17.84, 6144 x 1280 18.64 -> 17.45, 5632 x 1408 (44
  // of 48) 18.55 -> 18.07, 4608 x 1664 18.14 -> 17.58, 4352 x 1792 18.18 -> 17.22, 3584 x 2176
  // 18.59 -> 17.48, 3072 x 2688 (336 vectors) 19.44 -> 18.86, float16 6144 x 1152 16.29 -> 15.43;
  // without normed_out 9216 x 1152 21.75 -> 20.66, 8192 x 1280 21.68 -> 19.44, 8192 x 1152 19.46 ->
  // 18.13, 8192 x 1408 level (22.55 -> 22.51); float32 3584 x 1152 (72 of 96 lanes) level to 1.8%
  // faster, 3584 x 1280 level (-0.2%), without normed_out 5632 x 1152 20.96 -> 20.10. Longer rows
  // lose: bf16 2048 x 3200 (400 vectors, 100 of 112 lanes) 14.64 -> 15.01, 2048 x 3712 16.65 ->
  // 17.29, float32 2048 x 1920 (480) 14.86 -> 15.92. v45, rows of 352 / 368 vectors: mixed (bf16
  // H = 2816 at M 2304 / 2560 / 2816 / 3072: +0.2 / +2.0 / -3.6 / -3.0%; 2304 x 2944 -1.1%), so
  // the bound stays.
  // The op without a residual: 4-vector rows, not lean ones, where those are whole warps (rows of a
  // multiple of 128 vectors: bf16 H = 1024, 2048, 3072, 4096; float32 512, 1024, 2048) in grids of
  // more than two waves of lean rows. It reads 2 bytes and writes 3 (1 without normed_out) per
  // element, against the fused op's 4 and 5, for nearly the same instructions, so it is closer to
  // issue-bound, where a lean one-vector row's reduction is spread over one vector per thread, not
  // four (static, bf16, hinted: 464 instructions per 8 elements against 1368 per 32, though the
  // 4-vector kernel's count includes multi-tile paths a one-tile row skips; v51). Same binary, two
  // passes (v51), with PDL, µs, lean -> 4-vector rows: bf16 2048 x 2048 6.48 -> 5.97, 2048 x 4096
  // 13.19 -> 11.69, 8192 x 1024 12.09 -> 11.12, 8192 x 4096 52.43 -> 47.82, 32768 x 1024 51.26 ->
  // 48.21, 32768 x 4096 196.8 -> 178.7 (3.1-11.4% faster with normed_out; 2048 x 1024 level); without
  // normed_out 32768 x 2048 95.2 -> 81.6, 32768 x 4096 189.6 -> 156.4 (6-18% faster at 8192 x 4096
  // and 32768 x 2048..4096, level at 8192 x 2048 / 3072 and 32768 x 1024, but 2.3 / 6.6% slower at
  // 2048 x 2048 / 3072); float16 alike; float32 2048 x 1024 / 2048 x 2048 / 16384 x 2048 11 / 10 / 7%
  // faster (without normed_out 9-22%), 8192 x 512 23%; without PDL 4-8% faster with normed_out (level
  // to 1.6% slower without it at 2048 / 16384 x 2048). Not: rows whose 4-vector rows leave idle lanes
  // or are half-warps (bf16 2048 x 1152 +9%, 8192 x 1152 +4%, without normed_out +11-20%; 2048 x 1536
  // +1.5%), and 512 x 4096 (1.9 waves) +4.5%.
  const bool four_warps = svec % (4 * 32) == 0;  // rows of whole warps of 4 vectors
  const bool no_res_warp_rows = !has_residual && four_warps && rows > 2 * wave_vpt1;
  // And where those rows are two warps or more (bf16 H = 2048..4096, float32 1024 / 2048), the same
  // four vectors per thread in lean one-row CTAs (row_vec1_kernel, VPT = kLeanVptFour: no tile loop,
  // no CTA of several rows) in grids of more than one wave of them. Executed instructions are level
  // (ncu, bf16 16384 x 4096 without normed_out: 64.8 M against 64.3 M), yet same binary, two passes
  // (v52), with PDL, µs, 4-vector rows -> lean four: bf16 2048 x 4096 11.77 -> 11.29, 8192 x 4096
  // 48.10 -> 45.87, 16384 x 2048 47.80 -> 45.95, 16384 x 4096 93.78 -> 89.84, 32768 x 4096 178.98 ->
  // 174.91 (2.3-4.6% faster); without normed_out 5.0-8.0% faster (16384 x 4096 81.06 -> 75.98);
  // float32 16384 x 1024 1.8% faster (4.5% without normed_out). Not rows of one warp (32-thread
  // CTAs, at most 32 per SM, half the threads): bf16 8192 x 1024 +1.0% (+3.2% without normed_out),
  // float32 8192 x 512 +27% (+37%). Nor one wave of 64-thread CTAs (2048 rows, 2112 slots): bf16
  // 2048 x 2048 +0.4% (-5.0% without normed_out), float32 2048 x 1024 +5.9% (-2.7%).
  // Longer rows too, up to kLeanVptFourMaxThreads threads (bf16 H 4608..16384 in multiples of 512,
  // float32 2304..8192 in 256: beyond kLeanMaxVecs, in CTAs of up to 512 threads, two per SM at
  // the same 64 registers). Same binary, two passes (v55), with PDL, µs, 4-vector rows -> lean four:
  // bf16 2048 x 7168 22.72 -> 20.19, 16384 x 7168 162.9 -> 153.8, 8192 x 8192 93.6 -> 89.4, 32768 x
  // 8192 357.8 -> 344.3, 8192 x 12288 144.0 -> 132.6, 2048 x 16384 50.15 -> 48.72, 16384 x 16384
  // 352.6 -> 347.2 (1.5-11% faster), float16 16384 x 8192 / 16384 3% / level; without normed_out
  // 12-21% faster (bf16 16384 x 8192 157.3 -> 125.5, 16384 x 16384 322.3 -> 277.2, float32 16384 x
  // 8192 235.3 -> 185.6). Float32 with normed_out level (8192 x 4096 -1.1 / -2.7%, 16384 x 4096 +1.0
  // / -0.3%, 16384 x 8192 +1.4 / +0.5%: at 95% of its copy). And where the rule starts (about two
  // waves of these CTAs), five and six warps: bf16 512 x 16384 12.28 -> 12.11, 1024 x 8192 11.84 ->
  // 10.58, 600 x 8192 8.02 -> 7.20, 1024 x 5120 8.41 -> 7.21, 2048 x 5120 16.18 -> 14.33, 16384 x
  // 6144 144.7 -> 131.1, float32 1024 x 4096 9.27 -> 8.49, 8192 x 2560 51.3 -> 49.9 (1.4-15%;
  // without normed_out 9-27%). Rows over 512 threads (bf16 H 16896..32768, float32 8448..16384),
  // in CTAs of up to 1024 threads (one per SM, the same 64 registers), without normed_out only.
  // Same binary, two passes (v56), with PDL, µs, 4-vector rows -> lean four, without normed_out:
  // bf16 2048 x 32768 88.8 -> 85.5 / 90.2 -> 85.5, 8192 x 24576 279 -> 251 (v56 call 2), float32
  // 2048 x 16384 74.4 -> 57.2, 8192 x 12288 207 -> 166, 16384 x 16384 464 -> 410 (4-23% faster),
  // bf16 512 x 32768 and 16384 x 32768 level (-0.4..+0.8%). With normed_out mixed: 2048 x 32768
  // and 8192 x 24576 2-4% faster, 8192 / 16384 x 32768 4-5% slower, float16 16384 x 32768 1% slower.
  // The fused op (v56): lean four in rows of 128..256 threads (bf16 H 4096..8192, float32
  // 2048..4096) in grids of at most kLeanFourResMaxRows rows (v57: rows of 128 threads without
  // normed_out kLeanFourResNoNormedMaxRows, rows of more than 128 threads kLeanFourResWideMaxRows;
  // v58: those without normed_out kLeanFourResWideNoNormedMaxRows), with a weight of the input's dtype.
  // Same binary, two passes, with PDL, µs, 4-vector rows (2048 x 4096 without normed_out: lean two
  // vectors per thread) -> lean four: bf16 2048 x 4096 18.04 -> 17.31 / 18.05 -> 17.60, 2048 x
  // 5120 24.67 -> 24.06, 2048 x 8192 40.73 -> 40.06 / 40.64 -> 40.28, float16 2048 x 4096 18.10 ->
  // 17.43, float32 2048 x 2048 16.09 -> 15.70 (0-4% faster; 2048 x 6144 / 7168 -1.6..+0.1%);
  // without normed_out 3-11% faster (2048 x 5120 19.25 -> 17.18, float32 2048 x 2048 11.19 ->
  // 9.58); without PDL 2048 x 4096 / 7168 2% (3-9% without normed_out). Not beyond: at 8192..32768
  // rows level to 2.6% slower with normed_out (8192 x 4096 +1.0 / +2.6%, 16384 x 8192 +0.6 /
  // +1.5%), -2.1..+2.5% without it; not rows of 64 threads (16384 x 2048 +2.8%), nor 512 (2048 x
  // 16384 level, 16384 x 16384 +0.6..+0.8%); not with a float32 weight and a 2-byte input (those
  // kernels spilled 52 bytes: 3-5% slower, 46% without normed_out at 2048 x 4096), which has no
  // such kernel. Between 2048 and 8192 rows (v57, same binary, two passes, with PDL, B / A of
  // fourrows=100000 against v56's table): rows of 160..256 threads 0.4-2.8% faster with normed_out
  // up to 6144 rows (bf16 2560..6144 x 5120..8192: 0.972-1.000, 3072 x 5120 37.21 -> 36.46, 4096 x
  // 8192 79.78 -> 78.96, 6144 x 8192 116.36 -> 116.18; float32 3072 / 4096 x 4096 0.993-1.000,
  // float16 3072 x 8192 0.993 / 0.995, 4096 x 8192 without PDL 0.991 / 0.984) and 1.6-8.2% without
  // it (0.918-0.984); rows of 128 threads (bf16 H 4096, float32 2048) 1.6-4.8% slower with
  // normed_out from 2560 rows (2560 x 4096 23.44 -> 24.52), without it 8-11% faster up to 3072
  // rows (2560 x 4096 19.07 -> 17.06, float32 3072 x 2048 20.35 -> 18.27) and 0-1.8% slower from
  // 4096 (4096 x 4096 1.012 / 1.011, float32 6144 x 2048 1.006 / 1.013). Beyond 6144 rows (v58, the
  // same A/B, two and three passes): rows of 160..256 threads without normed_out level to 2.2% faster
  // up to 16384 rows (bf16 8192 x 5120 78.04 -> 76.80, 12288 x 6144 138.17 -> 135.07, 8192 x 8192
  // 122.57 -> 120.79, 16384 x 7168 210.05 -> 208.58, float16 8192 x 7168 108.42 -> 106.36, float32
  // 8192 x 2560 71.74 -> 70.43, 12288 x 3072 124.64 -> 122.89, 16384 x 2560 138.42 -> 137.00; every
  // median <= 1.001), level at 32768 rows (32768 x 5120 / 8192 0.993..1.008, float32 32768 x 4096
  // 0.993..1.012); with normed_out -1.8..+2.2% per pass from 8192 rows, 45 of 67 passes slower
  // (median +0.3%; 16384 x 8192 1.006 / 1.022), so those keep 6144.
  // FP8NORM_TUNE=leanvpt=4: in every grid of many rows whose rows are whole warps of four vectors
  // (at most kLeanVptFourMaxThreads threads; in the fused op with a weight of the input's dtype);
  // leanvpt=1 (or 2 / 3): never (4-vector rows by the rule above). fourres=0: none in the fused op;
  // fourres=1: the fused op's rows by the rule of the op without a residual with normed_out (64..512
  // threads, any number of rows). fourrows=N: the default rule's row bound N in every band.
  const int64_t four_threads = svec / kLeanVptFour;  // threads of a row
  const bool four_fits = four_warps && sw.row_vec1 != 0 && four_threads <= kLeanVptFourMaxThreads &&
                         lean_four_built(has_residual, weight_is_float, elem_size);
  // The table's band: a row's threads, the grid's rows.
  int64_t four_min = kLeanFourMinThreads, four_max = kLeanFourNormedMaxThreads, four_max_rows = rows;
  if (!has_residual && !writes_normed) {
    four_max = kLeanVptFourMaxThreads;
  } else if (has_residual && sw.four_res == 0) {
    four_max = 0;
  } else if (has_residual && sw.four_res < 0) {
    four_min = kLeanFourResMinThreads;
    four_max = kLeanFourResMaxThreads;
    if (sw.four_rows >= 0) {
      four_max_rows = sw.four_rows;
    } else if (four_threads > kLeanFourResMinThreads) {
      four_max_rows = writes_normed ? kLeanFourResWideMaxRows : kLeanFourResWideNoNormedMaxRows;
    } else {
      four_max_rows = writes_normed ? kLeanFourResMaxRows : kLeanFourResNoNormedMaxRows;
    }
  }
  const bool lean_four = four_fits && (sw.lean_vpt == kLeanVptFour ||
                                       (sw.lean_vpt == 0 && rows > 2 * wave_vpt1 && rows <= four_max_rows &&
                                        four_threads >= four_min && four_threads <= four_max &&
                                        rows > lean_vpt_slots(four_threads)));
  // FP8NORM_TUNE=lean=N: rows of 128..N vectors, with PDL in L2 and without a residual in every
  // case (0: none); vpt=4: the 4-vector rows. Default: kLeanMaxVecs, or lean four's rows.
  const int64_t lean_max = sw.lean_vecs >= 0 ? sw.lean_vecs : lean_four ? svec : kLeanMaxVecs;
  const bool l2_resident_pdl = dev.major >= 9 && sw.pdl && c.hinted && footprint <= dev.l2_bytes;
  const bool lean_in_l2 = svec % (4 * 16) != 0 && svec <= kLeanL2MaxVecs;
  const bool lean_rows = many_rows && aligned && c.shape.cluster == 1 && svec >= kLeanMinVecs &&
                         svec <= lean_max &&
                         (sw.lean_vecs >= 0 || lean_four || ((!l2_resident_pdl || lean_in_l2) && !no_res_warp_rows));
  // Lean four rows may be longer than one-vector rows' 1024 threads.
  c.vpt = (svec > 1024 && !(lean_rows && lean_four)) || clustered_long ||
                  (many_rows && threads_for(4) < threads_for(1) && !lean_rows)
              ? 4
              : 1;
  if (sw.vpt != 0) c.vpt = sw.vpt;
  c.threads_x = static_cast<int>(threads_for(c.vpt));
  if (sw.row_threads > 0) c.threads_x = std::min(sw.row_threads, max_threads_per_cta(c.vpt));
  int cta_threads = std::min(sw.cta_threads > 0 ? sw.cta_threads : 256, max_threads_per_cta(c.vpt));
  // Fewer threads than threads_x only when the row is one tile (threads_x was not capped).
  const int64_t half_row_threads = ceil_div(ceil_div(svec, c.vpt), 16) * 16;
  const bool lean = lean_rows && c.vpt == 1 && sw.row_threads == 0;
  // Lean rows of three vectors per thread (kLeanVpt; strided: tx, tx + threads_x, tx + 2 threads_x)
  // for an odd number of 1x128 blocks that divides by three (bf16 H = 1152: 48 threads a row, two
  // rows per CTA; float32 H = 1152: 96), in grids of one wave over more than half the CTA slots at
  // the kernel's 64 registers. About 20% fewer instructions per row (2048 x 1152: 3.31 -> 2.65 M
  // warp instructions, ncu), where the lean rows are close to issue-bound, but at most 10 CTAs of 96
  // threads per SM. Same binary, two passes (v40), against one vector per thread, µs, with PDL: bf16
  // 2048 x 1152 5.54 -> 5.41, 2560 x 1152 6.34 -> 6.09, float16 2048 x 1152 5.35 -> 5.06, float32
  // 1024 x 1152 4.49 -> 4.35; without PDL bf16 2048 x 1152 6.05 -> 5.72, 2560 x 1152 6.88 -> 6.59.
  // Not in half a wave or less (bf16 1024 x 1152: 3.53 -> 3.46 with PDL but 3.81 -> 4.00 without),
  // nor beyond one wave with normed_out (3168 / 8192 / 16384 x 1152 +1.5 / +3.5 / +3.6%, float32
  // 16384 x 1152 +1.2%; without normed_out -0.3 / -0.2 / -1.3%: see v45 below), nor for an even
  // number of blocks (not measured).
  // Without normed_out, also beyond one wave where the call's bytes take at most twice the L2
  // (kLeanVptNoNormedMaxL2s): fewer bytes per row, so the rows are closer to issue-bound. Same
  // binary, three passes (v45), without normed_out, against one vector per thread, µs, with PDL:
  // bf16 3168 x 1152 7.10 -> 6.95, 4096 x 1152 8.77 -> 8.28, 6144 x 1152 12.35 -> 11.42, 7000 x 1152
  // 14.17 -> 13.41, 8192 x 1152 18.32 -> 17.35, 12288 x 1152 27.62 -> 26.31, 16384 x 1152 (1.5 times
  // the L2) 37.50 -> 36.84, 4096 x 1920 14.17 -> 13.33, 8192 x 1920 30.67 -> 29.57, 3072 x 2688
  // 15.19 -> 14.53, float16 6144 x 1152 11.74 -> 10.54, 8192 x 1152 17.78 -> 16.55, 16384 x 1152
  // -2.6%, float32 3584 x 1152 10.65 -> 9.91, 5632 x 1152 -2.5%, 2048 x 1920 10.62 -> 9.38, 8192 x
  // 1152 level; without PDL bf16 4096 / 6144 / 8192 x 1152 -3.9 / -5.7 / -1.3%, 4096 x 1920 -4.5%,
  // but 16384 x 1152 +1.1%. Beyond twice the L2: bf16 32768 x 1152 -0.6%, float32 16384 x 1152
  // +1.3%. With normed_out these grids were level to 7.5% slower (float16 8192 x 1152 +0.9%, bf16
  // 3072 x 2688 +2.6%, 8192 / 16384 x 1152 +3.5%, 7000 x 1152 +4.7%; without PDL 6144 x 1152 +7.5%)
  // except in the plain-access band (bf16 4096 x 1152 -2.9..-4.7%, float16 -5.2%, 2048 x 1920 -2.6%,
  // but float32 2048 x 1152 +3.1%): not taken there. The op without a residual: not measured.
  // FP8NORM_TUNE=leanvpt=1: never; leanvpt=3: in every such lean grid.
  // Two lean rows per CTA (the rule below): rows of `threads` threads, an odd number of half-warps.
  auto pair_lean_rows = [&](int64_t threads) {
    return lean && sw.pair_rows && sw.row_vec1 != 0 && threads % 32 != 0 && 2 * threads <= kLeanPairMaxThreads;
  };
  // Where lean rows of several vectors per thread pay beyond one wave: calls without normed_out
  // whose bytes take at most twice the L2 (v45 for three vectors, v47 for two).
  const bool lean_vpt_few_bytes = !writes_normed && footprint <= kLeanVptNoNormedMaxL2s * dev.l2_bytes;
  const int64_t t3 = svec / kLeanVpt;  // threads of a row
  const bool t3_pair = pair_lean_rows(t3);
  const int64_t cta3 = t3_pair ? 2 * t3 : t3;
  const bool t3_fits = lean && sw.row_vec1 != 0 && nblocks % 2 == 1 && nblocks % kLeanVpt == 0 && t3 >= 32 &&
                       (t3 % 32 == 0 || t3_pair) && cta3 <= kLeanVptMaxThreads;
  if (t3_fits && (sw.lean_vpt == 0 || sw.lean_vpt == kLeanVpt)) {
    const int64_t ctas = ceil_div(rows, cta3 / t3), slots = lean_vpt_slots(cta3);
    if (sw.lean_vpt == kLeanVpt || (2 * ctas > slots && (ctas <= slots || lean_vpt_few_bytes))) {
      c.lean_vpt = kLeanVpt;
      c.threads_x = static_cast<int>(t3);
    }
  }
  // Two lean rows per CTA where a row is an odd number of half-warps (2-byte types, an odd
  // number of 1x128 blocks: H = 1152 is 144 vectors), in CTAs of at most 512 threads: 9 whole
  // warps for two rows instead of 5 warps with 16 idle lanes for one (row_vec1_kernel's PAIR;
  // with three vectors per thread 48-thread rows, 3 warps for two).
  // Same binary, two passes (v39), bf16 µs, with PDL: 1024 x 1152 3.76 -> 3.52 (-6.6%), 2048 x
  // 1152 5.66 -> 5.53, 3168 x 1152 7.77 -> 7.28 (-6.3%), 8192 / 16384 / 32768 x 1152 -2.2 / -0.9
  // / -0.9% (without normed_out -1.2 / -4.7 / -4.7%), 1024 / 2048 x 1408 -7.1 / -3.3%, 2048 x
  // 1920 -1.3%; float16 2048 x 1152 -1.2%; without PDL 2048 x 1152 -1.8%, 16384 x 1152 level
  // (without normed_out -3.4%). Not at 2048 x 3968 (496 vectors, 992 threads): level, and 7.7%
  // slower without normed_out (14.82 -> 15.97).
  // Lean rows of two vectors per thread (kLeanVptEven; tx, tx + threads_x) for rows of whole
  // warps in 2-byte types without normed_out, in grids of about two waves or more (over 15/16 of
  // two waves' CTA slots at the kernel's 64 registers) where the call's bytes take at most twice
  // the L2 (kLeanVptNoNormedMaxL2s, as three vectors above): the per-thread part of a lean row's
  // instructions over two vectors. Same binary, three passes (v47), without normed_out, against one
  // vector per thread, µs, with PDL: bf16 2048 x 2048 7.71 -> 7.43 (-3.6%), 2560 x 2048 9.24 ->
  // 9.02, 3072 x 2048 10.80 -> 10.23 (-5.2%), 8192 x 2048 31.68 -> 30.82 (-2.7%), 1024 x 4096 7.87
  // -> 7.64, 1280 x 4096 9.52 -> 9.17, 4096 x 4096 32.22 -> 31.88, 2048 x 3072 11.04 -> 10.71,
  // float16 2048 x 2048 -3.2%, 1024 x 4096 -3.9%; without PDL level to 1.5% faster (4096 x 2048
  // 14.85 -> 14.63, 2048 x 2048 / 1024 x 4096 / 2048 x 3072 level). Not in fewer waves (1100 /
  // 1536 x 2048 +7.0 / +2.4%, 1024 x 3072 +2.3%, 600 / 768 x 4096 level), nor with normed_out
  // (-4.4..+10.3%: 2048 x 2048 -2.2..-3.1%, 1024 x 4096 -3.2..-4.4%, but 1024 / 1536 x 2048 +2.6 /
  // +2.2%, 2048 x 3072 +4.1%, 4096 x 4096 +1.6%), nor in float32 (2048 x 1024 +2.4%, 1536 x 1024
  // +7.9% without normed_out), nor needed beyond twice the L2 (16384 x 2048 +0.3%, 16384 x 4096
  // -0.8%, 32768 x 2048 -1.4%). The op without a residual: not measured beyond its L2 band, where
  // the rule above gives most of these grids 4-vector rows (forced, bf16 2048 x 2048 level without
  // normed_out, 3.4% faster with it; v51).
  // FP8NORM_TUNE=leanvpt=1: never; leanvpt=2: in every lean grid of such rows (any normed_out).
  const int64_t t2 = svec / kLeanVptEven;  // threads of a row
  const bool t2_fits = lean && sw.row_vec1 != 0 && elem_size == 2 && svec % kLeanVptEven == 0 && t2 % 32 == 0 &&
                       t2 <= kLeanVptMaxThreads;
  if (t2_fits && (sw.lean_vpt == 0 || sw.lean_vpt == kLeanVptEven)) {
    const int64_t slots = lean_vpt_slots(t2);
    const bool two_waves = 16 * rows > 15 * 2 * slots;
    if (sw.lean_vpt == kLeanVptEven || (two_waves && lean_vpt_few_bytes)) {
      c.lean_vpt = kLeanVptEven;
      c.threads_x = static_cast<int>(t2);
    }
  }
  if (lean && lean_four) {
    c.lean_vpt = kLeanVptFour;
    c.threads_x = static_cast<int>(four_threads);
  }
  const int64_t lean_threads = svec / c.lean_vpt;
  c.pair_rows = pair_lean_rows(lean_threads);
  if (c.pair_rows) c.threads_x = static_cast<int>(lean_threads);
  if (sw.half_warps && !lean && sw.row_threads == 0 && c.shape.cluster == 1 && lanes_per_block <= 16 &&
      half_row_threads < c.threads_x && half_row_threads <= 256 && cta_threads / half_row_threads >= 2) {
    c.threads_x = static_cast<int>(half_row_threads);
  }
  c.shape.ntiles = static_cast<int>(ceil_div(svec, int64_t{c.threads_x} * c.vpt * c.lean_vpt));
  // ~512 threads per CTA, with normed_out, for rows of whole warps: in deep grids, and where
  // ~256 would make one wave of one-tile 4-vector rows over 15/16 of the CTA slots.
  if (sw.cta_threads == 0 && writes_normed && !c.half_warp_rows() && !lean) {
    const bool deep = rows * c.threads_x >= int64_t{kDeepGrid} * dev.sms * kThreadsPerSm;
    bool near_full = false;
    if (c.vpt == 4 && c.shape.cluster == 1 && c.shape.ntiles == 1 && c.threads_x <= cta_threads) {
      const int64_t rows_per_cta = cta_threads / c.threads_x;
      const int64_t ctas = ceil_div(rows, rows_per_cta);
      const int64_t slots = int64_t{dev.sms} * (kThreadsPerSm / (rows_per_cta * c.threads_x));
      near_full = ctas <= slots && 16 * ctas >= 15 * slots;
    }
    if (deep || near_full) cta_threads = std::min(512, max_threads_per_cta(c.vpt));
  }
  c.shape.weight_in_pass1 = !(c.shape.cluster == 1 && c.threads_x > 512);
  if (sw.weight_pass > 0) c.shape.weight_in_pass1 = sw.weight_pass == 1;
  c.rows_per_cta = c.pair_rows ? 2
                   : c.shape.ntiles == 1 && c.shape.cluster == 1 && !lean ? std::max(1, cta_threads / c.threads_x) : 1;
  if (c.half_warp_rows()) c.rows_per_cta &= ~1;  // half-warp rows: whole warps per CTA
  const size_t red_bytes = reduction_smem_bytes(c.rows_per_cta);
  const size_t stash_bytes = static_cast<size_t>(svec * 16);
  c.shape.smem_stash = sw.stash && c.shape.ntiles > 1 &&
                       red_bytes + stash_bytes <= static_cast<size_t>(dev.max_smem);
  c.smem_bytes = red_bytes + (c.shape.smem_stash ? stash_bytes : 0);
  c.pdl = dev.major >= 9 && sw.pdl;
  c.release = sw.release;
  c.device = dev.device;
  c.sms = dev.sms;
  c.shape.inv_hidden = 1.0 / static_cast<double>(hidden);
  // L2 prefetch of later rows (the distance is set at launch, from the occupancy and the tiles
  // per row: launch_one): one CTA per row group.
  const bool prefetch_ok = dev.major >= 9 && c.shape.cluster == 1;
  c.prefetch_pct = prefetch_ok ? sw.prefetch_pct : 0;
  // Block-scale lines kept in L2 until full (sm_90+; the launcher's rule: launch_one).
  c.demote_pct = dev.major >= 9 ? sw.demote_pct : 0;
  // L2 prefetch of a slice's later tiles: where each SM runs at most one CTA (rows of several
  // tiles are one CTA per slice), so that the grid's time is one CTA's chain of latencies (bf16
  // 132 x 32768: 11.50 -> 10.40 µs, 96 x 32768 10.09 -> 9.50; v16), and in grids whose streams
  // exceed 1 GiB each (bf16 12288 x 65536 1944 -> 1910 µs, 32768 x 32768 2624 -> 2572, 32768 x
  // 65536 5200 -> 5059; float32 32768 x 16384 2360 -> 2335; v17). Not between: two CTAs per SM
  // (128 x 65536: 23.07 -> 23.62), several waves (1024 x 65536 163.5 -> 169.1, 4096 x 32768
  // 321 -> 327), level at 1 GiB (8192 x 65536, 16384 x 32768, float32 16384 x 16384).
  const bool huge = rows * hidden * elem_size > kHugeStreamBytes;
  c.shape.prefetch_tiles = dev.major >= 9 && c.shape.ntiles > 1 &&
                           (sw.tile_prefetch >= 0 ? sw.tile_prefetch == 1 : ctas_per_wave <= dev.sms || huge);
  // Plain rows of whole warps take Layout::kWarpRowsCta (the kernel without the per-row barrier
  // code, and with the paired residual add; was kWarpRow1) instead of kWarpRows' kernel:
  // - 4-vector rows in one-row CTAs where the grid has at most 3 rows per SM; more rows per SM
  //   take the several-row kernel (its float add). Same-run A/B, bf16 (v22): 1.9-2.9 rows per SM
  //   2.5-13% faster (384 x 5120 5.84 -> 5.08 µs, 256 x 5120 4.50 -> 4.32, 384 x 8192 7.21 ->
  //   7.03), one per SM 2.6-4.6% (128 x 16384 5.63 -> 5.38, 128 x 32768 9.52 -> 9.30), level at
  //   256 x 16384 (+0.7%) and 64 x 32768; 3.9 per SM 5% slower with short rows (512 x 5120 6.02 ->
  //   6.35, 512 x 6144 6.70 -> 7.02), level with longer ones (512 x 7168) and at 5.8 (768 x 5120).
  //   4-vector rows several to a CTA keep kWarpRows (v20's per-row barriers; 4096 x 512, eight
  //   rows per CTA: level, v43).
  // - 1-vector rows, one or several to a CTA (v43; the one-row ones: with PDL, rows with idle
  //   lanes in CTAs of under 512 threads, one per SM at most, outside the lean kernel). Same
  //   binary, three passes, with PDL, plain, µs: one-row CTAs 1 x 1152 1.57 -> 1.44, 16 x 1152
  //   1.67 -> 1.55, 128 x 1152 1.83 -> 1.75 (hinted, the table's choice there: 1.42 / 1.53 /
  //   1.72), 128 x 1920 1.98 -> 1.88, 128 x 2176 2.15 -> 2.05, 128 x 3200 2.45 -> 2.35, float16
  //   128 x 2176 2.17 -> 2.06; several rows per CTA 256 x 1024 2.03 -> 1.91, 512 x 1024 2.52 ->
  //   2.45, 1024 x 1024 3.46 -> 3.37, 512 x 512 1.93 -> 1.81, 2048 x 512 3.42 -> 3.38, 1 x 1024
  //   1.45 -> 1.34; without normed_out level to 4% faster.
  // The launcher takes kWarpRowsCta only for aligned rows (known at launch); unaligned ones take
  // kWarpRows' kernel.
  const bool cta_default = c.vpt == 1 || (c.rows_per_cta == 1 && rows <= kRow1MaxRowsPerSm * dev.sms);
  c.cta_barrier = !c.hinted && (sw.row1 >= 0 ? sw.row1 >= 1 && (c.rows_per_cta == 1 || sw.row1 == 2) : cta_default);
  // One-vector one-tile one-row CTAs (decode rows of one CTA) take their own lean kernel
  // (Layout::kRowVec1, kernel.cuh: row_vec1_kernel, fewer instructions per thread; the launcher
  // takes it for aligned rows only), except with PDL in CTAs of under 512 threads with idle
  // lanes, one per SM at most. Same binary, two passes (v32), µs: without PDL 4.6-11% faster at
  // M = 128, H 1152..8192 (128 x 8192 4.53 -> 4.03, 128 x 2048 2.65 -> 2.48), 6.7-7.5% at 256 /
  // 512 x 2048 and 256 x 4096, 4% at 1 x 2048; with PDL 2.5-6% faster in CTAs of 512 threads or
  // more (128 x 8192 3.58 -> 3.42, 128 x 4096 2.64 -> 2.49, 256 x 4096 3.40 -> 3.31) and 1.5-5%
  // with more rows than SMs (256 x 2048 2.50 -> 2.38), but 1.6-6% slower in the one-wave grids of
  // smaller CTAs (1 x 1152 1.43 -> 1.51, 128 x 1152 1.74 -> 1.84, 1 x 2048 / 128 x 2048 +2.5 /
  // +1.6%), where a call is a chain of latencies and the PDL wait hides the old kernel's longer
  // prologue.
  // Since the FULL kernel (below, v36) rows of whole warps are faster lean there too. Same
  // binary, three passes (v38), with PDL: 128 x 2048 1.91 -> 1.84 (-3.8%), 64 x 2560 / 3072
  // -3.4 / -3.7%, float32 1 x 1024 1.29 -> 1.22, 128 x 1024 1.80 -> 1.67 (-7.5%), 64 x 1152
  // -6.1%; level at 1 / 16 / 64 x 2048; rows with idle lanes still slower (1 x 1152 1.37 ->
  // 1.45, 128 x 1152 1.74 -> 1.81).
  const bool whole_warps = svec == c.threads_x;  // one vector per thread, no idle lane
  c.row_vec1 = sw.row_vec1 >= 0 ? sw.row_vec1 == 1 : !c.pdl || c.threads_x >= 512 || rows > dev.sms || whole_warps;
  // Rows of whole warps (H / VEC == threads_x) in Layout::kRowVec1 take the FULL kernel (no
  // `valid` predicate: no branch around the loads and the sums), except the lean rows of grids
  // of many rows. Same binary, three passes (v36), bf16 µs, with PDL: 128 x 4096 2.46 -> 2.33
  // (-5.4%), 256 x 2048 2.36 -> 2.24 (-5.3%), 128 x 7168 / 8192 -0.6 / -0.3%; without PDL 128 x
  // 4096 2.98 -> 2.91, 256 x 2048 2.90 -> 2.83, 1 x 2048 1.99 -> 1.96; float32 128 x 2048 2.15 ->
  // 2.08 (-3.2%); level (within the runs' spread) at 1 x 4096 and float32 1 / 128 x 1152. But in
  // lean grids of many rows 0.3-1.2% slower (16384 x 4096 152.2 -> 153.8, 4096 x 4096 39.0 ->
  // 39.4 / 39.7 -> 40.1 without PDL, 16384 x 2048 76.6 -> 77.0).
  // v60: in the plain-access band (the call's buffers 1.5 MiB .. 72% of L2: !c.hinted) the lean
  // rows of grids of many rows take FULL too. Same binary, full=0 (the old rule there) against
  // the table, three passes in alternating order (h200_ab_v60_b.json; A/A 0.987-1.019 per pass),
  // µs, bf16 with PDL: 1024 x 4096 7.50 -> 7.25 (-3.3%, 3/3 passes), 2048 x 2048 7.23 -> 7.14
  // (-1.3%), 512 x 4096 -0.6%, 1536 x 2048 / 3072 x 2048 / 2048 x 3072 level, 2048 x 1024 +0.7%;
  // without normed_out 512 x 4096 4.38 -> 4.22 (-3.7%), 1536 x 2048 -3.6%, 2048 x 1024 -1.5%,
  // others level; without PDL 1024 x 4096 -2.1%, 2048 x 2048 -0.9%; float32 512 x 2048 -1.8%
  // (-3.0% without normed_out). 16384 x 2048 (hinted: unchanged) 1.002.
  c.full_rows = (sw.full_rows >= 0 ? sw.full_rows == 1 : !lean || !c.hinted) && whole_warps && !c.pair_rows;
  // Narrow vectors: one-row CTAs of one-vector 2-byte rows of an odd number of half-warps (an odd
  // number of 1x128 blocks: bf16 H = 1152 is 144 vectors, 160 threads with 16 idle lanes, in
  // kWarpRows' kernel with PDL, in the lean kernel with its `valid` predicate without) take 8
  // bytes per thread instead: 288 threads, 9 whole warps, the FULL lean kernel (4 elements per
  // thread, a 1x128 block one warp, as float32's 16-byte vectors; 416 instructions per thread
  // against 464 in 16-byte vectors), in CTAs of at most kNarrowMaxThreads threads, in grids of
  // at most kNarrowMaxRowsPerSm rows per SM: there a call is a chain of latencies, each shorter
  // per thread. Same binary, three passes (v50), against 16-byte vectors, µs, with PDL: bf16 1 x
  // 1152 1.372 -> 1.281, 16 x 1152 1.482 -> 1.411, 64 / 128 x 1152 -2.0%, 132 x 1152 -4.4%, 256 x
  // 1152 1.926 -> 1.819, 1 x 1408 1.454 -> 1.256 (-13.6%), 128 x 1408 -3.5%, 1 x 1920 -0.7%, 128 x
  // 1920 -2.8%, float16 1 x 1152 -7.0%, 128 x 1152 -3.7%; without PDL bf16 1 x 1152 1.961 ->
  // 1.833, 128 x 1152 -3.7%, 128 x 1920 -1.2%; without normed_out alike. Not in deeper grids,
  // where the rows are closer to issue-bound and narrow rows run 1.6 times the warp
  // instructions: 512 x 1152 +14.1% (float16 +13.7%, without PDL +5.3%), 600 x 1152 +20.4%, 512
  // x 1920 +13.1%. FP8NORM_TUNE=narrow=0: never; narrow=1: in every grid they fit.
  // (Not lean: so one vector per thread and no pairs.)
  const bool narrow_fits = elem_size == 2 && aligned && sw.narrow != 0 && sw.row_vec1 != 0 && sw.full_rows != 0 &&
                           sw.row_threads == 0 && !lean && c.shape.cluster == 1 && c.vpt == 1 &&
                           c.shape.ntiles == 1 && c.rows_per_cta == 1 && svec % 32 == 16 &&
                           2 * svec <= kNarrowMaxThreads;
  if (narrow_fits && (sw.narrow == 1 || rows <= kNarrowMaxRowsPerSm * dev.sms)) {
    c.vec_bytes = kNarrowVecBytes;
    c.threads_x = static_cast<int>(2 * svec);
    c.row_vec1 = true;
    c.full_rows = true;
  }
  TORCH_INTERNAL_ASSERT(c.lean_vpt == 1 || (c.layout() == Layout::kRowVec1 && !c.full_rows && c.shape.ntiles == 1));
  TORCH_INTERNAL_ASSERT(c.vec_bytes == 16 || (c.layout() == Layout::kRowVec1 && c.full_rows));
  return c;
}

bool aligned_rows(const void* p, int64_t stride_elems, int64_t elem_size, int64_t align) {
  return reinterpret_cast<uintptr_t>(p) % align == 0 && (stride_elems * elem_size) % align == 0;
}

void run(const RowArgs& a, const at::Tensor& input) {
  if (a.rows == 0) return;
  const c10::cuda::CUDAGuard guard(input.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(input.device().index());
  const int64_t es = input.element_size();
  const int64_t vec = 16 / es;
  const bool aligned = aligned_rows(a.input, a.input_stride, es, 16) &&
                       (a.residual == nullptr || aligned_rows(a.residual, a.residual_stride, es, 16)) &&
                       (a.normed == nullptr || aligned_rows(a.normed, a.normed_stride, es, 16)) &&
                       aligned_rows(a.weight, 0, 1, 16) && aligned_rows(a.out, a.out_stride, 1, vec);
  const Switches& sw = switches();
  LaunchConfig cfg = launch_config(a.rows, a.hidden, es, a.residual != nullptr, a.normed != nullptr, aligned,
                                   device_info(input.device().index()), sw, a.weight_is_float);
  // One row offset for the four row streams (kRowVec1 one-vector rows; LaunchConfig::one_stride)
  // where they share a row stride, only in calls that write normed_out: same binary against
  // onestride=0, bf16, four passes in alternating order (an A/A control within 0.9%), with
  // normed_out with PDL 1 x 2048 -2.0%, 128 x 4096 -1.4%, 2048 x 2048 -1.1%, 128 x 8192 -0.6%,
  // without PDL 1 x 2048 / 1 x 4096 -2.8%, 128 x 2048 / 4096 -1.3%; without normed_out (one
  // product saved instead of three) level to 1.6% slower (128 x 2048 +1.6%, 128 x 8192 +1.2%
  // with PDL), so those calls keep the per-stream strides (benchmarks/NOTES.md, v59).
  cfg.one_stride = sw.one_stride && a.normed != nullptr && a.normed_stride == a.input_stride &&
                   (a.residual == nullptr || a.residual_stride == a.input_stride) && a.out_stride == a.input_stride;
  switch (input.scalar_type()) {
    case at::kBFloat16: launch<__nv_bfloat16>(a, cfg, aligned, stream); break;
    case at::kHalf: launch<__half>(a, cfg, aligned, stream); break;
    case at::kFloat: launch<float>(a, cfg, aligned, stream); break;
    default: TORCH_CHECK(false, "fp8norm: unsupported dtype ", input.scalar_type());
  }
}

void fused_add_rmsnorm_fp8_block_quant_out_cuda(const at::Tensor& input, const at::Tensor& residual,
                                                const at::Tensor& weight, double eps, bool ue8m0,
                                                const at::Tensor& out, const at::Tensor& block_scale,
                                                const std::optional<at::Tensor>& normed_out) {
  run(prepare(kFusedOp, input, &residual, weight, eps, ue8m0, out, block_scale, normed_out), input);
}

void rmsnorm_fp8_block_quant_out_cuda(const at::Tensor& input, const at::Tensor& weight, double eps,
                                      bool ue8m0, const at::Tensor& out,
                                      const at::Tensor& block_scale,
                                      const std::optional<at::Tensor>& normed_out) {
  run(prepare(kPlainOp, input, nullptr, weight, eps, ue8m0, out, block_scale, normed_out), input);
}

}  // namespace
}  // namespace cuda

TORCH_LIBRARY_IMPL(fp8norm, CUDA, m) {
  m.impl("fused_add_rmsnorm_fp8_block_quant.out", &cuda::fused_add_rmsnorm_fp8_block_quant_out_cuda);
  m.impl("rmsnorm_fp8_block_quant.out", &cuda::rmsnorm_fp8_block_quant_out_cuda);
}

}  // namespace fp8norm
