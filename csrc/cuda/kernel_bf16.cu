// Instantiates the fp8norm CUDA kernels for one activation dtype (split for parallel builds).
#include "launcher.cuh"

namespace fp8norm {
namespace cuda {
template void launch<__nv_bfloat16>(const RowArgs&, bool, const launch::Plan&, cudaStream_t);
}  // namespace cuda
}  // namespace fp8norm
