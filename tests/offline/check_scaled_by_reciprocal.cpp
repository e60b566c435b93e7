// Offline check (under a minute; not part of CI) of the CUDA kernel's division-free quotients, with the
// host build of numerics.h (std::fma: the same IEEE operations as the CUDA kernel's __fmul_rn /
// __fmaf_rn):
//   fp8norm::divided_by_fp8_max(amax) against amax / 448, for every float32 amax >= 1e-10 and
//   +inf, NaN (claim: bit-identical);
//   fp8norm::scaled_by_reciprocal against the division fp8norm::scaled,
//   exhaustive over every float32 g with |g| <= 448 x scale, for scales that are not powers of two,
//   and 4e8 random (g, scale) pairs with scale = amax / 448 (or its UE8M0 rounding).
// Claim checked (numerics.h): bit-identical wherever |g / scale| >= 2^-10; below that both are
// under float8_e4m3fn's rounding-to-zero threshold with the same sign (same fp8 byte). Also
// counted (v49): pairs whose quotient differs from v48's form of the correction step (a select
// on the scale, the sign of g copied; 0 of 6.9e9 when run); and scale +inf / NaN against every
// kind of g (zeros, subnormals, finite, inf, NaN: bit for bit g / scale, any NaN for a NaN).
// 22 s on the 2-core dev machine.
//   g++ -O2 -march=native -ffp-contract=off -I$(python -c 'import torch,os;print(os.path.dirname(torch.__file__))')/include \
//       tests/offline/check_scaled_by_reciprocal.cpp -o /tmp/check && /tmp/check
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>

#include "../../csrc/common/numerics.h"

using fp8norm::bits_float;
using fp8norm::float_bits;

static bool same_fp8(float q, float ref) {
  if (float_bits(q) == float_bits(ref)) return true;
  return std::fabs(q) < 0x1p-10f && std::fabs(ref) < 0x1p-10f && std::signbit(q) == std::signbit(ref);
}

int main() {
  {
    uint64_t bad = 0, count = 0;
    for (uint64_t b = float_bits(fp8norm::kAmaxFloor); b <= 0x7FC00000u; ++b) {
      const float amax = bits_float(static_cast<uint32_t>(b));
      const float q = fp8norm::divided_by_fp8_max(amax), ref = amax / fp8norm::kFp8Max;
      ++count;
      if (float_bits(q) != float_bits(ref) && !(std::isnan(q) && std::isnan(ref))) {
        if (++bad <= 10) std::printf("WRONG amax=%a q=%a ref=%a\n", amax, q, ref);
      }
    }
    std::printf("divided_by_fp8_max: %llu amax values (1e-10 .. inf, NaN), %llu differ from amax / 448\n",
                static_cast<unsigned long long>(count), static_cast<unsigned long long>(bad));
    if (bad != 0) return 1;
  }
  uint64_t n = 0, differ = 0, wrong = 0, changed = 0;
  auto check = [&](float g, float scale) {
    const float rcp = 1.0f / scale;
    const float q = fp8norm::scaled_by_reciprocal(g, fp8norm::finite_scale_or_zero(scale), rcp);
    const float ref = fp8norm::scaled(g, scale);
    // v48's form (a select on the scale and the sign of g copied): the same bits wherever scale is finite.
    const float q0 = g * rcp;
    const float before = std::copysign(std::fma(std::fma(-q0, scale, g), rcp, q0), g);
    ++n;
    if (float_bits(q) != float_bits(before)) ++changed;
    if (float_bits(q) != float_bits(ref)) ++differ;
    if (!same_fp8(q, ref)) {
      if (++wrong <= 10) std::printf("WRONG g=%a scale=%a q=%a ref=%a\n", g, scale, q, ref);
    }
  };
  for (float scale : {0.0067f, 3.0f / 448.0f, 5.5f / 448.0f}) {
    const uint32_t lim = float_bits(448.0f * scale * 1.0001f);
    for (uint64_t m = 0; m <= lim; ++m) {
      check(bits_float(static_cast<uint32_t>(m)), scale);
      check(bits_float(static_cast<uint32_t>(m) | 0x80000000u), scale);
    }
    std::printf("scale %a: exhaustive done\n", scale);
  }
  std::mt19937_64 rng(1);
  for (int i = 0; i < 400000000; ++i) {
    const uint64_t x = rng(), y = rng();
    const float amax = std::fmax(bits_float(static_cast<uint32_t>(x & 0x7F7FFFFF)), 1e-10f);
    const float scale = fp8norm::block_scale_from_amax_bits(float_bits(amax), (x >> 63) != 0);
    if (!std::isfinite(scale)) continue;
    int e = static_cast<int>((float_bits(amax) >> 23) & 0xFF) - static_cast<int>(y % 40);
    const uint32_t gb = (static_cast<uint32_t>(e < 0 ? 0 : e) << 23) | ((y >> 8) & 0x7FFFFF) |
                        (static_cast<uint32_t>((y >> 40) & 1) << 31);
    check(std::fmin(std::fmax(bits_float(gb), -amax), amax), scale);
  }
  std::printf("%llu pairs: %llu float quotients differ, %llu could change an fp8 byte, %llu differ from v48's form\n",
              static_cast<unsigned long long>(n), static_cast<unsigned long long>(differ),
              static_cast<unsigned long long>(wrong), static_cast<unsigned long long>(changed));
  // Blocks holding inf or NaN: scale inf or NaN, every kind of g; bit for bit what g / scale gives
  // (any NaN for a NaN).
  uint64_t special = 0, special_wrong = 0;
  const float inf = INFINITY, nan = NAN;
  for (float scale : {inf, nan, -nan}) {
    for (float g : {0.0f, -0.0f, 1.0f, -1.0f, 0x1p-149f, -0x1p-149f, 3.4e38f, -3.4e38f, 448.0f, inf, -inf, nan, -nan}) {
      const float q = fp8norm::scaled_by_reciprocal(g, fp8norm::finite_scale_or_zero(scale), 1.0f / scale);
      const float ref = fp8norm::scaled(g, scale);
      ++special;
      if (float_bits(q) != float_bits(ref) && !(std::isnan(q) && std::isnan(ref))) {
        ++special_wrong;
        std::printf("WRONG g=%a scale=%a q=%a ref=%a\n", g, scale, q, ref);
      }
    }
  }
  std::printf("%llu pairs with scale inf / NaN: %llu differ from g / scale\n",
              static_cast<unsigned long long>(special), static_cast<unsigned long long>(special_wrong));
  return wrong == 0 && special_wrong == 0 ? 0 : 1;
}
