// Device helpers for sm_90 features: programmatic dependent launch, thread-block clusters and
// their distributed shared memory, L2 prefetch and L2 eviction priorities. Compiled to nothing
// (or a trap, for clusters: the policy never asks for them below sm_90) for older targets.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define FP8NORM_SM90 1
#else
#define FP8NORM_SM90 0
#endif

namespace fp8norm {
namespace cuda {

// Waits until the grid this launch depends on has completed and its writes are visible (a no-op
// when the launch was not programmatic), then, if `release`, lets the next grid in the stream
// launch now (its own wait still holds it until this grid has completed); without, the next
// grid launches as this one's CTAs exit. Nothing before it may read what the previous grid
// writes; an L2 prefetch may come before it (a hint: it returns no data).
__device__ __forceinline__ void wait_previous_grid(bool release) {
#if FP8NORM_SM90
  asm volatile("griddepcontrol.wait;" ::: "memory");
  if (release) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// This CTA's index in the grid, read at each use (read once as blockIdx.x it stayed live and the
// register-capped kernels spilled).
__device__ __forceinline__ unsigned cta_index() {
  unsigned r;
  asm volatile("mov.u32 %0, %%ctaid.x;" : "=r"(r));
  return r;
}

// This CTA's cluster's index in the grid (cluster launches only).
__device__ __forceinline__ unsigned cluster_index() {
  unsigned r = 0;
#if FP8NORM_SM90
  asm("mov.u32 %0, %%clusterid.x;" : "=r"(r));
#endif
  return r;
}

__device__ __forceinline__ unsigned cluster_rank() {
  unsigned r = 0;
#if FP8NORM_SM90
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
#endif
  return r;
}

// Asks the L2 to fetch `bytes` (a multiple of 16) from p (16-byte aligned) ahead of its use, with
// no register and no wait (cp.async.bulk.prefetch).
__device__ __forceinline__ void prefetch_to_l2(const void* p, uint32_t bytes) {
#if FP8NORM_SM90
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
#endif
}

// Block-scale lines in L2. With column-major block scales one 128-byte line of a scale column
// holds 32 rows' scales, written 4 bytes at a time by up to 32 CTAs over the grid's run. Rows of
// all but the last two waves store their scales with an evict_last policy, so the line stays in
// L2 until it is full, and the row two waves further on (the line's rows long done) demotes it
// to evict_normal: no line stays evict_last after the op (one would slow the kernels after it).
// The policy of a CTA's scale stores: uniform per CTA, so that every CTA runs one store form.
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

// Whether `row` demotes a block-scale line: the last row of a group of 32 whose line (rows
// row - demote_rows - 31 .. row - demote_rows of each column) was stored evict_last (the policy
// keeps both counts multiples of 32, where a line is rows 32k .. 32k + 31 of one column).
__device__ __forceinline__ bool scale_line_demoter(int64_t row, int64_t demote_rows, int64_t keep_rows) {
  return (row & 31) == 31 && row >= demote_rows && row - demote_rows < keep_rows;
}

// If `demoter`, the line of the scales demote_rows + 31 .. demote_rows rows above `p` (this row's
// scale store, column-major) goes back to evict_normal in L2 (no-op if absent); predicated.
__device__ __forceinline__ void demote_scale_line_if(bool demoter, const float* p, int64_t demote_rows) {
#if FP8NORM_SM90
  const uintptr_t line = reinterpret_cast<uintptr_t>(p) - (demote_rows + 31) * sizeof(float);
  asm volatile(
      "{\n .reg .pred q;\n .reg .b64 ga;\n setp.ne.b32 q, %1, 0;\n cvta.to.global.u64 ga, %0;\n"
      " @q applypriority.global.L2::evict_normal [ga], 128;\n}" ::"l"(line), "r"(static_cast<int>(demoter))
      : "memory");
#endif
}

// Cluster barrier, split: every thread arrives (relaxed) at kernel start and waits before its
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
// receiving CTA's mbarrier, which that CTA waits on. No cluster-wide release, which would wait
// for this thread's outstanding global stores (the new residual).
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

}  // namespace cuda
}  // namespace fp8norm
