// hip_types_on_cuda.h: HIP's types and constants as CUDA's, for the two headers that put HIP's
// API onto CUDA: hip_on_cuda.h (the HIP port built by nvcc) and wave64/hip/hip_runtime.h (a
// student's hw4.hip through fa's MI210 emulation).
#pragma once

#include <cuda_runtime.h>

using hipError_t = cudaError_t;
using hipStream_t = cudaStream_t;
using hipEvent_t = cudaEvent_t;
using hipMemcpyKind = cudaMemcpyKind;
using hipFuncAttributes = cudaFuncAttributes;

constexpr hipError_t hipSuccess = cudaSuccess;
constexpr hipError_t hipErrorInvalidValue = cudaErrorInvalidValue;
constexpr hipError_t hipErrorOutOfMemory = cudaErrorMemoryAllocation;
constexpr hipError_t hipErrorInvalidConfiguration = cudaErrorInvalidConfiguration;
constexpr hipError_t hipErrorLaunchFailure = cudaErrorLaunchFailure;
constexpr hipError_t hipErrorNotReady = cudaErrorNotReady;
constexpr hipMemcpyKind hipMemcpyHostToHost = cudaMemcpyHostToHost;
constexpr hipMemcpyKind hipMemcpyHostToDevice = cudaMemcpyHostToDevice;
constexpr hipMemcpyKind hipMemcpyDeviceToHost = cudaMemcpyDeviceToHost;
constexpr hipMemcpyKind hipMemcpyDeviceToDevice = cudaMemcpyDeviceToDevice;
constexpr hipMemcpyKind hipMemcpyDefault = cudaMemcpyDefault;
constexpr unsigned hipStreamDefault = cudaStreamDefault;
constexpr unsigned hipStreamNonBlocking = cudaStreamNonBlocking;
constexpr unsigned hipHostMallocDefault = cudaHostAllocDefault;
constexpr unsigned hipHostRegisterDefault = cudaHostRegisterDefault;
constexpr unsigned hipEventDefault = cudaEventDefault;
