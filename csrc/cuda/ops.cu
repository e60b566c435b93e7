// CUDA kernels of the ops: validation (shared with CPU), device guard, current stream, the
// problem's facts and the launch plan (launch_policy.h), then the launch. The functional ops
// have CUDA kernels of their own (else the backend-independent one in registration.cpp runs):
// their outputs come straight from the CUDA allocator, not through the dispatcher (host time
// per call).
#include <ATen/ATen.h>
#include <ATen/cuda/EmptyTensor.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <array>
#include <cstdlib>
#include <mutex>
#include <string>

#include "launch.h"
#include "launch_policy.h"

namespace fp8norm {
namespace cuda {
namespace {

constexpr int kMaxDevices = 64;

// FP8NORM_PDL=0: no programmatic dependent launch (README, "Configuration"); read once.
bool pdl_wanted() {
  static const bool wanted = [] {
    const char* v = std::getenv("FP8NORM_PDL");
    return v == nullptr || std::string(v) != "0";
  }();
  return wanted;
}

// An empty kernel whose image tells which of the library's images the driver loaded on a device:
// every .cu file is compiled with one -gencode list, so the driver picks the same one for each
// (the cubin of the device's architecture, else the newest PTX it can JIT-compile).
__global__ void image_probe() {}

// The architecture the loaded kernels were compiled for (their PTX's, e.g. 80 for a compute_80
// PTX JIT-compiled on an sm_90 GPU), on the current device. It, not the device's compute
// capability, says whether the kernels hold the sm_90 instructions (clusters, PDL, L2 hints).
int image_arch() {
  cudaFuncAttributes attr{};
  C10_CUDA_CHECK(cudaFuncGetAttributes(&attr, image_probe));
  return attr.ptxVersion;
}

// Per-device facts, queried once per device (std::call_once: no lock after the first call), with
// the device current.
const launch::Device& device_facts(int device) {
  static std::array<launch::Device, kMaxDevices> facts;
  static std::array<std::once_flag, kMaxDevices> once;
  TORCH_CHECK(device >= 0 && device < kMaxDevices, "fp8norm: CUDA device index ", to_str(device),
              " out of range");
  std::call_once(once[device], [device] {
    auto attribute = [&](cudaDeviceAttr attr) {
      int value = 0;
      C10_CUDA_CHECK(cudaDeviceGetAttribute(&value, attr, device));
      return value;
    };
    launch::Device& d = facts[device];
    d.sms = attribute(cudaDevAttrMultiProcessorCount);
    d.image_arch = image_arch();
    d.l2_bytes = attribute(cudaDevAttrL2CacheSize);
    d.max_smem = attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin);
    d.pdl = pdl_wanted();
  });
  return facts[device];
}

bool aligned_rows(const void* p, int64_t stride_elems, int64_t elem_size, int64_t align) {
  return reinterpret_cast<uintptr_t>(p) % align == 0 && (stride_elems * elem_size) % align == 0;
}

launch::Problem problem_of(const RowArgs& a, int64_t es) {
  launch::Problem p;
  p.rows = a.rows;
  p.hidden = a.hidden;
  p.elem_size = static_cast<int>(es);
  p.residual = a.residual != nullptr;
  p.normed = a.normed != nullptr;
  p.aligned = aligned_rows(a.input, a.input_stride, es, 16) &&
              (a.residual == nullptr || aligned_rows(a.residual, a.residual_stride, es, 16)) &&
              (a.normed == nullptr || aligned_rows(a.normed, a.normed_stride, es, 16)) &&
              aligned_rows(a.weight, 0, 1, 16) && aligned_rows(a.out, a.out_stride, 1, 16 / es);
  p.weight_fp32 = a.weight_is_float && es != 4;
  // One row offset pays in calls that write normed_out (three products saved, not one).
  p.one_stride = a.normed != nullptr && a.normed_stride == a.input_stride &&
                 (a.residual == nullptr || a.residual_stride == a.input_stride) && a.out_stride == a.input_stride;
  // Packed scales are byte stores: the float lines' L2 policy is not planned for them.
  p.scale_lines = !a.scale_packed && a.scale_stride_row == 1 && a.scale_stride_col % 32 == 0 &&
                  reinterpret_cast<uintptr_t>(a.block_scale) % 128 == 0;
  return p;
}

bool same_problem(const launch::Problem& x, const launch::Problem& y) {
  return x.rows == y.rows && x.hidden == y.hidden && x.elem_size == y.elem_size && x.residual == y.residual &&
         x.normed == y.normed && x.aligned == y.aligned && x.weight_fp32 == y.weight_fp32 &&
         x.one_stride == y.one_stride && x.scale_lines == y.scale_lines;
}

// The plan of a problem on a device: the last one of this thread is kept (calls of one shape
// repeat, a model's layers one after another), so that a repeated call computes nothing.
const launch::Plan& plan_for(const launch::Problem& p, int device) {
  struct Entry {
    launch::Problem problem;
    int device = -1;
    int forced = -1;
    launch::Plan plan;
  };
  thread_local Entry last;
  const std::optional<launch::Kernel> force = launch::forced_kernel();
  const int forced = force ? static_cast<int>(*force) : -1;
  if (last.device == device && last.forced == forced && same_problem(last.problem, p)) return last.plan;
  const launch::Device& d = device_facts(device);
  if (force) {
    const std::string why = launch::check_forced(p, d, *force);
    TORCH_CHECK(why.empty(), "fp8norm: forced kernel ", launch::kernel_name(*force), " cannot run this call: ", why);
  }
  last.plan = launch::plan(p, d, force);
  last.problem = p;
  last.device = device;
  last.forced = forced;
  return last.plan;
}

void run(const RowArgs& a, const at::Tensor& input) {
  if (a.rows == 0) return;
  TORCH_CHECK(a.hidden < (int64_t{1} << 31), "fp8norm: H must be below 2^31, got ", to_str(a.hidden));
  const c10::cuda::CUDAGuard guard(input.device());
  const int device = input.device().index();
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(device);
  const int64_t es = input.element_size();
  const launch::Problem p = problem_of(a, es);
  const launch::Plan& plan = plan_for(p, device);
  TORCH_CHECK(plan.ctas <= int64_t{0x7FFFFFFF}, "fp8norm: too many rows for one launch: ", to_str(a.rows));
  switch (input.scalar_type()) {
    case at::kBFloat16: launch<__nv_bfloat16>(a, p.aligned, plan, stream); break;
    case at::kHalf: launch<__half>(a, p.aligned, plan, stream); break;
    case at::kFloat: launch<float>(a, p.aligned, plan, stream); break;
    default: TORCH_CHECK(false, "fp8norm: unsupported dtype ", input.scalar_type());
  }
}

void fused_add_rmsnorm_fp8_block_quant_out_cuda(const at::Tensor& input, const at::Tensor& residual,
                                                const at::Tensor& weight, double eps, bool ue8m0,
                                                const at::Tensor& out, const at::Tensor& block_scale,
                                                const std::optional<at::Tensor>& normed_out) {
  run(prepare(kFusedOp, input, &residual, weight, eps, ue8m0, out, block_scale, normed_out), input);
}

void rmsnorm_fp8_block_quant_out_cuda(const at::Tensor& input, const at::Tensor& weight, double eps,
                                      bool ue8m0, const at::Tensor& out,
                                      const at::Tensor& block_scale,
                                      const std::optional<at::Tensor>& normed_out) {
  run(prepare(kPlainOp, input, nullptr, weight, eps, ue8m0, out, block_scale, normed_out), input);
}

using Outputs = std::tuple<at::Tensor, at::Tensor, at::Tensor>;

// The functional ops: allocate_outputs' layout, allocated on input's device. The inputs are
// validated once; fresh outputs have the layout check_outputs asks for, and check_no_overlap
// still holds the residual against input and weight.
Outputs functional(const char* op, const at::Tensor& input, const at::Tensor* residual, const at::Tensor& weight,
                   double eps, bool ue8m0) {
  check_inputs(op, input, residual, weight);
  const int64_t m = input.size(0), h = input.size(1);
  const c10::Device device = input.device();
  at::Tensor out = at::detail::empty_cuda({m, h}, at::kFloat8_e4m3fn, device, std::nullopt);
  at::Tensor block_scale =
      at::detail::empty_strided_cuda({m, h / launch::kBlock}, {1, scale_column_stride(m)}, at::kFloat, device);
  at::Tensor normed = at::detail::empty_cuda({m, h}, input.scalar_type(), device, std::nullopt);
  check_no_overlap(op, input, residual, weight, out, block_scale, normed);
  run(row_args(input, residual, weight, eps, ue8m0, out, block_scale, normed), input);
  return {std::move(out), std::move(block_scale), std::move(normed)};
}

Outputs fused_add_rmsnorm_fp8_block_quant_cuda(const at::Tensor& input, const at::Tensor& residual,
                                               const at::Tensor& weight, double eps, bool ue8m0) {
  return functional(kFusedOp, input, &residual, weight, eps, ue8m0);
}

Outputs rmsnorm_fp8_block_quant_cuda(const at::Tensor& input, const at::Tensor& weight, double eps, bool ue8m0) {
  return functional(kPlainOp, input, nullptr, weight, eps, ue8m0);
}

// fp8norm::_kernel_image_arch: image_arch() of a device (tests: what the launch policy is told).
int64_t kernel_image_arch(int64_t device) {
  const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
  return device_facts(static_cast<int>(device)).image_arch;
}

}  // namespace

}  // namespace cuda

TORCH_LIBRARY_FRAGMENT(fp8norm, m) { m.def("_kernel_image_arch(int device) -> int", &cuda::kernel_image_arch); }

TORCH_LIBRARY_IMPL(fp8norm, CUDA, m) {
  m.impl("fused_add_rmsnorm_fp8_block_quant", &cuda::fused_add_rmsnorm_fp8_block_quant_cuda);
  m.impl("fused_add_rmsnorm_fp8_block_quant.out", &cuda::fused_add_rmsnorm_fp8_block_quant_out_cuda);
  m.impl("rmsnorm_fp8_block_quant", &cuda::rmsnorm_fp8_block_quant_cuda);
  m.impl("rmsnorm_fp8_block_quant.out", &cuda::rmsnorm_fp8_block_quant_out_cuda);
}

}  // namespace fp8norm
