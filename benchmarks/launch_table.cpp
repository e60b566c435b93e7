// Prints the CUDA op's launch table (launch_config in fused_add_rmsnorm_fp8_block_quant.cu) for a
// grid of shapes, on a machine without a GPU: see launch_table.sh, which builds this file with
// -DFP8NORM_LAUNCH_SRC naming the .cu to include (the host code only; the kernels are stubbed).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include FP8NORM_LAUNCH_SRC

namespace fp8norm {
namespace cuda {
// The kernels' launcher (kernel_<dtype>.cu) is not built here: launch_config alone is printed.
template <typename T>
void launch(const RowArgs&, const LaunchConfig&, bool, cudaStream_t) {}
// launch_config with the weight's dtype where it takes it (v56 on), for REV's csrc too.
template <typename... A>
LaunchConfig launch_config_for(bool weight_fp32, const A&... a) {
  if constexpr (requires { launch_config(a..., weight_fp32); }) {
    return launch_config(a..., weight_fp32);
  } else {
    return launch_config(a...);
  }
}
}  // namespace cuda
}  // namespace fp8norm

int main() {
  using namespace fp8norm::cuda;
  DeviceInfo dev;  // the H200's facts (cudaDeviceGetAttribute there)
  dev.sms = 132;
  dev.max_smem = 232448;
  dev.major = 9;
  dev.l2_bytes = int64_t{60} << 20;
  // The grid, or the shapes in SHAPES ("MxH,MxH,...").
  std::vector<std::pair<int64_t, int64_t>> shapes;
  if (const char* list = std::getenv("SHAPES")) {
    for (const char* p = list; *p;) {
      char* end;
      const long long m = std::strtoll(p, &end, 10);
      const long long h = *end == 'x' ? std::strtoll(end + 1, &end, 10) : 0;
      if (m <= 0 || h <= 0 || (*end != ',' && *end != '\0')) {
        std::fprintf(stderr, "SHAPES: expected MxH,MxH,..., got %s\n", list);
        return 2;
      }
      shapes.emplace_back(m, h);
      p = *end ? end + 1 : end;
    }
  } else {
    for (int64_t m : {1, 16, 128, 512, 2048, 8192, 16384, 32768})
      for (int64_t h : {512, 1024, 1152, 1408, 1920, 2048, 2176, 3200, 4096, 5120, 6144, 7168, 8192, 16384, 32768, 65536})
        shapes.emplace_back(m, h);
  }
  // Layout's enumerators by value (launch.h's order; kWarpRowsCta was kWarpRow1 before v43).
  const char* layouts[] = {"kWarpRows", "kHalfWarpRows", "kClusterSlices", "kWarpRowsCta", "kRowVec1"};
  static_assert(sizeof(layouts) / sizeof(layouts[0]) == static_cast<size_t>(Layout::kRowVec1) + 1 &&
                    static_cast<int>(Layout::kWarpRowsCta) == 3,
                "layouts[] must follow launch.h's Layout enumerators");
  // RESIDUAL=0 (environment): the launches of rmsnorm_fp8_block_quant (no residual) instead.
  const char* residual_env = std::getenv("RESIDUAL");
  const bool residual = residual_env == nullptr || std::string(residual_env) != "0";
  // WEIGHT_FP32=1 (environment): a float32 weight (default: the input's dtype).
  const char* weight_env = std::getenv("WEIGHT_FP32");
  const bool weight_fp32 = weight_env != nullptr && std::string(weight_env) == "1";
  for (int pdl = 1; pdl >= 0; --pdl) {
    for (int es : {2, 4}) {
      for (int normed = 1; normed >= 0; --normed) {
        for (const auto& [m, h] : shapes) {
          Switches sw = switches();  // FP8NORM_TUNE from the environment, as in the op
          sw.pdl = pdl == 1;
          const LaunchConfig c = launch_config_for(weight_fp32, m, h, es, residual, normed == 1, true, dev, sw);
          std::printf("pdl=%d bytes=%d res=%d normed=%d %5lld x %-5lld %-14s vpt=%d lean_vpt=%d threads=%d rows=%d "
                      "tiles=%d cluster=%d hinted=%d full=%d pair=%d vec=%d\n",
                      pdl, es, int{residual}, normed, static_cast<long long>(m), static_cast<long long>(h),
                      layouts[static_cast<int>(c.layout())], c.vpt, c.lean_vpt, c.threads_x, c.rows_per_cta,
                      c.shape.ntiles, c.shape.cluster, c.hinted, c.full_rows, c.pair_rows, c.vec_bytes);
        }
      }
    }
  }
}
