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
// Variants 6..10 then move that kernel toward the op's lean one-row kernel (row_vec1_kernel) one
// difference at a time in the code around the math (benchmarks/NOTES.md v34, item 10):
//   B        +hint or +wlate by the op's rule (the weight after the reduction for rows of more
//            than 512 threads)
//   +early   the next grid released right after the PDL wait, as the op does at decode
//   +args    the op's parameters (RowArgs, TileShape by value) instead of ten scalars
//   +strides each stream's row from its own 64-bit stride, the scales from (row, column) strides
//   +flags   normed_out (nullable), ue8m0 and the weight pass read at run time; the `valid`
//            predicate (the op's kernel runs on rows of up to 1024 threads of any H)
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
#include "../csrc/cuda/launch.h"

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

// One row's work after the PDL wait, shared by both kernels below. The row's pointers come from
// the kernel (one element offset for all streams, or the op's per-stream strides); `valid`, a
// null `normed` and `ue8m0` are compile-time or run-time as the kernel says (FLAGS: run time).
struct RowPtrs {
  const __nv_bfloat16* x;  // this thread's vector of each stream
  __nv_bfloat16* r;
  const __nv_bfloat16* w;
  __nv_bfloat16* normed;  // null: not written (FLAGS only)
  uint8_t* q;
  float* scale;  // this thread's block scale (written by the block's first lane)
  bool valid;    // FLAGS only: a thread past the row loads nothing and stores nothing
  bool ue8m0;    // FLAGS only
  bool w_early;  // FLAGS only: the weight with the row (else after the reduction)
  float eps;
  double inv_h;
  int hidden;
};

template <bool DSUM, bool BFLY, bool HINT, bool WLATE, bool EXACT, bool FLAGS>
__device__ __forceinline__ void probe_row(const RowPtrs& p) {
  using Acc = std::conditional_t<DSUM, double, float>;
  __shared__ Acc red[32];
  __shared__ float rstd_shared;
  const int t = threadIdx.x;
  const int warp = t >> 5, lane = t & 31, nw = blockDim.x >> 5;
  const bool valid = !FLAGS || p.valid;
  const bool w_early = FLAGS ? p.w_early : !WLATE;
  uint4 xv, rv, wv;
  if (valid) {
    xv = load_stream<HINT>(reinterpret_cast<const uint4*>(p.x));
    rv = load_stream<HINT>(reinterpret_cast<const uint4*>(p.r));
    if (w_early) wv = load_weight<HINT>(reinterpret_cast<const uint4*>(p.w));
  } else {  // computed on and never stored, as the op's opaque_fill
    asm("" : "=r"(xv.x), "=r"(xv.y), "=r"(xv.z), "=r"(xv.w));
    asm("" : "=r"(wv.x), "=r"(wv.y), "=r"(wv.z), "=r"(wv.w));
    rv = xv;
  }
  __nv_bfloat162* s2 = reinterpret_cast<__nv_bfloat162*>(&xv);
  const __nv_bfloat162* r2 = reinterpret_cast<const __nv_bfloat162*>(&rv);
#pragma unroll
  for (int i = 0; i < kVec / 2; ++i) s2[i] = __hadd2_rn(s2[i], r2[i]);
  if (valid) store_stream<HINT>(reinterpret_cast<uint4*>(p.r), xv);
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
      return __double2float_rn(rsqrt(__fma_rn(sum, p.inv_h, static_cast<double>(p.eps))));
    } else {
      return rsqrtf(sum / static_cast<float>(p.hidden) + p.eps);
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
  if (!w_early && valid) wv = load_weight<HINT>(reinterpret_cast<const uint4*>(p.w));
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
  if (valid && (!FLAGS || p.normed != nullptr)) store_stream<HINT>(reinterpret_cast<uint4*>(p.normed), nv);
#pragma unroll
  for (int o = 8; o > 0; o /= 2) amax = max(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, o));
  float sc, qv[kVec];
  if constexpr (EXACT) {
    sc = fp8norm::block_scale_from_amax_bits(amax, FLAGS && p.ue8m0);
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
  if (valid) {
    store_stream<HINT>(reinterpret_cast<uint2*>(p.q), make_uint2(words[0], words[1]));
    if ((t & 15) == 0) *p.scale = sc;
  }
}

__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void pdl_release() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }

// FlashInfer's structure (variants 0..7): ten scalar parameters, one element offset for every
// stream, column-major scales (scale[block * M + row]); the next grid released after the last
// store, or (EARLY) right after the wait, as the op does at decode.
template <bool DSUM, bool BFLY, bool HINT, bool WLATE, bool EXACT, bool EARLY>
__global__ void __launch_bounds__(1024) fi_structure_kernel(
    const __nv_bfloat16* __restrict__ x, __nv_bfloat16* __restrict__ r, const __nv_bfloat16* __restrict__ w,
    __nv_bfloat16* __restrict__ normed, uint8_t* __restrict__ q, float* __restrict__ scale, int rows, int hidden,
    float eps, double inv_h) {
  const int row = blockIdx.x;
  const int t = threadIdx.x;
  const size_t off = static_cast<size_t>(row) * hidden + static_cast<size_t>(t) * kVec;
  pdl_wait();
  if constexpr (EARLY) pdl_release();
  const RowPtrs p{x + off, r + off, w + t * kVec, normed + off, q + off,
                  scale + static_cast<size_t>(t >> 4) * rows + row, true, false, !WLATE, eps, inv_h, hidden};
  probe_row<DSUM, BFLY, HINT, WLATE, EXACT, false>(p);
  if constexpr (!EARLY) pdl_release();
}

// The op's parameters (variants 8..10): RowArgs and TileShape by value, as the op's kernels take
// them, the next grid released right after the wait. STRIDES: each stream's row from its own
// 64-bit row stride and the scales from their (row, column) strides, as the op's general layout
// (else one element offset from H and column-major scales from M, as above). FLAGS: normed_out
// (may be null), ue8m0 and the weight pass read at run time, and the `valid` predicate.
template <bool WLATE, bool STRIDES, bool FLAGS>
__global__ void __launch_bounds__(1024) op_params_kernel(const fp8norm::RowArgs a, const fp8norm::cuda::TileShape s) {
  const int64_t row = blockIdx.x;
  const int t = threadIdx.x;
  pdl_wait();
  pdl_release();
  const auto* x = static_cast<const __nv_bfloat16*>(a.input);
  auto* r = static_cast<__nv_bfloat16*>(a.residual);
  auto* n = static_cast<__nv_bfloat16*>(a.normed);
  auto* q = static_cast<uint8_t*>(a.out);
  const int64_t v = static_cast<int64_t>(t) * kVec;
  RowPtrs p;
  if constexpr (STRIDES) {
    p.x = x + row * a.input_stride + v;
    p.r = r + row * a.residual_stride + v;
    p.normed = n + row * a.normed_stride + v;  // never null here; +flags tests it at the store
    p.q = q + row * a.out_stride + v;
    p.scale = a.block_scale + row * a.scale_stride_row + (t >> 4) * a.scale_stride_col;
  } else {
    const int64_t off = row * a.hidden + v;
    p.x = x + off;
    p.r = r + off;
    p.normed = n + off;
    p.q = q + off;
    p.scale = a.block_scale + (t >> 4) * a.rows + row;
  }
  p.w = static_cast<const __nv_bfloat16*>(a.weight) + v;
  p.valid = static_cast<unsigned>(t) < static_cast<unsigned>(a.hidden) / kVec;
  p.ue8m0 = a.ue8m0;
  p.w_early = s.weight_in_pass1;
  p.eps = a.eps;
  p.inv_h = s.inv_hidden;
  p.hidden = static_cast<int>(a.hidden);
  probe_row<true, true, true, WLATE, true, FLAGS>(p);
}

// The weight after the reduction where a row is one CTA of more than 512 threads (the op's rule).
bool weight_late(int64_t h) { return h / kVec > 512; }

// Variant index -> (the probe's kernel, the op's-parameters kernel): each variant adds one of the
// op's choices to the one before.
using Kernel = void (*)(const __nv_bfloat16*, __nv_bfloat16*, const __nv_bfloat16*, __nv_bfloat16*, uint8_t*,
                        float*, int, int, float, double);
using OpKernel = void (*)(const fp8norm::RowArgs, const fp8norm::cuda::TileShape);

Kernel kernel_of(int64_t variant, int64_t h) {
  switch (variant) {
    case 0: return fi_structure_kernel<false, false, false, false, false, false>;  // F: FlashInfer's structure
    case 1: return fi_structure_kernel<false, false, false, false, true, false>;   // + EXACT
    case 2: return fi_structure_kernel<true, false, false, false, true, false>;    // + DSUM
    case 3: return fi_structure_kernel<true, true, false, false, true, false>;     // + BFLY
    case 4: return fi_structure_kernel<true, true, true, false, true, false>;      // + HINT
    case 5: return fi_structure_kernel<true, true, true, true, true, false>;       // + WLATE
    case 6:  // B: +hint or +wlate by the op's weight rule
      return weight_late(h) ? fi_structure_kernel<true, true, true, true, true, false>
                            : fi_structure_kernel<true, true, true, false, true, false>;
    case 7:  // B + the release right after the wait
      return weight_late(h) ? fi_structure_kernel<true, true, true, true, true, true>
                            : fi_structure_kernel<true, true, true, false, true, true>;
    default: return nullptr;
  }
}

OpKernel op_kernel_of(int64_t variant, int64_t h) {
  switch (variant) {
    case 8: return weight_late(h) ? op_params_kernel<true, false, false> : op_params_kernel<false, false, false>;
    case 9: return weight_late(h) ? op_params_kernel<true, true, false> : op_params_kernel<false, true, false>;
    case 10: return op_params_kernel<false, true, true>;  // the weight pass from TileShape
    default: TORCH_CHECK(false, "fi_structure_probe: variant 0..10, got ", variant);
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
  if (Kernel k = kernel_of(variant, h)) {
    C10_CUDA_CHECK(cudaLaunchKernelEx(
        &lc, k, static_cast<const __nv_bfloat16*>(x.data_ptr()), static_cast<__nv_bfloat16*>(r.data_ptr()),
        static_cast<const __nv_bfloat16*>(w.data_ptr()), static_cast<__nv_bfloat16*>(normed.data_ptr()),
        static_cast<uint8_t*>(q.data_ptr()), scale.data_ptr<float>(), static_cast<int>(m), static_cast<int>(h),
        static_cast<float>(eps), 1.0 / static_cast<double>(h)));
    return;
  }
  // The op's parameters, filled as prepare() fills them for these contiguous tensors (column-major
  // scales: strides (1, M)).
  fp8norm::RowArgs a;
  a.rows = m;
  a.hidden = h;
  a.input = x.data_ptr();
  a.input_stride = h;
  a.residual = r.data_ptr();
  a.residual_stride = h;
  a.weight = w.data_ptr();
  a.out = q.data_ptr();
  a.out_stride = h;
  a.block_scale = scale.data_ptr<float>();
  a.scale_stride_row = 1;
  a.scale_stride_col = m;
  a.normed = normed.data_ptr();
  a.normed_stride = h;
  a.eps = static_cast<float>(eps);
  fp8norm::cuda::TileShape sh;
  sh.slice_vecs = static_cast<int>(h / kVec);
  sh.inv_hidden = 1.0 / static_cast<double>(h);
  sh.weight_in_pass1 = !weight_late(h);
  C10_CUDA_CHECK(cudaLaunchKernelEx(&lc, op_kernel_of(variant, h), a, sh));
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, mod) { mod.def("run", &run); }
