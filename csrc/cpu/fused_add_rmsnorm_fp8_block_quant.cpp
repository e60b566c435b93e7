// CPU kernels of the .out ops: one task per group of rows (at::parallel_for); each row is read
// from memory once (pass 1: residual add, sum of squares) and then re-read from cache
// (pass 2: normalize, 1x128 amax, quantize), with no temporaries beyond one 128-value block.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <c10/util/Float8_e4m3fn.h>
#include <torch/library.h>

#include <algorithm>

#include "../common/fp8norm.h"
#include "../common/numerics.h"

namespace fp8norm {
namespace {

template <typename T, typename W>
void row_kernel(const RowArgs& a, int64_t row) {
  const int64_t H = a.hidden;
  const T* in = static_cast<const T*>(a.input) + row * a.input_stride;
  T* res = a.residual ? static_cast<T*>(a.residual) + row * a.residual_stride : nullptr;
  const W* w = static_cast<const W*>(a.weight);
  T* normed = a.normed ? static_cast<T*>(a.normed) + row * a.normed_stride : nullptr;
  uint8_t* out = static_cast<uint8_t*>(a.out) + row * a.out_stride;
  float* scale_row = a.block_scale + row * a.scale_stride_row;

  // Pass 1: s = T(input + residual), written back to residual; sum of float32 squares in double.
  constexpr int kLanes = 8;
  double acc[kLanes] = {};
  const T* s_row = in;
  if (res != nullptr) {
    for (int64_t i = 0; i < H; i += kLanes) {
      for (int l = 0; l < kLanes; ++l) {
        const T s = static_cast<T>(static_cast<float>(in[i + l]) + static_cast<float>(res[i + l]));
        res[i + l] = s;
        const float x = static_cast<float>(s);
        acc[l] += static_cast<double>(x * x);
      }
    }
    s_row = res;
  } else {
    for (int64_t i = 0; i < H; i += kLanes) {
      for (int l = 0; l < kLanes; ++l) {
        const float x = static_cast<float>(in[i + l]);
        acc[l] += static_cast<double>(x * x);
      }
    }
  }
  double sum_sq = 0;
  for (double v : acc) sum_sq += v;
  const float rstd = rstd_from_sum_of_squares(sum_sq, H, a.eps);

  // Pass 2, one 1x128 block at a time.
  float g[kBlock];
  for (int64_t b = 0; b < H / kBlock; ++b) {
    const int64_t base = b * kBlock;
    uint32_t amax = 0;
    for (int j = 0; j < kBlock; ++j) {
      const T n = static_cast<T>(
          normalize(static_cast<float>(s_row[base + j]), rstd, static_cast<float>(w[base + j])));
      if (normed != nullptr) normed[base + j] = n;
      g[j] = static_cast<float>(n);
      amax = std::max(amax, abs_bits(g[j]));
    }
    const float scale = block_scale_from_amax_bits(amax, a.ue8m0);
    scale_row[b * a.scale_stride_col] = scale;
    for (int j = 0; j < kBlock; ++j) {
      // std::max/std::min return their first argument when it is NaN: NaN stays NaN.
      const float q = std::min(std::max(scaled(g[j], scale), -kFp8Max), kFp8Max);
      out[base + j] = c10::Float8_e4m3fn(q).x;
    }
  }
}

template <typename T, typename W>
void run(const RowArgs& a) {
  // Enough rows per task to amortize scheduling: at least ~32k elements.
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 15) / a.hidden);
  at::parallel_for(0, a.rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) row_kernel<T, W>(a, row);
  });
}

void dispatch(const RowArgs& a, at::ScalarType dtype) {
  if (a.rows == 0) return;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, dtype, "fp8norm_cpu", [&] {
    if (a.weight_is_float) {
      run<scalar_t, float>(a);
    } else {
      run<scalar_t, scalar_t>(a);
    }
  });
}

void fused_add_rmsnorm_fp8_block_quant_out_cpu(const at::Tensor& input, const at::Tensor& residual,
                                               const at::Tensor& weight, double eps, bool ue8m0,
                                               const at::Tensor& out, const at::Tensor& block_scale,
                                               const std::optional<at::Tensor>& normed_out) {
  const RowArgs a = prepare(kFusedOp, input, &residual, weight, eps, ue8m0, out, block_scale,
                            normed_out);
  dispatch(a, input.scalar_type());
}

void rmsnorm_fp8_block_quant_out_cpu(const at::Tensor& input, const at::Tensor& weight, double eps,
                                     bool ue8m0, const at::Tensor& out,
                                     const at::Tensor& block_scale,
                                     const std::optional<at::Tensor>& normed_out) {
  const RowArgs a =
      prepare(kPlainOp, input, nullptr, weight, eps, ue8m0, out, block_scale, normed_out);
  dispatch(a, input.scalar_type());
}

}  // namespace

TORCH_LIBRARY_IMPL(fp8norm, CPU, m) {
  m.impl("fused_add_rmsnorm_fp8_block_quant.out", &fused_add_rmsnorm_fp8_block_quant_out_cpu);
  m.impl("rmsnorm_fp8_block_quant.out", &rmsnorm_fp8_block_quant_out_cpu);
}

}  // namespace fp8norm
