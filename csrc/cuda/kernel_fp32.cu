// Instantiates the fp8norm CUDA kernels for one activation dtype (split for parallel builds).
#include "kernel.cuh"

namespace fp8norm {
namespace cuda {
template void launch<float>(const RowArgs&, const LaunchConfig&, bool, cudaStream_t);
}  // namespace cuda
}  // namespace fp8norm
