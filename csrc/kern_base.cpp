// The Cube kernels for any CPU of the build's target (baseline x86-64: no FMA, one row at a time).
#define AOE_KNS k_base
#define AOE_ISA_NAME "base"
#include "kernels.inc"

const aoesim::CubeKernels* aoesim::cube_kernels_base() { return &k_base::kSet; }
