// The Cube kernels for x86-64-v4 (AVX-512), 8 rows per step: CMakeLists.txt builds this file with
// -march=x86-64-v4 (GCC on x86-64); otherwise it provides nothing.
#include "cube.h"

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512DQ__) && defined(__AVX512VL__)
#define AOE_KNS k_v4
#define AOE_ISA_NAME "x86-64-v4"
#include "kernels.inc"

const aoesim::CubeKernels* aoesim::cube_kernels_v4() { return &k_v4::kSet; }
#else
const aoesim::CubeKernels* aoesim::cube_kernels_v4() { return nullptr; }
#endif
