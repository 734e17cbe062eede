// planted_as_cuda.h: what makes tests/data/planted_hw4.hip the student's hw4.cu: CUDA's names for
// the HIP calls it makes, and a warp's 32-lane shuffles and ballot. Included first:
//   #include "planted_as_cuda.h"
//   #include "planted_hw4.hip"
#pragma once
#define FA_AS_CUDA 1
#define hipMalloc cudaMalloc
#define hipMemcpy cudaMemcpy
#define hipFree cudaFree
#define hipMemcpyHostToDevice cudaMemcpyHostToDevice
#define hipMemcpyDeviceToHost cudaMemcpyDeviceToHost
#define hipDeviceSynchronize cudaDeviceSynchronize
#define hipGetLastError cudaGetLastError
#define hipGetErrorString cudaGetErrorString
#define hipError_t cudaError_t
#define hipSuccess cudaSuccess
#define hipFuncSetAttribute cudaFuncSetAttribute
#define hipFuncAttributeMaxDynamicSharedMemorySize cudaFuncAttributeMaxDynamicSharedMemorySize
#define hipLaunchKernelGGL(k, g, b, s, st, ...) k<<<g, b, s, st>>>(__VA_ARGS__)
#define __shfl(v, j) __shfl_sync(0xffffffffu, v, j)
#define __shfl_xor(v, m) __shfl_xor_sync(0xffffffffu, v, m)
#define __ballot(p) __ballot_sync(0xffffffffu, p)
#define __lane_id() (threadIdx.x & 31)

