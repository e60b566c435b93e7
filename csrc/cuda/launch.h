// Interface between the CUDA op (fused_add_rmsnorm_fp8_block_quant.cu: validation, launch
// table) and the kernels (kernel.cuh, instantiated once per dtype in kernel_<dtype>.cu).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "../common/fp8norm.h"

namespace fp8norm {
namespace cuda {

// More vectors per thread need more registers: 4 vectors per thread fit without spills only
// with at most 512 threads per CTA (128 registers per thread).
constexpr int max_threads_per_cta(int vpt) { return vpt == 1 ? 1024 : 512; }

struct LaunchConfig {
  int threads_x = 32;     // threads per row, a multiple of 32, at most max_threads_per_cta(vpt)
  int rows_per_cta = 1;   // rows per CTA (threads_x * rows_per_cta <= max_threads_per_cta(vpt))
  int vpt = 1;            // 16-byte vectors per thread per tile: 1 or 4
  int ntiles = 1;         // tiles per row
  bool smem_stash = false;  // keep the tiles of a multi-tile row in shared memory
  size_t smem_bytes = 0;    // dynamic shared memory per CTA
};

// T is __nv_bfloat16, __half or float. aligned: every row start of input, residual, weight and
// normed is 16-byte aligned and every fp8 row start is VEC-byte aligned.
template <typename T>
void launch(const RowArgs& a, const LaunchConfig& cfg, bool aligned, cudaStream_t stream);

}  // namespace cuda
}  // namespace fp8norm
