// CUDA kernels of the .out ops: validation (shared with CPU), device guard, current stream,
// and the launch configuration table.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>

#include "launch.h"

namespace fp8norm {
namespace cuda {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Launch table, by the number of 16-byte vectors in a row (nvec = H * sizeof(T) / 16) and the
// number of rows M (measurements: benchmarks/NOTES.md).
//   vectors per thread: 4 for rows longer than 1024 vectors. For shorter rows, 4 when there are
//                       enough rows to fill every SM several times (M >= 4 * SMs: then bytes
//                       in flight per SM decide, and 64 bytes of input + residual per thread
//                       beat more, smaller threads), unless that leaves over 15% of the lanes
//                       idle (H = 128 or 1152 in bf16); else 1 (few rows: latency decides, so
//                       spread each row over more threads)
//   threads per row:    round_up(nvec / vpt, 32), at most 1024 (vpt 1) or 512 (vpt 4); rows
//                       longer than that take several tiles, kept in shared memory if they fit
//   rows per CTA:       enough to make ~256 threads per CTA, when a row is one tile
LaunchConfig launch_config(int64_t rows, int64_t hidden, int64_t elem_size, int sms, int max_smem) {
  const int64_t nvec = hidden * elem_size / 16;
  auto threads_for = [&](int vpt) {
    return std::min<int64_t>(max_threads_per_cta(vpt), ceil_div(ceil_div(nvec, vpt), 32) * 32);
  };
  auto lane_use = [&](int vpt) {
    const int64_t t = threads_for(vpt);
    return static_cast<double>(nvec) / static_cast<double>(ceil_div(nvec, t * vpt) * t * vpt);
  };
  LaunchConfig c;
  c.vpt = nvec > 1024 || (rows >= 4 * int64_t{sms} && lane_use(4) >= 0.85) ? 4 : 1;
  c.threads_x = static_cast<int>(threads_for(c.vpt));
  c.ntiles = static_cast<int>(ceil_div(nvec, int64_t{c.threads_x} * c.vpt));
  c.rows_per_cta = c.ntiles == 1 ? std::max(1, 256 / c.threads_x) : 1;
  const size_t red_bytes = sizeof(double) * 32 * c.rows_per_cta;
  const size_t stash_bytes = static_cast<size_t>(hidden * elem_size);
  c.smem_stash = c.ntiles > 1 && red_bytes + stash_bytes <= static_cast<size_t>(max_smem);
  c.smem_bytes = red_bytes + (c.smem_stash ? stash_bytes : 0);
  return c;
}

int device_attribute(cudaDeviceAttr attr, int device) {
  int value = 0;
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&value, attr, device));
  return value;
}

bool aligned_rows(const void* p, int64_t stride_elems, int64_t elem_size, int64_t align) {
  return reinterpret_cast<uintptr_t>(p) % align == 0 && (stride_elems * elem_size) % align == 0;
}

void run(const RowArgs& a, const at::Tensor& input) {
  if (a.rows == 0) return;
  const c10::cuda::CUDAGuard guard(input.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(input.device().index());
  const int64_t es = input.element_size();
  const int64_t vec = 16 / es;
  const bool aligned = aligned_rows(a.input, a.input_stride, es, 16) &&
                       (a.residual == nullptr || aligned_rows(a.residual, a.residual_stride, es, 16)) &&
                       (a.normed == nullptr || aligned_rows(a.normed, a.normed_stride, es, 16)) &&
                       aligned_rows(a.weight, 0, 1, 16) && aligned_rows(a.out, a.out_stride, 1, vec);
  const int device = input.device().index();
  const LaunchConfig cfg =
      launch_config(a.rows, a.hidden, es, device_attribute(cudaDevAttrMultiProcessorCount, device),
                    device_attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  switch (input.scalar_type()) {
    case at::kBFloat16: launch<__nv_bfloat16>(a, cfg, aligned, stream); break;
    case at::kHalf: launch<__half>(a, cfg, aligned, stream); break;
    case at::kFloat: launch<float>(a, cfg, aligned, stream); break;
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

}  // namespace
}  // namespace cuda

TORCH_LIBRARY_IMPL(fp8norm, CUDA, m) {
  m.impl("fused_add_rmsnorm_fp8_block_quant.out", &cuda::fused_add_rmsnorm_fp8_block_quant_out_cuda);
  m.impl("rmsnorm_fp8_block_quant.out", &cuda::rmsnorm_fp8_block_quant_out_cuda);
}

}  // namespace fp8norm
