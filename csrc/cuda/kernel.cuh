// The CUDA kernel of the fp8norm ops, included by one .cu file per activation dtype.
//
// Design (one memory pass):
//  - One row per group of threads (threads_x wide: whole warps, or whole half-warps when that
//    takes fewer threads; rows_per_cta groups per CTA), or, for few
//    rows (decode sizes), one row per thread-block cluster: each CTA of the cluster takes a
//    slice of whole 1x128 blocks, and the partial sums of squares are exchanged through
//    distributed shared memory (sm_90+). Each thread owns 16-byte vectors of its slice:
//    VEC = 16 / sizeof(T) elements, so a 1x128 quantization block is LPB = 128 / VEC
//    consecutive lanes of one warp.
//  - A slice is processed in tiles of threads_x * VPT vectors. Pass 1 reads input and residual
//    once (and the weight of the last tile, so that its latency overlaps the reduction), writes
//    the new residual, and keeps the rounded sums on chip: in registers when the slice is one
//    tile, otherwise in shared memory (the "stash"), or, for slices larger than shared memory,
//    re-read from the just-written residual (a same-thread read-after-write, in L2).
//  - The sum of squares is reduced by warp shuffles and one shared-memory exchange (in double,
//    in a fixed order: deterministic; with a cluster, every CTA adds the slices' partial sums
//    in rank order, so all get the same rstd). Pass 2 normalizes, reduces each block's amax over
//    its LPB lanes (shuffles, or redux.sync: block_amax), and writes normed (optional), fp8 and
//    the block scale.
//  - Programmatic dependent launch (sm_90+): the kernel waits for the preceding grid before its
//    first global read (griddepcontrol.wait; only the L2 prefetch hints come before it), so the
//    launch itself may overlap that grid's tail.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include "../common/fp8norm.h"
#include "../common/numerics.h"
#include "launch.h"

#include <type_traits>

namespace fp8norm {
namespace cuda {

// Conversions between a storage type and float (explicit intrinsics: torch builds with
// __CUDA_NO_HALF_OPERATORS__ and friends). from_float2 rounds two floats to nearest even with
// one paired conversion (cvt.rn.{bf16x2,f16x2}.f32: one F2FP instruction in SASS, where each
// single conversion is an F2F on the slower conversion pipe); the same values as two single
// conversions (those: 0.05-0.12 µs slower at decode sizes, benchmarks/NOTES.md, v4).
// to_float2 and from_float2 take a pair of adjacent elements as one 32-bit word in and out: with
// one element at a time (until v49) the compiler kept each 16-bit half in a register of its own
// (two instructions to widen an upper half, a PRMT to pack a pair again before each store), and
// the bf16 kernels ran 8-15% more instructions (benchmarks/NOTES.md, v49).
//
// add2 sets a[0..1] to the reference's residual + input, a + b computed in float32 and rounded
// to T. For the 2-byte types that is one paired add rounded once (add.rn.{bf16x2,f16x2}; below
// sm_90 bf16 is an fma by 1.0), instead of four unpacks, two float adds and a paired
// conversion: the same values, since the float32 sum of two bf16 / fp16 values is either exact
// or, where it is not (exponents more than 16 / 13 apart), the smaller addend lies far below
// half an ulp of T of the larger, so both round to the larger (NaN stays NaN, its payload may
// differ). Checked over every pair of bf16 and of fp16 bit patterns on the H200
// (tests/test_residual_add.py).
template <typename T>
struct Cvt;
template <>
struct Cvt<float> {
  __device__ static void to_float2(const float* p, float& lo, float& hi) {
    lo = p[0];
    hi = p[1];
  }
  __device__ static void from_float2(float a, float b, float* out) {
    out[0] = a;
    out[1] = b;
  }
  __device__ static void add2(float* a, const float* b) {
    a[0] = __fadd_rn(a[0], b[0]);
    a[1] = __fadd_rn(a[1], b[1]);
  }
};
template <>
struct Cvt<__half> {
  __device__ static void to_float2(const __half* p, float& lo, float& hi) {
    const float2 f = __half22float2(*reinterpret_cast<const __half2*>(p));
    lo = f.x;
    hi = f.y;
  }
  __device__ static void from_float2(float a, float b, __half* out) {
    *reinterpret_cast<__half2*>(out) = __floats2half2_rn(a, b);
  }
  __device__ static void add2(__half* a, const __half* b) {
    *reinterpret_cast<__half2*>(a) =
        __hadd2_rn(*reinterpret_cast<const __half2*>(a), *reinterpret_cast<const __half2*>(b));
  }
};
template <>
struct Cvt<__nv_bfloat16> {
  // A bf16 value is the upper half of its float: from the pair's 32-bit word (the first element
  // in its low half) w << 16 and w & 0xFFFF0000 are the two floats exactly, one integer
  // instruction each.
  __device__ static void to_float2(const __nv_bfloat16* p, float& lo, float& hi) {
    const uint32_t w = *reinterpret_cast<const uint32_t*>(p);
    lo = __uint_as_float(w << 16);
    hi = __uint_as_float(w & 0xFFFF0000u);
  }
  __device__ static void from_float2(float a, float b, __nv_bfloat16* out) {
    *reinterpret_cast<__nv_bfloat162*>(out) = __floats2bfloat162_rn(a, b);
  }
  __device__ static void add2(__nv_bfloat16* a, const __nv_bfloat16* b) {
    *reinterpret_cast<__nv_bfloat162*>(a) =
        __hadd2_rn(*reinterpret_cast<const __nv_bfloat162*>(a), *reinterpret_cast<const __nv_bfloat162*>(b));
  }
};

// N elements of T, loaded or stored as 16-byte accesses when ALIGNED (one 8-byte access for a
// Pack of 8 bytes: row_vec1_kernel's narrow vectors; PackWord), else one by one.
// Cache hints for the 16-byte accesses: kStream for data touched once (evict first), kKeep for
// data every row reads again (the weight: read-only path, stays in L1/L2), kPlain otherwise.
// The kernel uses kStream / kKeep only when its HINTED parameter is true: a call whose buffers
// stay in L2 until the next call runs faster with plain accesses (benchmarks/NOTES.md, v18).
enum class Hint { kPlain, kStream, kKeep };

template <typename T, int N>
struct alignas(16) Pack {
  T v[N];
};

// One 16- or 8-byte load (V = uint4 or uint2) with the cache hint.
template <Hint H, typename V>
__device__ __forceinline__ V load_hinted(const V* p) {
  if constexpr (H == Hint::kStream) return __ldcs(p);
  if constexpr (H == Hint::kKeep) return __ldg(p);
  return *p;
}

// One store of a 16-, 8- or 4-byte value with the cache hint.
template <Hint H, typename V>
__device__ __forceinline__ void store_hinted(V* p, V v) {
  if constexpr (H == Hint::kStream) {
    __stcs(p, v);
  } else {
    *p = v;
  }
}

// Element pointer of the 16-byte vector v of a row: row + v * N, from a 32-bit index by one
// 64-bit multiply-add (IMAD.WIDE), so that each stream costs one instruction per vector.
template <int N, typename T>
__device__ __forceinline__ T* vec_at(T* row, int v) {
  return row + static_cast<int64_t>(v) * N;
}

// A row's start, hidden from the compiler's address arithmetic when ALIGNED: it stays one
// 64-bit register, instead of the row offset being folded into every access's index (64-bit
// shifts and adds per vector and stream). The compiler then no longer knows p is global, so
// only an access that names the space itself is a global one: the hinted kernels' aligned
// accesses are all 16-, 8- or 4-byte hinted ones (ld.global.cs / .nc, st.global.cs); the
// plain ones (HINTED false) are generic, as are the unaligned kernels' element accesses.
template <bool ALIGNED, typename P>
__device__ __forceinline__ P* row_start(P* p) {
  if constexpr (ALIGNED) asm("" : "+l"(p));
  return p;
}

// Gives p a value the compiler cannot know, without an instruction: for registers whose
// results are computed and thrown away (not a read of an uninitialized variable).
template <typename T, int N>
__device__ __forceinline__ void opaque_fill(Pack<T, N>& p) {
  static_assert(sizeof(p) % 4 == 0, "whole 32-bit words");
  uint32_t* u = reinterpret_cast<uint32_t*>(&p);
#pragma unroll
  for (int i = 0; i < int(sizeof(p) / 4); ++i) asm("" : "=r"(u[i]));
}

// The access word of an ALIGNED Pack<T, N>: 16 bytes (uint4) for packs of whole 16-byte
// vectors, 8 (uint2) for row_vec1_kernel's narrow vectors; void: element by element.
template <typename T, int N>
using PackWord = std::conditional_t<(sizeof(T) * N) % 16 == 0, uint4,
                                    std::conditional_t<sizeof(T) * N == 8, uint2, void>>;

template <bool ALIGNED, Hint H = Hint::kPlain, typename T, int N>
__device__ __forceinline__ void load(Pack<T, N>& dst, const T* src) {
  using V = PackWord<T, N>;
  if constexpr (ALIGNED && !std::is_void_v<V>) {
#pragma unroll
    for (int c = 0; c < int(sizeof(T) * N / sizeof(V)); ++c) {
      reinterpret_cast<V*>(&dst)[c] = load_hinted<H>(reinterpret_cast<const V*>(src) + c);
    }
  } else {
#pragma unroll
    for (int e = 0; e < N; ++e) dst.v[e] = src[e];
  }
}

template <bool ALIGNED, Hint H = Hint::kPlain, typename T, int N>
__device__ __forceinline__ void store(T* dst, const Pack<T, N>& src) {
  using V = PackWord<T, N>;
  if constexpr (ALIGNED && !std::is_void_v<V>) {
#pragma unroll
    for (int c = 0; c < int(sizeof(T) * N / sizeof(V)); ++c) {
      store_hinted<H>(reinterpret_cast<V*>(dst) + c, reinterpret_cast<const V*>(&src)[c]);
    }
  } else {
#pragma unroll
    for (int e = 0; e < N; ++e) dst[e] = src.v[e];
  }
}

// N fp8 bytes (N = 4 or 8), written once: one 4- or 8-byte store (with hint H) when ALIGNED.
template <bool ALIGNED, int N, Hint H>
__device__ __forceinline__ void store_fp8(uint8_t* dst, const uint32_t (&words)[N / 4]) {
  if constexpr (ALIGNED && N == 8) {
    store_hinted<H>(reinterpret_cast<uint2*>(dst), make_uint2(words[0], words[1]));
  } else if constexpr (ALIGNED && N == 4) {
    store_hinted<H>(reinterpret_cast<unsigned int*>(dst), words[0]);
  } else {
#pragma unroll
    for (int e = 0; e < N; ++e) dst[e] = static_cast<uint8_t>(words[e / 4] >> (8 * (e % 4)));
  }
}

// Two quotients to two float8_e4m3fn bytes: round to nearest even, saturating to +-448
// (the reference's clamp), NaN stays NaN.
__device__ __forceinline__ uint32_t to_fp8x2(float a, float b) {
  return static_cast<uint32_t>(
      __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, __NV_E4M3));
}

// ---- sm_90+: programmatic dependent launch and thread-block clusters. Compiled to nothing
// (PDL) or a trap (clusters; the launcher never asks for them below sm_90) for older targets.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define FP8NORM_SM90 1
#else
#define FP8NORM_SM90 0
#endif

// Waits until the grid this launch depends on has completed and its writes are visible (a
// no-op when the launch was not programmatic), then, if `release`, lets the next grid in the
// stream launch now (its own wait still holds it until this grid has completed); without, the
// next grid launches as this one's CTAs exit.
__device__ __forceinline__ void wait_previous_grid(bool release) {
#if FP8NORM_SM90
  asm volatile("griddepcontrol.wait;" ::: "memory");
  if (release) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Makes the warp sums a row's warps wrote to shared memory visible to all of that row's warps.
// With PER_ROW, in CTAs of several rows of whole warps, a row waits only for its own warps, so
// that a row whose loads have landed goes on to pass 2 while the CTA's other rows are still
// loading: a row of one warp with __syncwarp, a row of several warps, in a CTA of at most 15
// rows, with the named barrier 1 + its index (`bar.sync id, threads`: only the row's warps take
// part, and it orders their shared-memory accesses as __syncthreads does the CTA's). Half-warp
// rows share warps with their neighbours and cluster slices are one per CTA: those keep the CTA
// barrier. PER_ROW is on in the plain-access kWarpRows kernels only (the L2 window's multi-row
// grids: 2048 x 2048 2.3% faster, the others 0.4-0.9%); in the hinted kernels it measured 4-7%
// slower at decode, in one-row CTAs that never take the per-row path (the code around the
// barrier), and 0.7-1.0% slower at large M (benchmarks/NOTES.md, v20). Plain 1-vector rows were
// slower with it too (6-10% in one-row CTAs, 1-7% in CTAs of several rows; v43), so the launch
// rule gives those Layout::kWarpRowsCta, its kernel without this code.
template <Layout L, bool PER_ROW>
__device__ __forceinline__ void row_barrier() {
  if constexpr (PER_ROW && L == Layout::kWarpRows) {
    if (blockDim.x == 32) {
      __syncwarp();
      return;
    }
    if (blockDim.y > 1 && blockDim.y <= 15) {
      asm volatile("bar.sync %0, %1;" ::"r"(1 + threadIdx.y), "r"(blockDim.x) : "memory");
      return;
    }
  }
  __syncthreads();
}

// The index of this CTA's row group in the grid: for cluster slices the index of its cluster
// (blockIdx.x / cluster size, without a division), else blockIdx.x. Not %clusterid.x in every
// layout: outside a cluster launch ptxas forms it from blockIdx.x and a driver constant
// (I2FP, FMUL by c[0x0][0x150], F2I), and that constant's 64-byte line was one more of the
// prologue's serialized constant-cache misses (benchmarks/NOTES.md, v30). %ctaid.x is read by
// a volatile move at each use: read as blockIdx.x it was kept live, and the 4-vector kernels
// under their 64-register cap spilled 8-16 bytes (ptxas, bf16).
template <Layout L>
__device__ __forceinline__ unsigned row_group_index() {
  unsigned r;
#if FP8NORM_SM90
  if constexpr (L == Layout::kClusterSlices) {
    asm("mov.u32 %0, %%clusterid.x;" : "=r"(r));
    return r;
  }
#endif
  asm volatile("mov.u32 %0, %%ctaid.x;" : "=r"(r));  // no clusters below sm_90
  return r;
}

// Asks the L2 to fetch `bytes` (a multiple of 16) from p (16-byte aligned) ahead of its use;
// no register and no wait: the copy engine does it (cp.async.bulk.prefetch, sm_90+).
__device__ __forceinline__ void prefetch_to_l2(const void* p, uint32_t bytes) {
#if FP8NORM_SM90
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
#endif
}

// Block-scale lines in L2 (benchmarks/NOTES.md, v26). With column-major block scales, one
// 128-byte line of a scale column holds 32 rows' scales, written 4 bytes at a time by up to 32
// CTAs over the grid's run. Kept in L2 until full (an evict_last policy on the scale stores)
// the op is 1-3% faster at large M (v7), but lines left evict_last after the op slowed the
// kernels after it by 5-9% (v7, v24). So the launcher (TileShape::scale_keep_rows,
// scale_demote_rows) has the rows of all but the last two waves store their scales with
// evict_last, and the row two waves further on (the line's rows long done) demotes each full
// line to evict_normal: no line stays evict_last after the op. In the hinted 4-vector kernels
// of one-CTA rows and the hinted lean one-row kernel (the deep grids'; in lean rows 1.5-1.7% at
// 16384 / 32768 x 2048 and 32768 x 1152, v33); elsewhere plain stores.
template <int VPT, Layout L, bool HINTED>
constexpr bool scale_line_policy() {
  return (VPT == 4 || L == Layout::kRowVec1) && HINTED && L != Layout::kClusterSlices;
}

// The L2 policy of a CTA's block-scale stores: evict_last (keep) or evict_normal (a plain
// store's); uniform per CTA, so that every CTA runs one store form.
__device__ __forceinline__ uint64_t scale_store_policy(bool keep) {
  uint64_t last = 0, normal = 0;
#if FP8NORM_SM90
  asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(last));
  asm("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;" : "=l"(normal));
#endif
  return keep ? last : normal;
}

__device__ __forceinline__ void store_scale(float* p, float value, uint64_t policy) {
#if FP8NORM_SM90
  asm volatile(
      "{\n .reg .b64 ga;\n cvta.to.global.u64 ga, %0;\n"
      " st.global.L2::cache_hint.f32 [ga], %1, %2;\n}" ::"l"(p), "f"(value), "l"(policy) : "memory");
#else
  *p = value;
#endif
}

// If `demote`, the 128-byte line at `line` (a global address, 128-byte aligned) goes back to
// evict_normal in L2 (no-op if absent); predicated, not branched.
__device__ __forceinline__ void demote_line_if(bool demote, uintptr_t line) {
#if FP8NORM_SM90
  asm volatile(
      "{\n .reg .pred q;\n .reg .b64 ga;\n setp.ne.b32 q, %1, 0;\n cvta.to.global.u64 ga, %0;\n"
      " @q applypriority.global.L2::evict_normal [ga], 128;\n}" ::"l"(line), "r"(static_cast<int>(demote)) : "memory");
#endif
}

// Whether `row` demotes a block-scale line (scale_line_policy): the last row of a group of 32
// whose line (rows row - scale_demote_rows - 31 .. row - scale_demote_rows, one line per
// column) was stored with evict_last (the launcher sets scale_keep_rows only where a line is
// rows 32k .. 32k + 31 of one column, and keeps both counts multiples of 32).
__device__ __forceinline__ bool scale_line_demoter(int64_t row, int64_t scale_demote_rows, int64_t scale_keep_rows) {
  return (row & 31) == 31 && row >= scale_demote_rows && row - scale_demote_rows < scale_keep_rows;
}

// If `demoter`, the line of the scales scale_demote_rows + 31 .. scale_demote_rows rows above
// `p` (this row's scale store, column-major) goes back to evict_normal.
__device__ __forceinline__ void demote_scale_line_if(bool demoter, const float* p, int64_t scale_demote_rows) {
  demote_line_if(demoter, reinterpret_cast<uintptr_t>(p) - (scale_demote_rows + 31) * sizeof(float));
}

__device__ __forceinline__ unsigned cluster_rank() {
  unsigned r = 0;
#if FP8NORM_SM90
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
#endif
  return r;
}

// Cluster barrier, split: every thread arrives (relaxed) at kernel start, and waits before its
// CTA's first distributed shared memory access: every CTA of the cluster is then running, with
// its mbarrier initialized.
__device__ __forceinline__ void cluster_arrive_relaxed() {
#if FP8NORM_SM90
  asm volatile("barrier.cluster.arrive.relaxed;" ::: "memory");
#endif
}
__device__ __forceinline__ void cluster_wait() {
#if FP8NORM_SM90
  asm volatile("barrier.cluster.wait.acquire;" ::: "memory");
#endif
}

// The slices' sums of squares are exchanged by st.async: each store completes its bytes on the
// receiving CTA's mbarrier, which that CTA waits on. No cluster-wide release: a release arrive
// on the cluster barrier (v11's exchange) compiles to MEMBAR.ALL.GPU, which waits for this
// thread's outstanding global stores (the new residual): 0.5 µs of a 2.05 µs M = 1, H = 8192
// call (benchmarks/NOTES.md, v12).
__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// One thread: an mbarrier of one arrival, expecting `bytes` (its own arrival comes with it).
// The fence makes the initialization visible to the cluster's async stores (ordered by the
// cluster barrier's arrive / wait).
__device__ __forceinline__ void mbarrier_init_expect(uint64_t* bar, uint32_t bytes) {
#if FP8NORM_SM90
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(shared_address(bar)) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  asm volatile("{ .reg .b64 st; mbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1; }" ::"r"(
                   shared_address(bar)),
               "r"(bytes) : "memory");
#endif
}

// Waits until the mbarrier's first phase has completed (all expected bytes arrived).
__device__ __forceinline__ void mbarrier_wait_first_phase(uint64_t* bar) {
#if FP8NORM_SM90
  uint32_t done = 0;
  while (!done) {
    asm volatile(
        "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0; selp.u32 %0, 1, 0, p; }"
        : "=r"(done)
        : "r"(shared_address(bar))
        : "memory");
  }
#endif
}

// Stores v at `local` (a shared-memory address of this CTA) in the shared memory of the CTA of
// cluster rank `rank`, completing 8 bytes on that CTA's copy of the mbarrier `bar`.
__device__ __forceinline__ void store_to_cluster_rank(double* local, uint64_t* bar, unsigned rank, double v) {
#if FP8NORM_SM90
  uint32_t remote = 0, remote_bar = 0;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(shared_address(local)), "r"(rank));
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote_bar) : "r"(shared_address(bar)), "r"(rank));
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b64 [%0], %1, [%2];" ::"r"(remote),
               "l"(__double_as_longlong(v)), "r"(remote_bar)
               : "memory");
#else
  __trap();
#endif
}

// One 16-byte vector's steps, shared by both kernels (inlined: the same code in each).
// The squares of x's elements (float32 products), added pairwise in double: log2(VEC) dependent
// adds, not VEC.
template <typename T, int VEC>
__device__ __forceinline__ double sum_of_squares(const Pack<T, VEC>& x) {
  double sq[VEC];
#pragma unroll
  for (int e = 0; e < VEC; e += 2) {
    float f[2];
    Cvt<T>::to_float2(&x.v[e], f[0], f[1]);
#pragma unroll
    for (int i = 0; i < 2; ++i) sq[e + i] = static_cast<double>(__fmul_rn(f[i], f[i]));
  }
#pragma unroll
  for (int n = VEC / 2; n > 0; n /= 2) {
#pragma unroll
    for (int e = 0; e < n; ++e) sq[e] += sq[e + n];
  }
  return sq[0];
}

// max(|g|, m) for m >= 0 (a running amax), NaN if either is NaN: on sm_80+ one FMNMX.NAN
// (max.NaN.f32, with |g| as an operand modifier); below, the unsigned max of the bits.
__device__ __forceinline__ float amax_step(float m, float g) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  float d;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(d) : "f"(fabsf(g)), "f"(m));
  return d;
#else
  return bits_float(max(abs_bits(g), float_bits(m)));
#endif
}

// The normed values of x (x * rstd * weight, rounded to T) into nv, and as floats into g;
// returns their largest |value| as bits (abs_bits' order: NaN above +inf). The amax as a float
// max that propagates NaN: one instruction per element (an abs_bits mask and an unsigned max
// before, one and a half). With a NaN, its bits are the canonical NaN's, not the element's
// payload; the block scale computed from them is the canonical NaN either way (the division by
// 448 makes it so).
template <typename T, typename W, int VEC>
__device__ __forceinline__ uint32_t normalize_vec(const Pack<T, VEC>& x, const Pack<W, VEC>& w, float rstd,
                                                  Pack<T, VEC>& nv, float (&g)[VEC]) {
#pragma unroll
  for (int e = 0; e < VEC; e += 2) {
    float xf[2], wf[2], n[2];
    Cvt<T>::to_float2(&x.v[e], xf[0], xf[1]);
    Cvt<W>::to_float2(&w.v[e], wf[0], wf[1]);
#pragma unroll
    for (int i = 0; i < 2; ++i) n[i] = normalize(xf[i], rstd, wf[i]);
    Cvt<T>::from_float2(n[0], n[1], &nv.v[e]);
  }
#pragma unroll
  for (int e = 0; e < VEC; e += 2) Cvt<T>::to_float2(&nv.v[e], g[e], g[e + 1]);
  float m = 0.0f;
#pragma unroll
  for (int e = 0; e < VEC; ++e) m = amax_step(m, g[e]);
  return float_bits(m);
}

// The largest of v over each aligned group of LPB lanes of the warp (a 1x128 block's lanes), in
// every lane; all 32 lanes take part. v is amax bits (abs_bits): their unsigned max is the
// NaN-propagating amax. REDUX (sm_80+): one warp-wide max per group (redux.sync; a 16-lane group
// takes the max of its own lanes' values with zeros in the other half's), instead of log2(LPB)
// dependent shuffle-and-max steps: the same value. Taken in the heavy 1-vector kernels (decode
// rows of few warps per SM); the lean kernel (M = 128: 1024-thread CTAs) and the 4-vector
// kernels (16384 x 8192 +0.3-0.7%, one pass) keep the shuffles, where REDUX measured level or
// slower. With the lean kernel's scale store below, against the kernels before, same run, five
// passes (medians): decode 0.4-1% faster (1 x 2048 2.076 -> 2.056 µs without PDL, 128 x 2048
// 1.912 -> 1.900 with PDL), 128 x 8192 level (benchmarks/NOTES.md, v34).
template <int LPB>
__device__ __forceinline__ uint32_t block_amax_shuffle(uint32_t v) {
#pragma unroll
  for (int off = LPB / 2; off > 0; off /= 2) v = max(v, __shfl_xor_sync(0xFFFFFFFFu, v, off));
  return v;
}

template <int LPB, bool REDUX>
__device__ __forceinline__ uint32_t block_amax(uint32_t v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (REDUX && LPB == 32) {
    return __reduce_max_sync(0xFFFFFFFFu, v);
  } else if constexpr (REDUX && LPB == 16) {
    unsigned lane;
    asm("mov.u32 %0, %%laneid;" : "=r"(lane));
    const bool upper = (lane & 16u) != 0;
    const uint32_t lower_max = __reduce_max_sync(0xFFFFFFFFu, upper ? 0u : v);
    const uint32_t upper_max = __reduce_max_sync(0xFFFFFFFFu, upper ? v : 0u);
    return upper ? upper_max : lower_max;
  } else {
    return block_amax_shuffle<LPB>(v);
  }
#else
  return block_amax_shuffle<LPB>(v);
#endif
}

// The block amax of N vectors per lane at once (N a power of two, at most LPB): v[j] is this
// lane's amax bits of its vector j, one 1x128 block per j over each aligned group of LPB lanes.
// Reduced transposed: at each of the first log2(N) steps the lanes exchange half their values
// with the lane `off` apart and keep the max of the other half (the lane with bit `off` set
// keeps the upper half), then block_amax's plain steps over the remaining LPB / N lanes; so the
// lanes (lane % LPB) / (LPB / N) == j end with vector j's block amax. Shuffles: N - 1 +
// log2(LPB / N) instead of N * log2(LPB) (N = 4, LPB = 16: 5 instead of 16). The same value
// (the unsigned max of the same bits). All 32 lanes take part.
template <int LPB, int N>
__device__ __forceinline__ uint32_t block_amax_transposed(const uint32_t (&v)[N], int tx) {
  static_assert(N >= 1 && N <= LPB && (N & (N - 1)) == 0, "N a power of two, at most LPB");
  uint32_t cur[N];
#pragma unroll
  for (int j = 0; j < N; ++j) cur[j] = v[j];
  int off = LPB / 2;
#pragma unroll
  for (int n = N; n > 1; n /= 2, off /= 2) {
    const bool upper = (tx & off) != 0;
#pragma unroll
    for (int i = 0; i < n / 2; ++i) {
      const uint32_t send = upper ? cur[i] : cur[i + n / 2];
      const uint32_t keep = upper ? cur[i + n / 2] : cur[i];
      cur[i] = max(keep, __shfl_xor_sync(0xFFFFFFFFu, send, off));
    }
  }
  return block_amax<LPB / N, false>(cur[0]);
}

// g quantized to fp8 bytes, four per word, given its block's scale as scaled_by_reciprocal takes
// it (finite_scale_or_zero) and the scale's reciprocal.
template <int VEC>
__device__ __forceinline__ void quantize_by(const float (&g)[VEC], float scale_or_zero, float rcp,
                                            uint32_t (&words)[VEC / 4]) {
  float q[VEC];
#pragma unroll
  for (int e = 0; e < VEC; ++e) q[e] = scaled_by_reciprocal(g[e], scale_or_zero, rcp);
#pragma unroll
  for (int e = 0; e < VEC; e += 4) words[e / 4] = to_fp8x2(q[e], q[e + 1]) | (to_fp8x2(q[e + 2], q[e + 3]) << 16);
}

// The 1x128 block's scale (amax reduced over the block's LPB lanes of this warp: block_amax)
// and g quantized by it to fp8 bytes, four per word.
template <int VEC, int LPB, bool REDUX>
__device__ __forceinline__ float quantize_vec(const float (&g)[VEC], uint32_t amax, bool ue8m0,
                                              uint32_t (&words)[VEC / 4]) {
  amax = block_amax<LPB, REDUX>(amax);
  const float scale = block_scale_from_amax_bits(amax, ue8m0);
  quantize_by(g, finite_scale_or_zero(scale), __frcp_rn(scale), words);
  return scale;
}

// Load the weight of a slice's last tile in pass 1, with the row, so that its latency overlaps
// the reduction (a decode-size call is one chain of latencies). With 1 vector per thread only by
// default: with 4 it costs 16-32 registers (64 -> 84 for bf16, 3 CTAs of 256 threads per SM
// instead of 4) where many rows in flight already hide the weight's latency. Build with
// -DFP8NORM_PREFETCH_WEIGHT=0 / =2 for none / all (benchmarks/NOTES.md). Where it is compiled
// in, the launch table still decides per launch (TileShape::weight_in_pass1).
#ifndef FP8NORM_PREFETCH_WEIGHT
#define FP8NORM_PREFETCH_WEIGHT 1
#endif
template <int VPT>
constexpr bool prefetch_weight() {
  return FP8NORM_PREFETCH_WEIGHT == 2 || (FP8NORM_PREFETCH_WEIGHT == 1 && VPT == 1);
}

#ifndef FP8NORM_VPT4_MIN_CTAS
#define FP8NORM_VPT4_MIN_CTAS 2
#endif
// Registers: with 4 vectors per thread the aligned kernels are held to 64 registers, so that
// two CTAs of 512 threads fit on an SM (at 75 registers only one did: H = 16384 at large M fell
// from 89% to 75% of copy, benchmarks/NOTES.md v3; -DFP8NORM_VPT4_MIN_CTAS=1 lifts the cap).
// bf16 / fp32 do not spill, fp16 without a residual 4 bytes, a float32 weight 20-68 bytes
// (ptxas, v31).
// Unaligned rows keep every register.
// HINTED: the streaming and read-only cache hints on the 16-byte accesses (false: plain
// accesses, for calls whose bytes stay in L2; LaunchConfig::hinted).
template <typename T, typename W, bool HAS_RES, bool ALIGNED, int VPT, Layout L, bool HINTED>
__global__ void __launch_bounds__(max_threads_per_cta(VPT), VPT == 4 && ALIGNED ? FP8NORM_VPT4_MIN_CTAS : 1)
    fused_add_rmsnorm_fp8_block_quant_kernel(const RowArgs a, const TileShape s) {
  constexpr Hint kOnce = HINTED ? Hint::kStream : Hint::kPlain;  // input, residual, outputs
  constexpr Hint kReuse = HINTED ? Hint::kKeep : Hint::kPlain;   // the weight
  constexpr bool HALF = L == Layout::kHalfWarpRows;
  constexpr bool CLUSTER = L == Layout::kClusterSlices;  // then s.cluster > 1, blockDim.y == 1
  constexpr int VEC = 16 / sizeof(T);
  constexpr int LPB = kBlock / VEC;  // lanes per quantization block
  static_assert(LPB <= 32 && 32 % LPB == 0, "a 1x128 block must sit inside one warp");
  static_assert(!HALF || LPB <= 16, "half-warp rows need 1x128 blocks of at most 16 lanes");
  using C = Cvt<T>;
  // The residual add as one paired add (Cvt::add2; same values) in every kernel but the
  // plain-access 4-vector kWarpRows one: there, in the L2 window's one-wave grids of several
  // rows per CTA, it measured 0.6-3.9% slower (2048 x 2048 8.03 -> 8.34 µs), where elsewhere
  // it is 1-3.6% faster (128 x 8192 3.77 -> 3.67, 1 x 16384 1.99 -> 1.95; benchmarks/NOTES.md,
  // v21). One-row CTAs of those rows take Layout::kWarpRowsCta, with the paired add, in grids of
  // at most 3 rows per SM (128 x 16384 5.60 -> 5.36 µs), and this kernel above (512 x 5120:
  // 6.36 µs with the paired add, 6.00 without; launch_config, v22; kWarpRowsCta was kWarpRow1).
  constexpr bool kPairedAdd = HINTED || L != Layout::kWarpRows || VPT != 4;
  constexpr bool kScaleLines = FP8NORM_SM90 && scale_line_policy<VPT, L, HINTED>();

  // Shared memory: red[rows_per_cta][kMaxWarpsPerRow], cluster_red[kMaxCluster], the mbarrier,
  // the stash (reduction_smem_bytes).
  extern __shared__ __align__(16) unsigned char smem[];
  double* red = reinterpret_cast<double*>(smem);
  double* cluster_red = red + kMaxWarpsPerRow * blockDim.y;
  uint64_t* bar = reinterpret_cast<uint64_t*>(cluster_red + kMaxCluster);
  T* stash = reinterpret_cast<T*>(smem + reduction_smem_bytes(static_cast<int>(blockDim.y)));

  // Split rows: the exchange's mbarrier and the cluster arrive at entry, not after the wait
  // (there, split decode rows lost 3.5-7%; benchmarks/NOTES.md, v12, item 6). The other layouts
  // are kernels without this code (in v12 unsplit rows of 160 threads, M = 1 / 16, H = 1152,
  // paid 0.05-0.10 µs for the untaken branch and its setup; v13).
  if constexpr (CLUSTER) {
    if (threadIdx.x == 0) mbarrier_init_expect(bar, static_cast<uint32_t>(sizeof(double) * s.cluster));
    cluster_arrive_relaxed();
  }
  const unsigned rank = CLUSTER ? cluster_rank() : 0;
  const int tx = threadIdx.x;
  // A row's threads are whole warps (blockDim.x a multiple of 32), or, HALF, whole half-warps
  // (blockDim.x an odd multiple of 16: the launcher gives a CTA an even number of rows, so that
  // warps are full, a warp may hold the end of one row and the start of the next; only where a
  // 1x128 block is at most 16 lanes and a row at most 16 half-warps).
  constexpr int seg_shift = HALF ? 4 : 5;
  constexpr int seg = 1 << seg_shift;  // lanes of a row's warp or half-warp
  const int lane = HALF ? static_cast<int>((threadIdx.y * blockDim.x + tx) & 31) : tx & 31;
  const int64_t row = static_cast<int64_t>(row_group_index<L>()) * blockDim.y + threadIdx.y;
  const bool active = row < a.rows;
  // This CTA's slice of the row: vectors [v_begin, v_end). The launcher checks H < 2^31.
  const int nvec = static_cast<int>(a.hidden / VEC);
  const int v_begin = static_cast<int>(rank) * s.slice_vecs;
  const int v_end = min(nvec, v_begin + s.slice_vecs);
  const int tile_vecs = blockDim.x * VPT;
  const bool weight_early = prefetch_weight<VPT>() && s.weight_in_pass1;
  const int64_t safe_row = active ? row : 0;  // pointers are formed, never dereferenced, if inactive

  const T* in = row_start<ALIGNED>(static_cast<const T*>(a.input) + safe_row * a.input_stride);
  T* res = HAS_RES ? row_start<ALIGNED>(static_cast<T*>(a.residual) + safe_row * a.residual_stride) : nullptr;
  const W* w = static_cast<const W*>(a.weight);
  T* normed = a.normed ? row_start<ALIGNED>(static_cast<T*>(a.normed) + safe_row * a.normed_stride) : nullptr;
  uint8_t* out = row_start<ALIGNED>(static_cast<uint8_t*>(a.out) + safe_row * a.out_stride);
  float* scale_row = a.block_scale + safe_row * a.scale_stride_row;

  // Vectors past the slice's end (or of a row past M) are not loaded, and their results are
  // never stored: pass 2 computes on whatever their registers hold (opaque_fill), instead of
  // selecting zeros element by element (v4: two selects per element). Their amax stays in their
  // own 1x128 blocks (slices hold whole blocks, and a block's lanes are one warp's).
  Pack<T, VEC> sv[VPT];  // the rounded sums s of the current tile (exact in T)
  Pack<W, VEC> wv[VPT];  // the weights of the current tile (the last tile's may come from pass 1)
  double acc = 0.0;

  // Rows further on (a later CTA's, `s.prefetch_ctas` CTAs ahead: the CTA that will run on an SM
  // when this one is done) are asked into L2 now, so that DRAM keeps streaming while the rows
  // in flight are reduced and written (one thread per row; 0: off; one CTA per row group only).
  // Both prefetches behind one branch, the second as the first's else: written as two tests,
  // ptxas predicated the tile prefetch's body (and the loops that move each address into a
  // uniform register) in every warp, ~35 instructions before the first load of every aligned
  // kernel (M = 1 4-10% slower; v17). Check the SASS from the PDL wait to the first load.
  // The prefetch comes before the PDL wait: it is a hint that returns no data, and the loads
  // after the wait still see every write of the previous grid (the L2 is the point of
  // coherence). After the wait, the branch over its block and its setup were on every decode
  // kernel's path to the first load (with PDL 1 x 2048 1.505 -> 1.435 µs, 128 x 8192 3.69 ->
  // 3.605; large M level; benchmarks/NOTES.md, v31).
  if constexpr (ALIGNED) {
    if (tx == 0 && (s.prefetch_ctas > 0 || s.prefetch_tiles)) {
      if (s.prefetch_ctas > 0) {
        const int64_t ahead = row + static_cast<int64_t>(s.prefetch_ctas) * blockDim.y;
        if (ahead < a.rows) {
          const uint32_t bytes = static_cast<uint32_t>(a.hidden * sizeof(T));
          prefetch_to_l2(static_cast<const T*>(a.input) + ahead * a.input_stride, bytes);
          if constexpr (HAS_RES) prefetch_to_l2(static_cast<const T*>(a.residual) + ahead * a.residual_stride, bytes);
        }
      } else if (active && v_begin + tile_vecs < v_end) {
        // The slice's later tiles, asked into L2 now (the launch table's choice; not with the
        // row prefetch, which has asked for them a row earlier): their loads then wait for L2,
        // not DRAM, after the first tile has been added and stored.
        const uint32_t bytes = static_cast<uint32_t>(v_end - v_begin - tile_vecs) * 16u;
        prefetch_to_l2(vec_at<VEC>(in, v_begin + tile_vecs), bytes);
        if constexpr (HAS_RES) prefetch_to_l2(vec_at<VEC>(res, v_begin + tile_vecs), bytes);
      }
    }
  }

  wait_previous_grid(s.release_early);

  // Pass 1.
  for (int t = 0; t < s.ntiles; ++t) {
    const int v0 = v_begin + t * tile_vecs + tx;  // this thread's vector k is v0 + k * blockDim.x
    [[maybe_unused]] Pack<T, VEC> vres[VPT];  // the residual (HAS_RES)
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      const int v = v0 + k * blockDim.x;
      if (active && v < v_end) {
        load<ALIGNED, kOnce>(sv[k], vec_at<VEC>(in, v));
        if constexpr (HAS_RES) load<ALIGNED, kOnce>(vres[k], vec_at<VEC>(res, v));
        if (weight_early && t == s.ntiles - 1) load<ALIGNED, kReuse>(wv[k], vec_at<VEC>(w, v));
      } else {
        opaque_fill(sv[k]);
        opaque_fill(wv[k]);
      }
    }
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      const int v = v0 + k * blockDim.x;
      if (!(active && v < v_end)) continue;
      if constexpr (HAS_RES && kPairedAdd) {
#pragma unroll
        for (int e = 0; e < VEC; e += 2) C::add2(&sv[k].v[e], &vres[k].v[e]);
      } else if constexpr (HAS_RES) {
#pragma unroll
        for (int e = 0; e < VEC; e += 2) {
          float a[2], b[2];
          C::to_float2(&sv[k].v[e], a[0], a[1]);
          C::to_float2(&vres[k].v[e], b[0], b[1]);
          C::from_float2(__fadd_rn(a[0], b[0]), __fadd_rn(a[1], b[1]), &sv[k].v[e]);
        }
      }
      acc += sum_of_squares(sv[k]);
      if constexpr (HAS_RES) store<ALIGNED, kOnce>(vec_at<VEC>(res, v), sv[k]);
      if (s.smem_stash && s.ntiles > 1) store<true>(vec_at<VEC>(stash, v - v_begin), sv[k]);
    }
  }

  // Row sum of squares: warp shuffles, then one exchange through shared memory, then (with a
  // cluster) one exchange of the slices' sums through distributed shared memory.
  if constexpr (!HALF) acc += __shfl_xor_sync(0xFFFFFFFFu, acc, 16);
#pragma unroll
  for (int off = 8; off > 0; off /= 2) acc += __shfl_xor_sync(0xFFFFFFFFu, acc, off);
  if ((tx & (seg - 1)) == 0) red[threadIdx.y * kMaxWarpsPerRow + (tx >> seg_shift)] = acc;
  row_barrier<L, !HINTED>();  // per-row in the plain kernels only
  // Every warp adds the row's nw warp (or half-warp) sums by a butterfly over groups of
  // `group` = pow2 >= nw lanes (each group holds all nw sums of its row, zero-padded; a group
  // never straddles two rows: group <= seg): log2(group) dependent steps instead of nw
  // (one after another, v3: 0.28 µs slower with 32 warps, benchmarks/NOTES.md, v4). Each step
  // adds the same two values in both lanes of a pair (a + b == b + a bitwise), so every lane of
  // every warp ends with the same, deterministic sum.
  const int nw = static_cast<int>(blockDim.x) >> seg_shift;
  const int group = nw == 1 ? 1 : 1 << (32 - __clz(nw - 1));
  const int w_idx = lane & (group - 1);
  double sum_sq = w_idx < nw ? red[threadIdx.y * kMaxWarpsPerRow + w_idx] : 0.0;
#pragma unroll
  for (int off = kMaxWarpsPerRow / 2; off > 0; off /= 2) {
    if (off < group) sum_sq += __shfl_xor_sync(0xFFFFFFFFu, sum_sq, off);
  }
  if constexpr (CLUSTER) {
    cluster_wait();  // every CTA of the cluster is running, its mbarrier initialized
    if (tx < s.cluster) store_to_cluster_rank(cluster_red + rank, bar, static_cast<unsigned>(tx), sum_sq);
    mbarrier_wait_first_phase(bar);  // every slice's sum has arrived
    sum_sq = 0.0;
    for (int i = 0; i < s.cluster; ++i) sum_sq += cluster_red[i];
  }
  const float rstd = rstd_from_sum_of_squares_device(sum_sq, s.inv_hidden, a.eps);

  // Block-scale lines (scale_line_policy): this CTA's store policy, and whether this row
  // demotes a line.
  [[maybe_unused]] uint64_t scale_policy = 0;
  [[maybe_unused]] bool demoter = false;
  if constexpr (kScaleLines) {
    const int64_t cta_last_row = static_cast<int64_t>(row_group_index<L>()) * blockDim.y + blockDim.y - 1;
    scale_policy = scale_store_policy(cta_last_row < s.scale_keep_rows);
    demoter = scale_line_demoter(row, s.scale_demote_rows, s.scale_keep_rows);
  }

  // Pass 2: the last tile is still in registers; earlier tiles come back from the stash (or,
  // without one, from the residual / input just read: a same-thread read-after-write).
  for (int t = s.ntiles - 1; t >= 0; --t) {
    const int v0 = v_begin + t * tile_vecs + tx;
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      const int v = v0 + k * blockDim.x;
      if (!(active && v < v_end)) {
        opaque_fill(wv[k]);
        continue;
      }
      if (t != s.ntiles - 1) {
        if (s.smem_stash) {
          load<true>(sv[k], vec_at<VEC>(stash, v - v_begin));
        } else {
          load<ALIGNED, kOnce>(sv[k], vec_at<VEC>(HAS_RES ? res : in, v));  // last read
        }
      }
      if (!weight_early || t != s.ntiles - 1) load<ALIGNED, kReuse>(wv[k], vec_at<VEC>(w, v));
    }
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      const int v = v0 + k * blockDim.x;
      const bool valid = active && v < v_end;
      Pack<T, VEC> nv;
      float g[VEC];
      const uint32_t amax = normalize_vec(sv[k], wv[k], rstd, nv, g);
      if (valid && normed != nullptr) store<ALIGNED, kOnce>(vec_at<VEC>(normed, v), nv);
      uint32_t words[VEC / 4];
      const float scale = quantize_vec<VEC, LPB, VPT == 1>(g, amax, a.ue8m0, words);
      if (valid) {
        store_fp8<ALIGNED, VEC, kOnce>(vec_at<VEC>(out, v), words);
        if (tx % LPB == 0) {
          float* p = scale_row + (v / LPB) * a.scale_stride_col;
          if constexpr (kScaleLines) {
            store_scale(p, scale, scale_policy);
            demote_scale_line_if(demoter, p, s.scale_demote_rows);
          } else {
            *p = scale;
          }
        }
      }
    }
  }
}

// row_vec1_kernel's store of row `row`'s block scale `col` (one lane of the block's stores it).
template <bool HINTED>
__device__ __forceinline__ void store_lean_block_scale(const RowArgs& a, const TileShape& s, int64_t row, int col,
                                                       float scale) {
  float* p = a.block_scale + row * a.scale_stride_row + col * a.scale_stride_col;
  // The line policy only in grids where some rows keep their lines (scale_keep_rows > 0):
  // with none (decode grids, short grids) every store would be an evict_normal one, which a
  // plain store is, and the policy path costs each warp ~35 more instructions at the end of
  // its chain (same binary, a runtime switch, one pass: 128 x 8192 3.45 -> 3.39 µs with PDL,
  // 4.05 / 4.10 -> 3.99 without; against the build before, five passes: level with PDL, 0.4%
  // faster without; benchmarks/NOTES.md, v34).
  if constexpr (FP8NORM_SM90 && scale_line_policy<1, Layout::kRowVec1, HINTED>()) {
    if (s.scale_keep_rows > 0) {
      store_scale(p, scale, scale_store_policy(row < s.scale_keep_rows));
      demote_scale_line_if(scale_line_demoter(row, s.scale_demote_rows, s.scale_keep_rows), p, s.scale_demote_rows);
      return;
    }
  }
  *p = scale;
}

// Layout::kRowVec1: one row per CTA, one 16-byte vector per thread and stream, aligned rows (the
// decode rows of one CTA, such as M = 128 with H 2048..8192 in bf16, and the lean rows of grids
// of many rows, bf16 H 1024..4096; launch_config's rules say where it is taken). The same
// values as the kernel above for these launches (the same paired add, the same pairwise double
// sums in the same order: the warp sums' butterfly runs over all 32 lanes, and the lanes past
// the row's warps add exact zeros), in fewer instructions. A decode CTA of up to 1024
// threads is one SM's only CTA, and once its loads have landed every warp computes at once, so
// each instruction a thread runs costs the SM one issue slot per warp (32 warps over 4
// schedulers: 8 cycles per instruction of the thread's path). FlashInfer's structure, timed in
// the same run (benchmarks/fi_structure_probe.py), took 0.85-0.96x the time of the kernel above
// at M = 128 (benchmarks/NOTES.md, v32). So: no tile loop, no stash, no cluster or several-row code,
// the output rows' addresses formed after the reduction. In deep grids (hinted) the block scales
// take the line policy (scale_line_policy), only in the lanes that store one.
#ifndef FP8NORM_LEAN_MIN_CTAS
#define FP8NORM_LEAN_MIN_CTAS 2  // two CTAs of 1024 threads per SM: at most 32 registers
#endif
// FULL: every thread holds a vector of the row (H / VEC == blockDim.x, whole warps): no `valid`
// predicate, so no branch around the loads and the sums: up to 5% faster in decode grids (with
// PDL 128 x 4096 2.46 -> 2.33 µs, 256 x 2048 2.36 -> 2.24), 0.3-1.2% slower in lean grids of many
// rows, which keep the predicate (launch_config's rule; benchmarks/NOTES.md, v36). The launch
// bound of two CTAs per SM (<= 32 registers) was level or up to 1% faster than one (v36).
// PAIR: two rows per CTA, blockDim (H / VEC, 2), for the lean rows of grids of many rows whose
// vectors are an odd number of half-warps (2-byte types, an odd number of 1x128 blocks: H =
// 1152 is 144 vectors, 4.5 warps): one row alone takes 160 threads with 16 idle lanes, two take
// 288 threads, 9 whole warps, and the warp between them holds the end of the first row (lower
// half) and the start of the second (upper half). In the L2-resident band a lean row's time
// follows its warps more than its bytes (2048 x 1152 took as long as 2048 x 1280, five warps
// each; benchmarks/NOTES.md, v39). The first row's sums are the one-row kernel's, in the same
// order (there the row's last warp added exact zeros from its idle upper half); the second row's
// partial sums are grouped by the hardware warps, so its double sum may associate differently
// (the numerical contract allows that: rstd within its rounding).
// VPT (1, kLeanVpt = 3, kLeanVptEven = 2 or kLeanVptFour = 4): vectors per thread, strided by
// blockDim.x (a multiple of a block's lanes, the row exactly VPT * blockDim.x vectors), for lean
// rows where launch_config's rules take them: 3 for an odd number of 1x128 blocks (bf16 H = 1152
// in 48-thread rows, two per CTA), 2 for 2-byte rows of whole warps without normed_out (bf16 H =
// 2048 in 128), 4 for rows of two warps or more of the op without a residual (bf16 H = 4096 in
// 128, up to H = 16384 in 512: kLeanVptFourMaxThreads; FP8NORM_TUNE=leanvpt=4: rows of one warp
// too). Each thread's sum of squares adds its vectors' sums in order.
// VB (16 or kNarrowVecBytes = 8): the bytes of a thread's vector of the row. 8 for the one-row
// CTAs of 2-byte rows of an odd number of half-warps (bf16 H = 1152: 144 16-byte vectors, 160
// threads with 16 idle lanes, or 288 threads of 8-byte vectors, 9 whole warps; FULL, one vector
// per thread; launch_config's rule): 4 elements per thread, a 1x128 block one warp, the same
// arithmetic per thread as float32's 16-byte vectors.
// ONE_STRIDE: input, residual, normed_out and out have the same row stride in elements
// (LaunchConfig::one_stride: contiguous calls, or rows padded alike, writing normed_out), so one
// row offset serves all four: one 64-bit product (row x stride) instead of four, 7 fewer
// instructions in the bf16 kernel with a residual (one-vector one-row CTAs of 16-byte vectors
// only; 1-3% faster at decode with normed_out, benchmarks/NOTES.md v59).
template <typename T, typename W, bool HAS_RES, bool HINTED, bool FULL, bool PAIR = false, int VPT = 1, int VB = 16,
          bool ONE_STRIDE = false>
__global__ void __launch_bounds__(VPT > 1 ? lean_vpt_max_threads(VPT) : max_threads_per_cta(1),
                                  VPT > 1 ? lean_vpt_min_ctas(VPT) : FP8NORM_LEAN_MIN_CTAS)
    row_vec1_kernel(const RowArgs a, const TileShape s) {
  static_assert(!(PAIR && FULL), "two rows per CTA keep the row predicate (the grid's last row may be past M)");
  static_assert(!ONE_STRIDE || (VPT == 1 && !PAIR && VB == 16), "one row stride: one-vector one-row CTAs");
  static_assert(VPT == 1 || !FULL, "several vectors per thread: lean rows of grids of many rows (not FULL)");
  static_assert(VB == 16 || (VB == kNarrowVecBytes && sizeof(T) == 2 && FULL && VPT == 1),
                "narrow vectors: one-row CTAs of 2-byte rows of whole warps");
  constexpr Hint kOnce = HINTED ? Hint::kStream : Hint::kPlain;
  constexpr Hint kReuse = HINTED ? Hint::kKeep : Hint::kPlain;
  constexpr int VEC = VB / sizeof(T);
  constexpr int LPB = kBlock / VEC;
  constexpr int kRows = PAIR ? 2 : 1;  // rows per CTA
  static_assert(LPB <= 32 && 32 % LPB == 0, "a 1x128 block must sit inside one warp");
  using C = Cvt<T>;
  extern __shared__ __align__(16) unsigned char smem[];
  double* red = reinterpret_cast<double*>(smem);  // the warp sums (reduction_smem_bytes(kRows))

  const int tx = threadIdx.x;
  // VPT > 1: the thread's vectors tx, tx + blockDim.x, ...: the launcher makes blockDim.x a
  // multiple of LPB and the row exactly VPT * blockDim.x vectors, so vector j of each lane
  // group of LPB lanes is one 1x128 block, and every thread holds VPT vectors of its row.
  [[maybe_unused]] const int stride = VPT > 1 ? static_cast<int>(blockDim.x) : 0;
  // grid: one CTA per row (PAIR: per two rows, threadIdx.y the row of the pair)
  const int64_t row = PAIR ? 2 * static_cast<int64_t>(row_group_index<Layout::kWarpRows>()) + threadIdx.y
                           : static_cast<int64_t>(row_group_index<Layout::kWarpRows>());
  const bool valid = FULL || (PAIR ? row < a.rows : static_cast<unsigned>(tx) < static_cast<unsigned>(a.hidden) / (VEC * VPT));  // H < 2^31
  // A row stream's offset to this row, in elements, from its row stride (ONE_STRIDE: the input's).
  const int64_t in_off = row * a.input_stride;
  const auto row_off = [&](int64_t stride) { return ONE_STRIDE ? in_off : row * stride; };
  const T* in = row_start<true>(static_cast<const T*>(a.input) + in_off);
  T* res = HAS_RES ? row_start<true>(static_cast<T*>(a.residual) + row_off(a.residual_stride)) : nullptr;
  // The L2 prefetch of the rows further on (see the kernel above; one-tile rows: no tile
  // prefetch). Its addresses from this row's pointers, so that ptxas forms those before the PDL
  // wait, as in the kernel above (formed after the wait in the first build: decode times level
  // with these; benchmarks/NOTES.md, v32).
  // The distance scaled inside the test (kRows rows per CTA): computed before it, the distance
  // changed every lean kernel's code (benchmarks/NOTES.md, v39).
  if (tx == 0 && s.prefetch_ctas > 0 && row + s.prefetch_ctas * kRows < a.rows) {
    const uint32_t bytes = static_cast<uint32_t>(a.hidden * sizeof(T));
    prefetch_to_l2(in + s.prefetch_ctas * kRows * a.input_stride, bytes);
    if constexpr (HAS_RES) prefetch_to_l2(res + s.prefetch_ctas * kRows * a.residual_stride, bytes);
  }

  wait_previous_grid(s.release_early);

  Pack<T, VEC> sv[VPT];
  [[maybe_unused]] Pack<T, VEC> vres[VPT];
  Pack<W, VEC> wv[VPT];
  if (valid) {
#pragma unroll
    for (int j = 0; j < VPT; ++j) {
      load<true, kOnce>(sv[j], vec_at<VEC>(in, tx + j * stride));
      if constexpr (HAS_RES) load<true, kOnce>(vres[j], vec_at<VEC>(res, tx + j * stride));
    }
    if (s.weight_in_pass1) {
#pragma unroll
      for (int j = 0; j < VPT; ++j) load<true, kReuse>(wv[j], vec_at<VEC>(static_cast<const W*>(a.weight), tx + j * stride));
    }
  } else {
#pragma unroll
    for (int j = 0; j < VPT; ++j) {
      opaque_fill(sv[j]);
      opaque_fill(wv[j]);
    }
  }
  double acc = 0.0;
  if (valid) {
#pragma unroll
    for (int j = 0; j < VPT; ++j) {
      if constexpr (HAS_RES) {
#pragma unroll
        for (int e = 0; e < VEC; e += 2) C::add2(&sv[j].v[e], &vres[j].v[e]);
        store<true, kOnce>(vec_at<VEC>(res, tx + j * stride), sv[j]);
      }
    }
    acc = sum_of_squares(sv[0]);
#pragma unroll
    for (int j = 1; j < VPT; ++j) acc += sum_of_squares(sv[j]);
  }
  double sum_sq;
  if constexpr (PAIR) {
    // Warps 0 .. sw - 1 hold the first row, warp sw its last half-warp and the second row's
    // first, warps sw + 1 .. 2 sw the rest of the second: each row has sw + 1 partial sums (at
    // most 16 for the half-warp butterfly below: blockDim.x <= 496; launch_config takes PAIR up
    // to 256), red[0 ..] the first row's, red[32 ..] the second's. The shared warp skips the
    // butterfly's step across its halves.
    const int lin = threadIdx.y * blockDim.x + tx;
    const int warp = lin >> 5, sw = blockDim.x >> 5;
#pragma unroll
    for (int off = 16; off > 0; off /= 2) {
      const double other = __shfl_xor_sync(0xFFFFFFFFu, acc, off);
      if (off != 16 || warp != sw) acc += other;
    }
    if ((lin & 31) == 0 || (warp == sw && (lin & 31) == 16)) red[threadIdx.y * 32 + warp - threadIdx.y * sw] = acc;
    __syncthreads();
    sum_sq = (lin & 15) <= sw ? red[threadIdx.y * 32 + (lin & 15)] : 0.0;
#pragma unroll
    for (int off = 8; off > 0; off /= 2) sum_sq += __shfl_xor_sync(0xFFFFFFFFu, sum_sq, off);
  } else {
#pragma unroll
    for (int off = 16; off > 0; off /= 2) acc += __shfl_xor_sync(0xFFFFFFFFu, acc, off);
    if ((tx & 31) == 0) red[tx >> 5] = acc;
    __syncthreads();
    sum_sq = (tx & 31) < static_cast<int>(blockDim.x >> 5) ? red[tx & 31] : 0.0;
#pragma unroll
    for (int off = 16; off > 0; off /= 2) sum_sq += __shfl_xor_sync(0xFFFFFFFFu, sum_sq, off);
  }
  const float rstd = rstd_from_sum_of_squares_device(sum_sq, s.inv_hidden, a.eps);

  if (!s.weight_in_pass1 && valid) {
#pragma unroll
    for (int j = 0; j < VPT; ++j) load<true, kReuse>(wv[j], vec_at<VEC>(static_cast<const W*>(a.weight), tx + j * stride));
  }
  if constexpr (VPT == 1) {
    Pack<T, VEC> nv;
    float g[VEC];
    const uint32_t amax = normalize_vec(sv[0], wv[0], rstd, nv, g);
    if (valid && a.normed != nullptr) {
      store<true, kOnce>(vec_at<VEC>(row_start<true>(static_cast<T*>(a.normed) + row_off(a.normed_stride)), tx), nv);
    }
    uint32_t words[VEC / 4];
    const float scale = quantize_vec<VEC, LPB, false>(g, amax, a.ue8m0, words);
    if (valid) {
      uint8_t* out = row_start<true>(static_cast<uint8_t*>(a.out) + row_off(a.out_stride));
      store_fp8<true, VEC, kOnce>(vec_at<VEC>(out, tx), words);
      if (tx % LPB == 0) store_lean_block_scale<HINTED>(a, s, row, tx / LPB, scale);
    }
  } else {
    // Several vectors per thread: every vector normalized first, its normed values kept as T
    // (what g holds, rounded: re-widened below, the same values); the block amax values reduced
    // transposed (block_amax_transposed: 5 shuffles instead of 16 for four vectors of 16 lanes;
    // three vectors padded to four with zero bits, no amax), so that the lanes (tx % LPB) /
    // kOwners == j of the block's LPB lanes hold vector j's; they compute its scale once, its
    // reciprocal and finite value shuffled to the block's other lanes (two shuffles per vector),
    // instead of the same ~20 instructions (floor, division by 448, ue8m0, reciprocal) in every
    // lane for every vector; and the first of them stores it, at most one store per thread: each
    // warp runs the scale store's code (address, L2 policy: ~20-50 instructions) once, not once
    // per vector (benchmarks/NOTES.md v52 items 2 and 6, v53).
    constexpr int kN = VPT == 3 ? 4 : VPT;
    constexpr int kOwners = LPB / kN;  // lanes of a block ending with one vector's amax
    static_assert(kN <= LPB, "a block's lanes hold the amax of a thread's vectors");
    const int kept_j = (tx % LPB) / kOwners;  // the vector whose scale this lane computes
    Pack<T, VEC> nv[VPT];
    uint32_t amax[kN];
#pragma unroll
    for (int j = 0; j < VPT; ++j) {
      float g[VEC];
      amax[j] = normalize_vec(sv[j], wv[j], rstd, nv[j], g);
      if (valid && a.normed != nullptr) {
        store<true, kOnce>(vec_at<VEC>(row_start<true>(static_cast<T*>(a.normed) + row * a.normed_stride),
                                       tx + j * stride),
                           nv[j]);
      }
    }
    if constexpr (kN > VPT) amax[kN - 1] = 0u;
    const float scale = block_scale_from_amax_bits(block_amax_transposed<LPB, kN>(amax, tx), a.ue8m0);
    const float rcp = __frcp_rn(scale), scale_or_zero = finite_scale_or_zero(scale);
    // The block's first lane in the warp (a block's LPB lanes are aligned in the warp: blockDim.x
    // is a multiple of LPB).
    const int first = static_cast<int>((threadIdx.y * blockDim.x + tx) & 31) & ~(LPB - 1);
    uint8_t* out = row_start<true>(static_cast<uint8_t*>(a.out) + row * a.out_stride);
#pragma unroll
    for (int j = 0; j < VPT; ++j) {
      const float rcp_j = __shfl_sync(0xFFFFFFFFu, rcp, first + j * kOwners);
      const float scale_or_zero_j = __shfl_sync(0xFFFFFFFFu, scale_or_zero, first + j * kOwners);
      float g[VEC];
#pragma unroll
      for (int e = 0; e < VEC; e += 2) Cvt<T>::to_float2(&nv[j].v[e], g[e], g[e + 1]);
      uint32_t words[VEC / 4];
      quantize_by(g, scale_or_zero_j, rcp_j, words);
      if (valid) store_fp8<true, VEC, kOnce>(vec_at<VEC>(out, tx + j * stride), words);
    }
    if (valid && kept_j < VPT && tx % kOwners == 0) {
      store_lean_block_scale<HINTED>(a, s, row, (tx + kept_j * stride) / LPB, scale);
    }
  }
}

}  // namespace cuda
}  // namespace fp8norm

// ---- Host side: instantiate and launch (one .cu per T instantiates launch<T>) ----
#include <c10/cuda/CUDAException.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <tuple>

namespace fp8norm {
namespace cuda {

// How many CTAs of `kernel` one SM of `device` holds at once; cached per kernel, device, CTA
// size and shared memory (every kernel has the same type: the key holds its address).
template <typename K>
int64_t ctas_per_sm(K* kernel, int device, unsigned threads, size_t smem) {
  static std::mutex mu;
  static std::map<std::tuple<const void*, int, unsigned, size_t>, int64_t> cache;
  const std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_tuple(reinterpret_cast<const void*>(kernel), device, threads, smem);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  int per_sm = 0;
  C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, static_cast<int>(threads), smem));
  return cache.emplace(key, std::max(per_sm, 1)).first->second;
}

template <typename T, typename W, bool HAS_RES, bool ALIGNED, int VPT, Layout L, bool HINTED>
void launch_one(const RowArgs& a, const LaunchConfig& cfg, cudaStream_t stream) {
  auto* kernel = [&] {
    if constexpr (L == Layout::kRowVec1) {
      static_assert(ALIGNED && VPT == 1, "kRowVec1: aligned one-vector rows");
      TORCH_CHECK(cfg.lean_vpt == 1 || ((cfg.lean_vpt == kLeanVpt || cfg.lean_vpt == kLeanVptEven ||
                                         cfg.lean_vpt == kLeanVptFour) &&
                                        !cfg.full_rows &&
                                        cfg.threads_x * cfg.rows_per_cta <= lean_vpt_max_threads(cfg.lean_vpt)),
                  "fp8norm: lean rows of ", kLeanVpt, " or ", kLeanVptEven, " vectors per thread in CTAs of at most ",
                  kLeanVptMaxThreads, " threads, of ", kLeanVptFour, " in at most ", kLeanVptFourMaxThreads,
                  "; got ", cfg.lean_vpt, " vectors per thread in ", cfg.threads_x * cfg.rows_per_cta, " threads");
      // Four vectors per thread: rows of whole warps, one per CTA, where that kernel is built.
      if constexpr (lean_four_built(HAS_RES, std::is_same_v<W, float>, sizeof(T))) {
        if (cfg.lean_vpt == kLeanVptFour && !cfg.pair_rows && cfg.threads_x % 32 == 0) {
          return row_vec1_kernel<T, W, HAS_RES, HINTED, false, false, kLeanVptFour>;
        }
      }
      TORCH_CHECK(cfg.lean_vpt != kLeanVptFour, "fp8norm: lean rows of ", kLeanVptFour,
                  " vectors per thread are rows of whole warps, one per CTA, in the fused op with a weight of the "
                  "input's dtype");
      // Narrow vectors: FULL one-vector rows, one per CTA (before the branches below, which do
      // not read vec_bytes).
      if (cfg.vec_bytes != 16) {
        TORCH_CHECK(sizeof(T) == 2 && cfg.vec_bytes == kNarrowVecBytes && cfg.full_rows && cfg.lean_vpt == 1 &&
                        !cfg.pair_rows,
                    "fp8norm: narrow vectors are ", kNarrowVecBytes, " bytes, in one-row CTAs of 2-byte rows of "
                    "whole warps, got ", cfg.vec_bytes, " bytes");
        if constexpr (sizeof(T) == 2) return row_vec1_kernel<T, W, HAS_RES, HINTED, true, false, 1, kNarrowVecBytes>;
      }
      // Two vectors per thread: 2-byte rows of whole warps, one per CTA.
      if constexpr (sizeof(T) == 2) {
        if (cfg.lean_vpt == kLeanVptEven && !cfg.pair_rows && cfg.threads_x % 32 == 0) {
          return row_vec1_kernel<T, W, HAS_RES, HINTED, false, false, kLeanVptEven>;
        }
      }
      TORCH_CHECK(cfg.lean_vpt != kLeanVptEven, "fp8norm: lean rows of ", kLeanVptEven,
                  " vectors per thread are 2-byte rows of whole warps, one per CTA");
      const bool vpt3 = cfg.lean_vpt == kLeanVpt;
      if constexpr (sizeof(T) == 2) {  // two rows per CTA: rows of an odd number of half-warps
        if (cfg.pair_rows) {
          return vpt3 ? row_vec1_kernel<T, W, HAS_RES, HINTED, false, true, kLeanVpt>
                      : row_vec1_kernel<T, W, HAS_RES, HINTED, false, true>;
        }
      }
      TORCH_CHECK(!cfg.pair_rows, "fp8norm: two lean rows per CTA need a 2-byte type");
      // One row of three vectors per thread: float32 only (a 2-byte row of an odd number of
      // blocks in three vectors per thread is an odd number of half-warps: pairs, above).
      if constexpr (sizeof(T) == 4) {
        if (vpt3) return row_vec1_kernel<T, W, HAS_RES, HINTED, false, false, kLeanVpt>;
      }
      TORCH_CHECK(!vpt3, "fp8norm: 2-byte lean rows of three vectors per thread come in pairs");
      if (cfg.one_stride) {
        return cfg.full_rows ? row_vec1_kernel<T, W, HAS_RES, HINTED, true, false, 1, 16, true>
                             : row_vec1_kernel<T, W, HAS_RES, HINTED, false, false, 1, 16, true>;
      }
      return cfg.full_rows ? row_vec1_kernel<T, W, HAS_RES, HINTED, true> : row_vec1_kernel<T, W, HAS_RES, HINTED, false>;
    } else {
      return fused_add_rmsnorm_fp8_block_quant_kernel<T, W, HAS_RES, ALIGNED, VPT, L, HINTED>;
    }
  }();
  if (cfg.smem_bytes > 48 * 1024) {
    C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(cfg.smem_bytes)));
  }
  TORCH_CHECK(a.hidden < (int64_t{1} << 31), "fp8norm: H must be below 2^31, got ", to_str(a.hidden));
  const int64_t ctas = (a.rows + cfg.rows_per_cta - 1) / cfg.rows_per_cta * cfg.shape.cluster;
  TORCH_CHECK(ctas <= int64_t{0x7FFFFFFF}, "fp8norm: too many rows for one launch: ", to_str(a.rows));
  cudaLaunchConfig_t lc = {};
  lc.gridDim = dim3(static_cast<unsigned>(ctas));
  lc.blockDim = dim3(cfg.threads_x, cfg.rows_per_cta);
  lc.dynamicSmemBytes = cfg.smem_bytes;
  lc.stream = stream;
  cudaLaunchAttribute attrs[2] = {};
  unsigned n = 0;
  if (cfg.shape.cluster > 1) {
    attrs[n].id = cudaLaunchAttributeClusterDimension;
    attrs[n].val.clusterDim.x = static_cast<unsigned>(cfg.shape.cluster);
    attrs[n].val.clusterDim.y = 1;
    attrs[n].val.clusterDim.z = 1;
    ++n;
  }
  if (cfg.pdl) {
    attrs[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attrs[n].val.programmaticStreamSerializationAllowed = 1;
    ++n;
  }
  lc.attrs = attrs;
  lc.numAttrs = n;
  TileShape shape = cfg.shape;
  // CTAs per SM, looked up (once) only where a rule below needs it.
  int64_t per_sm_cached = 0;
  auto per_sm_of_kernel = [&] {
    if (per_sm_cached == 0) per_sm_cached = ctas_per_sm(kernel, cfg.device, lc.blockDim.x * lc.blockDim.y, cfg.smem_bytes);
    return per_sm_cached;
  };
  if (cfg.pdl || cfg.prefetch_pct != 0) {
    const int64_t per_sm = per_sm_of_kernel();
    const int64_t sms = cfg.sms;
    const int64_t resident = per_sm * sms;
    // PDL: release the next grid at the start, unless this grid is one wave that takes more
    // than half the CTA slots and leaves slots free: an SM could hold more of the next grid's
    // CTAs than its even share, or (4-vector rows, several CTAs per SM) under 15/16 of the
    // slots are taken. The next grid's CTAs, placed as slots free up, then pile onto the SMs
    // that finish first and slow this grid's tail (M = 512, H = 5120: 10.4 µs with an early
    // release, 7.9 without PDL, 7.55 with this rule, v5; M = 400, H = 8192: 11.1 -> 9.5, v15).
    const bool one_wave_over_half = ctas <= resident && 2 * ctas > resident;
    const bool crowded = VPT == 4 && per_sm >= 2 && 16 * ctas < 15 * resident;
    const bool slots_left = per_sm > (ctas + sms - 1) / sms || crowded;
    shape.release_early = !(one_wave_over_half && slots_left);
    if (cfg.release >= 0) shape.release_early = cfg.release == 1;
    // L2 prefetch distance: the next wave when the grid is at most two waves (v5), else a
    // quarter of a wave (against half a wave: 2048 x 8192 41.62 -> 40.53 µs, 3072 x 4096
    // 30.78 -> 29.90, 4096 x 4096 41.65 -> 40.61, level at six waves and more; v25); off for
    // plain accesses, which the table picks where the call's rows are still in L2 from the last
    // call (4096 x 1152 11.30 -> 10.33 µs, 3072 x 2048 14.56 -> 13.41, level at the window's
    // other shapes; v19). Rows of several tiles (bf16 H = 32768: 64 KiB per row and stream)
    // only beyond eight waves, a quarter of a wave ahead: 4096 x 32768 316.6 -> 313.5 µs, 8192 x
    // 32768 636.7 -> 617.6, 16384 x 32768 1275.8 -> 1227.8, 32768 x 32768 2478 -> 2460 (in place
    // of the tile prefetch), float32 16384 x 16384 1172.7 -> 1149.1; level at 2048 x 32768 (7.8
    // waves), 1.5-2.5% slower at 600 / 1024 x 32768 (2.3 / 3.9 waves); half a wave ahead
    // 1.5-4.7% slower than none (v27). FP8NORM_TUNE=prefetch=P: P percent of a wave (0: off; the
    // launch table sets 0 where the prefetch does not apply). benchmarks/NOTES.md has each step.
    if (cfg.prefetch_pct != 0) {
      const bool tiles = cfg.shape.ntiles > 1;
      const int64_t pct = cfg.prefetch_pct > 0   ? cfg.prefetch_pct
                          : !HINTED              ? 0
                          : ctas <= resident     ? 0  // one wave: every row is read at the start
                          : ctas <= 2 * resident ? (tiles ? 0 : 100)
                          : tiles && ctas <= 8 * resident ? 0
                                                          : 25;
      shape.prefetch_ctas = pct == 0 ? 0 : static_cast<int>(std::max<int64_t>(1, resident * pct / 100));
    }
  }
  // Block-scale lines kept in L2 until full (scale_line_policy): where each 128-byte line of
  // the scale columns is rows 32k .. 32k + 31 of one column, rows below M - D store with
  // evict_last and row r demotes the line of rows r - D - 31 .. r - D, D = two waves of rows by
  // default (FP8NORM_TUNE=demote=P: P percent of a wave; 0: off). Same binary against demote=0,
  // three passes (v26): 16384 x 16384 627.5 -> 610.6 µs, 16384 x 7168 272.7 -> 266.9, 32768 x
  // 4096 307.5 -> 301.6 (1.6-2.7% at M >= 16384, H 4096..16384), 0.7-1.4% at 16384 x 1152 /
  // 2048 / 32768, 32768 x 2048 and 8192 x 4096, level in grids of up to four waves; with 64
  // block_scale buffers in turn 1.2% faster, and a copy after the op as fast as without the
  // policy (no line left evict_last; v24's demotion by the line's own last row left them).
  if constexpr (scale_line_policy<VPT, L, HINTED>()) {
    const bool whole_lines = a.scale_stride_row == 1 && a.scale_stride_col % 32 == 0 &&
                             reinterpret_cast<uintptr_t>(a.block_scale) % 128 == 0;
    if (cfg.demote_pct != 0 && whole_lines) {  // one-CTA rows: scale_line_policy has no clusters
      const int64_t wave_rows = per_sm_of_kernel() * cfg.sms * cfg.rows_per_cta;
      const int64_t pct = cfg.demote_pct > 0 ? cfg.demote_pct : 200;
      const int64_t d = (std::max<int64_t>(1, wave_rows * pct / 100) + 31) / 32 * 32;
      shape.scale_demote_rows = d;
      shape.scale_keep_rows = std::max<int64_t>(0, (a.rows - d) / 32 * 32);
    }
  }
  C10_CUDA_CHECK(cudaLaunchKernelEx(&lc, kernel, a, shape));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
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
void launch(const RowArgs& a, const LaunchConfig& cfg, bool aligned, cudaStream_t stream) {
  with_bool(a.weight_is_float, [&](auto w_float) {
    using W = std::conditional_t<decltype(w_float)::value, float, T>;
    with_bool(a.residual != nullptr, [&](auto has_res) {
      with_bool(aligned, [&](auto al) {
        constexpr bool R = decltype(has_res)::value, A = decltype(al)::value;
        // The layout's kernel with the given hints, by vectors per thread.
        auto with_vpt = [&](auto layout, auto hinted) {
          constexpr Layout L = decltype(layout)::value;
          constexpr bool H = decltype(hinted)::value;
          if (cfg.vpt == 4) {
            launch_one<T, W, R, A, 4, L, H>(a, cfg, stream);
          } else {
            TORCH_CHECK(cfg.vpt == 1, "fp8norm: unsupported vectors per thread ", to_str(cfg.vpt));
            launch_one<T, W, R, A, 1, L, H>(a, cfg, stream);
          }
        };
        auto with_layout = [&](auto layout) {
          // Plain accesses are compiled only for aligned rows of one CTA; other kernels keep
          // their hints whatever cfg.hinted says.
          if constexpr (A && decltype(layout)::value != Layout::kClusterSlices) {
            with_bool(cfg.hinted, [&](auto hinted) { with_vpt(layout, hinted); });
          } else {
            with_vpt(layout, std::true_type{});
          }
        };
        switch (cfg.layout()) {
          case Layout::kClusterSlices:
            with_layout(std::integral_constant<Layout, Layout::kClusterSlices>{});
            break;
          case Layout::kWarpRowsCta:
            // Plain-access CTAs of whole-warp rows (launch_config sets cta_barrier only for
            // those); it is compiled for aligned rows only, so unaligned ones take kWarpRows'.
            if constexpr (A) {
              with_vpt(std::integral_constant<Layout, Layout::kWarpRowsCta>{}, std::false_type{});
            } else {
              with_layout(std::integral_constant<Layout, Layout::kWarpRows>{});
            }
            break;
          case Layout::kRowVec1:
            // One-vector one-row CTAs: their own kernel for aligned rows (either hint); unaligned
            // ones take kWarpRows' kernel.
            if constexpr (A) {
              with_bool(cfg.hinted, [&](auto hinted) {
                launch_one<T, W, R, true, 1, Layout::kRowVec1, decltype(hinted)::value>(a, cfg, stream);
              });
            } else {
              TORCH_CHECK(!cfg.pair_rows, "fp8norm: two lean rows per CTA need aligned rows");
              with_layout(std::integral_constant<Layout, Layout::kWarpRows>{});
            }
            break;
          case Layout::kHalfWarpRows:
            // 2-byte types only (the launch table never picks them for float).
            if constexpr (sizeof(T) == 2) {
              with_layout(std::integral_constant<Layout, Layout::kHalfWarpRows>{});
            } else {
              TORCH_CHECK(false, "fp8norm: half-warp rows need a 2-byte type");
            }
            break;
          default: with_layout(std::integral_constant<Layout, Layout::kWarpRows>{});
        }
      });
    });
  });
}

}  // namespace cuda
}  // namespace fp8norm
