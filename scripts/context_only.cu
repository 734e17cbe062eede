// context_only.cu: the floor under fa-cuda's whole process. It creates the CUDA context, as
// fa-cuda's init thread does first, and exits: a process can take no less time on this GPU.
// Built and timed beside fa-cuda by scripts/startup_floor.py.
#include <cstdio>

#include <cuda_runtime.h>

int main() {
  const cudaError_t err = cudaFree(nullptr);
  if (err != cudaSuccess) {
    std::fprintf(stderr, "context_only: %s\n", cudaGetErrorString(err));
    return 1;
  }
  return 0;
}
