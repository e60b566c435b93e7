// The host side of the kernels: a plan's kernel instantiation, and its launch. Included by one
// kernel_<dtype>.cu per activation dtype (split for parallel builds).
#pragma once

#include <torch/csrc/stable/macros.h>  // STD_CUDA_CHECK (the CUDA library builds with USE_CUDA)

#include <type_traits>

#include "../common/check.h"
#include "launch.h"
#include "row_kernel.cuh"
#include "tile_kernel.cuh"

namespace fp8norm {
namespace cuda {

using KernelFn = void (*)(RowArgs, LaunchParams);

template <typename T, typename W, bool R, bool F, int VPT, int VB, bool FULL>
KernelFn row_kernel_for(bool one_stride) {
  return one_stride ? row_kernel<T, W, R, F, VPT, VB, FULL, true> : row_kernel<T, W, R, F, VPT, VB, FULL, false>;
}

template <typename T, typename W, bool R, bool F, int VPT, TileLayout L>
KernelFn tile_kernel_for(bool aligned) {
  return aligned ? tile_kernel<T, W, R, F, true, VPT, L> : tile_kernel<T, W, R, F, false, VPT, L>;
}

// The instantiation of plan.kernel for T, W, a residual or not and the float32 sum (F: the
// norm conventions that normalize the unrounded residual sum; 2-byte T with a residual only).
// Kernels a dtype has no instantiation of (8-byte vectors and half-warp rows of float32; four
// vectors per thread in the fused op with a float32 weight and a 2-byte input) are never planned
// (launch_policy.cpp).
template <typename T, typename W, bool R, bool F>
KernelFn kernel_for(const launch::Plan& plan, bool aligned) {
  using K = launch::Kernel;
  constexpr bool kTwoBytes = sizeof(T) == 2;
  constexpr bool kRowFourBuilt = !(R && std::is_same_v<W, float> && kTwoBytes);
  FP8NORM_CHECK(!launch::is_row_kernel(plan.kernel) || aligned, "fp8norm: row kernels need aligned rows");
  switch (plan.kernel) {
    case K::kRow: return row_kernel_for<T, W, R, F, 1, 16, false>(plan.one_stride);
    case K::kRowNarrow:
      if constexpr (kTwoBytes) return row_kernel_for<T, W, R, F, 1, 8, true>(plan.one_stride);
      break;
    case K::kRowFour:
      if constexpr (kRowFourBuilt) return row_kernel_for<T, W, R, F, 4, 16, true>(plan.one_stride);
      break;
    case K::kTile1: return tile_kernel_for<T, W, R, F, 1, TileLayout::kRows>(aligned);
    case K::kTile4: return tile_kernel_for<T, W, R, F, 4, TileLayout::kRows>(aligned);
    case K::kHalfTile1:
      if constexpr (kTwoBytes) return tile_kernel_for<T, W, R, F, 1, TileLayout::kHalfRows>(aligned);
      break;
    case K::kHalfTile4:
      if constexpr (kTwoBytes) return tile_kernel_for<T, W, R, F, 4, TileLayout::kHalfRows>(aligned);
      break;
    case K::kCluster1: return tile_kernel_for<T, W, R, F, 1, TileLayout::kCluster>(aligned);
    case K::kCluster4: return tile_kernel_for<T, W, R, F, 4, TileLayout::kCluster>(aligned);
  }
  fail(cat("fp8norm: kernel ", launch::kernel_name(plan.kernel), " is not built for this dtype"));
}

template <typename F>
void with_bool(bool b, F&& f) {
  if (b) {
    f(std::true_type{});
  } else {
    f(std::false_type{});
  }
}

template <typename T>
void launch(const RowArgs& a, bool aligned, const launch::Plan& plan, cudaStream_t stream) {
  KernelFn kernel = nullptr;
  with_bool(a.weight_is_float, [&](auto w_float) {
    using W = std::conditional_t<decltype(w_float)::value, float, T>;
    if constexpr (sizeof(T) == 2) {
      if (a.sum_f32) {
        kernel = kernel_for<T, W, true, true>(plan, aligned);  // a.sum_f32: a residual (args.cpp)
        return;
      }
    }
    with_bool(a.residual != nullptr,
              [&](auto res) { kernel = kernel_for<T, W, decltype(res)::value, false>(plan, aligned); });
  });
  if (plan.smem_bytes > 48 * 1024) {
    STD_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(plan.smem_bytes)));
  }
  cudaLaunchConfig_t lc = {};
  lc.gridDim = dim3(static_cast<unsigned>(plan.ctas));
  lc.blockDim = dim3(static_cast<unsigned>(plan.threads), static_cast<unsigned>(plan.rows_per_cta));
  lc.dynamicSmemBytes = static_cast<size_t>(plan.smem_bytes);
  lc.stream = stream;
  cudaLaunchAttribute attrs[2] = {};
  unsigned n = 0;
  if (plan.cluster > 1) {
    attrs[n].id = cudaLaunchAttributeClusterDimension;
    attrs[n].val.clusterDim.x = static_cast<unsigned>(plan.cluster);
    attrs[n].val.clusterDim.y = 1;
    attrs[n].val.clusterDim.z = 1;
    ++n;
  }
  if (plan.pdl) {
    attrs[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attrs[n].val.programmaticStreamSerializationAllowed = 1;
    ++n;
  }
  lc.attrs = attrs;
  lc.numAttrs = n;
  LaunchParams s;
  s.cluster = plan.cluster;
  s.slice_vecs = plan.slice_vecs;
  s.tiles = plan.tiles;
  s.stash = plan.stash;
  s.release_early = plan.release_early;
  s.prefetch_tiles = plan.prefetch_tiles;
  s.prefetch_ctas = plan.prefetch_ctas;
  s.inv_hidden = 1.0 / static_cast<double>(a.hidden);
  s.scale_keep_rows = plan.scale_keep_rows;
  s.scale_demote_rows = plan.scale_demote_rows;
  STD_CUDA_CHECK(cudaLaunchKernelEx(&lc, kernel, a, s));
  STD_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace cuda
}  // namespace fp8norm
