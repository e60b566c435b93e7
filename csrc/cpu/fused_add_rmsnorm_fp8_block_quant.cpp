// The CPU kernel of the ops: one task per group of rows (torch::stable::parallel_for); each row is read
// from memory once (pass 1: residual add, sum of squares) and then re-read from cache
// (pass 2: normalize, then quantize one block of the format at a time), with no temporaries beyond a
// few blocks. The format is a template policy of the one row kernel (Fp8Block, MxBlock, Nvfp4Block).
// The loops are written for the compiler to vectorize; on x86-64 (GCC) they are compiled for
// three instruction sets and the CPU picks one at the first call (cpu_isa).
#include "cpu.h"

#include <torch/csrc/stable/ops.h>
#include <torch/headeronly/util/BFloat16.h>
#include <torch/headeronly/util/Half.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "../common/numerics.h"

namespace fp8norm {
namespace cpu {
namespace {

// The AVX2 / AVX-512 builds of the kernel (cpu_isa, below) exist on x86-64 with GCC 12 or later.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12 && defined(__x86_64__)
#define FP8NORM_CPU_X86_ISAS 1
#include <immintrin.h>
#else
#define FP8NORM_CPU_X86_ISAS 0
#endif

// N values (a quantization block) between a storage type and float: to_float (exact), round
// (f = float(T(f)): to nearest even) and store (f already a T's value). Loops the compiler vectorizes; float16 in
// the AVX2 / AVX-512 builds (F16C) by the conversion instructions, 8 values each (c10::Half's
// portable conversions go one element at a time). The same values (NaN stays NaN, its payload
// may differ).
template <typename T, bool F16C, int N>
struct Block {
  static C10_ALWAYS_INLINE void to_float(const T* p, float* f) {
    for (int j = 0; j < N; ++j) f[j] = static_cast<float>(p[j]);
  }
  static C10_ALWAYS_INLINE void round(float* f) {
    for (int j = 0; j < N; ++j) f[j] = static_cast<float>(static_cast<T>(f[j]));
  }
  static C10_ALWAYS_INLINE void store(T* p, const float* f) {
    for (int j = 0; j < N; ++j) p[j] = static_cast<T>(f[j]);
  }
};
#if FP8NORM_CPU_X86_ISAS
// Own functions compiled with F16C (the inlined row_kernel has the default target, which cannot
// inline them), called once per block, from the AVX2 / AVX-512 builds only.
#define FP8NORM_F16C __attribute__((target("avx,f16c")))
template <int N>
struct Block<torch::headeronly::Half, true, N> {
  static FP8NORM_F16C void to_float(const torch::headeronly::Half* p, float* f) {
    for (int j = 0; j < N; j += 8) {
      _mm256_storeu_ps(f + j, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + j))));
    }
  }
  static FP8NORM_F16C void round(float* f) {
    for (int j = 0; j < N; j += 8) {
      _mm256_storeu_ps(f + j, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(f + j), _MM_FROUND_TO_NEAREST_INT)));
    }
  }
  static FP8NORM_F16C void store(torch::headeronly::Half* p, const float* f) {
    for (int j = 0; j < N; j += 8) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(p + j),
                       _mm256_cvtps_ph(_mm256_loadu_ps(f + j), _MM_FROUND_TO_NEAREST_INT));
    }
  }
};
#undef FP8NORM_F16C
#endif

// The quantizers, one object per row (constructed from the arguments: what a row's blocks share):
// block(a, row, b, g, out_row) quantizes block b's N normed values g (floats of the dtype's values)
// into the row's out bytes and its scale; row_end(a, row) writes what the row owns beyond its
// blocks (the swizzled layout's padding).

// fp8_1x128: float32 scale amax / 448 (UE8M0-rounded with a.ue8m0), in a.block_scale's strides or
// packed; codes g / scale.
struct Fp8Block {
  static constexpr int kN = kBlock;
  explicit Fp8Block(const RowArgs&) {}
  C10_ALWAYS_INLINE void block(const RowArgs& a, int64_t row, int64_t b, const float* g, uint8_t* out) {
    uint32_t amax = 0;
    for (int j = 0; j < kN; ++j) amax = std::max(amax, abs_bits(g[j]));
    const float scale = block_scale_from_amax_bits(amax, a.ue8m0);
    float* scale_row = a.block_scale + row * a.scale_stride_row;
    if (a.scale_packed) {
      store_packed_ue8m0(scale_row, a.scale_stride_col, static_cast<int>(b), a.hidden, scale);
    } else {
      scale_row[b * a.scale_stride_col] = scale;
    }
    for (int j = 0; j < kN; ++j) out[b * kN + j] = fp8e4m3fn_saturating(scaled(g[j], scale));
  }
  void row_end(const RowArgs&, int64_t) {}
};

// The one-byte scales of the block formats: row-major, or the 128x4 swizzle.
C10_ALWAYS_INLINE void store_scale_byte(const RowArgs& a, int64_t row, int64_t b, uint32_t byte) {
  reinterpret_cast<uint8_t*>(a.block_scale)[scale_byte_offset(a, row, b)] = static_cast<uint8_t>(byte);
}

// The swizzled layout's padding columns of a row (Ks to 4 * k_tiles), zero on every call.
template <int N>
void zero_padding_columns(const RowArgs& a, int64_t row) {
  if (!a.scale_swizzled) return;
  for (int64_t k = a.hidden / N; k < 4 * a.scale_k_tiles; ++k) store_scale_byte(a, row, k, 0);
}

// N codes -> out bytes: float8_e4m3fn, or e2m1 pairs (element 2j in the low nibble of byte j). The
// codes first, in a loop of N that vectorizes, then the pairs.
template <int N, bool Fp4>
C10_ALWAYS_INLINE void store_codes(const float* v, uint8_t* out) {
  if constexpr (Fp4) {
    uint32_t c[N];
    for (int j = 0; j < N; ++j) c[j] = e2m1_code(v[j]);
    for (int j = 0; j < N / 2; ++j) out[j] = static_cast<uint8_t>(c[2 * j] | (c[2 * j + 1] << 4));
  } else {
    for (int j = 0; j < N; ++j) out[j] = fp8e4m3fn_saturating(v[j]);
  }
}

// mxfp8 / mxfp4 (reference.quantize_mx): UE8M0 byte by rceil (of amax / max_elem, correctly
// rounded) or floor (of amax's exponent); codes of g * mx_multiplier(byte).
template <bool Fp4>
struct MxBlock {
  static constexpr int kN = 32;
  explicit MxBlock(const RowArgs&) {}
  C10_ALWAYS_INLINE void block(const RowArgs& a, int64_t row, int64_t b, const float* g, uint8_t* out) {
    uint32_t amax = 0;
    for (int j = 0; j < kN; ++j) amax = std::max(amax, abs_bits(g[j]));
    const uint32_t byte = mx_scale_byte(amax, a.scale_floor, Fp4);
    store_scale_byte(a, row, b, byte);
    const float r = mx_multiplier(byte, a.scale_floor);
    float v[kN];
    for (int j = 0; j < kN; ++j) v[j] = g[j] * r;
    store_codes<kN, Fp4>(v, out + (Fp4 ? b * kN / 2 : b * kN));
  }
  void row_end(const RowArgs& a, int64_t row) { zero_padding_columns<kN>(a, row); }
};

// nvfp4 (reference.quantize_nvfp4): float8_e4m3fn scale of vmax * (gs / 6); codes of g * os.
struct Nvfp4Block {
  static constexpr int kN = 16;
  explicit Nvfp4Block(const RowArgs& a) : gs(nvfp4_global(*a.global_scale)) {}
  const Nvfp4Global gs;  // read once per row: the row's byte stores may alias it as far as C++ knows
  C10_ALWAYS_INLINE void block(const RowArgs& a, int64_t row, int64_t b, const float* g, uint8_t* out) {
    uint32_t vmax = 0;
    for (int j = 0; j < kN; ++j) vmax = std::max(vmax, abs_bits(g[j]));
    const uint32_t byte = fp8e4m3fn_saturating(nvfp4_scale(bits_float(vmax), gs));
    store_scale_byte(a, row, b, byte);
    const float os = nvfp4_multiplier(bits_float(vmax), e4m3_value(byte), gs);
    float v[kN];
    for (int j = 0; j < kN; ++j) v[j] = g[j] * os;
    store_codes<kN, true>(v, out + b * kN / 2);
  }
  void row_end(const RowArgs& a, int64_t row) { zero_padding_columns<kN>(a, row); }
};

// Inlined into each instruction set's rows_* function below, so that it is compiled for each.
template <typename T, typename W, bool F16C, typename Q>
C10_ALWAYS_INLINE void row_kernel(const RowArgs& a, int64_t row) {
  constexpr int N = Q::kN;
  using B = Block<T, F16C, N>;
  const int64_t H = a.hidden;
  const T* in = static_cast<const T*>(a.input) + row * a.input_stride;
  T* res = a.residual ? static_cast<T*>(a.residual) + row * a.residual_stride : nullptr;
  const W* w = static_cast<const W*>(a.weight);
  T* normed = a.normed ? static_cast<T*>(a.normed) + row * a.normed_stride : nullptr;
  uint8_t* out = static_cast<uint8_t*>(a.out) + row * a.out_stride;

  // Pass 1: s = T(input + residual), written back to residual; sum of float32 squares in double,
  // of s or, with a.sum_f32, of the float32 sum itself (then pass 2 writes the residual, from
  // input and the old residual read again, since it needs the float32 sum too).
  // Simple loops over one block of N values at a time, so that the compiler vectorizes them;
  // element j goes to lane j % 8 in every format (N a multiple of 8), so rstd does not depend on it.
  constexpr int kLanes = 8;
  double acc[kLanes] = {};
  float f[N], r[N];
  const bool store_in_pass1 = res != nullptr && !a.sum_f32;
  for (int64_t base = 0; base < H; base += N) {
    B::to_float(in + base, f);
    if (res != nullptr) {
      B::to_float(res + base, r);
      for (int j = 0; j < N; ++j) f[j] += r[j];
      if (store_in_pass1) {
        B::round(f);
        B::store(res + base, f);
      }
    }
    for (int j = 0; j < N; j += kLanes) {
      for (int l = 0; l < kLanes; ++l) acc[l] += static_cast<double>(f[j + l] * f[j + l]);
    }
  }
  double sum_sq = 0;
  for (double v : acc) sum_sq += v;
  const float rstd = rstd_from_sum_of_squares(sum_sq, H, a.eps);
  const T* s_row = store_in_pass1 ? res : in;

  // Pass 2, one quantization block at a time (the row is in cache now).
  Q quantizer(a);
  float g[N], wf[N];
  for (int64_t b = 0; b < H / N; ++b) {
    const int64_t base = b * N;
    B::to_float(s_row + base, g);
    if (res != nullptr && !store_in_pass1) {  // sum_f32: g the float32 sum, residual its rounding
      B::to_float(res + base, r);
      for (int j = 0; j < N; ++j) g[j] += r[j];
      for (int j = 0; j < N; ++j) r[j] = g[j];
      B::round(r);
      B::store(res + base, r);
    }
    Block<W, F16C, N>::to_float(w + base, wf);
    if (a.round_twice) {
      for (int j = 0; j < N; ++j) g[j] = scaled_by_rstd(g[j], rstd);
      B::round(g);
      for (int j = 0; j < N; ++j) g[j] = weighted(g[j], wf[j]);
    } else {
      for (int j = 0; j < N; ++j) g[j] = normalize(g[j], rstd, wf[j]);
    }
    B::round(g);
    if (normed != nullptr) B::store(normed + base, g);
    quantizer.block(a, row, b, g, out);
  }
  quantizer.row_end(a, row);
}

// Instruction sets: the baseline of the build (x86-64: SSE2, 4 floats per vector), and on x86-64
// with GCC 12 or later also x86-64-v3 (AVX2, 8 floats) and x86-64-v4 (AVX-512, 16 floats). The
// same source and the same results in each: -ffp-contract=off (setup.py) keeps the FMA of v3 /
// v4 out of the float arithmetic, and nothing is reassociated (what each is worth: docs/design.md).
enum class Isa { kBaseline, kAvx2, kAvx512 };

const char* isa_name(Isa isa) {
  return isa == Isa::kAvx512 ? "avx512" : isa == Isa::kAvx2 ? "avx2" : "baseline";
}

// The best instruction set of this CPU and build, or FP8NORM_CPU_ISA=baseline|avx2|avx512
// (README, "Environment variables"): decided once per process.
Isa cpu_isa() {
  static const Isa isa = [] {
    Isa best = Isa::kBaseline;  // of the CPU, among those this build has
#if FP8NORM_CPU_X86_ISAS
    __builtin_cpu_init();
    if (__builtin_cpu_supports("x86-64-v4")) {
      best = Isa::kAvx512;
    } else if (__builtin_cpu_supports("x86-64-v3")) {
      best = Isa::kAvx2;
    }
#endif
    const char* env = std::getenv("FP8NORM_CPU_ISA");
    if (env == nullptr || *env == '\0') return best;
    const std::string want(env);
    Isa chosen = Isa::kBaseline;
    if (want == "avx2") {
      chosen = Isa::kAvx2;
    } else if (want == "avx512") {
      chosen = Isa::kAvx512;
    } else {
      FP8NORM_CHECK(want == "baseline", "fp8norm: FP8NORM_CPU_ISA must be baseline, avx2 or avx512, got '", want, "'");
    }
    FP8NORM_CHECK(FP8NORM_CPU_X86_ISAS || chosen == Isa::kBaseline, "fp8norm: FP8NORM_CPU_ISA=", want,
                ", but this build has the baseline kernel only (avx2 and avx512 are built on x86-64 by "
                "GCC 12 or later)");
    FP8NORM_CHECK(chosen <= best, "fp8norm: FP8NORM_CPU_ISA=", want, ", but this CPU supports at most ",
                isa_name(best));
    return chosen;
  }();
  return isa;
}

#define FP8NORM_CPU_ROWS(name, f16c, attributes)                                   \
  template <typename T, typename W, typename Q>                                    \
  attributes void name(const RowArgs& a, int64_t begin, int64_t end) {             \
    for (int64_t row = begin; row < end; ++row) row_kernel<T, W, f16c, Q>(a, row); \
  }
FP8NORM_CPU_ROWS(rows_baseline, false, )
#if FP8NORM_CPU_X86_ISAS
FP8NORM_CPU_ROWS(rows_avx2, true, __attribute__((target("arch=x86-64-v3"))))
FP8NORM_CPU_ROWS(rows_avx512, true, __attribute__((target("arch=x86-64-v4"))))
#endif
#undef FP8NORM_CPU_ROWS

template <typename T, typename W, typename Q>
void run_format(const RowArgs& a) {
  // Enough rows per task to amortize scheduling: at least ~32k elements.
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 15) / a.hidden);
  [[maybe_unused]] const Isa isa = cpu_isa();  // checks FP8NORM_CPU_ISA on every platform
  torch::stable::parallel_for(0, a.rows, grain, [&](int64_t begin, int64_t end) {
#if FP8NORM_CPU_X86_ISAS
    if (isa == Isa::kAvx512) return rows_avx512<T, W, Q>(a, begin, end);
    if (isa == Isa::kAvx2) return rows_avx2<T, W, Q>(a, begin, end);
#endif
    rows_baseline<T, W, Q>(a, begin, end);
  });
}

template <typename T, typename W>
void run_typed(const RowArgs& a) {
  switch (a.format) {
    case Format::kFp8_1x128: return run_format<T, W, Fp8Block>(a);
    case Format::kMxfp8: return run_format<T, W, MxBlock<false>>(a);
    case Format::kMxfp4: return run_format<T, W, MxBlock<true>>(a);
    case Format::kNvfp4: return run_format<T, W, Nvfp4Block>(a);
  }
}

// The swizzled layout's padding rows (M to round_up(M, 128)), zero on every call.
void zero_padding_rows(const RowArgs& a) {
  if (!a.scale_swizzled) return;
  const int64_t padded = (a.rows + 127) / 128 * 128;
  for (int64_t row = a.rows; row < padded; ++row) {
    for (int64_t k = 0; k < 4 * a.scale_k_tiles; ++k) store_scale_byte(a, row, k, 0);
  }
}

}  // namespace

void run(const RowArgs& a, const Tensor& input) {
  if (a.rows == 0) return;
  zero_padding_rows(a);
  auto with_weight = [&](auto t) {
    using T = decltype(t);
    if (a.weight_is_float) {
      run_typed<T, float>(a);
    } else {
      run_typed<T, T>(a);
    }
  };
  switch (input.scalar_type()) {
    case ScalarType::BFloat16: with_weight(torch::headeronly::BFloat16{}); break;
    case ScalarType::Half: with_weight(torch::headeronly::Half{}); break;
    case ScalarType::Float: with_weight(float{}); break;
    default: fail(cat("fp8norm: unsupported dtype ", dtype_str(input.scalar_type())));
  }
}

}  // namespace cpu
}  // namespace fp8norm
