// row_kernel: one row per CTA, the whole row in registers (one tile), aligned rows. The decode
// rows of one CTA and the rows of grids of many rows up to 1024 threads (Kernel::kRow*, in
// launch_policy.h). A decode CTA of up to 1024 threads is its SM's only CTA, and once its loads
// have landed every warp computes at once, so each instruction of a thread's path costs the SM
// an issue slot per warp: hence a kernel of its own, without the tile loop, the stash, the
// cluster or several-row code of tile_kernel, the output addresses formed after the reduction.
//
// Template parameters:
//   VPT         vectors per thread: 1, or 4 (vectors tx, tx + blockDim.x, ...: each group of a
//               block's LPB lanes holds one 1x128 block per vector)
//   VB          bytes of a vector: 16, or 8 (2-byte rows of an odd number of half-warps become
//               whole warps: 4 elements per thread, a 1x128 block one warp)
//   FULL        the row is exactly VPT * blockDim.x vectors: no lane predicate
//   ONE_STRIDE  input, residual, normed_out and out share one row stride: one row offset (one
//               64-bit product) for all four
// The same values as tile_kernel (the same paired add, the same pairwise double sums in the same
// order: lanes past the row's end add exact zeros).
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

// The store of row `row`'s block scale `col` (one lane of the block's stores it), with the L2
// line policy in grids where some rows keep their lines (scale_keep_rows > 0; elsewhere a plain
// store is the same and costs less).
__device__ __forceinline__ void store_row_block_scale(const RowArgs& a, const LaunchParams& s, int64_t row, int col,
                                                      float scale) {
  if (a.scale_packed) {
    store_packed_ue8m0(a.block_scale + row * a.scale_stride_row, a.scale_stride_col, col, a.hidden, scale);
    return;
  }
  float* p = a.block_scale + row * a.scale_stride_row + col * a.scale_stride_col;
  if (FP8NORM_SM90 && s.scale_keep_rows > 0) {
    store_scale(p, scale, scale_store_policy(row < s.scale_keep_rows));
    demote_scale_line_if(scale_line_demoter(row, s.scale_demote_rows, s.scale_keep_rows), p, s.scale_demote_rows);
    return;
  }
  *p = scale;
}

// Pass 1 of a row: its vectors and the weight's loaded, the residual added and stored, the
// thread's sum of squares returned (lanes past the row's end: registers the compiler cannot
// know, never stored, and a zero sum). sv ends with the rounded sums, or with F32SUM with the
// input, and rv with the old residual (norm_values2 adds them again in pass 2).
template <typename T, typename W, bool HAS_RES, bool F32SUM, int VPT, int VEC>
__device__ __forceinline__ double load_add_sum(const RowArgs& a, const T* in, T* res, bool valid,
                                               Pack<T, VEC> (&sv)[VPT], Pack<T, VEC> (&rv)[VPT],
                                               Pack<W, VEC> (&wv)[VPT]) {
  const int tx = threadIdx.x;
  [[maybe_unused]] const int stride = VPT > 1 ? static_cast<int>(blockDim.x) : 0;
  if (!valid) {
#pragma unroll
    for (int j = 0; j < VPT; ++j) {
      opaque_fill(sv[j]);
      if constexpr (F32SUM) opaque_fill(rv[j]);
      opaque_fill(wv[j]);
    }
    return 0.0;
  }
#pragma unroll
  for (int j = 0; j < VPT; ++j) {
    load<true, Hint::kStream>(sv[j], vec_at<VEC>(in, tx + j * stride));
    if constexpr (HAS_RES) load<true, Hint::kStream>(rv[j], vec_at<VEC>(res, tx + j * stride));
  }
#pragma unroll
  for (int j = 0; j < VPT; ++j) load<true, Hint::kKeep>(wv[j], vec_at<VEC>(static_cast<const W*>(a.weight), tx + j * stride));
  if constexpr (HAS_RES) {
#pragma unroll
    for (int j = 0; j < VPT; ++j) {
      Pack<T, VEC> sum = sv[j];
#pragma unroll
      for (int e = 0; e < VEC; e += 2) Cvt<T>::add2(&sum.v[e], &rv[j].v[e]);
      store<true, Hint::kStream>(vec_at<VEC>(res, tx + j * stride), sum);
      if constexpr (!F32SUM) sv[j] = sum;
    }
  }
  double acc = sum_of_squares<F32SUM>(sv[0], rv[0]);
#pragma unroll
  for (int j = 1; j < VPT; ++j) acc += sum_of_squares<F32SUM>(sv[j], rv[j]);
  return acc;
}

// Pass 2 of rows of four vectors per thread: every vector normalized first (its normed values
// kept as T: the same values re-widened below); the four block amax values reduced transposed,
// so that lanes (tx % LPB) / kOwners == j of a block's LPB lanes hold vector j's; they compute its
// scale once and its reciprocal and finite value are shuffled to the block's other lanes; the
// first of them stores it: at most one scale store per thread.
template <bool F32SUM, typename T, typename W, int VEC, int LPB>
__device__ __forceinline__ void quantize_four(const RowArgs& a, const LaunchParams& s, int64_t row, float rstd,
                                              bool valid, const Pack<T, VEC> (&sv)[4], const Pack<T, VEC> (&rv)[4],
                                              const Pack<W, VEC> (&wv)[4], T* normed, uint8_t* out) {
  constexpr int VPT = 4;
  constexpr int kOwners = LPB / VPT;  // lanes of a block that end with one vector's amax
  const int tx = threadIdx.x;
  const int stride = static_cast<int>(blockDim.x);
  const int kept_j = (tx % LPB) / kOwners;  // the vector whose scale this lane computes
  Pack<T, VEC> nv[VPT];
  uint32_t amax[VPT];
#pragma unroll
  for (int j = 0; j < VPT; ++j) {
    float g[VEC];
    amax[j] = normalize_vec<F32SUM>(sv[j], rv[j], wv[j], rstd, a.round_twice, nv[j], g);
    if (valid && normed != nullptr) store<true, Hint::kStream>(vec_at<VEC>(normed, tx + j * stride), nv[j]);
  }
  const float scale = block_scale_from_amax_bits(block_amax_transposed<LPB, VPT>(amax, tx), a.ue8m0);
  const float rcp = __frcp_rn(scale), scale_or_zero = finite_scale_or_zero(scale);
  const int first = (tx & 31) & ~(LPB - 1);  // the block's first lane in the warp
#pragma unroll
  for (int j = 0; j < VPT; ++j) {
    const float rcp_j = __shfl_sync(0xFFFFFFFFu, rcp, first + j * kOwners);
    const float scale_or_zero_j = __shfl_sync(0xFFFFFFFFu, scale_or_zero, first + j * kOwners);
    float g[VEC];
#pragma unroll
    for (int e = 0; e < VEC; e += 2) Cvt<T>::to_float2(&nv[j].v[e], g[e], g[e + 1]);
    uint32_t words[VEC / 4];
    quantize_by(g, scale_or_zero_j, rcp_j, words);
    if (valid) store_fp8<true, VEC, Hint::kStream>(vec_at<VEC>(out, tx + j * stride), words);
  }
  if (valid && tx % kOwners == 0) store_row_block_scale(a, s, row, (tx + kept_j * stride) / LPB, scale);
}

// Pass 2 of rows of one vector per thread.
template <bool F32SUM, typename T, typename W, int VEC, int LPB>
__device__ __forceinline__ void quantize_one(const RowArgs& a, const LaunchParams& s, int64_t row, float rstd,
                                             bool valid, const Pack<T, VEC>& sv, const Pack<T, VEC>& rv,
                                             const Pack<W, VEC>& wv, T* normed, uint8_t* out) {
  const int tx = threadIdx.x;
  Pack<T, VEC> nv;
  float g[VEC];
  const uint32_t amax = normalize_vec<F32SUM>(sv, rv, wv, rstd, a.round_twice, nv, g);
  if (valid && normed != nullptr) store<true, Hint::kStream>(vec_at<VEC>(normed, tx), nv);
  uint32_t words[VEC / 4];
  const float scale = quantize_vec<VEC, LPB, false>(g, amax, a.ue8m0, words);
  if (valid) {
    store_fp8<true, VEC, Hint::kStream>(vec_at<VEC>(out, tx), words);
    if (tx % LPB == 0) store_row_block_scale(a, s, row, tx / LPB, scale);
  }
}

// Two CTAs of 1024 threads per SM (the one-vector register budget) where an SM holds 2048
// threads; sm_120 holds 1536, so there the bound asks for one.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1200
constexpr int kRowMinCtasHere = 1;
#else
constexpr int kRowMinCtasHere = launch::kRowMinCtas;
#endif

template <typename T, typename W, bool HAS_RES, bool F32SUM, int VPT, int VB, bool FULL, bool ONE_STRIDE>
__global__ void __launch_bounds__(VPT == 1 ? launch::kRowMaxThreads : launch::kRowFourMaxThreads,
                                  VPT == 1 ? kRowMinCtasHere : launch::kRowFourMinCtas)
    row_kernel(const RowArgs a, const LaunchParams s) {
  static_assert(VPT == 1 || VPT == 4, "one or four vectors per thread");
  static_assert(HAS_RES || !F32SUM, "the float32 sum: with a residual");
  static_assert(VB == 16 || (VB == 8 && sizeof(T) == 2 && VPT == 1 && FULL), "8-byte vectors: 2-byte rows of whole warps");
  constexpr int VEC = VB / sizeof(T);    // elements per vector
  constexpr int LPB = kBlock / VEC;      // lanes per 1x128 block
  static_assert(LPB <= 32 && 32 % LPB == 0, "a 1x128 block must sit inside one warp");
  extern __shared__ __align__(16) unsigned char smem[];
  double* red = reinterpret_cast<double*>(smem);  // the warp sums

  const int tx = threadIdx.x;
  const int64_t row = cta_index();
  const bool valid = FULL || static_cast<unsigned>(tx) < static_cast<unsigned>(a.hidden) / VEC;  // H < 2^31
  const int64_t in_off = row * a.input_stride;
  const auto row_off = [&](int64_t row_stride) { return ONE_STRIDE ? in_off : row * row_stride; };
  const T* in = row_start<true>(static_cast<const T*>(a.input) + in_off);
  T* res = HAS_RES ? row_start<true>(static_cast<T*>(a.residual) + row_off(a.residual_stride)) : nullptr;
  // The L2 prefetch of a later CTA's row, before the PDL wait (its addresses from this row's
  // pointers, so that they are formed before the wait too).
  if (tx == 0 && s.prefetch_ctas > 0 && row + s.prefetch_ctas < a.rows) {
    const uint32_t bytes = static_cast<uint32_t>(a.hidden * sizeof(T));
    prefetch_to_l2(in + s.prefetch_ctas * a.input_stride, bytes);
    if constexpr (HAS_RES) prefetch_to_l2(res + s.prefetch_ctas * a.residual_stride, bytes);
  }

  wait_previous_grid(s.release_early);

  // Pass 1: the row and the weight, the new residual, the sum of squares.
  // (Input, residual, outputs: touched once, Hint::kStream; the weight, read by every row,
  // Hint::kKeep.)
  Pack<T, VEC> sv[VPT];
  [[maybe_unused]] Pack<T, VEC> rv[VPT];
  Pack<W, VEC> wv[VPT];
  double acc = load_add_sum<T, W, HAS_RES, F32SUM, VPT, VEC>(a, in, res, valid, sv, rv, wv);
  // The row's sum: warp shuffles, the warp sums through shared memory, then a butterfly over all
  // 32 lanes (lanes past the row's warps add exact zeros): every lane the same sum, in one order.
#pragma unroll
  for (int off = 16; off > 0; off /= 2) acc += __shfl_xor_sync(0xFFFFFFFFu, acc, off);
  if ((tx & 31) == 0) red[tx >> 5] = acc;
  __syncthreads();
  double sum_sq = (tx & 31) < static_cast<int>(blockDim.x >> 5) ? red[tx & 31] : 0.0;
#pragma unroll
  for (int off = 16; off > 0; off /= 2) sum_sq += __shfl_xor_sync(0xFFFFFFFFu, sum_sq, off);
  const float rstd = rstd_from_sum_of_squares_device(sum_sq, s.inv_hidden, a.eps);

  // Pass 2: normalize, quantize, store.
  T* normed = a.normed != nullptr ? row_start<true>(static_cast<T*>(a.normed) + row_off(a.normed_stride)) : nullptr;
  uint8_t* out = row_start<true>(static_cast<uint8_t*>(a.out) + row_off(a.out_stride));
  if constexpr (VPT == 1) {
    quantize_one<F32SUM, T, W, VEC, LPB>(a, s, row, rstd, valid, sv[0], rv[0], wv[0], normed, out);
  } else {
    quantize_four<F32SUM, T, W, VEC, LPB>(a, s, row, rstd, valid, sv, rv, wv, normed, out);
  }
}

}  // namespace cuda
}  // namespace fp8norm
