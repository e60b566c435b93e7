// The flat argument block the CPU and CUDA kernels take: raw pointers and element strides of
// validated arguments (fp8norm.h: prepare, prepare_functional). No torch header.
#pragma once

#include <cstdint>

namespace fp8norm {

struct RowArgs {
  int64_t rows = 0;
  int64_t hidden = 0;
  const void* input = nullptr;
  int64_t input_stride = 0;
  void* residual = nullptr;  // read, then overwritten with the new residual; null: no residual
  int64_t residual_stride = 0;
  const void* weight = nullptr;
  bool weight_is_float = false;  // weight dtype float32 (else: input's dtype)
  void* out = nullptr;           // float8_e4m3fn bytes
  int64_t out_stride = 0;
  float* block_scale = nullptr;  // with scale_packed, int32 words (the same 4-byte strides)
  bool scale_packed = false;     // packed UE8M0 exponents (check_outputs)
  int64_t scale_stride_row = 0;
  int64_t scale_stride_col = 0;
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
