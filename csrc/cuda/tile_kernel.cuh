// tile_kernel: rows of any length and alignment (Kernel::kTile*, kHalfTile*, kCluster* in
// launch_policy.h).
//  - A row is covered by threads_x threads (blockDim.x: whole warps, or with kHalfRows whole
//    half-warps, where a warp may hold the end of one row and the start of the next),
//    rows_per_cta rows per CTA (blockDim.y); or, with kCluster, split into slices of whole 1x128
//    blocks over the CTAs of a thread-block cluster, whose partial sums of squares are exchanged
//    through distributed shared memory (sm_90+).
//  - Each thread owns 16-byte vectors: a 1x128 block is LPB = 128 / VEC consecutive lanes of one
//    warp. A slice is processed in tiles of threads_x * VPT vectors. Pass 1 reads input and
//    residual once (and, with one vector per thread, the last tile's weight, so that its latency
//    overlaps the reduction), writes the new residual and keeps the rounded sums on chip: in
//    registers for a one-tile slice, else in shared memory (the stash), or, for slices larger
//    than shared memory, re-read from the residual just written (same thread, from L2).
//  - The sum of squares is reduced by warp shuffles and one exchange through shared memory, in
//    double, in a fixed order (with a cluster every CTA adds the slices' sums in rank order): the
//    same rstd in every CTA and every run. Pass 2 normalizes, reduces each block's amax over its
//    lanes and writes normed (optional), fp8 and the block scale.
#pragma once

#include "../common/row_args.h"
#include "../common/numerics.h"
#include "launch.h"
#include "quantize.cuh"
#include "reduce.cuh"
#include "sm90.cuh"
#include "vector_io.cuh"

namespace fp8norm {
namespace cuda {

enum class TileLayout { kRows, kHalfRows, kCluster };

// This CTA's part of one row: the row's streams and the slice's vectors [begin, end).
template <typename T>
struct Slice {
  const T* in;
  T* res;
  T* normed;
  uint8_t* out;
  float* scale_row;
  int64_t row;
  bool active;  // row < M (pointers of an inactive row are formed, never dereferenced)
  int begin, end;
};

template <typename T, bool HAS_RES, bool ALIGNED, TileLayout L>
__device__ __forceinline__ Slice<T> slice_of(const RowArgs& a, const LaunchParams& s, unsigned rank) {
  constexpr int VEC = 16 / sizeof(T);
  Slice<T> sl;
  sl.row = static_cast<int64_t>(L == TileLayout::kCluster ? cluster_index() : cta_index()) * blockDim.y + threadIdx.y;
  sl.active = sl.row < a.rows;
  const int64_t r = sl.active ? sl.row : 0;
  sl.in = row_start<ALIGNED>(static_cast<const T*>(a.input) + r * a.input_stride);
  sl.res = HAS_RES ? row_start<ALIGNED>(static_cast<T*>(a.residual) + r * a.residual_stride) : nullptr;
  sl.normed = a.normed ? row_start<ALIGNED>(static_cast<T*>(a.normed) + r * a.normed_stride) : nullptr;
  sl.out = row_start<ALIGNED>(static_cast<uint8_t*>(a.out) + r * a.out_stride);
  sl.scale_row = a.block_scale + r * a.scale_stride_row;
  const int nvec = static_cast<int>(a.hidden / VEC);  // the policy keeps H < 2^31
  sl.begin = static_cast<int>(rank) * s.slice_vecs;
  sl.end = min(nvec, sl.begin + s.slice_vecs);
  return sl;
}

// Asks L2 for the rows of the CTA s.prefetch_ctas ahead, or else for this slice's later tiles
// (one thread; before the PDL wait: a hint returns no data). One branch for both: as two tests
// ptxas predicated the second's body into every warp ahead of the first load.
template <typename T, bool HAS_RES, bool ALIGNED>
__device__ __forceinline__ void prefetch_later(const RowArgs& a, const LaunchParams& s, const Slice<T>& sl,
                                               int tile_vecs) {
  constexpr int VEC = 16 / sizeof(T);
  if constexpr (ALIGNED) {
    if (threadIdx.x != 0 || (s.prefetch_ctas == 0 && !s.prefetch_tiles)) return;
    if (s.prefetch_ctas > 0) {
      const int64_t ahead = sl.row + static_cast<int64_t>(s.prefetch_ctas) * blockDim.y;
      if (ahead < a.rows) {
        const uint32_t bytes = static_cast<uint32_t>(a.hidden * sizeof(T));
        prefetch_to_l2(static_cast<const T*>(a.input) + ahead * a.input_stride, bytes);
        if constexpr (HAS_RES) prefetch_to_l2(static_cast<const T*>(a.residual) + ahead * a.residual_stride, bytes);
      }
    } else if (sl.active && sl.begin + tile_vecs < sl.end) {
      const uint32_t bytes = static_cast<uint32_t>(sl.end - sl.begin - tile_vecs) * 16u;
      prefetch_to_l2(vec_at<VEC>(sl.in, sl.begin + tile_vecs), bytes);
      if constexpr (HAS_RES) prefetch_to_l2(vec_at<VEC>(sl.res, sl.begin + tile_vecs), bytes);
    }
  }
}

// Pass 1: every tile's input (+ residual: the new residual, stored), its sum of squares, the
// tiles before the last stashed; the last tile's sums stay in sv (its weight in wv with one
// vector per thread). Vectors past the slice's end are not loaded; their registers hold values
// pass 2 computes on and never stores (no select per element). With F32SUM sv keeps the input
// and rv the old residual (the stash both, the residual's half after the input's); earlier
// tiles without a stash store their residual in pass 2, which reads input and residual again.
template <typename T, typename W, bool HAS_RES, bool F32SUM, bool ALIGNED, int VPT>
__device__ __forceinline__ double pass1(const RowArgs& a, const LaunchParams& s, const Slice<T>& sl, T* stash,
                                        Pack<T, 16 / sizeof(T)> (&sv)[VPT], Pack<T, 16 / sizeof(T)> (&rv)[VPT],
                                        Pack<W, 16 / sizeof(T)> (&wv)[VPT]) {
  constexpr int VEC = 16 / sizeof(T);
  constexpr bool kWeightEarly = VPT == 1;  // with four vectors the weight would cost registers
  const int tile_vecs = blockDim.x * VPT;
  double acc = 0.0;
  for (int t = 0; t < s.tiles; ++t) {
    const int v0 = sl.begin + t * tile_vecs + threadIdx.x;  // vector k: v0 + k * blockDim.x
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      const int v = v0 + k * blockDim.x;
      if (sl.active && v < sl.end) {
        load<ALIGNED, Hint::kStream>(sv[k], vec_at<VEC>(sl.in, v));
        if constexpr (HAS_RES) load<ALIGNED, Hint::kStream>(rv[k], vec_at<VEC>(sl.res, v));
        if (kWeightEarly && t == s.tiles - 1) load<ALIGNED, Hint::kKeep>(wv[k], vec_at<VEC>(static_cast<const W*>(a.weight), v));
      } else {
        opaque_fill(sv[k]);
        if constexpr (F32SUM) opaque_fill(rv[k]);
        opaque_fill(wv[k]);
      }
    }
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      const int v = v0 + k * blockDim.x;
      if (!(sl.active && v < sl.end)) continue;
      if constexpr (HAS_RES) {
        Pack<T, VEC> sum = sv[k];
#pragma unroll
        for (int e = 0; e < VEC; e += 2) Cvt<T>::add2(&sum.v[e], &rv[k].v[e]);
        if (!F32SUM || s.stash || t == s.tiles - 1) store<ALIGNED, Hint::kStream>(vec_at<VEC>(sl.res, v), sum);
        if constexpr (!F32SUM) sv[k] = sum;
      }
      acc += sum_of_squares<F32SUM>(sv[k], rv[k]);
      if (s.stash && s.tiles > 1) {
        store<true>(vec_at<VEC>(stash, v - sl.begin), sv[k]);
        if constexpr (F32SUM) store<true>(vec_at<VEC>(stash, v - sl.begin + s.slice_vecs), rv[k]);
      }
    }
  }
  return acc;
}

// The row's sum of squares from each thread's `acc`: shuffles over a row's warp (half-warp),
// the warp sums through shared memory, then every warp adds them by a butterfly over groups of
// a power of two >= the row's warps (zero-padded; a group never straddles two rows): every lane
// gets the same sum in the same order. With a cluster the slices' sums then go to every CTA of
// the cluster (st.async), each adding them in rank order.
template <TileLayout L>
__device__ __forceinline__ double row_sum(double acc, double* red, double* cluster_red, uint64_t* bar,
                                          const LaunchParams& s, unsigned rank) {
  constexpr bool HALF = L == TileLayout::kHalfRows;
  constexpr int seg_shift = HALF ? 4 : 5;
  const int tx = threadIdx.x;
  const int lane = HALF ? static_cast<int>((threadIdx.y * blockDim.x + tx) & 31) : tx & 31;
  if constexpr (!HALF) acc += __shfl_xor_sync(0xFFFFFFFFu, acc, 16);
#pragma unroll
  for (int off = 8; off > 0; off /= 2) acc += __shfl_xor_sync(0xFFFFFFFFu, acc, off);
  if ((tx & ((1 << seg_shift) - 1)) == 0) red[threadIdx.y * launch::kMaxWarpsPerRow + (tx >> seg_shift)] = acc;
  __syncthreads();
  const int nw = static_cast<int>(blockDim.x) >> seg_shift;
  const int group = nw == 1 ? 1 : 1 << (32 - __clz(nw - 1));
  const int w_idx = lane & (group - 1);
  double sum_sq = w_idx < nw ? red[threadIdx.y * launch::kMaxWarpsPerRow + w_idx] : 0.0;
#pragma unroll
  for (int off = launch::kMaxWarpsPerRow / 2; off > 0; off /= 2) {
    if (off < group) sum_sq += __shfl_xor_sync(0xFFFFFFFFu, sum_sq, off);
  }
  if constexpr (L == TileLayout::kCluster) {
    cluster_wait();  // every CTA of the cluster is running, its mbarrier initialized
    if (tx < s.cluster) store_to_cluster_rank(cluster_red + rank, bar, static_cast<unsigned>(tx), sum_sq);
    mbarrier_wait_first_phase(bar);  // every slice's sum has arrived
    sum_sq = 0.0;
    for (int i = 0; i < s.cluster; ++i) sum_sq += cluster_red[i];
  }
  return sum_sq;
}

// Pass 2, last tile first (still in registers); earlier tiles come back from the stash or from
// the residual / input just read (with F32SUM: input and old residual, and the new residual is
// stored here). Block-scale stores with the L2 line policy (kScaleLines) in the four-vector
// kernels of one-CTA rows.
template <typename T, typename W, bool HAS_RES, bool F32SUM, bool ALIGNED, int VPT, TileLayout L>
__device__ __forceinline__ void pass2(const RowArgs& a, const LaunchParams& s, const Slice<T>& sl, const T* stash,
                                      float rstd, Pack<T, 16 / sizeof(T)> (&sv)[VPT], Pack<T, 16 / sizeof(T)> (&rv)[VPT],
                                      Pack<W, 16 / sizeof(T)> (&wv)[VPT]) {
  constexpr int VEC = 16 / sizeof(T);
  constexpr int LPB = kBlock / VEC;
  constexpr bool kWeightEarly = VPT == 1;
  constexpr bool kScaleLines = FP8NORM_SM90 && VPT == 4 && L != TileLayout::kCluster;
  [[maybe_unused]] uint64_t scale_policy = 0;
  [[maybe_unused]] bool demoter = false;
  if constexpr (kScaleLines) {
    const int64_t cta_last_row = static_cast<int64_t>(cta_index()) * blockDim.y + blockDim.y - 1;
    scale_policy = scale_store_policy(cta_last_row < s.scale_keep_rows);
    demoter = scale_line_demoter(sl.row, s.scale_demote_rows, s.scale_keep_rows);
  }
  const int tile_vecs = blockDim.x * VPT;
  for (int t = s.tiles - 1; t >= 0; --t) {
    const int v0 = sl.begin + t * tile_vecs + threadIdx.x;
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      const int v = v0 + k * blockDim.x;
      if (!(sl.active && v < sl.end)) {
        opaque_fill(wv[k]);
        continue;
      }
      if (t != s.tiles - 1) {
        if (s.stash) {
          load<true>(sv[k], vec_at<VEC>(stash, v - sl.begin));
          if constexpr (F32SUM) load<true>(rv[k], vec_at<VEC>(stash, v - sl.begin + s.slice_vecs));
        } else if constexpr (F32SUM) {
          load<ALIGNED, Hint::kStream>(sv[k], vec_at<VEC>(sl.in, v));
          load<ALIGNED, Hint::kStream>(rv[k], vec_at<VEC>(sl.res, v));
          Pack<T, VEC> sum = sv[k];
#pragma unroll
          for (int e = 0; e < VEC; e += 2) Cvt<T>::add2(&sum.v[e], &rv[k].v[e]);
          store<ALIGNED, Hint::kStream>(vec_at<VEC>(sl.res, v), sum);
        } else {
          load<ALIGNED, Hint::kStream>(sv[k], vec_at<VEC>(HAS_RES ? sl.res : sl.in, v));
        }
      }
      if (!kWeightEarly || t != s.tiles - 1) load<ALIGNED, Hint::kKeep>(wv[k], vec_at<VEC>(static_cast<const W*>(a.weight), v));
    }
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      const int v = v0 + k * blockDim.x;
      const bool valid = sl.active && v < sl.end;
      Pack<T, VEC> nv;
      float g[VEC];
      const uint32_t amax = normalize_vec<F32SUM>(sv[k], rv[k], wv[k], rstd, a.round_twice, nv, g);
      if (valid && sl.normed != nullptr) store<ALIGNED, Hint::kStream>(vec_at<VEC>(sl.normed, v), nv);
      uint32_t words[VEC / 4];
      const float scale = quantize_vec<VEC, LPB, VPT == 1>(g, amax, a.ue8m0, words);
      if (!valid) continue;
      store_fp8<ALIGNED, VEC, Hint::kStream>(vec_at<VEC>(sl.out, v), words);
      if (threadIdx.x % LPB != 0) continue;
      if (a.scale_packed) {
        store_packed_ue8m0(sl.scale_row, a.scale_stride_col, v / LPB, a.hidden, scale);
        continue;
      }
      float* p = sl.scale_row + (v / LPB) * a.scale_stride_col;
      if constexpr (kScaleLines) {
        store_scale(p, scale, scale_policy);
        demote_scale_line_if(demoter, p, s.scale_demote_rows);
      } else {
        *p = scale;
      }
    }
  }
}

// Registers: with four vectors per thread aligned rows are held to 64 registers, so that two
// CTAs of 512 threads fit on an SM; unaligned rows keep every register.
template <typename T, typename W, bool HAS_RES, bool F32SUM, bool ALIGNED, int VPT, TileLayout L>
__global__ void __launch_bounds__(VPT == 4 ? launch::kTileMaxThreads4 : launch::kTileMaxThreads1,
                                  VPT == 4 && ALIGNED ? launch::kTileMinCtas4 : 1)
    tile_kernel(const RowArgs a, const LaunchParams s) {
  constexpr int VEC = 16 / sizeof(T);
  static_assert(kBlock / VEC <= 32, "a 1x128 block must sit inside one warp");
  static_assert(L != TileLayout::kHalfRows || kBlock / VEC <= 16, "half-warp rows: 2-byte types");
  // Shared memory: the warp sums red[rows_per_cta][kMaxWarpsPerRow], the slices' sums
  // cluster_red[kMaxCluster], the mbarrier, the stash (launch::reduction_smem_bytes).
  extern __shared__ __align__(16) unsigned char smem[];
  double* red = reinterpret_cast<double*>(smem);
  double* cluster_red = red + launch::kMaxWarpsPerRow * blockDim.y;
  uint64_t* bar = reinterpret_cast<uint64_t*>(cluster_red + launch::kMaxCluster);
  T* stash = reinterpret_cast<T*>(smem + launch::reduction_smem_bytes(static_cast<int>(blockDim.y)));
  // Split rows: the exchange's mbarrier and the cluster arrive at entry, off the critical path.
  if constexpr (L == TileLayout::kCluster) {
    if (threadIdx.x == 0) mbarrier_init_expect(bar, static_cast<uint32_t>(sizeof(double) * s.cluster));
    cluster_arrive_relaxed();
  }
  const unsigned rank = L == TileLayout::kCluster ? cluster_rank() : 0;
  const Slice<T> sl = slice_of<T, HAS_RES, ALIGNED, L>(a, s, rank);
  prefetch_later<T, HAS_RES, ALIGNED>(a, s, sl, blockDim.x * VPT);
  wait_previous_grid(s.release_early);

  static_assert(HAS_RES || !F32SUM, "the float32 sum: with a residual");
  Pack<T, VEC> sv[VPT];  // the rounded sums of the current tile (exact in T); F32SUM: the input
  [[maybe_unused]] Pack<T, VEC> rv[VPT];  // F32SUM: the old residual
  Pack<W, VEC> wv[VPT];  // the weights of the current tile
  const double acc = pass1<T, W, HAS_RES, F32SUM, ALIGNED, VPT>(a, s, sl, stash, sv, rv, wv);
  const double sum_sq = row_sum<L>(acc, red, cluster_red, bar, s, rank);
  const float rstd = rstd_from_sum_of_squares_device(sum_sq, s.inv_hidden, a.eps);
  pass2<T, W, HAS_RES, F32SUM, ALIGNED, VPT, L>(a, s, sl, stash, rstd, sv, rv, wv);
}

}  // namespace cuda
}  // namespace fp8norm
