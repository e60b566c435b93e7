#include "launch_policy.h"

#include <algorithm>
#include <array>
#include <atomic>

namespace fp8norm {
namespace launch {
namespace {

// Every tuned number of the policy, each with its reason (docs/design.md: the measurements).
struct Rules {
  // Row split over a cluster (decode sizes, sm_90+).
  int64_t split_min_vecs = 256;    // shorter rows stay whole: one CTA is as fast
  int64_t slice_vecs = 128;        // aim for slices this long: one SM no longer does a long row
  int64_t pair_max_vecs = 896;     // a split in two gains nothing up to here
  int64_t no_pdl_whole_vecs = 512; // without PDL one CTA is faster up to here
  int64_t whole_elems = 1536;      // float32 rows of up to this many elements: one CTA is faster
  int64_t long_slice_vecs = 4096;  // longer rows (any M): a cluster brings slices to this (two
                                   // tiles, a 64 KiB stash: two CTAs per SM instead of one)
  // Row kernels in grids of many rows ("lean rows": one row per CTA, one tile).
  int64_t lean_min_vecs = 128;     // shorter rows take several to a CTA (tile kernel)
  int64_t lean_max_vecs = 512;     // longer rows take four vectors per thread
  // Four vectors per thread in a row kernel (rows of whole warps of four vectors), in grids of
  // more than one wave of one-vector rows (rmsnorm_*: two, and one wave of these CTAs).
  int64_t four_min_threads = 64;           // one-warp rows lose
  int64_t four_plain_max_threads = 512;    // rmsnorm_* with normed_out
  int64_t four_fused_min_threads = 128;    // fused op: 128..256 threads...
  int64_t four_fused_max_threads = 256;
  int64_t four_fused_max_rows = 2048;      // ...in grids of at most: rows of 128 threads
  int64_t four_fused_max_rows_nn = 3072;   //   without normed_out
  int64_t four_fused_wide_max_rows = 6144;      // rows of more threads
  int64_t four_fused_wide_max_rows_nn = 16384;  //   without normed_out
  // Narrow (8-byte) vectors: one-row CTAs of 2-byte rows of an odd number of half-warps.
  int64_t narrow_max_threads = 512;        // longer rows run too many instructions per row
  int64_t narrow_max_rows_per_sm = 2;      // deeper grids are issue-bound
  // Tile kernels.
  int cta_threads = 256;                   // rows per CTA: about this many threads
  // Streams and L2.
  int64_t prefetch_min_waves = 4;          // L2 row prefetch only in grids deeper than this...
  int64_t prefetch_pct = 25;               // ...this many percent of a wave ahead
  int64_t prefetch_tiles_min_waves = 8;    // rows of several tiles: deeper than this
  int64_t huge_stream_bytes = int64_t{1} << 30;  // tile prefetch: streams over this
  int64_t demote_waves = 2;                // block-scale lines kept evict_last this long
};
constexpr Rules kRules{};

// Clusters, PDL and the L2 hints exist in kernels compiled for sm_90 or later (csrc/cuda/sm90.cuh).
bool sm90_image(const Device& d) { return d.image_arch >= 90; }

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }
int pow2_at_least(int64_t n) {
  int p = 1;
  while (p < n) p *= 2;
  return p;
}

constexpr std::array<const char*, kNumKernels> kNames = {
    "row", "row_narrow", "row_four", "tile1", "tile4", "half_tile1", "half_tile4",
    "cluster1", "cluster4"};

// Row facts the rules share.
struct Shape {
  int64_t nvec;      // 16-byte vectors per row
  int64_t lpb;       // lanes of a 1x128 block (16-byte vectors)
  int64_t nblocks;   // 1x128 blocks per row
  int64_t wave1;     // CTAs one wave holds with one vector per thread (~1024 threads per SM)
  bool many_rows;    // more rows than one such wave
};

Shape shape_of(const Problem& p, const Device& d) {
  Shape s;
  s.nvec = p.hidden * p.elem_size / 16;
  s.lpb = kBlock * p.elem_size / 16;
  s.nblocks = p.hidden / kBlock;
  const int64_t threads1 = std::min<int64_t>(1024, round_up(s.nvec, 32));
  s.wave1 = int64_t{d.sms} * std::max<int64_t>(1, 1024 / threads1);
  s.many_rows = p.rows > s.wave1;
  return s;
}

// CTAs per row: a decode-size row split over a cluster (while the grid stays one wave), or a
// very long row split at any M.
int cluster_size(const Problem& p, const Device& d, const Shape& s) {
  if (!sm90_image(d)) return 1;
  int c = 1;
  if (s.nvec > kRules.split_min_vecs) {
    c = std::min(kMaxCluster, pow2_at_least(ceil_div(s.nvec, kRules.slice_vecs)));
  }
  while (c > 1 && p.rows * c > d.sms) c /= 2;
  if ((c == 2 && s.nvec <= kRules.pair_max_vecs) || (!d.pdl && s.nvec <= kRules.no_pdl_whole_vecs) ||
      p.hidden <= kRules.whole_elems) {
    c = 1;
  }
  if (c == 1 && s.nvec > kRules.long_slice_vecs) c = static_cast<int>(ceil_div(s.nvec, kRules.long_slice_vecs));
  c = static_cast<int>(std::min<int64_t>({c, kMaxCluster, s.nblocks}));
  return static_cast<int>(ceil_div(s.nblocks, ceil_div(s.nblocks, c)));  // no empty slice
}

// CTAs of `threads` threads one SM holds, by threads and by the kernel's register budget
// (its launch bounds), and by shared memory.
int64_t ctas_per_sm(Kernel k, int64_t cta_threads, int64_t smem, const Device& d) {
  const int64_t warps_threads = round_up(cta_threads, 32);
  int64_t regs = 64;  // per thread
  if (k == Kernel::kRow || k == Kernel::kRowNarrow) regs = 65536 / (kRowMaxThreads * kRowMinCtas);
  int64_t n = std::min<int64_t>({32, 2048 / warps_threads, 65536 / (regs * warps_threads)});
  if (smem > 0) n = std::min<int64_t>(n, std::max<int64_t>(1, d.max_smem / smem));
  return std::max<int64_t>(1, n);
}

bool row_four_fits(const Problem& p, const Shape& s) {
  const int64_t t = s.nvec / 4;
  // A float32 weight with a 2-byte input spilled in the fused op's kernel: not built.
  return p.aligned && s.nvec % (4 * 32) == 0 && t <= kRowFourMaxThreads && !(p.residual && p.weight_fp32);
}

// Four vectors per thread in one-row CTAs: rows of the table's band of threads and grid depths,
// in grids of more than one wave of one-vector rows (rmsnorm_*: more than two, and more than one
// wave of these CTAs).
bool row_four_in_band(const Problem& p, const Device& d, const Shape& s) {
  if (!s.many_rows || !row_four_fits(p, s)) return false;
  const int64_t t = s.nvec / 4;
  int64_t lo = kRules.four_min_threads, hi = kRules.four_plain_max_threads, max_rows = p.rows;
  if (!p.residual && !p.normed) {
    hi = kRowFourMaxThreads;
  } else if (p.residual) {
    lo = kRules.four_fused_min_threads;
    hi = kRules.four_fused_max_threads;
    const bool wide = t > kRules.four_fused_min_threads;
    max_rows = wide ? (p.normed ? kRules.four_fused_wide_max_rows : kRules.four_fused_wide_max_rows_nn)
                    : (p.normed ? kRules.four_fused_max_rows : kRules.four_fused_max_rows_nn);
  }
  const int64_t slots = int64_t{d.sms} * ctas_per_sm(Kernel::kRowFour, t, 0, d);
  const bool deep = p.rows > 2 * s.wave1 && p.rows > slots;
  return t >= lo && t <= hi && p.rows <= max_rows && (p.residual || deep);
}

// The tile kernel for rows of one CTA: four vectors per thread for rows of more than 1024
// vectors, and in grids of many rows where that takes fewer threads per row (more rows in
// flight per SM); else one (a one-wave grid is a chain of latencies: spread the row wider).
Kernel tile_kernel_for(const Shape& s) {
  const int64_t t1 = round_up(s.nvec, 32), t4 = round_up(ceil_div(s.nvec, 4), 32);
  return s.nvec > 1024 || (s.many_rows && t4 < t1) ? Kernel::kTile4 : Kernel::kTile1;
}

// The policy's kernel for a problem without a cluster.
Kernel pick_kernel(const Problem& p, const Device& d, const Shape& s) {
  const Kernel tile = tile_kernel_for(s);
  if (!p.aligned) return tile;
  if (!s.many_rows) {
    // One wave: one row per CTA in the row kernel, unless the row is short enough to share a
    // CTA with others (tile kernel).
    if (s.nvec > kRowMaxThreads || round_up(s.nvec, 32) <= kRules.cta_threads / 2) return tile;
    const bool narrow = p.elem_size == 2 && s.nvec % 32 == 16 && 2 * s.nvec <= kRules.narrow_max_threads &&
                        p.rows <= kRules.narrow_max_rows_per_sm * d.sms;
    return narrow ? Kernel::kRowNarrow : Kernel::kRow;
  }
  if (row_four_in_band(p, d, s)) return Kernel::kRowFour;
  // One vector per thread in one-row CTAs, but not rmsnorm_* rows of whole warps of four vectors
  // beyond two waves (closer to issue-bound: the tile kernel's four vectors per thread win).
  const bool plain_four_rows = !p.residual && s.nvec % (4 * 32) == 0 && p.rows > 2 * s.wave1;
  if (s.nvec >= kRules.lean_min_vecs && s.nvec <= kRules.lean_max_vecs && !plain_four_rows) return Kernel::kRow;
  return tile;
}

bool is_half(Kernel k) { return k == Kernel::kHalfTile1 || k == Kernel::kHalfTile4; }

// Geometry of kernel `k` for the problem, with `cluster` CTAs per row.
Plan geometry(const Problem& p, const Device& d, const Shape& s, Kernel k, int cluster) {
  Plan g;
  g.kernel = k;
  g.cluster = cluster;
  const int64_t blocks_per_slice = ceil_div(s.nblocks, cluster);
  const int64_t svec = blocks_per_slice * s.lpb;
  g.slice_vecs = static_cast<int>(svec);
  const int vpt = vectors_per_thread(k);
  if (is_row_kernel(k)) {
    g.threads = static_cast<int>(k == Kernel::kRowNarrow ? 2 * svec : round_up(ceil_div(svec, vpt), 32));
  } else {
    const int64_t max_threads = vpt == 4 ? kTileMaxThreads4 : kTileMaxThreads1;
    const int64_t per_thread = ceil_div(svec, vpt);
    g.threads = static_cast<int>(std::min(max_threads, round_up(per_thread, is_half(k) ? 16 : 32)));
    g.tiles = static_cast<int>(ceil_div(svec, int64_t{g.threads} * vpt));
    if (g.tiles == 1 && cluster == 1) {
      g.rows_per_cta = std::max(1, kRules.cta_threads / g.threads);
      if (is_half(k)) g.rows_per_cta &= ~1;  // whole warps per CTA
    }
  }
  g.ctas = ceil_div(p.rows, g.rows_per_cta) * cluster;
  const int64_t red = reduction_smem_bytes(g.rows_per_cta);
  const int64_t stash = svec * 16 * (p.sum_f32 ? 2 : 1);
  g.stash = g.tiles > 1 && red + stash <= d.max_smem;
  g.smem_bytes = is_row_kernel(k) ? reduction_smem_bytes(1) : red + (g.stash ? stash : 0);
  return g;
}

// The launch-time choices: PDL and its release point, L2 prefetch, block-scale line policy.
void schedule(const Problem& p, const Device& d, Plan& g) {
  g.pdl = sm90_image(d) && d.pdl;
  const int64_t per_sm = ctas_per_sm(g.kernel, int64_t{g.threads} * g.rows_per_cta, g.smem_bytes, d);
  const int64_t resident = per_sm * d.sms;
  // PDL: release the next grid at the start, unless this grid is one wave over half the CTA
  // slots that leaves slots free: the next grid's CTAs would pile onto the SMs that finish
  // first and slow this grid's tail.
  const bool one_wave_over_half = g.ctas <= resident && 2 * g.ctas > resident;
  const bool crowded = vectors_per_thread(g.kernel) == 4 && !is_row_kernel(g.kernel) && per_sm >= 2 &&
                       16 * g.ctas < 15 * resident;
  g.release_early = !(one_wave_over_half && (per_sm > ceil_div(g.ctas, d.sms) || crowded));
  // L2 prefetch of the rows a quarter of a wave ahead, in deep grids of one CTA per row group.
  if (sm90_image(d) && p.aligned && g.cluster == 1) {
    const int64_t min_waves = g.tiles > 1 ? kRules.prefetch_tiles_min_waves : kRules.prefetch_min_waves;
    if (g.ctas > min_waves * resident) {
      g.prefetch_ctas = static_cast<int>(std::max<int64_t>(1, resident * kRules.prefetch_pct / 100));
    }
  }
  // A slice's later tiles asked into L2 at the CTA's start, where every stream exceeds 1 GiB.
  g.prefetch_tiles = sm90_image(d) && p.aligned && g.tiles > 1 && g.prefetch_ctas == 0 &&
                     p.rows * p.hidden * p.elem_size > kRules.huge_stream_bytes;
  // Block-scale lines kept in L2 until full, then demoted (row kernels and four-vector tiles).
  const bool line_kernel = is_row_kernel(g.kernel) || g.kernel == Kernel::kTile4 || g.kernel == Kernel::kHalfTile4;
  if (sm90_image(d) && p.scale_lines && line_kernel) {
    const int64_t wave_rows = resident * g.rows_per_cta;
    const int64_t dist = round_up(std::max<int64_t>(1, kRules.demote_waves * wave_rows), 32);
    const int64_t keep = std::max<int64_t>(0, (p.rows - dist) / 32 * 32);
    if (keep > 0) {
      g.scale_demote_rows = dist;
      g.scale_keep_rows = keep;
    }
  }
}

}  // namespace

const char* kernel_name(Kernel k) { return kNames[static_cast<int>(k)]; }

std::optional<Kernel> kernel_from_name(const std::string& name) {
  for (int i = 0; i < kNumKernels; ++i) {
    if (name == kNames[i]) return static_cast<Kernel>(i);
  }
  return std::nullopt;
}

bool is_row_kernel(Kernel k) {
  return k == Kernel::kRow || k == Kernel::kRowNarrow || k == Kernel::kRowFour;
}

bool is_cluster_kernel(Kernel k) { return k == Kernel::kCluster1 || k == Kernel::kCluster4; }

int vectors_per_thread(Kernel k) {
  switch (k) {
    case Kernel::kRowFour:
    case Kernel::kTile4:
    case Kernel::kHalfTile4:
    case Kernel::kCluster4: return 4;
    default: return 1;
  }
}

int vector_bytes(Kernel k) { return k == Kernel::kRowNarrow ? 8 : 16; }

std::string check_forced(const Problem& p, const Device& d, Kernel k) {
  const Shape s = shape_of(p, d);
  if (is_cluster_kernel(k)) {
    if (!sm90_image(d)) return "clusters need kernels built for sm_90 or later";
    return s.nblocks >= 2 ? "" : "a cluster needs two 1x128 blocks or more";
  }
  if (is_half(k)) {
    const int64_t half = round_up(ceil_div(s.nvec, vectors_per_thread(k)), 16);
    return s.lpb <= 16 && 2 * half <= kRules.cta_threads ? "" : "half-warp rows: 2-byte rows of two or more per CTA";
  }
  if (!is_row_kernel(k)) return "";
  if (!p.aligned) return "row kernels need aligned rows";
  switch (k) {
    case Kernel::kRow: return s.nvec <= kRowMaxThreads ? "" : "a row of at most 1024 vectors";
    case Kernel::kRowNarrow:
      return p.elem_size == 2 && 2 * s.nvec <= kRowMaxThreads ? "" : "2-byte rows of at most 512 16-byte vectors";
    default: return row_four_fits(p, s) ? "" : "rows of whole warps of four vectors (fused op: weight of input's dtype)";
  }
}

Plan plan(const Problem& p, const Device& d, std::optional<Kernel> force) {
  const Shape s = shape_of(p, d);
  int cluster = cluster_size(p, d, s);
  Kernel k;
  if (force) {
    k = *force;
    if (!is_cluster_kernel(k)) {
      cluster = 1;
    } else if (cluster == 1) {
      cluster = static_cast<int>(std::min<int64_t>({4, s.nblocks}));
      cluster = static_cast<int>(ceil_div(s.nblocks, ceil_div(s.nblocks, cluster)));
    }
  } else if (cluster > 1) {
    // Clustered slices of more than 512 vectors: four per thread once the clusters take more
    // than half the SMs (a cluster of 1024-thread CTAs needs whole SMs of one GPC).
    const int64_t svec = ceil_div(s.nblocks, cluster) * s.lpb;
    k = svec > 1024 || (svec > 512 && p.rows * cluster > d.sms / 2) ? Kernel::kCluster4 : Kernel::kCluster1;
  } else {
    k = pick_kernel(p, d, s);
    // Rows in whole half-warps where that takes fewer threads (2-byte types, one tile, a CTA of
    // two rows or more).
    if ((k == Kernel::kTile1 || k == Kernel::kTile4) && s.lpb <= 16) {
      const int vpt = vectors_per_thread(k);
      const int64_t half = round_up(ceil_div(s.nvec, vpt), 16);
      if (half < round_up(ceil_div(s.nvec, vpt), 32) && 2 * half <= kRules.cta_threads) {
        k = vpt == 4 ? Kernel::kHalfTile4 : Kernel::kHalfTile1;
      }
    }
  }
  Plan g = geometry(p, d, s, k, cluster);
  g.one_stride = p.one_stride && is_row_kernel(k);
  schedule(p, d, g);
  return g;
}

namespace {
std::atomic<int> g_forced{-1};
}  // namespace

void set_forced_kernel(std::optional<Kernel> k) { g_forced.store(k ? static_cast<int>(*k) : -1); }

std::optional<Kernel> forced_kernel() {
  const int k = g_forced.load(std::memory_order_relaxed);
  if (k < 0) return std::nullopt;
  return static_cast<Kernel>(k);
}

std::string to_string(const Plan& g) {
  std::string s = std::string("kernel=") + kernel_name(g.kernel);
  auto add = [&](const char* key, int64_t v) { s += std::string(" ") + key + "=" + std::to_string(v); };
  add("threads", g.threads);
  add("rows_per_cta", g.rows_per_cta);
  add("cluster", g.cluster);
  add("tiles", g.tiles);
  add("stash", g.stash);
  add("ctas", g.ctas);
  add("smem", g.smem_bytes);
  add("pdl", g.pdl);
  add("release_early", g.release_early);
  add("prefetch_ctas", g.prefetch_ctas);
  add("prefetch_tiles", g.prefetch_tiles);
  add("scale_keep_rows", g.scale_keep_rows);
  add("scale_demote_rows", g.scale_demote_rows);
  add("one_stride", g.one_stride);
  return s;
}

}  // namespace launch
}  // namespace fp8norm
