// Blocks per SM by CUDA's own occupancy calculator (cuda_occupancy.h), for the tests.
#include <cstdio>
#include <cuda_occupancy.h>
int main(int argc, char** argv) {
  cudaOccDeviceProp prop;
  int major, minor, threads_sm; long smem_sm, smem_optin, reserved;
  std::sscanf(argv[1], "%d", &major); std::sscanf(argv[2], "%d", &minor); std::sscanf(argv[3], "%d", &threads_sm);
  std::sscanf(argv[4], "%ld", &smem_sm); std::sscanf(argv[5], "%ld", &smem_optin); std::sscanf(argv[6], "%ld", &reserved);
  prop.computeMajor = major; prop.computeMinor = minor; prop.maxThreadsPerBlock = 1024;
  prop.maxThreadsPerMultiprocessor = threads_sm; prop.regsPerBlock = 65536; prop.regsPerMultiprocessor = 65536;
  prop.warpSize = 32; prop.sharedMemPerBlock = 48 * 1024; prop.sharedMemPerMultiprocessor = smem_sm;
  prop.numSms = 1; prop.sharedMemPerBlockOptin = smem_optin; prop.reservedSharedMemPerBlock = reserved;
  int regs, threads; long smem, dyn;
  while (std::scanf("%d %d %ld %ld", &regs, &threads, &smem, &dyn) == 4) {
    cudaOccFuncAttributes attr;
    attr.maxThreadsPerBlock = 1024; attr.numRegs = regs; attr.sharedSizeBytes = smem;
    attr.partitionedGCConfig = PARTITIONED_GC_OFF; attr.shmemLimitConfig = FUNC_SHMEM_LIMIT_OPTIN;
    attr.maxDynamicSharedSizeBytes = smem_optin - smem; attr.numBlockBarriers = 1;
    cudaOccDeviceState state;
    cudaOccResult result;
    cudaOccError err = cudaOccMaxActiveBlocksPerMultiprocessor(&result, &prop, &attr, &state, threads, dyn);
    std::printf("%d\n", err == CUDA_OCC_SUCCESS ? result.activeBlocksPerMultiprocessor : -1);
  }
}
