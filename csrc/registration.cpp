// The fp8norm library: every schema, the functional ops (backend-independent: they allocate the
// outputs and call the .out op), and the Meta kernels of the .out ops (validation only).
// The CPU and CUDA kernels of the .out ops are registered in csrc/cpu and csrc/cuda.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <Python.h>
#include <torch/library.h>

#include "common/fp8norm.h"

extern "C" {
// `import torch_fp8norm._C` loads this library, whose static initializers register the ops.
PyObject* PyInit__C(void) {
  static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, nullptr};
  return PyModule_Create(&module_def);
}
}

namespace fp8norm {
namespace {

using Tensor = at::Tensor;
using OptTensor = std::optional<at::Tensor>;

std::tuple<Tensor, Tensor, Tensor> fused_add_rmsnorm_fp8_block_quant(
    const Tensor& input, const Tensor& residual, const Tensor& weight, double eps, bool ue8m0) {
  check_inputs(kFusedOp, input, &residual, weight);
  auto [out, block_scale, normed] = allocate_outputs(input);
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("fp8norm::fused_add_rmsnorm_fp8_block_quant", "out")
                       .typed<void(const Tensor&, const Tensor&, const Tensor&, double, bool,
                                   const Tensor&, const Tensor&, const OptTensor&)>();
  op.call(input, residual, weight, eps, ue8m0, out, block_scale, normed);
  return {out, block_scale, normed};
}

std::tuple<Tensor, Tensor, Tensor> rmsnorm_fp8_block_quant(const Tensor& input,
                                                           const Tensor& weight, double eps,
                                                           bool ue8m0) {
  check_inputs(kPlainOp, input, nullptr, weight);
  auto [out, block_scale, normed] = allocate_outputs(input);
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("fp8norm::rmsnorm_fp8_block_quant", "out")
                       .typed<void(const Tensor&, const Tensor&, double, bool, const Tensor&,
                                   const Tensor&, const OptTensor&)>();
  op.call(input, weight, eps, ue8m0, out, block_scale, normed);
  return {out, block_scale, normed};
}

void fused_add_rmsnorm_fp8_block_quant_out_meta(const Tensor& input, const Tensor& residual,
                                                const Tensor& weight, double, bool,
                                                const Tensor& out, const Tensor& block_scale,
                                                const OptTensor& normed_out) {
  check_inputs(kFusedOp, input, &residual, weight);
  check_outputs(kFusedOp, input, out, block_scale, normed_out);
}

void rmsnorm_fp8_block_quant_out_meta(const Tensor& input, const Tensor& weight, double, bool,
                                      const Tensor& out, const Tensor& block_scale,
                                      const OptTensor& normed_out) {
  check_inputs(kPlainOp, input, nullptr, weight);
  check_outputs(kPlainOp, input, out, block_scale, normed_out);
}

}  // namespace

TORCH_LIBRARY(fp8norm, m) {
  m.def(
      "fused_add_rmsnorm_fp8_block_quant(Tensor input, Tensor(a!) residual, Tensor weight, "
      "float eps=1e-06, bool scale_ue8m0=False) -> (Tensor, Tensor, Tensor)");
  m.def(
      "fused_add_rmsnorm_fp8_block_quant.out(Tensor input, Tensor(a!) residual, Tensor weight, "
      "float eps=1e-06, bool scale_ue8m0=False, *, Tensor(b!) out, Tensor(c!) block_scale, "
      "Tensor(d!)? normed_out=None) -> ()");
  m.def(
      "rmsnorm_fp8_block_quant(Tensor input, Tensor weight, float eps=1e-06, "
      "bool scale_ue8m0=False) -> (Tensor, Tensor, Tensor)");
  m.def(
      "rmsnorm_fp8_block_quant.out(Tensor input, Tensor weight, float eps=1e-06, "
      "bool scale_ue8m0=False, *, Tensor(b!) out, Tensor(c!) block_scale, "
      "Tensor(d!)? normed_out=None) -> ()");
}

TORCH_LIBRARY_IMPL(fp8norm, CompositeExplicitAutograd, m) {
  m.impl("fused_add_rmsnorm_fp8_block_quant", &fused_add_rmsnorm_fp8_block_quant);
  m.impl("rmsnorm_fp8_block_quant", &rmsnorm_fp8_block_quant);
}

TORCH_LIBRARY_IMPL(fp8norm, Meta, m) {
  m.impl("fused_add_rmsnorm_fp8_block_quant.out", &fused_add_rmsnorm_fp8_block_quant_out_meta);
  m.impl("rmsnorm_fp8_block_quant.out", &rmsnorm_fp8_block_quant_out_meta);
}

}  // namespace fp8norm
