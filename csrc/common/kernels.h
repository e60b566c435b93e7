// The ops' kernels of one backend, given its runner `Run(args, input)`: the .out ops
// validate and run (prepare); the functional ops validate the inputs, allocate the outputs and
// run (prepare_functional). Registered with TORCH_BOX by each library.
#pragma once

#include <string>
#include <tuple>
#include <utility>

#include "fp8norm.h"

namespace fp8norm {

template <void (*Run)(const RowArgs&, const Tensor& input)>
struct Kernels {
  static void fused_out(const Tensor& input, const Tensor& residual, const Tensor& weight, double eps, bool ue8m0,
                        OptString conv, const Tensor& out, const Tensor& block_scale, const OptTensor& normed_out) {
    Run(prepare(kFusedOp, input, &residual, weight, eps, fp8_quant(ue8m0), conv, out, block_scale, normed_out), input);
  }

  static void plain_out(const Tensor& input, const Tensor& weight, double eps, bool ue8m0, OptString conv,
                        const Tensor& out, const Tensor& block_scale, const OptTensor& normed_out) {
    Run(prepare(kPlainOp, input, nullptr, weight, eps, fp8_quant(ue8m0), conv, out, block_scale, normed_out), input);
  }

  static Outputs fused(const Tensor& input, const Tensor& residual, const Tensor& weight, double eps, bool ue8m0,
                       OptString conv) {
    return functional(kFusedOp, input, &residual, weight, eps, fp8_quant(ue8m0), conv);
  }

  static Outputs plain(const Tensor& input, const Tensor& weight, double eps, bool ue8m0, OptString conv) {
    return functional(kPlainOp, input, nullptr, weight, eps, fp8_quant(ue8m0), conv);
  }

  // The block-format ops: the format's options (parse_quant) before everything else.
  static void quant_fused_out(const Tensor& input, const Tensor& residual, const Tensor& weight, double eps,
                              std::string format, OptString layout, OptString scale_format, OptString mode,
                              OptTensor global_scale, OptString conv, const Tensor& out, const Tensor& block_scale,
                              const OptTensor& normed_out) {
    const Quant q = parse_quant(kFusedQuantOp, format, layout, scale_format, mode, global_scale);
    Run(prepare(kFusedQuantOp, input, &residual, weight, eps, q, conv, out, block_scale, normed_out), input);
  }

  static void quant_plain_out(const Tensor& input, const Tensor& weight, double eps, std::string format,
                              OptString layout, OptString scale_format, OptString mode, OptTensor global_scale,
                              OptString conv, const Tensor& out, const Tensor& block_scale,
                              const OptTensor& normed_out) {
    const Quant q = parse_quant(kPlainQuantOp, format, layout, scale_format, mode, global_scale);
    Run(prepare(kPlainQuantOp, input, nullptr, weight, eps, q, conv, out, block_scale, normed_out), input);
  }

  static Outputs quant_fused(const Tensor& input, const Tensor& residual, const Tensor& weight, double eps,
                             std::string format, OptString layout, OptString scale_format, OptString mode,
                             OptTensor global_scale, OptString conv) {
    const Quant q = parse_quant(kFusedQuantOp, format, layout, scale_format, mode, global_scale);
    return functional(kFusedQuantOp, input, &residual, weight, eps, q, conv);
  }

  static Outputs quant_plain(const Tensor& input, const Tensor& weight, double eps, std::string format,
                             OptString layout, OptString scale_format, OptString mode, OptTensor global_scale,
                             OptString conv) {
    const Quant q = parse_quant(kPlainQuantOp, format, layout, scale_format, mode, global_scale);
    return functional(kPlainQuantOp, input, nullptr, weight, eps, q, conv);
  }

 private:
  static Outputs functional(const char* op, const Tensor& input, const Tensor* residual, const Tensor& weight,
                            double eps, const Quant& q, const OptString& conv) {
    auto [args, outs] = prepare_functional(op, input, residual, weight, eps, q, conv);
    Run(args, input);
    return std::move(outs);
  }
};

// Registers a backend's kernels of the ops in a STABLE_TORCH_LIBRARY_IMPL block.
#define FP8NORM_REGISTER_KERNELS(m, K)                                         \
  m.impl("fused_add_rmsnorm_fp8_block_quant", TORCH_BOX(&K::fused));           \
  m.impl("fused_add_rmsnorm_fp8_block_quant.out", TORCH_BOX(&K::fused_out));   \
  m.impl("rmsnorm_fp8_block_quant", TORCH_BOX(&K::plain));                     \
  m.impl("rmsnorm_fp8_block_quant.out", TORCH_BOX(&K::plain_out));             \
  m.impl("fused_add_rmsnorm_quant", TORCH_BOX(&K::quant_fused));               \
  m.impl("fused_add_rmsnorm_quant.out", TORCH_BOX(&K::quant_fused_out));       \
  m.impl("rmsnorm_quant", TORCH_BOX(&K::quant_plain));                         \
  m.impl("rmsnorm_quant.out", TORCH_BOX(&K::quant_plain_out))

}  // namespace fp8norm
