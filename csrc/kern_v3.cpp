// The Cube kernels for x86-64-v3 (AVX2, FMA), 4 rows per step: CMakeLists.txt builds this file with
// -march=x86-64-v3 (GCC on x86-64); otherwise it provides nothing.
#include "cube.h"

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__) && defined(__BMI2__)
#define AOE_KNS k_v3
#define AOE_ISA_NAME "x86-64-v3"
#include "kernels.inc"

const aoesim::CubeKernels* aoesim::cube_kernels_v3() { return &k_v3::kSet; }
#else
const aoesim::CubeKernels* aoesim::cube_kernels_v3() { return nullptr; }
#endif
