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

// Names of the two op families, for error messages.
constexpr const char* kFusedOp = "fp8norm.fused_add_rmsnorm_fp8_block_quant";
constexpr const char* kPlainOp = "fp8norm.rmsnorm_fp8_block_quant";

using Outputs = std::tuple<Tensor, Tensor, Tensor>;  // out, block_scale, normed_out

// The .out ops' checks, then their kernels' arguments. Checks of dtypes, devices, ranks, shapes,
// strides and eps (finite and >= 0); residual is null for rmsnorm_fp8_block_quant; block_scale:
// float32 [M, H/128], or with scale_ue8m0 packed UE8M0 exponents, int32 [M, ceil(H/512)] (byte
// g % 4 of word g / 4 is block g's exponent, padding bytes zero). Then the checks that need real
// memory: no written tensor overlaps itself or any other argument. All before anything is
// written. torch_fp8norm/_fake.py states the same rules on symbolic shapes for fake tensors
// (torch.compile), with the same messages.
// norm_convention: "torch" (or none), "hf", "vllm" or "flashinfer" (RowArgs::sum_f32, round_twice).
RowArgs prepare(const char* op, const Tensor& input, const Tensor* residual, const Tensor& weight, double eps,
                bool scale_ue8m0, const OptString& norm_convention, const Tensor& out, const Tensor& block_scale,
                const OptTensor& normed_out);

// The functional ops': the inputs' checks, then fresh outputs on input's device (which pass the
// output checks by construction): out [M, H] float8_e4m3fn, block_scale [M, H/128] float32 with
// strides (1, scale_column_stride(M)) (column-major, TMA-aligned), normed_out [M, H] of input's
// dtype; the residual's overlap check, and the kernels' arguments.
std::pair<RowArgs, Outputs> prepare_functional(const char* op, const Tensor& input, const Tensor* residual,
                                               const Tensor& weight, double eps, bool scale_ue8m0,
                                               const OptString& norm_convention);
inline int64_t scale_column_stride(int64_t m) { return (m + 3) / 4 * 4; }  // round_up(M, 4)

}  // namespace fp8norm
