// Offline check (minutes; not part of CI) of numerics.h's block-format functions, host build,
// against exact arithmetic in double:
//   e2m1_code: every float32 bit pattern (nearest e2m1 value, ties to the even code, saturating,
//     signed zeros, NaN -> 0x7);
//   e8m0_rceil: every float32 bit pattern (the smallest power of two >= d; <= 2^-127 -> 0,
//     > 2^127 and inf -> 254, NaN -> 255);
//   e8m0_floor: every float32 bit pattern as amax (|x|), for emax 8 and 2;
//   mx_multiplier: "floor" multiplies where the reference divides by max(2^(byte - 127), 2^-126):
//     bitwise equal for every byte on 2^16 random and the special x each; "rceil" is 2^(127 - byte)
//     but for bytes 0 and 255.
//   g++ -O2 -ffp-contract=off -I$(python -c 'import torch,os;print(os.path.dirname(torch.__file__))')/include \
//       tests/offline/check_block_formats.cpp -o /tmp/check_bf && /tmp/check_bf
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>

#include "../../csrc/common/numerics.h"

using fp8norm::bits_float;
using fp8norm::float_bits;

static uint32_t e2m1_exact(float x) {
  if (std::isnan(x)) return 7;
  static const double values[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  const double m = std::fmin(std::fabs(static_cast<double>(x)), 6.0);
  uint32_t best = 0;
  for (uint32_t c = 1; c < 8; ++c) {
    const double d = std::fabs(m - values[c]), db = std::fabs(m - values[best]);
    if (d < db || (d == db && c % 2 == 0)) best = c;
  }
  return best | (std::signbit(x) ? 8u : 0u);
}

static uint32_t rceil_exact(float d) {
  if (std::isnan(d)) return 255;
  if (std::isinf(d) || d > std::ldexp(1.0, 127)) return 254;
  if (d <= std::ldexp(1.0, -127)) return 0;
  int e;
  const double f = std::frexp(static_cast<double>(d), &e);  // d = f 2^e, f in [0.5, 1)
  const int k = f == 0.5 ? e - 1 : e;                        // smallest 2^k >= d
  return static_cast<uint32_t>(k + 127);
}

static uint32_t floor_exact(float amax, int emax) {
  if (std::isnan(amax)) return 255;
  int biased = 0;  // float32 exponent field: 0 for zero and subnormals, 255 for inf
  if (std::isinf(amax)) {
    biased = 255;
  } else if (amax >= std::ldexp(1.0f, -126)) {
    biased = std::ilogb(amax) + 127;
  }
  const int e = std::min(std::max(biased - 127 - emax, -127), 128);
  return static_cast<uint32_t>(e + 127);
}

static bool same_bits(float a, float b) { return float_bits(a) == float_bits(b) || (std::isnan(a) && std::isnan(b)); }

int main() {
  uint64_t bad_e2m1 = 0, bad_rceil = 0, bad_floor = 0;
  for (uint64_t u = 0; u <= 0xFFFFFFFFull; ++u) {
    const float x = bits_float(static_cast<uint32_t>(u));
    bad_e2m1 += fp8norm::e2m1_code(x) != e2m1_exact(x);
    const float a = std::fabs(x);
    if (!std::signbit(x)) bad_rceil += fp8norm::e8m0_rceil(x) != rceil_exact(x);
    const uint32_t ab = fp8norm::abs_bits(x);
    bad_floor += fp8norm::e8m0_floor(ab, fp8norm::kE4m3Emax) != floor_exact(a, 8);
    bad_floor += fp8norm::e8m0_floor(ab, fp8norm::kE2m1Emax) != floor_exact(a, 2);
  }
  std::printf("e2m1_code: %llu of 2^32 differ\n", static_cast<unsigned long long>(bad_e2m1));
  std::printf("e8m0_rceil: %llu of 2^31 differ\n", static_cast<unsigned long long>(bad_rceil));
  std::printf("e8m0_floor: %llu of 2 x 2^32 differ\n", static_cast<unsigned long long>(bad_floor));

  std::mt19937 rng(7);
  uint64_t bad_mult = 0, pairs = 0;
  const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, 1e-45f, -1e-45f, 3.4e38f, -3.4e38f};
  for (uint32_t byte = 0; byte < 256; ++byte) {
    const float divisor = std::fmax(bits_float(byte << 23), std::ldexp(1.0f, -126));  // byte 255: inf
    const float m = fp8norm::mx_multiplier(byte, true);
    for (int i = 0; i < (1 << 16) + 10; ++i) {
      const float x = i < 10 ? specials[i] : bits_float(static_cast<uint32_t>(rng()));
      bad_mult += !same_bits(x * m, x / divisor);
      ++pairs;
    }
    const float r = fp8norm::mx_multiplier(byte, false);
    if (byte != 0 && byte != 255) bad_mult += float_bits(r) != float_bits(std::ldexp(1.0f, 127 - static_cast<int>(byte)));
  }
  bad_mult += fp8norm::mx_multiplier(0, false) != 1.0f || !std::isnan(fp8norm::mx_multiplier(255, false));
  std::printf("mx_multiplier: %llu of %llu products differ from the division\n",
              static_cast<unsigned long long>(bad_mult), static_cast<unsigned long long>(pairs));
  return bad_e2m1 || bad_rceil || bad_floor || bad_mult ? 1 : 0;
}
