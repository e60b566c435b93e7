// Probe (measurement only, benchmarks/NOTES.md v32): a kernel of FlashInfer's structure for
// this op (FusedAddRMSNormFP8BlockQuantKernel, as read in v31; written here, not copied), timed
// in the same run as ours, so that the decode comparison with FlashInfer no longer rests on
// anchors from another run. bf16 only, contiguous rows, H a multiple of 128 and at most 8192:
// one row per CTA, H / 8 threads, one 16-byte vector per thread and stream, the row and weight in
// registers, griddepcontrol.wait before the first load and launch_dependents after the last
// store (PDL), column-major block scales (scale[block * M + row]).
//
// The variants turn on, one at a time, what our kernel does differently, so that the steps
// between FlashInfer's structure and ours can be timed:
//   DSUM   the sum of squares in double (our contract), pairwise per vector; else float
//   BFLY   every warp adds the warp sums by a butterfly (ours: one barrier); else warp 0 adds
//          them and broadcasts rstd through shared memory (two barriers)
//   HINT   streaming cache hints (ld/st .cs) on the row's streams, the weight through ld.global.nc
//   WLATE  the weight loaded after the reduction (ours for one-CTA rows of > 512 threads)
//   EXACT  our quantization steps (amax floor 1e-10, scale = amax / 448 and g / scale correctly
//          rounded without a division: numerics.h); else FlashInfer's (floor 1e-4, scale and
//          its inverse by division, q = g * inverse)
// Built and timed by fi_structure_probe.py.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <torch/extension.h>

#include <type_traits>

#include "../csrc/common/numerics.h"

namespace {

constexpr int kVec = 8;  // bf16 elements per 16-byte vector

template <bool HINT>
__device__ __forceinline__ uint4 load_stream(const uint4* p) {
  if constexpr (HINT) return __ldcs(p);
  return *p;
}
template <bool HINT>
__device__ __forceinline__ uint4 load_weight(const uint4* p) {
  if constexpr (HINT) return __ldg(p);
  return *p;
}
template <bool HINT, typename V>
__device__ __forceinline__ void store_stream(V* p, V v) {
  if constexpr (HINT) {
    __stcs(p, v);
  } else {
    *p = v;
  }
}

template <bool DSUM, bool BFLY, bool HINT, bool WLATE, bool EXACT>
__global__ void __launch_bounds__(1024) fi_structure_kernel(
    const __nv_bfloat16* __restrict__ x, __nv_bfloat16* __restrict__ r, const __nv_bfloat16* __restrict__ w,
    __nv_bfloat16* __restrict__ normed, uint8_t* __restrict__ q, float* __restrict__ scale, int rows, int hidden,
    float eps, double inv_h) {
  using Acc = std::conditional_t<DSUM, double, float>;
  __shared__ Acc red[32];
  __shared__ float rstd_shared;
  const int row = blockIdx.x;
  const int t = threadIdx.x;
  const int warp = t >> 5, lane = t & 31, nw = blockDim.x >> 5;
  const size_t off = static_cast<size_t>(row) * hidden + static_cast<size_t>(t) * kVec;
  asm volatile("griddepcontrol.wait;" ::: "memory");
  uint4 xv = load_stream<HINT>(reinterpret_cast<const uint4*>(x + off));
  uint4 rv = load_stream<HINT>(reinterpret_cast<const uint4*>(r + off));
  uint4 wv = make_uint4(0, 0, 0, 0);
  if constexpr (!WLATE) wv = load_weight<HINT>(reinterpret_cast<const uint4*>(w + t * kVec));
  __nv_bfloat162* s2 = reinterpret_cast<__nv_bfloat162*>(&xv);
  const __nv_bfloat162* r2 = reinterpret_cast<const __nv_bfloat162*>(&rv);
#pragma unroll
  for (int i = 0; i < kVec / 2; ++i) s2[i] = __hadd2_rn(s2[i], r2[i]);
  store_stream<HINT>(reinterpret_cast<uint4*>(r + off), xv);
  float f[kVec];
#pragma unroll
  for (int i = 0; i < kVec / 2; ++i) {
    f[2 * i] = __low2float(s2[i]);
    f[2 * i + 1] = __high2float(s2[i]);
  }
  Acc acc;
  if constexpr (DSUM) {
    double sq[kVec];
#pragma unroll
    for (int e = 0; e < kVec; ++e) sq[e] = static_cast<double>(__fmul_rn(f[e], f[e]));
#pragma unroll
    for (int n = kVec / 2; n > 0; n /= 2) {
#pragma unroll
      for (int e = 0; e < n; ++e) sq[e] += sq[e + n];
    }
    acc = sq[0];
  } else {
    acc = 0.f;
#pragma unroll
    for (int e = 0; e < kVec; ++e) acc = __fmaf_rn(f[e], f[e], acc);
  }
#pragma unroll
  for (int o = 16; o > 0; o /= 2) acc += __shfl_xor_sync(0xFFFFFFFFu, acc, o);
  if (lane == 0) red[warp] = acc;
  __syncthreads();
  float rstd;
  auto rstd_of = [&](Acc sum) {
    if constexpr (DSUM) {
      return __double2float_rn(rsqrt(__fma_rn(sum, inv_h, static_cast<double>(eps))));
    } else {
      return rsqrtf(sum / static_cast<float>(hidden) + eps);
    }
  };
  if constexpr (BFLY) {
    Acc v = lane < nw ? red[lane] : Acc(0);
#pragma unroll
    for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
    rstd = rstd_of(v);
  } else {
    if (warp == 0) {
      Acc v = lane < nw ? red[lane] : Acc(0);
#pragma unroll
      for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
      if (lane == 0) rstd_shared = rstd_of(v);
    }
    __syncthreads();
    rstd = rstd_shared;
  }
  if constexpr (WLATE) wv = load_weight<HINT>(reinterpret_cast<const uint4*>(w + t * kVec));
  const __nv_bfloat162* w2 = reinterpret_cast<const __nv_bfloat162*>(&wv);
  uint4 nv;
  __nv_bfloat162* n2 = reinterpret_cast<__nv_bfloat162*>(&nv);
  float g[kVec];
  uint32_t amax = 0;
#pragma unroll
  for (int i = 0; i < kVec / 2; ++i) {
    const float a = fp8norm::normalize(f[2 * i], rstd, __low2float(w2[i]));
    const float b = fp8norm::normalize(f[2 * i + 1], rstd, __high2float(w2[i]));
    n2[i] = __floats2bfloat162_rn(a, b);
    g[2 * i] = __low2float(n2[i]);
    g[2 * i + 1] = __high2float(n2[i]);
    amax = max(amax, max(fp8norm::abs_bits(g[2 * i]), fp8norm::abs_bits(g[2 * i + 1])));
  }
  store_stream<HINT>(reinterpret_cast<uint4*>(normed + off), nv);
#pragma unroll
  for (int o = 8; o > 0; o /= 2) amax = max(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, o));
  float sc, qv[kVec];
  if constexpr (EXACT) {
    sc = fp8norm::block_scale_from_amax_bits(amax, false);
    const float rcp = __frcp_rn(sc);
#pragma unroll
    for (int e = 0; e < kVec; ++e) qv[e] = fp8norm::scaled_by_reciprocal(g[e], sc, rcp);
  } else {
    sc = __fdiv_rn(fmaxf(fp8norm::bits_float(amax), 1e-4f), 448.f);
    const float inv = __fdiv_rn(1.f, sc);
#pragma unroll
    for (int e = 0; e < kVec; ++e) qv[e] = __fmul_rn(g[e], inv);
  }
  uint32_t words[2];
#pragma unroll
  for (int e = 0; e < kVec; e += 4) {
    const uint32_t lo = __nv_cvt_float2_to_fp8x2(make_float2(qv[e], qv[e + 1]), __NV_SATFINITE, __NV_E4M3);
    const uint32_t hi = __nv_cvt_float2_to_fp8x2(make_float2(qv[e + 2], qv[e + 3]), __NV_SATFINITE, __NV_E4M3);
    words[e / 4] = lo | (hi << 16);
  }
  store_stream<HINT>(reinterpret_cast<uint2*>(q + off), make_uint2(words[0], words[1]));
  if ((t & 15) == 0) scale[static_cast<size_t>(t >> 4) * rows + row] = sc;
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

using Kernel = void (*)(const __nv_bfloat16*, __nv_bfloat16*, const __nv_bfloat16*, __nv_bfloat16*, uint8_t*,
                        float*, int, int, float, double);

// Variant index -> kernel: each adds one of our kernel's choices to the one before.
Kernel kernel_of(int64_t variant) {
  switch (variant) {
    case 0: return fi_structure_kernel<false, false, false, false, false>;  // F: FlashInfer's structure
    case 1: return fi_structure_kernel<false, false, false, false, true>;   // + EXACT
    case 2: return fi_structure_kernel<true, false, false, false, true>;    // + DSUM
    case 3: return fi_structure_kernel<true, true, false, false, true>;     // + BFLY
    case 4: return fi_structure_kernel<true, true, true, false, true>;      // + HINT
    case 5: return fi_structure_kernel<true, true, true, true, true>;       // + WLATE
    default: TORCH_CHECK(false, "fi_structure_probe: variant 0..5, got ", variant);
  }
}

void run(const at::Tensor& x, const at::Tensor& r, const at::Tensor& w, const at::Tensor& normed,
         const at::Tensor& q, const at::Tensor& scale, double eps, int64_t variant, bool pdl) {
  TORCH_CHECK(x.is_cuda() && x.dim() == 2 && x.scalar_type() == at::kBFloat16 && x.is_contiguous(), "x: bf16 (M, H)");
  const int64_t m = x.size(0), h = x.size(1);
  TORCH_CHECK(h % 128 == 0 && h / kVec <= 1024, "H a multiple of 128, at most 8192");
  for (const at::Tensor* t : {&r, &normed}) {
    TORCH_CHECK(t->sizes() == x.sizes() && t->scalar_type() == at::kBFloat16 && t->is_contiguous(), "bf16 (M, H)");
  }
  TORCH_CHECK(w.numel() == h && w.scalar_type() == at::kBFloat16 && w.is_contiguous(), "w: bf16 (H,)");
  TORCH_CHECK(q.sizes() == x.sizes() && q.scalar_type() == at::kFloat8_e4m3fn && q.is_contiguous(), "q: fp8 (M, H)");
  TORCH_CHECK(scale.numel() == m * (h / 128) && scale.scalar_type() == at::kFloat && scale.is_contiguous(),
              "scale: float, M * H / 128 (column-major)");
  const c10::cuda::CUDAGuard guard(x.device());
  cudaLaunchConfig_t lc = {};
  lc.gridDim = dim3(static_cast<unsigned>(m));
  lc.blockDim = dim3(static_cast<unsigned>(h / kVec));
  lc.stream = c10::cuda::getCurrentCUDAStream(x.device().index());
  cudaLaunchAttribute attr = {};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  lc.attrs = &attr;
  lc.numAttrs = pdl ? 1 : 0;
  C10_CUDA_CHECK(cudaLaunchKernelEx(
      &lc, kernel_of(variant), static_cast<const __nv_bfloat16*>(x.data_ptr()),
      static_cast<__nv_bfloat16*>(r.data_ptr()), static_cast<const __nv_bfloat16*>(w.data_ptr()),
      static_cast<__nv_bfloat16*>(normed.data_ptr()), static_cast<uint8_t*>(q.data_ptr()),
      scale.data_ptr<float>(), static_cast<int>(m), static_cast<int>(h), static_cast<float>(eps),
      1.0 / static_cast<double>(h)));
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, mod) { mod.def("run", &run); }
