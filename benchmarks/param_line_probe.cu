// Probe (measurement only, benchmarks/NOTES.md v31): what a kernel pays for each 64-byte line of
// its parameter block that it reads, in back-to-back launches of a CUDA graph (no PDL, and PDL with
// the reads after griddepcontrol.wait in the source; ptxas may hoist some of them above it). The parameters start at c[0x0][0x210]; field k of the
// 384-byte block is at 0x210 + 8k, so line L (0x200 + 64L) holds fields 8L-2 .. 8L+5.
// Every variant reads field 0 (the output pointer, line 0) and stores one value per thread;
// variant MASK also reads field 8L-1 for each line L in MASK (bit L). INDEXED reads them by a
// runtime index (blockIdx.y, always 0): an indexed constant load (ptxas picks LDC c[R + k] or
// ULDC c[UR + k]) instead of one with a fixed offset.
//
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o /tmp/plp benchmarks/param_line_probe.cu
//   /tmp/plp [threads per CTA (256)] [CTAs (1)]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

struct Params {
  unsigned long long f[48];
};

template <int MASK, bool INDEXED, bool PDL>
__global__ void probe(const Params p) {
  if constexpr (PDL) asm volatile("griddepcontrol.wait;" ::: "memory");
  unsigned long long acc = 0;
  const unsigned z = INDEXED ? blockIdx.y : 0;
#pragma unroll
  for (int L = 1; L < 6; ++L) {
    if (MASK & (1 << L)) acc += p.f[8 * L - 1 + z];
  }
  if constexpr (PDL) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  float* out = reinterpret_cast<float*>(p.f[0]);
  out[blockIdx.x * blockDim.x + threadIdx.x] = static_cast<float>(acc + threadIdx.x);
}

#define CK(x)                                                                   \
  do {                                                                          \
    cudaError_t e_ = (x);                                                       \
    if (e_ != cudaSuccess) {                                                    \
      std::printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));   \
      std::exit(1);                                                             \
    }                                                                           \
  } while (0)

struct Variant {
  const char* name;
  void (*kernel)(Params);
  bool pdl;
  cudaGraphExec_t exec = nullptr;
  std::vector<float> us;
};

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 256;
  const int ctas = argc > 2 ? std::atoi(argv[2]) : 1;
  const int launches = 200, replays = 20, trials = 7;
  float* out = nullptr;
  CK(cudaMalloc(&out, sizeof(float) * threads * ctas));
  Params p = {};
  p.f[0] = reinterpret_cast<unsigned long long>(out);
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  std::vector<Variant> v = {
      {"line 0 only", probe<0, false, false>, false},
      {"+ line 1 (0x240)", probe<2, false, false>, false},
      {"+ line 2 (0x280)", probe<4, false, false>, false},
      {"+ lines 1, 2", probe<6, false, false>, false},
      {"+ lines 1, 2, 3", probe<14, false, false>, false},
      {"+ lines 1..5", probe<62, false, false>, false},
      {"+ lines 1, 2 indexed", probe<6, true, false>, false},
      {"+ lines 1..5 indexed", probe<62, true, false>, false},
      {"PDL line 0 only", probe<0, false, true>, true},
      {"PDL + lines 1, 2", probe<6, false, true>, true},
      {"PDL + lines 1..5", probe<62, false, true>, true},
  };
  for (auto& x : v) {
    cudaGraph_t g;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    for (int i = 0; i < launches; ++i) {
      cudaLaunchConfig_t lc = {};
      lc.gridDim = dim3(ctas);
      lc.blockDim = dim3(threads);
      lc.stream = s;
      cudaLaunchAttribute attr = {};
      attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
      attr.val.programmaticStreamSerializationAllowed = 1;
      lc.attrs = &attr;
      lc.numAttrs = x.pdl ? 1 : 0;
      CK(cudaLaunchKernelEx(&lc, x.kernel, p));
    }
    CK(cudaStreamEndCapture(s, &g));
    CK(cudaGraphInstantiate(&x.exec, g, 0));
    CK(cudaGraphDestroy(g));
    for (int w = 0; w < 3; ++w) CK(cudaGraphLaunch(x.exec, s));
  }
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  for (int t = 0; t < trials; ++t) {
    for (auto& x : v) {
      CK(cudaEventRecord(a, s));
      for (int r = 0; r < replays; ++r) CK(cudaGraphLaunch(x.exec, s));
      CK(cudaEventRecord(b, s));
      CK(cudaEventSynchronize(b));
      float ms = 0;
      CK(cudaEventElapsedTime(&ms, a, b));
      x.us.push_back(ms * 1000.f / (launches * replays));
    }
  }
  std::printf("threads %d, ctas %d: us per launch (median of %d trials; min)\n", threads, ctas, trials);
  for (auto& x : v) {
    std::sort(x.us.begin(), x.us.end());
    std::printf("  %-24s %.3f  %.3f\n", x.name, x.us[x.us.size() / 2], x.us[0]);
  }
  return 0;
}
