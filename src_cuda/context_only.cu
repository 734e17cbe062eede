// context_only.cu: the floor under fa-cuda's whole process. It creates the CUDA context, as
// fa-cuda's init thread does first, and exits through the runtime's own teardown: a CUDA
// program can take no less time on this GPU with the same settings (scripts/startup_floor.py
// runs it as it is and with fa-cuda's start-up setting, CUDA_DEVICE_MAX_CONNECTIONS=1).
// FA_TIMING=2 prints "context-only: started at T, context at C s" (T on the monotonic clock,
// C since T), so that the script can tell start-up from exit.
// With the argument --copies it also times what a student's program pays per byte here: one
// copy of 64 MB from pageable host memory to the device and back (cudaMemcpy, as hw4.cu does),
// after a first copy that maps the pages, and prints "context-only: h2d=GB/s d2h=GB/s"
// (fa_cli/measure/floor.py reads it for the estimate of the judge's time).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <cuda_runtime.h>

#include "../src_common/host/settings.h"

static double now_seconds() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

static bool copy_rates() {
  constexpr size_t kBytes = size_t(64) << 20;
  char* host = static_cast<char*>(std::malloc(kBytes));
  void* device = nullptr;
  if (host == nullptr || cudaMalloc(&device, kBytes) != cudaSuccess) return false;
  std::memset(host, 1, kBytes);
  double seconds[2] = {0, 0};
  for (int round = 0; round < 2; ++round) {  // the first round maps the pages: not counted
    double t0 = now_seconds();
    if (cudaMemcpy(device, host, kBytes, cudaMemcpyHostToDevice) != cudaSuccess) return false;
    double t1 = now_seconds();
    if (cudaMemcpy(host, device, kBytes, cudaMemcpyDeviceToHost) != cudaSuccess) return false;
    seconds[0] = t1 - t0, seconds[1] = now_seconds() - t1;
  }
  std::fprintf(stderr, "context-only: h2d=%.3f d2h=%.3f\n", kBytes / seconds[0] / 1e9, kBytes / seconds[1] / 1e9);
  cudaFree(device);
  std::free(host);
  return true;
}

int main(int argc, char** argv) {
  const double started = now_seconds();
  const cudaError_t err = cudaFree(nullptr);
  if (err != cudaSuccess) {
    std::fprintf(stderr, "context_only: %s\n", cudaGetErrorString(err));
    return 1;
  }
  if (fa::settings().timing == 2)
    std::fprintf(stderr, "context-only: started at %.6f, context at %.6f s\n", started, now_seconds() - started);
  if (argc > 1 && std::strcmp(argv[1], "--copies") == 0 && !copy_rates()) {
    std::fprintf(stderr, "context_only: a copy failed: %s\n", cudaGetErrorString(cudaGetLastError()));
    return 1;
  }
  return 0;
}
