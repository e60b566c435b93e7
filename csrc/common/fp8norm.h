// Shared host-side pieces of the fp8norm ops: argument validation (one set of rules for every
// backend), the output layout, and the flat argument block the kernels take.
#pragma once

#include <ATen/core/Tensor.h>

#include <c10/core/SymInt.h>
#include <c10/core/SymIntArrayRef.h>

#include <optional>
#include <string>
#include <tuple>

namespace fp8norm {

// Integers in error messages are formatted with these, never by streaming them into a
// std::ostream from this library: on the H200 machine (torch 2.11, extension built with g++ 13)
// an integer streamed from here (c10::str / TORCH_CHECK) crashed the process (SIGSEGV) where
// strings and dtypes did not.
std::string to_str(int64_t v);
std::string to_str(const c10::SymInt& v);
std::string to_str(c10::IntArrayRef v);
std::string to_str(c10::SymIntArrayRef v);

// Names of the two op families, for error messages.
constexpr const char* kFusedOp = "fp8norm.fused_add_rmsnorm_fp8_block_quant";
constexpr const char* kPlainOp = "fp8norm.rmsnorm_fp8_block_quant";

// Checks that depend only on dtypes, devices, ranks and (possibly symbolic) shapes and strides.
// Safe to call on meta/fake tensors. residual is null for rmsnorm_fp8_block_quant.
void check_inputs(const char* op, const at::Tensor& input, const at::Tensor* residual,
                  const at::Tensor& weight);
// block_scale: float32 [M, H/128], or with scale_ue8m0 packed UE8M0 exponents, int32
// [M, ceil(H/512)] (byte g % 4 of word g / 4 is block g's exponent, padding bytes zero).
void check_outputs(const char* op, const at::Tensor& input, bool scale_ue8m0, const at::Tensor& out,
                   const at::Tensor& block_scale, const std::optional<at::Tensor>& normed_out);

// Checks that need real memory: no written tensor overlaps itself, and no written tensor
// overlaps any other argument. Called by the CPU and CUDA kernels before anything is written.
void check_no_overlap(const char* op, const at::Tensor& input, const at::Tensor* residual,
                      const at::Tensor& weight, const at::Tensor& out,
                      const at::Tensor& block_scale, const std::optional<at::Tensor>& normed_out);

// The functional ops' outputs: out [M, H] float8_e4m3fn, block_scale [M, H/128] float32 with
// strides (1, scale_column_stride(M)) (column-major, TMA-aligned), normed_out [M, H] of input's
// dtype. Works with symbolic M.
std::tuple<at::Tensor, at::Tensor, at::Tensor> allocate_outputs(const at::Tensor& input);
template <typename Int>
Int scale_column_stride(const Int& m) {
  return (m + 3) / 4 * 4;  // round_up(M, 4)
}

// Everything a kernel needs, as raw pointers and element strides. Built after validation.
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
};

// Validates everything (check_inputs, check_outputs, check_no_overlap), then row_args.
RowArgs prepare(const char* op, const at::Tensor& input, const at::Tensor* residual,
                const at::Tensor& weight, double eps, bool scale_ue8m0, const at::Tensor& out,
                const at::Tensor& block_scale, const std::optional<at::Tensor>& normed_out);

// RowArgs of arguments that passed prepare's checks (no check of its own).
RowArgs row_args(const at::Tensor& input, const at::Tensor* residual, const at::Tensor& weight, double eps,
                 bool scale_ue8m0, const at::Tensor& out, const at::Tensor& block_scale,
                 const std::optional<at::Tensor>& normed_out);

}  // namespace fp8norm
