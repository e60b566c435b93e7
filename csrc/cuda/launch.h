// Interface between the CUDA op (ops.cu: validation, device facts, the plan) and the kernels
// (row_kernel.cuh, tile_kernel.cuh; launched by launcher.cuh, instantiated once per dtype in
// kernel_<dtype>.cu).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "../common/row_args.h"
#include "launch_policy.h"

namespace fp8norm {
namespace cuda {

// What a kernel knows of its launch besides blockDim and RowArgs (from launch::Plan).
struct LaunchParams {
  int cluster = 1;          // CTAs per row (slices of whole 1x128 blocks)
  int slice_vecs = 0;       // 16-byte vectors per slice
  int tiles = 1;            // tiles per slice (tile_kernel)
  bool stash = false;       // tiles of a multi-tile slice kept in shared memory
  bool release_early = true;   // PDL: let the next grid launch once this one has started
  bool prefetch_tiles = false; // ask L2 for a slice's later tiles at the CTA's start
  int prefetch_ctas = 0;       // ask L2 for the rows of the CTA this many CTAs ahead (0: off)
  double inv_hidden = 0.0;     // 1 / H, for the mean of the squares
  int64_t scale_keep_rows = 0;    // block-scale L2 line policy (launch::Plan)
  int64_t scale_demote_rows = 0;
};

// Launches plan.kernel for T = __nv_bfloat16, __half or float on `stream`; a.rows > 0.
template <typename T>
void launch(const RowArgs& a, bool aligned, const launch::Plan& plan, cudaStream_t stream);

}  // namespace cuda
}  // namespace fp8norm
