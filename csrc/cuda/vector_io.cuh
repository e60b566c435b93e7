// Device helpers: conversions between a storage type and float, and the vector loads and stores
// of the kernels (16- or 8-byte accesses with cache hints).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

namespace fp8norm {
namespace cuda {

// Pairs of adjacent elements as one 32-bit word, in and out (explicit intrinsics: torch builds
// with __CUDA_NO_HALF_OPERATORS__ and friends). from_float2 rounds two floats to nearest even
// with one paired conversion (cvt.rn.{bf16x2,f16x2}.f32).
// add2 sets a[0..1] to a + b computed in float32 and rounded to T (the reference's residual +
// input). For the 2-byte types that is one paired add rounded once (add.rn.{bf16x2,f16x2}): the
// same values, since the float32 sum of two bf16 / fp16 values is exact or the smaller addend
// lies below half an ulp of T of the larger (checked on every pair of bit patterns:
// tests/test_residual_add.py).
template <typename T>
struct Cvt;
template <>
struct Cvt<float> {
  __device__ static void to_float2(const float* p, float& lo, float& hi) {
    lo = p[0];
    hi = p[1];
  }
  __device__ static void from_float2(float a, float b, float* out) {
    out[0] = a;
    out[1] = b;
  }
  __device__ static void add2(float* a, const float* b) {
    a[0] = __fadd_rn(a[0], b[0]);
    a[1] = __fadd_rn(a[1], b[1]);
  }
};
template <>
struct Cvt<__half> {
  __device__ static void to_float2(const __half* p, float& lo, float& hi) {
    const float2 f = __half22float2(*reinterpret_cast<const __half2*>(p));
    lo = f.x;
    hi = f.y;
  }
  __device__ static void from_float2(float a, float b, __half* out) {
    *reinterpret_cast<__half2*>(out) = __floats2half2_rn(a, b);
  }
  __device__ static void add2(__half* a, const __half* b) {
    *reinterpret_cast<__half2*>(a) =
        __hadd2_rn(*reinterpret_cast<const __half2*>(a), *reinterpret_cast<const __half2*>(b));
  }
};
template <>
struct Cvt<__nv_bfloat16> {
  // A bf16 value is the upper half of its float: from the pair's word (the first element in its
  // low half) w << 16 and w & 0xFFFF0000 are the two floats exactly.
  __device__ static void to_float2(const __nv_bfloat16* p, float& lo, float& hi) {
    const uint32_t w = *reinterpret_cast<const uint32_t*>(p);
    lo = __uint_as_float(w << 16);
    hi = __uint_as_float(w & 0xFFFF0000u);
  }
  __device__ static void from_float2(float a, float b, __nv_bfloat16* out) {
    *reinterpret_cast<__nv_bfloat162*>(out) = __floats2bfloat162_rn(a, b);
  }
  __device__ static void add2(__nv_bfloat16* a, const __nv_bfloat16* b) {
    *reinterpret_cast<__nv_bfloat162*>(a) =
        __hadd2_rn(*reinterpret_cast<const __nv_bfloat162*>(a), *reinterpret_cast<const __nv_bfloat162*>(b));
  }
};

// Cache hints: kStream for data touched once (evict first), kKeep for data every row reads
// again (the weight: read-only path).
enum class Hint { kPlain, kStream, kKeep };

template <typename T, int N>
struct alignas(16) Pack {
  T v[N];
};

// Elements e and e + 1 of the values the norm is computed from, as floats: x's, or with F32SUM
// the float32 sums of x's (the input) and r's (the old residual), not rounded to T.
template <bool F32SUM, typename T, int VEC>
__device__ __forceinline__ void norm_values2(const Pack<T, VEC>& x, const Pack<T, VEC>& r, int e, float& lo,
                                             float& hi) {
  Cvt<T>::to_float2(&x.v[e], lo, hi);
  if constexpr (F32SUM) {
    float a, b;
    Cvt<T>::to_float2(&r.v[e], a, b);
    lo = __fadd_rn(lo, a);
    hi = __fadd_rn(hi, b);
  }
}

template <Hint H, typename V>
__device__ __forceinline__ V load_hinted(const V* p) {
  if constexpr (H == Hint::kStream) return __ldcs(p);
  if constexpr (H == Hint::kKeep) return __ldg(p);
  return *p;
}

template <Hint H, typename V>
__device__ __forceinline__ void store_hinted(V* p, V v) {
  if constexpr (H == Hint::kStream) {
    __stcs(p, v);
  } else {
    *p = v;
  }
}

// Element pointer of vector v of a row: one 64-bit multiply-add per access.
template <int N, typename T>
__device__ __forceinline__ T* vec_at(T* row, int v) {
  return row + static_cast<int64_t>(v) * N;
}

// A row's start kept in one 64-bit register when ALIGNED, instead of the row offset being folded
// into every access's address arithmetic. The compiler then no longer knows p is global, so the
// aligned accesses name the space themselves (the hinted loads and stores do).
template <bool ALIGNED, typename P>
__device__ __forceinline__ P* row_start(P* p) {
  if constexpr (ALIGNED) asm("" : "+l"(p));
  return p;
}

// Gives p a value the compiler cannot know, without an instruction: registers whose results are
// computed and thrown away (lanes past a row's end).
template <typename T, int N>
__device__ __forceinline__ void opaque_fill(Pack<T, N>& p) {
  static_assert(sizeof(p) % 4 == 0, "whole 32-bit words");
  uint32_t* u = reinterpret_cast<uint32_t*>(&p);
#pragma unroll
  for (int i = 0; i < int(sizeof(p) / 4); ++i) asm("" : "=r"(u[i]));
}

// The access word of an aligned Pack: 16 bytes (uint4) for packs of whole 16-byte vectors, 8
// (uint2) for 8-byte ones; void: element by element.
template <typename T, int N>
using PackWord = std::conditional_t<(sizeof(T) * N) % 16 == 0, uint4,
                                    std::conditional_t<sizeof(T) * N == 8, uint2, void>>;

template <bool ALIGNED, Hint H = Hint::kPlain, typename T, int N>
__device__ __forceinline__ void load(Pack<T, N>& dst, const T* src) {
  using V = PackWord<T, N>;
  if constexpr (ALIGNED && !std::is_void_v<V>) {
#pragma unroll
    for (int c = 0; c < int(sizeof(T) * N / sizeof(V)); ++c) {
      reinterpret_cast<V*>(&dst)[c] = load_hinted<H>(reinterpret_cast<const V*>(src) + c);
    }
  } else {
#pragma unroll
    for (int e = 0; e < N; ++e) dst.v[e] = src[e];
  }
}

template <bool ALIGNED, Hint H = Hint::kPlain, typename T, int N>
__device__ __forceinline__ void store(T* dst, const Pack<T, N>& src) {
  using V = PackWord<T, N>;
  if constexpr (ALIGNED && !std::is_void_v<V>) {
#pragma unroll
    for (int c = 0; c < int(sizeof(T) * N / sizeof(V)); ++c) {
      store_hinted<H>(reinterpret_cast<V*>(dst) + c, reinterpret_cast<const V*>(&src)[c]);
    }
  } else {
#pragma unroll
    for (int e = 0; e < N; ++e) dst[e] = src.v[e];
  }
}

// N fp8 bytes (N = 4 or 8), four per word: one 4- or 8-byte store when ALIGNED.
template <bool ALIGNED, int N, Hint H>
__device__ __forceinline__ void store_fp8(uint8_t* dst, const uint32_t (&words)[N / 4]) {
  if constexpr (ALIGNED && N == 8) {
    store_hinted<H>(reinterpret_cast<uint2*>(dst), make_uint2(words[0], words[1]));
  } else if constexpr (ALIGNED && N == 4) {
    store_hinted<H>(reinterpret_cast<unsigned int*>(dst), words[0]);
  } else {
#pragma unroll
    for (int e = 0; e < N; ++e) dst[e] = static_cast<uint8_t>(words[e / 4] >> (8 * (e % 4)));
  }
}

// Two quotients to two float8_e4m3fn bytes: round to nearest even, saturating to +-448 (the
// reference's clamp), NaN stays NaN.
__device__ __forceinline__ uint32_t to_fp8x2(float a, float b) {
  return static_cast<uint32_t>(__nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, __NV_E4M3));
}

}  // namespace cuda
}  // namespace fp8norm
