// The numerical contract, one function per fact, shared by the CPU and CUDA kernels.
// torch_fp8norm/reference.py is the specification; every function here names the line it implements.
#pragma once

#include <torch/headeronly/macros/Macros.h>  // C10_HOST_DEVICE

#include <cmath>
#include <cstdint>
#include <cstring>

#include "row_args.h"

#ifdef __CUDACC__
#include <cuda_runtime.h>
#endif

namespace fp8norm {

constexpr int kBlock = 128;            // elements per quantization block (1 x 128)
constexpr float kFp8Max = 448.0f;      // largest finite float8_e4m3fn
constexpr float kAmaxFloor = 1e-10f;   // amax.clamp_min(1e-10)

C10_HOST_DEVICE inline uint32_t float_bits(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
#endif
}

C10_HOST_DEVICE inline float bits_float(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
#endif
}

// |g| as bits. For non-negative floats the unsigned order is the float order, and every NaN
// sorts above +inf, so an unsigned max over these bits is a NaN-propagating amax.
C10_HOST_DEVICE inline uint32_t abs_bits(float g) { return float_bits(g) & 0x7FFFFFFFu; }

// rstd = rsqrt(x.square().mean(-1) + eps), from the sum of the float32 squares accumulated in
// double: the mean, + eps and 1 / sqrt in double, rounded once to float32. The double steps err
// by a few double ulps, so this is the correctly rounded rstd except where the exact value lies
// within ~2^-50 (relative) of a float32 rounding boundary (torch's float32 mean and rsqrt are a
// few float32 ulp off it; the contract allows that). CPU kernel.
inline float rstd_from_sum_of_squares(double sum_sq, int64_t H, float eps) {
  const double v = sum_sq / static_cast<double>(H) + static_cast<double>(eps);
  return static_cast<float>(1.0 / std::sqrt(v));
}

#ifdef __CUDACC__
// The same value for the CUDA kernel, by a shorter chain of dependent double operations (its
// critical path at decode sizes): one fma for mean + eps with inv_h = 1 / H computed on the host
// (one more double rounding), and CUDA's double rsqrt (within 1 double ulp) instead of a
// correctly rounded division, sqrt and reciprocal (slower at decode sizes, where this chain is
// the critical path). Error: a few double ulps, as above.
__device__ inline float rstd_from_sum_of_squares_device(double sum_sq, double inv_h, float eps) {
  return __double2float_rn(rsqrt(__fma_rn(sum_sq, inv_h, static_cast<double>(eps))));
}
#endif

// The two float32 products of normed = x * rstd * weight, in the reference's order (no fma):
// normalize, or with round_twice scaled_by_rstd, the rounding to the dtype, then weighted.
C10_HOST_DEVICE inline float scaled_by_rstd(float x, float rstd) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(x, rstd);
#else
  return x * rstd;
#endif
}

C10_HOST_DEVICE inline float weighted(float xr, float w) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(xr, w);
#else
  return xr * w;
#endif
}

C10_HOST_DEVICE inline float normalize(float x, float rstd, float w) { return weighted(scaled_by_rstd(x, rstd), w); }

// amax / 448 correctly rounded, for amax >= 1e-10 (finite), +inf or NaN, without a division:
// with r = 1 / 448 correctly rounded, q0 = amax * r, then Markstein's correction step
// q0 + (amax - q0 * 448) * r (two fmas). Checked equal to amax / 448 for every float32 amax in
// that range (tests/offline/check_scaled_by_reciprocal.cpp). inf and NaN: q0 (inf, NaN).
C10_HOST_DEVICE inline float divided_by_fp8_max(float amax) {
  constexpr float r = 1.0f / kFp8Max;
#ifdef __CUDA_ARCH__
  const float q0 = __fmul_rn(amax, r);
  return isfinite(q0) ? __fmaf_rn(__fmaf_rn(-q0, kFp8Max, amax), r, q0) : q0;
#else
  const float q0 = amax * r;
  return std::isfinite(q0) ? std::fma(std::fma(-q0, kFp8Max, amax), r, q0) : q0;
#endif
}

// scale = amax.clamp_min(1e-10) / 448, then (scale_ue8m0) the smallest power of two >= scale.
// amax_bits comes from abs_bits; NaN and inf pass through. (The CPU kernel divides; the CUDA
// kernel uses divided_by_fp8_max, the same value without the division's latency.)
C10_HOST_DEVICE inline float block_scale_from_amax_bits(uint32_t amax_bits, bool ue8m0) {
  const uint32_t floor_bits = 0x2EDBE6FFu;  // bits of 1e-10f
  const float amax = bits_float(amax_bits > floor_bits ? amax_bits : floor_bits);
#ifdef __CUDA_ARCH__
  const float scale = divided_by_fp8_max(amax);
#else
  const float scale = amax / kFp8Max;
#endif
  if (!ue8m0) return scale;
  const uint32_t b = float_bits(scale);
  const bool finite = (b & 0x7F800000u) != 0x7F800000u;
  if (finite && (b & 0x007FFFFFu) != 0) return bits_float((b & 0x7F800000u) + 0x00800000u);
  return scale;
}

// The UE8M0 byte of a block scale rounded up to a power of two (or Inf / NaN): its biased float32
// exponent (the scale is positive). 1e-10 / 448 rounds to 2^-42: byte 85; Inf and NaN: 0xFF.
C10_HOST_DEVICE inline uint8_t ue8m0_byte(float scale) { return static_cast<uint8_t>(float_bits(scale) >> 23); }

// The packed UE8M0 store of block `col`'s scale, in a row of `hidden` elements, into the row's
// int32 words at `row_words`: byte col % 4 of word col / 4 (little-endian, so the byte at that
// offset); the row's last block also zeroes its word's padding bytes. Each byte has one writer.
// Block indices are 32-bit (non-negative: shifts and masks, no signed-division fixups).
C10_HOST_DEVICE inline void store_packed_ue8m0(float* row_words, int64_t word_stride, int col, int64_t hidden,
                                               float scale) {
  uint8_t* word = reinterpret_cast<uint8_t*>(row_words + (col >> 2) * word_stride);
  word[col & 3] = ue8m0_byte(scale);
  if (static_cast<int64_t>(col + 1) * kBlock == hidden) {
    for (int k = (col & 3) + 1; k < 4; ++k) word[k] = 0;
  }
}

// g / scale, correctly rounded, before the saturating conversion to float8_e4m3fn (which is
// the reference's clamp(-448, 448) followed by round-to-nearest-even).
C10_HOST_DEVICE inline float scaled(float g, float scale) {
#ifdef __CUDA_ARCH__
  return __fdiv_rn(g, scale);
#else
  return g / scale;
#endif
}

// g / scale without a division, given rcp = 1 / scale correctly rounded and s =
// finite_scale_or_zero(scale) (the CUDA kernel computes both once per quantization block, so
// each element costs a multiply and two fmas, nothing else).
// Finite scale (always normal: its floor is 1e-10 / 448): q0 = g * rcp, r = q0 * scale - g (one
// fma), q = q0 + r * -rcp (Markstein's correction step). Where |g / scale| >= 2^-10 this is the
// correctly rounded quotient, bit for bit (rcp within half an ulp of 1 / scale, q0 within one
// ulp of the quotient). Below that (g tiny or subnormal, where r underflows) it may differ from
// g / scale in the last bits, but both are below float8_e4m3fn's half-ulp and round to the same
// signed zero: the fp8 byte is the contract's. Signed zeros: r is formed as q0 * scale - g and
// multiplied by -rcp (not formed as g - q0 * scale and multiplied by rcp), so where it is
// exactly zero (+0) the second fma adds -0 to q0 and keeps q0's sign, which is g's: g = -0 gives
// -0 without a copysign. Not -fma(q0, scale, -g) * rcp either: GCC
// rewrites that negation as fma(-q0, scale, g), whose exact zero is +0 (seen in the offline check).
// Scale inf or NaN (a block holding inf or NaN): rcp is 0 or NaN and s is 0, so r = -g and q =
// -g * -rcp + q0 with q0 = g * rcp: what g / scale gives (+-0 with g's sign, or NaN), without a
// select per element. Checked on the CPU exhaustively over g for three scales, on 4e8 random
// pairs, and for scale inf / NaN against every kind of g
// (tests/offline/check_scaled_by_reciprocal.cpp).
C10_HOST_DEVICE inline float scaled_by_reciprocal(float g, float s, float rcp) {
#ifdef __CUDA_ARCH__
  const float q0 = __fmul_rn(g, rcp);
  return __fmaf_rn(__fmaf_rn(q0, s, -g), -rcp, q0);
#else
  const float q0 = g * rcp;
  return std::fma(std::fma(q0, s, -g), -rcp, q0);
#endif
}

// scaled_by_reciprocal's scale operand: the block's scale where finite, else 0.
C10_HOST_DEVICE inline float finite_scale_or_zero(float scale) {
#ifdef __CUDA_ARCH__
  return isfinite(scale) ? scale : 0.0f;
#else
  return std::isfinite(scale) ? scale : 0.0f;
#endif
}

// float -> float8_e4m3fn byte, with the reference's clamp(-448, 448) folded in (e4m3_satfinite):
// the same bits as c10::Float8_e4m3fn(clamp(q)) (round to nearest even, NaN stays NaN), but
// branch-free so that a CPU loop vectorizes.
C10_HOST_DEVICE inline uint8_t fp8e4m3fn_saturating(float q) {
  const uint32_t bits = float_bits(q);
  const uint32_t sign = (bits >> 24) & 0x80u;
  const uint32_t b = bits & 0x7FFFFFFFu;
  // |q| >= 2^-6: rebias the exponent (127 -> 7) and round the mantissa to 3 bits, ties to even.
  const uint32_t normal = (b + 0xC407FFFFu + ((b >> 20) & 1u)) >> 20;
  // |q| < 2^-6: let a float addition do the rounding to a multiple of 2^-9.
  const uint32_t subnormal = float_bits(bits_float(b) + bits_float(141u << 23)) - (141u << 23);
  uint32_t r = b < (121u << 23) ? subnormal : normal;
  r = b > 0x43E00000u ? 0x7Eu : r;  // |q| > 448 (inf too): clamp to 448
  r = b > 0x7F800000u ? 0x7Fu : r;  // NaN
  return static_cast<uint8_t>(r | sign);
}

// ---- The block formats beside FP8 1x128 (reference.py: e2m1_codes, e8m0_rceil, e8m0_floor,
// quantize_mx, quantize_nvfp4). Checked against exact arithmetic over every float32 input where
// exhaustive is feasible (tests/offline/check_block_formats.cpp).

constexpr int kE4m3Emax = 8, kE2m1Emax = 2;      // exponents of the elements' largest powers of two

// e2m1_codes: the e2m1 code (0..15) of x, rounded to nearest even and saturating (inf -> +-6), a
// zero keeping x's sign; NaN gives 0x7. |x| against the seven points where the code steps up: ">"
// keeps a tie on the even code below it, ">=" moves it to the even code above. Branch-free.
C10_HOST_DEVICE inline uint32_t e2m1_code(float x) {
  const uint32_t bits = float_bits(x);
  const float m = bits_float(bits & 0x7FFFFFFFu);
  const uint32_t code = static_cast<uint32_t>(m > 0.25f) + static_cast<uint32_t>(m >= 0.75f) +
                        static_cast<uint32_t>(m > 1.25f) + static_cast<uint32_t>(m >= 1.75f) +
                        static_cast<uint32_t>(m > 2.5f) + static_cast<uint32_t>(m >= 3.5f) +
                        static_cast<uint32_t>(m > 5.0f);
  return (bits & 0x7FFFFFFFu) > 0x7F800000u ? 7u : code | ((bits >> 28) & 8u);
}

// e8m0_rceil: the UE8M0 byte of the smallest power of two >= d (d >= 0 or NaN), from the bits, as
// cvt.rp.satfinite.ue8m0x2.f32: <= 2^-127 (zero too) gives 0, > 2^127 and +inf 254, NaN 255.
C10_HOST_DEVICE inline uint32_t e8m0_rceil(float d) {
  const uint32_t b = float_bits(d) & 0x7FFFFFFFu;
  const uint32_t e = b >> 23, m = b & 0x7FFFFFu;
  if (e == 0) return m > (1u << 22) ? 1u : 0u;  // subnormal: (2^-127, 2^-126) rounds up to 2^-126
  if (e == 0xFFu) return m != 0 ? 255u : 254u;
  const uint32_t up = e + (m != 0 ? 1u : 0u);
  return up > 254u ? 254u : up;
}

// e8m0_floor: the OCP MX v1.0 byte clamp(E - 127 - emax, -127, 128) + 127 from the biased exponent
// field E of amax (abs_bits), 255 for NaN.
C10_HOST_DEVICE inline uint32_t e8m0_floor(uint32_t amax_bits, int emax) {
  if (amax_bits > 0x7F800000u) return 255u;
  const int e = static_cast<int>(amax_bits >> 23) - 127 - emax;
  return static_cast<uint32_t>((e < -127 ? -127 : e > 128 ? 128 : e) + 127);
}

// The UE8M0 byte of an MX block from its amax bits (reference.quantize_mx): "rceil" of amax /
// max_elem (448 or 6, correctly rounded), or "floor" of amax's exponent.
C10_HOST_DEVICE inline uint32_t mx_scale_byte(uint32_t amax_bits, bool floor, bool fp4) {
  if (floor) return e8m0_floor(amax_bits, fp4 ? kE2m1Emax : kE4m3Emax);
  const float max_elem = fp4 ? 6.0f : kFp8Max;
#ifdef __CUDA_ARCH__
  return e8m0_rceil(__fdiv_rn(bits_float(amax_bits), max_elem));
#else
  return e8m0_rceil(bits_float(amax_bits) / max_elem);
#endif
}

// The power of two an MX block's values are multiplied by before the element conversion:
// 2^(127 - byte). "rceil": 1 for byte 0, NaN for 255 (TransformerEngine). "floor" (the reference
// divides by max(2^(byte - 127), 2^-126)): 2^126 for byte 0, 0 for 255 (a division by inf). A
// product by a power of two and the division by its reciprocal are the same exact value, rounded
// the same way, so multiplying gives the reference's bits (signed zeros and NaN included).
C10_HOST_DEVICE inline float mx_multiplier(uint32_t byte, bool floor) {
  if (byte == 0) return floor ? bits_float(253u << 23) : 1.0f;
  if (byte == 255) return floor ? 0.0f : bits_float(0x7FC00000u);
  return byte == 254 ? bits_float(0x00400000u) : bits_float((254u - byte) << 23);  // 2^-127 is subnormal
}

// NVFP4, all float32 and correctly rounded (FlashInfer's quantizer without fast math): the block
// scale before its e4m3 conversion, sf = vmax * (gs * fp32(1/6)) (0 for vmax 0), and, from the
// stored scale's value b, the multiplier os = fmin(1 / (b * (1 / gs)), FLT_MAX) (0 for vmax 0;
// fmin takes FLT_MAX where the quotient is NaN). gs * fp32(1/6) and 1 / gs depend on gs alone:
// Nvfp4Global holds them, computed once per row, the same values.
struct Nvfp4Global {
  float gs_sixth, inv_gs;
};

C10_HOST_DEVICE inline Nvfp4Global nvfp4_global(float gs) {
  constexpr float kSixth = 1.0f / 6.0f;
#ifdef __CUDA_ARCH__
  return {__fmul_rn(gs, kSixth), __fdiv_rn(1.0f, gs)};
#else
  return {gs * kSixth, 1.0f / gs};
#endif
}

C10_HOST_DEVICE inline float nvfp4_scale(float vmax, Nvfp4Global g) {
#ifdef __CUDA_ARCH__
  return vmax == 0.0f ? 0.0f : __fmul_rn(vmax, g.gs_sixth);
#else
  return vmax == 0.0f ? 0.0f : vmax * g.gs_sixth;
#endif
}

C10_HOST_DEVICE inline float nvfp4_multiplier(float vmax, float b, Nvfp4Global g) {
  constexpr float kFltMax = 3.40282346638528859812e+38f;
  if (vmax == 0.0f) return 0.0f;
#ifdef __CUDA_ARCH__
  return fminf(__fdiv_rn(1.0f, __fmul_rn(b, g.inv_gs)), kFltMax);
#else
  return std::fmin(1.0f / (b * g.inv_gs), kFltMax);
#endif
}

// The value of a float8_e4m3fn byte (NaN for 0x7F / 0xFF).
C10_HOST_DEVICE inline float e4m3_value(uint32_t byte) {
  const uint32_t sign = (byte & 0x80u) << 24, e = (byte >> 3) & 0xFu, m = byte & 7u;
  if (e == 0xFu && m == 7u) return bits_float(0x7FC00000u | sign);
  const float v = e == 0 ? static_cast<float>(m) * bits_float(118u << 23)  // m * 2^-9, exact
                         : bits_float(((e + 120u) << 23) | (m << 20));
  return bits_float(float_bits(v) | sign);
}

// Elements per quantization block of a format (reference.py: FORMAT_BLOCK).
C10_HOST_DEVICE constexpr int format_block(Format f) {
  return f == Format::kFp8_1x128 ? kBlock : f == Format::kNvfp4 ? 16 : 32;
}

// swizzle_128x4: the byte of scale (m, k) in the 128x4 layout with k_tiles = ceil(Ks / 4) tiles of
// four scales per 128 rows: (m / 128) * k_tiles * 512 + (k / 4) * 512 + (m % 32) * 16 +
// ((m / 32) % 4) * 4 + k % 4.
C10_HOST_DEVICE inline int64_t swizzled_scale_offset(int64_t m, int64_t k, int64_t k_tiles) {
  return ((m >> 7) * k_tiles + (k >> 2)) * 512 + (m & 31) * 16 + ((m >> 5) & 3) * 4 + (k & 3);
}

// The byte offset of row `row`'s block `b` scale in a one-byte block_scale (the block formats):
// row-major rows of scale_stride_row bytes, or the 128x4 swizzle.
C10_HOST_DEVICE inline int64_t scale_byte_offset(const RowArgs& a, int64_t row, int64_t b) {
  return a.scale_swizzled ? swizzled_scale_offset(row, b, a.scale_k_tiles) : row * a.scale_stride_row + b;
}

}  // namespace fp8norm
