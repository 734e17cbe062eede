# The course's Makefile, for our single-file sources:
#   make hw4        nvcc  hw4.cu  -> hw4       (CUDA)
#   make hw4-amd    hipcc hw4.hip -> hw4-amd   (HIP, for AMD GPUs)
#
# CUDA_ARCH: the GPU to compile for. Default: sm_61 (the course's GTX 1080) where this nvcc
# still lists it, else the oldest architecture it lists (sm_75 for CUDA 13, which dropped
# Pascal). The program runs on that GPU and every newer one; its tensor-core kernel needs the
# code built for sm_80 or later, and without it the program runs its fp32 tiled kernel; on an
# H100, `make hw4 CUDA_ARCH=sm_90a` adds the faster Hopper (wgmma) kernel.
# HIP_ARCH: AMD targets, space-separated. Default gfx908 (the course's example); an MI210 is
# gfx90a. HIP_PLATFORM=amd makes hipcc build for AMD even where nvcc is installed too.

NVCC  ?= nvcc
HIPCC ?= hipcc
OLDEST_NVCC_ARCH = $(shell $(NVCC) --list-gpu-arch 2>/dev/null | sed -n 's/^compute_//p' | sort -n | head -1)
NVCC_HAS_SM61 = $(shell $(NVCC) --list-gpu-arch 2>/dev/null | grep -qx compute_61 && echo yes)
CUDA_ARCH ?= sm_$(if $(NVCC_HAS_SM61),61,$(or $(OLDEST_NVCC_ARCH),61))
HIP_ARCH  ?= gfx908

# C++17 for the sources, threads for the host pipeline (reader, writer and device start-up).
NVFLAGS  := -std=c++17 -O3 -arch=$(CUDA_ARCH) -Xcompiler -pthread
HIPFLAGS := -std=c++17 -O3 $(foreach a,$(HIP_ARCH),--offload-arch=$(a)) -pthread
LDFLAGS  := -lm

.PHONY: all clean
all: hw4

hw4: hw4.cu
	$(NVCC) $(NVFLAGS) $(LDFLAGS) -o $@ $<

hw4-amd: hw4.hip
	HIP_PLATFORM=amd $(HIPCC) $(HIPFLAGS) $(LDFLAGS) -o $@ $<

clean:
	rm -f hw4 hw4-amd
