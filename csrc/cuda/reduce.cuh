// Device helpers: the reductions of the kernels (sums of squares in double, block amax over the
// lanes of a 1x128 block). Every order is fixed, so results do not depend on the launch.
#pragma once

#include "../common/numerics.h"
#include "vector_io.cuh"

namespace fp8norm {
namespace cuda {

// The squares of the values the norm is computed from (norm_values2: x's, or with F32SUM the
// float32 sums of x's and r's; float32 products, as the reference's x.square()), added pairwise
// in double: log2(VEC) dependent adds, not VEC.
template <bool F32SUM, typename T, int VEC>
__device__ __forceinline__ double sum_of_squares(const Pack<T, VEC>& x, const Pack<T, VEC>& r) {
  double sq[VEC];
#pragma unroll
  for (int e = 0; e < VEC; e += 2) {
    float f[2];
    norm_values2<F32SUM>(x, r, e, f[0], f[1]);
#pragma unroll
    for (int i = 0; i < 2; ++i) sq[e + i] = static_cast<double>(__fmul_rn(f[i], f[i]));
  }
#pragma unroll
  for (int n = VEC / 2; n > 0; n /= 2) {
#pragma unroll
    for (int e = 0; e < n; ++e) sq[e] += sq[e + n];
  }
  return sq[0];
}

// max(|g|, m) for m >= 0 (a running amax), NaN if either is NaN: on sm_80+ one max.NaN.f32 with
// |g| as an operand modifier; below, the unsigned max of the bits (abs_bits' order).
__device__ __forceinline__ float amax_step(float m, float g) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  float d;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(d) : "f"(fabsf(g)), "f"(m));
  return d;
#else
  return bits_float(max(abs_bits(g), float_bits(m)));
#endif
}

template <int LPB>
__device__ __forceinline__ uint32_t block_amax_shuffle(uint32_t v) {
#pragma unroll
  for (int off = LPB / 2; off > 0; off /= 2) v = max(v, __shfl_xor_sync(0xFFFFFFFFu, v, off));
  return v;
}

// The largest of v over each aligned group of LPB lanes of the warp (a 1x128 block's lanes), in
// every lane; all 32 lanes take part. v is amax bits (abs_bits): their unsigned max is the
// NaN-propagating amax. REDUX (sm_80+): one warp-wide redux.sync per group (a 16-lane group
// takes the max of its own lanes with zeros in the other half's) instead of log2(LPB) dependent
// shuffle steps; the same value.
template <int LPB, bool REDUX>
__device__ __forceinline__ uint32_t block_amax(uint32_t v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (REDUX && LPB == 32) {
    return __reduce_max_sync(0xFFFFFFFFu, v);
  } else if constexpr (REDUX && LPB == 16) {
    unsigned lane;
    asm("mov.u32 %0, %%laneid;" : "=r"(lane));
    const bool upper = (lane & 16u) != 0;
    const uint32_t lower_max = __reduce_max_sync(0xFFFFFFFFu, upper ? 0u : v);
    const uint32_t upper_max = __reduce_max_sync(0xFFFFFFFFu, upper ? v : 0u);
    return upper ? upper_max : lower_max;
  } else {
    return block_amax_shuffle<LPB>(v);
  }
#else
  return block_amax_shuffle<LPB>(v);
#endif
}

// The block amax of N vectors per lane at once (N a power of two, at most LPB): v[j] is this
// lane's amax bits of its vector j, one 1x128 block per j over each aligned group of LPB lanes.
// Reduced transposed: at each of the first log2(N) steps the lanes exchange half their values
// with the lane `off` apart and keep the max of the other half, then block_amax's steps over the
// remaining LPB / N lanes; the lanes (lane % LPB) / (LPB / N) == j end with vector j's amax.
// N - 1 + log2(LPB / N) shuffles instead of N * log2(LPB); the same value. All lanes take part.
template <int LPB, int N>
__device__ __forceinline__ uint32_t block_amax_transposed(const uint32_t (&v)[N], int tx) {
  static_assert(N >= 1 && N <= LPB && (N & (N - 1)) == 0, "N a power of two, at most LPB");
  uint32_t cur[N];
#pragma unroll
  for (int j = 0; j < N; ++j) cur[j] = v[j];
  int off = LPB / 2;
#pragma unroll
  for (int n = N; n > 1; n /= 2, off /= 2) {
    const bool upper = (tx & off) != 0;
#pragma unroll
    for (int i = 0; i < n / 2; ++i) {
      const uint32_t send = upper ? cur[i] : cur[i + n / 2];
      const uint32_t keep = upper ? cur[i + n / 2] : cur[i];
      cur[i] = max(keep, __shfl_xor_sync(0xFFFFFFFFu, send, off));
    }
  }
  return block_amax<LPB / N, false>(cur[0]);
}

}  // namespace cuda
}  // namespace fp8norm
