// The CUDA library (torch_fp8norm._C_cu<CUDA major>): the CUDA kernels of the four ops (common/kernels.h:
// validation shared with CPU, then run: device guard, current stream, the problem's facts and the
// launch plan, launch_policy.h, then the launch), and the CUDA test hooks. It links libtorch_cuda
// for the current stream, so it is loaded only where torch has CUDA.
#include <Python.h>
#include <torch/csrc/inductor/aoti_torch/c/shim.h>  // aoti_torch_get_current_cuda_stream (USE_CUDA)
#include <torch/csrc/stable/accelerator.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/macros.h>

#include <array>
#include <cstdlib>
#include <mutex>
#include <string>

#include "../common/kernels.h"
#include "launch.h"
#include "launch_policy.h"

// `import torch_fp8norm._C_cu<CUDA major>` (torch_fp8norm/__init__.py, beside a torch of that CUDA
// major version) loads this library, whose static initializers register the CUDA kernels. setup.py
// names the module (FP8NORM_CUDA_MODULE).
#define FP8NORM_CONCAT(a, b) FP8NORM_CONCAT_(a, b)
#define FP8NORM_CONCAT_(a, b) a##b
#define FP8NORM_STR(a) FP8NORM_STR_(a)
#define FP8NORM_STR_(a) #a
extern "C" {
PyMODINIT_FUNC FP8NORM_CONCAT(PyInit_, FP8NORM_CUDA_MODULE)(void) {
  static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, FP8NORM_STR(FP8NORM_CUDA_MODULE), nullptr, -1,
                                          nullptr};
  return PyModule_Create(&module_def);
}
}

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
  STD_CUDA_CHECK(cudaFuncGetAttributes(&attr, image_probe));
  return attr.ptxVersion;
}

// Per-device facts, queried once per device (std::call_once: no lock after the first call), with
// the device current.
const launch::Device& device_facts(int device) {
  static std::array<launch::Device, kMaxDevices> facts;
  static std::array<std::once_flag, kMaxDevices> once;
  FP8NORM_CHECK(device >= 0 && device < kMaxDevices, "fp8norm: CUDA device index ", device, " out of range");
  std::call_once(once[device], [device] {
    auto attribute = [&](cudaDeviceAttr attr) {
      int value = 0;
      STD_CUDA_CHECK(cudaDeviceGetAttribute(&value, attr, device));
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
  p.sum_f32 = a.sum_f32;
  return p;
}

bool same_problem(const launch::Problem& x, const launch::Problem& y) {
  return x.rows == y.rows && x.hidden == y.hidden && x.elem_size == y.elem_size && x.residual == y.residual &&
         x.normed == y.normed && x.aligned == y.aligned && x.weight_fp32 == y.weight_fp32 &&
         x.one_stride == y.one_stride && x.scale_lines == y.scale_lines && x.sum_f32 == y.sum_f32;
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
    FP8NORM_CHECK(why.empty(), "fp8norm: forced kernel ", launch::kernel_name(*force), " cannot run this call: ", why);
  }
  last.plan = launch::plan(p, d, force);
  last.problem = p;
  last.device = device;
  last.forced = forced;
  return last.plan;
}

void run(const RowArgs& a, const Tensor& input) {
  FP8NORM_CHECK(a.format == Format::kFp8_1x128,
                "fp8norm: the mxfp8, mxfp4 and nvfp4 formats run on CPU only in this build (no CUDA kernel yet)");
  if (a.rows == 0) return;
  FP8NORM_CHECK(a.hidden < (int64_t{1} << 31), "fp8norm: H must be below 2^31, got ", a.hidden);
  const int device = input.get_device_index();
  const torch::stable::accelerator::DeviceGuard guard(device);
  void* stream = nullptr;
  FP8NORM_SHIM_CHECK(aoti_torch_get_current_cuda_stream(device, &stream));
  const ScalarType dtype = input.scalar_type();
  const int64_t es = dtype == ScalarType::Float ? 4 : 2;
  const launch::Problem p = problem_of(a, es);
  const launch::Plan& plan = plan_for(p, device);
  FP8NORM_CHECK(plan.ctas <= int64_t{0x7FFFFFFF}, "fp8norm: too many rows for one launch: ", a.rows);
  const auto s = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case ScalarType::BFloat16: launch<__nv_bfloat16>(a, p.aligned, plan, s); break;
    case ScalarType::Half: launch<__half>(a, p.aligned, plan, s); break;
    case ScalarType::Float: launch<float>(a, p.aligned, plan, s); break;
    default: fail(cat("fp8norm: unsupported dtype ", dtype_str(dtype)));
  }
}

// fp8norm::_kernel_image_arch: image_arch() of a device (tests: what the launch policy is told).
int64_t kernel_image_arch(int64_t device) {
  const torch::stable::accelerator::DeviceGuard guard(static_cast<int32_t>(device));
  return device_facts(static_cast<int>(device)).image_arch;
}

// fp8norm::_force_kernel: the test hook; every CUDA launch takes this kernel ("": the policy's).
void force_kernel(std::string name) {
  std::optional<launch::Kernel> k;
  if (!name.empty()) {
    k = launch::kernel_from_name(name);
    FP8NORM_CHECK(k.has_value(), "fp8norm._force_kernel: no kernel named '", name, "'");
  }
  launch::set_forced_kernel(k);
}

}  // namespace

}  // namespace cuda
}  // namespace fp8norm

// Private, for the tests (the launch policy's hooks that act on CUDA launches).
STABLE_TORCH_LIBRARY_FRAGMENT(fp8norm, m) {
  m.def("_kernel_image_arch(int device) -> int");
  m.def("_force_kernel(str name) -> ()");
}

STABLE_TORCH_LIBRARY_IMPL(fp8norm, CompositeExplicitAutograd, m) {
  m.impl("_kernel_image_arch", TORCH_BOX(&fp8norm::cuda::kernel_image_arch));
  m.impl("_force_kernel", TORCH_BOX(&fp8norm::cuda::force_kernel));
}

STABLE_TORCH_LIBRARY_IMPL(fp8norm, CUDA, m) { FP8NORM_REGISTER_KERNELS(m, fp8norm::Kernels<&fp8norm::cuda::run>); }
