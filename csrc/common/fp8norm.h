// Shared host-side pieces of the fp8norm ops, compiled into the CPU library and the CUDA library:
// argument validation (one set of rules for every backend), the functional ops' outputs, and the
// kernels' argument block. LibTorch's stable ABI only (torch::stable, the C shim,
// torch/headeronly), so that one build loads on every torch from the targeted release on.
#pragma once

#include <torch/csrc/stable/macros.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>
#include <torch/headeronly/util/shim_utils.h>

#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <utility>

#include "check.h"
#include "row_args.h"

// Checks a C-shim call (a tensor's metadata, an allocation, the current stream). The stable
// ABI's own check raises with the error the shim caught (say, CUDA's out-of-memory text); headers
// of torch releases that lack it get the header-only check, which names the failed call alone.
// Source builds then compile against any torch the wheel serves.
#ifdef STABLE_TORCH_ERROR_CODE_CHECK
#define FP8NORM_SHIM_CHECK(call) STABLE_TORCH_ERROR_CODE_CHECK(call)
#else
#define FP8NORM_SHIM_CHECK(call) TORCH_ERROR_CODE_CHECK(call)
#endif

namespace fp8norm {

using Tensor = torch::stable::Tensor;
using OptTensor = std::optional<Tensor>;
using OptString = std::optional<std::string>;
using ScalarType = torch::headeronly::ScalarType;

// Names in error messages.
std::string to_str(torch::headeronly::IntHeaderOnlyArrayRef v);  // "[4, 256]"
std::string device_str(const torch::stable::Device& d);          // "cpu", "cuda:0"
const char* dtype_str(ScalarType t);                              // "bfloat16", as torch.bfloat16

// Names of the op families, for error messages.
constexpr const char* kFusedOp = "fp8norm.fused_add_rmsnorm_fp8_block_quant";
constexpr const char* kPlainOp = "fp8norm.rmsnorm_fp8_block_quant";
constexpr const char* kFusedQuantOp = "fp8norm.fused_add_rmsnorm_quant";
constexpr const char* kPlainQuantOp = "fp8norm.rmsnorm_quant";

// block_scale's layout: fp8_1x128's strides ("deepgemm", "scaled_mm", "row"; any strides in .out),
// or the other formats' shapes ("swizzled": the 128x4 layout, [round_up(M, 128), round_up(H /
// block, 4)] contiguous; "row": [M, H / block], last dimension contiguous).
enum class ScaleLayout : uint8_t { kDeepgemm, kScaledMm, kRow, kSwizzled };

// A call's format options, parsed and checked against each other (parse_quant).
struct Quant {
  Format format = Format::kFp8_1x128;
  ScaleLayout layout = ScaleLayout::kDeepgemm;
  bool ue8m0 = false;  // fp8_1x128: scales rounded up to powers of two
  int packed = -1;     // fp8_1x128: 1 packed int32 words, 0 float32, -1 (the fp8 ops) int32 allowed with ue8m0
  bool floor = false;  // MX: scale_mode "floor"
  const Tensor* global_scale = nullptr;  // nvfp4
};

// The fp8 ops' options: fp8_1x128, a block_scale of float32 or (with scale_ue8m0) packed int32.
inline Quant fp8_quant(bool scale_ue8m0) {
  Quant q;
  q.ue8m0 = scale_ue8m0;
  return q;
}

// The block-format ops' options (README, "Block formats"), each None for its format's default:
// format "fp8_1x128" (scale_layout "deepgemm", "scaled_mm" or "row"; scale_format "fp32", "ue8m0"
// or "ue8m0_packed"), "mxfp8" or "mxfp4" (scale_layout "swizzled" or "row"; scale_mode "rceil" or
// "floor"), "nvfp4" (scale_layout as MX; global_scale required). An option that does not apply
// to the format is refused.
Quant parse_quant(const char* op, const std::string& format, const OptString& scale_layout,
                  const OptString& scale_format, const OptString& scale_mode, const OptTensor& global_scale);

using Outputs = std::tuple<Tensor, Tensor, Tensor>;  // out, block_scale, normed_out

// The .out ops' checks, then their kernels' arguments. Checks of dtypes, devices, ranks, shapes,
// strides and eps (finite and >= 0); residual is null for rmsnorm_fp8_block_quant; block_scale:
// float32 [M, H/128], or with scale_ue8m0 packed UE8M0 exponents, int32 [M, ceil(H/512)] (byte
// g % 4 of word g / 4 is block g's exponent, padding bytes zero). Then the checks that need real
// memory: no written tensor overlaps itself or any other argument. All before anything is
// written. torch_fp8norm/_fake.py states the same rules on symbolic shapes for fake tensors
// (torch.compile), with the same messages.
// norm_convention: "torch" (or none), "hf", "vllm" or "flashinfer" (RowArgs::sum_f32, round_twice).
// The block-format ops (Quant): out float8_e4m3fn [M, H] or (mxfp4, nvfp4) float4_e2m1fn_x2 [M, H/2];
// block_scale float8_e8m0fnu (MX) or float8_e4m3fn (nvfp4) in the Quant's layout; global_scale a
// float32 tensor of one element on input's device; H a positive multiple of the format's block.
RowArgs prepare(const char* op, const Tensor& input, const Tensor* residual, const Tensor& weight, double eps,
                const Quant& quant, const OptString& norm_convention, const Tensor& out, const Tensor& block_scale,
                const OptTensor& normed_out);

// The functional ops': the inputs' checks, then fresh outputs on input's device (which pass the
// output checks by construction): out [M, H] float8_e4m3fn, block_scale [M, H/128] float32 with
// strides (1, scale_column_stride(M)) (column-major, TMA-aligned), normed_out [M, H] of input's
// dtype; the residual's overlap check, and the kernels' arguments. The block-format ops: out and
// block_scale of the Quant's format and layout, contiguous but for fp8_1x128's column-major
// layouts (deepgemm as above; scaled_mm: strides (1, max(M, 1))).
std::pair<RowArgs, Outputs> prepare_functional(const char* op, const Tensor& input, const Tensor* residual,
                                               const Tensor& weight, double eps, const Quant& quant,
                                               const OptString& norm_convention);
inline int64_t scale_column_stride(int64_t m) { return (m + 3) / 4 * 4; }  // round_up(M, 4)

}  // namespace fp8norm
