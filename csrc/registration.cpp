// The fp8norm library: every schema, the functional ops (backend-independent: they allocate the
// outputs and call the .out op), the Meta kernels of the .out ops (validation only) and the
// Autograd kernel of all four (no backward: a clear error instead).
// The CPU and CUDA kernels of the .out ops are registered in csrc/cpu and csrc/cuda.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <Python.h>
#include <c10/core/GradMode.h>
#include <torch/library.h>

#include <array>

#include "common/fp8norm.h"
#include "cuda/launch_policy.h"

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
                                                const Tensor& weight, double, bool ue8m0,
                                                const Tensor& out, const Tensor& block_scale,
                                                const OptTensor& normed_out) {
  check_inputs(kFusedOp, input, &residual, weight);
  check_outputs(kFusedOp, input, ue8m0, out, block_scale, normed_out);
}

void rmsnorm_fp8_block_quant_out_meta(const Tensor& input, const Tensor& weight, double, bool ue8m0,
                                      const Tensor& out, const Tensor& block_scale,
                                      const OptTensor& normed_out) {
  check_inputs(kPlainOp, input, nullptr, weight);
  check_outputs(kPlainOp, input, ue8m0, out, block_scale, normed_out);
}

// The Autograd kernel of every op: the ops are for inference and have no backward, so a call that
// autograd would record (grad mode on and a tensor argument that requires grad) is refused before
// anything runs, naming the argument. Otherwise the call goes on below autograd, and the tensors
// the op writes (the schema's Tensor(a!) arguments) get their version counter bumped, as torch's
// in-place ops do (so autograd notices a saved tensor changed; an inference tensor outside
// InferenceMode is refused, as torch refuses its in-place update).
void no_autograd(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack) {
  const auto& params = op.schema().arguments();
  const std::string& name = op.schema().name();  // "fp8norm::<op>"
  const auto args = torch::jit::last(*stack, params.size());
  const bool grad_mode = c10::GradMode::is_enabled();
  std::array<at::Tensor, 4> written;  // the schemas write at most four tensors
  size_t n_written = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    if (!args[i].isTensor()) continue;
    const at::Tensor& t = args[i].toTensor();
    TORCH_CHECK(!(grad_mode && t.requires_grad()), "fp8norm.", name.substr(name.find("::") + 2), ": ",
                params[i].name(), " requires grad, but these ops have no backward (they are for "
                "inference). Call them under torch.no_grad() or torch.inference_mode(), or pass ",
                params[i].name(), ".detach()");
    if (params[i].alias_info() != nullptr && params[i].alias_info()->isWrite()) written.at(n_written++) = t;
  }
  {
    const at::AutoDispatchBelowADInplaceOrView below;  // nested calls (functional -> .out) too
    op.redispatchBoxed(ks & c10::after_ADInplaceOrView_keyset, stack);
  }
  for (size_t i = 0; i < n_written; ++i) written[i].unsafeGetTensorImpl()->bump_version();
}

// The kernel of the launch policy named `name`; `op` names the caller in the error.
launch::Kernel named_kernel(const char* op, const std::string& name) {
  const std::optional<launch::Kernel> k = launch::kernel_from_name(name);
  TORCH_CHECK(k.has_value(), op, ": no kernel named '", name, "'");
  return *k;
}

// fp8norm::_launch_plan: the CUDA launch policy's plan for a problem on a device, as one line
// (tests/test_launch_policy.py: the golden file). Pure C++: in CPU-only builds too.
std::string launch_plan(int64_t rows, int64_t hidden, int64_t elem_size, bool residual, bool normed, bool aligned,
                        bool weight_fp32, bool one_stride, bool scale_lines, int64_t sms, int64_t image_arch,
                        int64_t l2_bytes, int64_t max_smem, bool pdl, const std::string& force) {
  launch::Problem p{rows, hidden, static_cast<int>(elem_size), residual, normed, aligned, weight_fp32,
                    one_stride, scale_lines};
  launch::Device d{static_cast<int>(sms), static_cast<int>(image_arch), l2_bytes, max_smem, pdl};
  TORCH_CHECK(rows > 0 && hidden > 0 && hidden % launch::kBlock == 0 && (elem_size == 2 || elem_size == 4),
              "fp8norm._launch_plan: rows > 0, H a positive multiple of 128, elem_size 2 or 4");
  std::optional<launch::Kernel> k;
  if (!force.empty()) {
    k = named_kernel("fp8norm._launch_plan", force);
    const std::string why = launch::check_forced(p, d, *k);
    TORCH_CHECK(why.empty(), "fp8norm._launch_plan: ", force, " cannot run this call: ", why);
  }
  return launch::to_string(launch::plan(p, d, k));
}

// fp8norm::_force_kernel: the test hook; every CUDA launch takes this kernel ("": the policy's).
void force_kernel(const std::string& name) {
  std::optional<launch::Kernel> k;
  if (!name.empty()) k = named_kernel("fp8norm._force_kernel", name);
  launch::set_forced_kernel(k);
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
  // Private, for the tests: the launch policy, and a kernel forced instead of its choice.
  m.def("_launch_plan(int rows, int hidden, int elem_size, bool residual, bool normed, bool aligned, "
        "bool weight_fp32, bool one_stride, bool scale_lines, int sms, int image_arch, int l2_bytes, int max_smem, "
        "bool pdl, str force='') -> str",
        &launch_plan);
  m.def("_force_kernel(str name) -> ()", &force_kernel);
}

TORCH_LIBRARY_IMPL(fp8norm, CompositeExplicitAutograd, m) {
  m.impl("fused_add_rmsnorm_fp8_block_quant", &fused_add_rmsnorm_fp8_block_quant);
  m.impl("rmsnorm_fp8_block_quant", &rmsnorm_fp8_block_quant);
}

TORCH_LIBRARY_IMPL(fp8norm, Autograd, m) {
  const auto no_grad = [] { return torch::CppFunction::makeFromBoxedFunction<&no_autograd>(); };
  m.impl("fused_add_rmsnorm_fp8_block_quant", no_grad());
  m.impl("fused_add_rmsnorm_fp8_block_quant.out", no_grad());
  m.impl("rmsnorm_fp8_block_quant", no_grad());
  m.impl("rmsnorm_fp8_block_quant.out", no_grad());
}

TORCH_LIBRARY_IMPL(fp8norm, Meta, m) {
  m.impl("fused_add_rmsnorm_fp8_block_quant.out", &fused_add_rmsnorm_fp8_block_quant_out_meta);
  m.impl("rmsnorm_fp8_block_quant.out", &rmsnorm_fp8_block_quant_out_meta);
}

}  // namespace fp8norm
