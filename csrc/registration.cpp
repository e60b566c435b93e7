// The fp8norm library (torch_fp8norm._C): every schema, the CPU kernels, and the launch policy's
// test hook. The CUDA kernels live in a library of their own (csrc/cuda/ops.cu,
// torch_fp8norm._C_cu<CUDA major>), loaded only beside a torch built for that CUDA major version.
// The Meta kernels are Python fake kernels (torch_fp8norm/_fake.py). No Autograd kernel: the ops
// are for inference, and torch_fp8norm/ops.py registers torch's fallthrough for the Autograd key
// (docs/design.md, "Autograd").
#include <Python.h>
#include <torch/csrc/stable/library.h>

#include <optional>
#include <string>

#include "common/kernels.h"
#include "cpu/cpu.h"
#include "cuda/launch_policy.h"

extern "C" {
// `import torch_fp8norm._C` loads this library, whose static initializers register the ops.
PyMODINIT_FUNC PyInit__C(void) {
  static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, nullptr};
  return PyModule_Create(&module_def);
}
}

namespace fp8norm {
namespace {

// fp8norm::_launch_plan: the CUDA launch policy's plan for a problem on a device, as one line
// (tests/test_launch_policy.py: the golden file). Pure C++: in CPU-only builds too.
std::string launch_plan(int64_t rows, int64_t hidden, int64_t elem_size, bool residual, bool normed, bool aligned,
                        bool weight_fp32, bool one_stride, bool scale_lines, int64_t sms, int64_t image_arch,
                        int64_t l2_bytes, int64_t max_smem, bool pdl, std::string force, bool sum_f32) {
  launch::Problem p{rows, hidden, static_cast<int>(elem_size), residual, normed, aligned, weight_fp32,
                    one_stride, scale_lines, sum_f32};
  launch::Device d{static_cast<int>(sms), static_cast<int>(image_arch), l2_bytes, max_smem, pdl};
  FP8NORM_CHECK(rows > 0 && hidden > 0 && hidden % launch::kBlock == 0 && (elem_size == 2 || elem_size == 4),
                "fp8norm._launch_plan: rows > 0, H a positive multiple of 128, elem_size 2 or 4");
  std::optional<launch::Kernel> k;
  if (!force.empty()) {
    k = launch::kernel_from_name(force);
    FP8NORM_CHECK(k.has_value(), "fp8norm._launch_plan: no kernel named '", force, "'");
    const std::string why = launch::check_forced(p, d, *k);
    FP8NORM_CHECK(why.empty(), "fp8norm._launch_plan: ", force, " cannot run this call: ", why);
  }
  return launch::to_string(launch::plan(p, d, k));
}

}  // namespace
}  // namespace fp8norm

STABLE_TORCH_LIBRARY(fp8norm, m) {
  m.def(
      "fused_add_rmsnorm_fp8_block_quant(Tensor input, Tensor(a!) residual, Tensor weight, "
      "float eps=1e-06, bool scale_ue8m0=False, str? norm_convention=None) -> (Tensor, Tensor, Tensor)");
  m.def(
      "fused_add_rmsnorm_fp8_block_quant.out(Tensor input, Tensor(a!) residual, Tensor weight, "
      "float eps=1e-06, bool scale_ue8m0=False, str? norm_convention=None, *, Tensor(b!) out, "
      "Tensor(c!) block_scale, Tensor(d!)? normed_out=None) -> ()");
  m.def(
      "rmsnorm_fp8_block_quant(Tensor input, Tensor weight, float eps=1e-06, "
      "bool scale_ue8m0=False, str? norm_convention=None) -> (Tensor, Tensor, Tensor)");
  m.def(
      "rmsnorm_fp8_block_quant.out(Tensor input, Tensor weight, float eps=1e-06, "
      "bool scale_ue8m0=False, str? norm_convention=None, *, Tensor(b!) out, Tensor(c!) block_scale, "
      "Tensor(d!)? normed_out=None) -> ()");
  // Every block format (README, "Block formats"); the options' None: the format's default.
  m.def(
      "fused_add_rmsnorm_quant(Tensor input, Tensor(a!) residual, Tensor weight, float eps=1e-06, "
      "str format=\"fp8_1x128\", str? scale_layout=None, str? scale_format=None, str? scale_mode=None, "
      "Tensor? global_scale=None, str? norm_convention=None) -> (Tensor, Tensor, Tensor)");
  m.def(
      "fused_add_rmsnorm_quant.out(Tensor input, Tensor(a!) residual, Tensor weight, float eps=1e-06, "
      "str format=\"fp8_1x128\", str? scale_layout=None, str? scale_format=None, str? scale_mode=None, "
      "Tensor? global_scale=None, str? norm_convention=None, *, Tensor(b!) out, Tensor(c!) block_scale, "
      "Tensor(d!)? normed_out=None) -> ()");
  m.def(
      "rmsnorm_quant(Tensor input, Tensor weight, float eps=1e-06, str format=\"fp8_1x128\", "
      "str? scale_layout=None, str? scale_format=None, str? scale_mode=None, Tensor? global_scale=None, "
      "str? norm_convention=None) -> (Tensor, Tensor, Tensor)");
  m.def(
      "rmsnorm_quant.out(Tensor input, Tensor weight, float eps=1e-06, str format=\"fp8_1x128\", "
      "str? scale_layout=None, str? scale_format=None, str? scale_mode=None, Tensor? global_scale=None, "
      "str? norm_convention=None, *, Tensor(b!) out, Tensor(c!) block_scale, Tensor(d!)? normed_out=None) -> ()");
  // Private, for the tests: the launch policy (the CUDA library adds _force_kernel and
  // _kernel_image_arch).
  m.def(
      "_launch_plan(int rows, int hidden, int elem_size, bool residual, bool normed, bool aligned, "
      "bool weight_fp32, bool one_stride, bool scale_lines, int sms, int image_arch, int l2_bytes, int max_smem, "
      "bool pdl, str force='', bool sum_f32=False) -> str");
}

STABLE_TORCH_LIBRARY_IMPL(fp8norm, CPU, m) { FP8NORM_REGISTER_KERNELS(m, fp8norm::Kernels<&fp8norm::cpu::run>); }

// An op without tensor arguments dispatches to its CompositeExplicitAutograd kernel.
STABLE_TORCH_LIBRARY_IMPL(fp8norm, CompositeExplicitAutograd, m) {
  m.impl("_launch_plan", TORCH_BOX(&fp8norm::launch_plan));
}
