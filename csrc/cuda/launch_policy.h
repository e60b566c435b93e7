// The CUDA launch policy: (problem, device facts) -> plan. A pure function: no environment, no
// CUDA call, so that it is compiled into every build (CPU-only too) and tests check it on CPU
// against a golden file (tests/test_launch_policy.py). docs/design.md has the measurement behind
// each threshold.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace fp8norm {
namespace launch {

constexpr int kBlock = 128;  // elements per quantization block

// One call of an op, as far as the launch is concerned.
struct Problem {
  int64_t rows = 0;
  int64_t hidden = 0;
  int elem_size = 2;         // bytes per input element: 2 (bf16, fp16) or 4 (float32)
  bool residual = true;      // fused_add_rmsnorm_* (else rmsnorm_*)
  bool normed = true;        // writes normed_out
  bool aligned = true;       // every row start 16-byte aligned (fp8 rows: 16 / elem_size bytes)
  bool weight_fp32 = false;  // a float32 weight with a 2-byte input
  bool one_stride = false;   // input, residual, normed_out and out share one row stride
  bool scale_lines = false;  // block_scale columns are whole 128-byte lines (column-major,
                             // column stride a multiple of 32, 128-byte aligned)
  bool sum_f32 = false;      // the norm of the float32 residual sum (RowArgs::sum_f32): a stash
                             // holds input and old residual, twice the bytes
};

// What the policy needs to know of the GPU and of the kernel image loaded on it.
struct Device {
  int sms = 132;
  int image_arch = 90;             // the loaded kernels' architecture (their PTX's, e.g. 80, 90,
                                   // 100): clusters, PDL and L2 hints from 90 on, whatever the GPU
  int64_t l2_bytes = 60 << 20;
  int64_t max_smem = 227 << 10;    // dynamic shared memory per CTA (opt-in maximum)
  bool pdl = true;                 // programmatic dependent launch wanted (FP8NORM_PDL)
};

// The kernels, a closed set: each is one instantiation shape of csrc/cuda/*_kernel.cuh (besides
// the dtype, weight dtype, residual and alignment, which the problem fixes).
enum class Kernel : uint8_t {
  kRow,         // row_kernel: one row per CTA, one 16-byte vector per thread, idle lanes masked
  kRowNarrow,   // row_kernel: one 8-byte vector per thread, whole warps (2-byte types)
  kRowFour,     // row_kernel: four 16-byte vectors per thread, whole warps
  kTile1,       // tile_kernel: rows of whole warps, several per CTA, one vector per thread per tile
  kTile4,       // tile_kernel: the same, four vectors per thread per tile
  kHalfTile1,   // tile_kernel: rows of whole half-warps (2-byte types), one vector per thread
  kHalfTile4,   // tile_kernel: the same, four vectors per thread
  kCluster1,    // tile_kernel: each row split over a thread-block cluster (sm_90+), one vector
  kCluster4,    // tile_kernel: the same, four vectors per thread
};
constexpr int kNumKernels = 9;

const char* kernel_name(Kernel k);
std::optional<Kernel> kernel_from_name(const std::string& name);
bool is_row_kernel(Kernel k);
bool is_cluster_kernel(Kernel k);
int vectors_per_thread(Kernel k);  // 16-byte vectors per thread per tile (kRowNarrow: 1)
int vector_bytes(Kernel k);        // bytes of a thread's vector: 16, or 8 for kRowNarrow

// How one call runs.
struct Plan {
  Kernel kernel = Kernel::kTile1;
  int threads = 32;           // blockDim.x: threads of a row (of a slice, with a cluster)
  int rows_per_cta = 1;       // blockDim.y
  int cluster = 1;            // CTAs per row (slices of whole 1x128 blocks)
  int slice_vecs = 0;         // 16-byte vectors of a CTA's slice of a row (the row without a cluster)
  int tiles = 1;              // tiles per slice (tile kernels; a tile is threads x vpt vectors)
  bool stash = false;         // multi-tile slices keep their tiles in shared memory
  int64_t ctas = 0;           // grid size
  int64_t smem_bytes = 0;     // dynamic shared memory per CTA
  bool pdl = false;           // programmatic dependent launch
  bool release_early = true;  // PDL: the next grid may launch when this one has started
  int prefetch_ctas = 0;      // ask L2 for the input and residual rows of the CTA this far ahead
  bool prefetch_tiles = false;  // ask L2 for a slice's later tiles at the CTA's start
  int64_t scale_keep_rows = 0;    // CTAs of rows below this store block scales evict_last...
  int64_t scale_demote_rows = 0;  // ...and row r demotes the line of rows r - this - 31 .. r - this
  bool one_stride = false;        // row kernels: one row offset for the four row streams
};

// The plan for a problem with rows > 0; `force` picks the kernel instead of the policy (tests),
// with the geometry the policy gives that kernel; it must be one that can run the problem
// (check_forced says why not).
Plan plan(const Problem& p, const Device& d, std::optional<Kernel> force = std::nullopt);

// Empty if `k` can run `p` on `d`, else why not.
std::string check_forced(const Problem& p, const Device& d, Kernel k);

// The test hook (fp8norm::_force_kernel): a kernel that every CUDA launch of this process takes
// instead of the policy's, until cleared (nullopt). Tests only: not thread-safe with calls.
void set_forced_kernel(std::optional<Kernel> k);
std::optional<Kernel> forced_kernel();

// One line: "kernel=row threads=256 rows_per_cta=1 ..." (the golden file's format).
std::string to_string(const Plan& plan);

// Shared memory of a tile_kernel CTA before its stash: the warp sums of each row (double), the
// slices' sums (double) and the cluster exchange's mbarrier, padded so that the stash stays
// 16-byte aligned. row_kernel uses the first part alone.
constexpr int kMaxWarpsPerRow = 32;
constexpr int kMaxCluster = 8;
constexpr int64_t reduction_smem_bytes(int rows_per_cta) {
  return 8 * (int64_t{kMaxWarpsPerRow} * rows_per_cta + kMaxCluster) + 16;
}

// Launch bounds, shared with the kernels (register budgets the occupancy estimate uses).
constexpr int kRowMaxThreads = 1024;      // row_kernel, one vector per thread: at most 1024
constexpr int kRowMinCtas = 2;            // threads, two CTAs per SM: <= 32 registers
constexpr int kRowFourMaxThreads = 1024;  // row_kernel, four vectors per thread: one CTA of
constexpr int kRowFourMinCtas = 1;        // 1024 threads per SM: <= 64 registers
constexpr int kTileMaxThreads1 = 1024;    // tile_kernel, one vector per thread
constexpr int kTileMaxThreads4 = 512;     // tile_kernel, four per thread: two CTAs of 512
constexpr int kTileMinCtas4 = 2;          // threads per SM (aligned rows): <= 64 registers

}  // namespace launch
}  // namespace fp8norm
