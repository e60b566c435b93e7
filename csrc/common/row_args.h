// The flat argument block the CPU and CUDA kernels take: raw pointers and element strides of
// validated arguments (fp8norm.h: prepare, prepare_functional). No torch header.
#pragma once

#include <cstdint>

namespace fp8norm {

// The block formats (reference.py: FORMATS).
enum class Format : uint8_t { kFp8_1x128, kMxfp8, kMxfp4, kNvfp4 };

struct RowArgs {
  int64_t rows = 0;
  int64_t hidden = 0;
  const void* input = nullptr;
  int64_t input_stride = 0;
  void* residual = nullptr;  // read, then overwritten with the new residual; null: no residual
  int64_t residual_stride = 0;
  const void* weight = nullptr;
  bool weight_is_float = false;  // weight dtype float32 (else: input's dtype)
  Format format = Format::kFp8_1x128;
  void* out = nullptr;           // float8_e4m3fn bytes, or (mxfp4, nvfp4) e2m1 code pairs
  int64_t out_stride = 0;
  // fp8_1x128: float32 scales, or with scale_packed int32 words (the same 4-byte strides). The
  // other formats: one byte per scale (UE8M0, or float8_e4m3fn for nvfp4), in rows of
  // scale_stride_row bytes, or with scale_swizzled in the 128x4 layout of scale_k_tiles tiles of
  // 4 scales per 128 rows (swizzled_scale_offset).
  float* block_scale = nullptr;
  bool scale_packed = false;     // packed UE8M0 exponents (check_outputs)
  int64_t scale_stride_row = 0;
  int64_t scale_stride_col = 0;
  bool scale_swizzled = false;
  int64_t scale_k_tiles = 0;
  bool scale_floor = false;             // MX: scale_mode "floor" (else "rceil")
  const float* global_scale = nullptr;  // nvfp4: the encode scale, one float32 on input's device
  void* normed = nullptr;  // null: normed values are not written
  int64_t normed_stride = 0;
  float eps = 0.f;
  bool ue8m0 = false;
  // The norm convention (README, "Norm conventions"), normalized for the call: sum_f32 (the norm
  // of the float32 residual sum, not of its rounding; only with a residual and a 2-byte dtype)
  // and round_twice (x * rstd rounded to the dtype before the weight multiplies it; 2-byte dtypes
  // only). For float32 every convention is "torch" (neither).
  bool sum_f32 = false;
  bool round_twice = false;
};

}  // namespace fp8norm
