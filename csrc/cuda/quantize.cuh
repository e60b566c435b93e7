// Device helpers: normalization and 1x128 FP8 quantization of one vector of a row, with the
// numerics of csrc/common/numerics.h (the contract's, bit for bit).
#pragma once

#include "../common/numerics.h"
#include "reduce.cuh"
#include "vector_io.cuh"

namespace fp8norm {
namespace cuda {

// The normed values (x * rstd * weight rounded to T; with `twice`, x * rstd rounded to T, times
// weight, rounded again) of the values norm_values2 gives, into nv, and as floats into g;
// returns their largest |value| as bits (NaN above +inf). With a NaN the bits are the canonical
// NaN's, and so is the block scale computed from them (the contract's). `twice` is uniform
// (RowArgs::round_twice): a branch around the extra rounding, which no other code waits on.
template <bool F32SUM, typename T, typename W, int VEC>
__device__ __forceinline__ uint32_t normalize_vec(const Pack<T, VEC>& x, const Pack<T, VEC>& r,
                                                  const Pack<W, VEC>& w, float rstd, bool twice, Pack<T, VEC>& nv,
                                                  float (&g)[VEC]) {
#pragma unroll
  for (int e = 0; e < VEC; e += 2) {
    float xf[2], wf[2];
    norm_values2<F32SUM>(x, r, e, xf[0], xf[1]);
    Cvt<W>::to_float2(&w.v[e], wf[0], wf[1]);
#pragma unroll
    for (int i = 0; i < 2; ++i) xf[i] = scaled_by_rstd(xf[i], rstd);
    if (twice) {
      T xr[2];
      Cvt<T>::from_float2(xf[0], xf[1], xr);
      Cvt<T>::to_float2(xr, xf[0], xf[1]);
    }
    Cvt<T>::from_float2(weighted(xf[0], wf[0]), weighted(xf[1], wf[1]), &nv.v[e]);
  }
#pragma unroll
  for (int e = 0; e < VEC; e += 2) Cvt<T>::to_float2(&nv.v[e], g[e], g[e + 1]);
  float m = 0.0f;
#pragma unroll
  for (int e = 0; e < VEC; ++e) m = amax_step(m, g[e]);
  return float_bits(m);
}

// g quantized to fp8 bytes, four per word, given its block's scale as scaled_by_reciprocal takes
// it (finite_scale_or_zero) and the scale's correctly rounded reciprocal.
template <int VEC>
__device__ __forceinline__ void quantize_by(const float (&g)[VEC], float scale_or_zero, float rcp,
                                            uint32_t (&words)[VEC / 4]) {
  float q[VEC];
#pragma unroll
  for (int e = 0; e < VEC; ++e) q[e] = scaled_by_reciprocal(g[e], scale_or_zero, rcp);
#pragma unroll
  for (int e = 0; e < VEC; e += 4) words[e / 4] = to_fp8x2(q[e], q[e + 1]) | (to_fp8x2(q[e + 2], q[e + 3]) << 16);
}

// The 1x128 block's scale (amax reduced over the block's LPB lanes of this warp) and g quantized
// by it to fp8 bytes, four per word.
template <int VEC, int LPB, bool REDUX>
__device__ __forceinline__ float quantize_vec(const float (&g)[VEC], uint32_t amax, bool ue8m0,
                                              uint32_t (&words)[VEC / 4]) {
  amax = block_amax<LPB, REDUX>(amax);
  const float scale = block_scale_from_amax_bits(amax, ue8m0);
  quantize_by(g, finite_scale_or_zero(scale), __frcp_rn(scale), words);
  return scale;
}

}  // namespace cuda
}  // namespace fp8norm
