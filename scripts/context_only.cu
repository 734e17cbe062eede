// context_only.cu: the floor under fa-cuda's whole process. It creates the CUDA context, as
// fa-cuda's init thread does first, and exits through the runtime's own teardown: a CUDA
// program can take no less time on this GPU with the same settings (scripts/startup_floor.py
// runs it as it is and with fa-cuda's start-up setting, CUDA_DEVICE_MAX_CONNECTIONS=1).
// FA_TIMING=2 prints "context-only: started at T, context at C s" (T on the monotonic clock,
// C since T), so that the script can tell start-up from exit.
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

int main() {
  const double started = now_seconds();
  const cudaError_t err = cudaFree(nullptr);
  if (err != cudaSuccess) {
    std::fprintf(stderr, "context_only: %s\n", cudaGetErrorString(err));
    return 1;
  }
  if (fa::settings().timing == 2)
    std::fprintf(stderr, "context-only: started at %.6f, context at %.6f s\n", started, now_seconds() - started);
  return 0;
}
