// hip_on_cuda.h: exactly the HIP API that src_hip uses, mapped onto CUDA, so that nvcc can
// compile the HIP port unchanged (make hip-cuda -> bin/fa-hip-cuda) and it can run on an NVIDIA
// GPU. Debian's HIP 5.2 headers for the NVIDIA platform do not compile against CUDA 13 (their
// inline wrappers call APIs whose signatures changed), hence this small header of our own.
// Used only when the .hip file is compiled by nvcc; hipcc builds for AMD never see it.
#pragma once

#include <cstdlib>
#include <string>

#include <cuda_runtime.h>

#include "hip_types_on_cuda.h"
using hipDeviceProp_t = cudaDeviceProp;

inline const char* hipGetErrorString(hipError_t e) { return cudaGetErrorString(e); }
inline hipError_t hipGetLastError() { return cudaGetLastError(); }
inline hipError_t hipGetDeviceCount(int* n) { return cudaGetDeviceCount(n); }
inline hipError_t hipSetDevice(int d) { return cudaSetDevice(d); }
inline hipError_t hipFree(void* p) { return cudaFree(p); }
inline hipError_t hipGetDeviceProperties(hipDeviceProp_t* p, int d) { return cudaGetDeviceProperties(p, d); }
inline hipError_t hipMalloc(void** p, size_t n) { return cudaMalloc(p, n); }
inline hipError_t hipDeviceReset() { return cudaDeviceReset(); }
inline hipError_t hipHostRegister(void* p, size_t n, unsigned flags) { return cudaHostRegister(p, n, flags); }
inline hipError_t hipStreamCreateWithFlags(hipStream_t* s, unsigned flags) { return cudaStreamCreateWithFlags(s, flags); }
inline hipError_t hipEventCreate(hipEvent_t* e) { return cudaEventCreate(e); }
inline hipError_t hipEventRecord(hipEvent_t e, hipStream_t s) { return cudaEventRecord(e, s); }
inline hipError_t hipStreamWaitEvent(hipStream_t s, hipEvent_t e, unsigned flags) { return cudaStreamWaitEvent(s, e, flags); }
inline hipError_t hipEventSynchronize(hipEvent_t e) { return cudaEventSynchronize(e); }
inline hipError_t hipEventElapsedTime(float* ms, hipEvent_t a, hipEvent_t b) { return cudaEventElapsedTime(ms, a, b); }
inline hipError_t hipMemcpyAsync(void* dst, const void* src, size_t n, cudaMemcpyKind kind, hipStream_t s) {
  return cudaMemcpyAsync(dst, src, n, kind, s);
}
template <class F>
inline hipError_t hipFuncGetAttributes(hipFuncAttributes* a, F f) { return cudaFuncGetAttributes(a, f); }
