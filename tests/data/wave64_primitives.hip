// wave64_primitives.hip: every lane's result of HIP's cross-lane functions, for a table of cases,
// printed so that tests/test_wave64.py can compare them with AMD's documented formulas. Built by
// nvcc through fa's MI210 emulation (src_hip/wave64); would build with hipcc as well.
//
//   wave64_primitives            one line per case: OP WIDTH ARG: the 128 results of two wavefronts
//
// Lane l of wavefront w holds the value 1000 w + l, so a result names the lane it came from.
// Ballots print the 64-bit mask of lanes whose value is odd or, for the "ballot_half" case,
// whose lane is below 40. The AMD builtins: ds_bpermute with the byte address of lane l + ARG,
// readfirstlane of the value, and mbcnt_lo/hi's count of the set bits of ARG's mask
// (ARG * 0x01010101 in each word) below the lane.
#include <cstdio>
#include <hip/hip_runtime.h>

enum { SHFL, UP, DOWN, XOR, BALLOT, ANY, ALL, LANE, BPERMUTE, FIRSTLANE, MBCNT };

__global__ void cases(int op, int width, int arg, long long* out) {
  const int t = threadIdx.x, lane = __lane_id(), wave = t / 64;
  const int v = 1000 * wave + lane;
  long long r = 0;
  switch (op) {
    case SHFL: r = __shfl(v, arg, width); break;
    case UP: r = __shfl_up(v, (unsigned)arg, width); break;
    case DOWN: r = __shfl_down(v, (unsigned)arg, width); break;
    case XOR: r = __shfl_xor(v, arg, width); break;
    case BALLOT: r = (long long)__ballot(lane < arg); break;
    case ANY: r = __any(lane == arg); break;
    case ALL: r = __all(lane < arg); break;
    case BPERMUTE: r = __builtin_amdgcn_ds_bpermute(((lane + arg) & 63) << 2, v); break;
    case FIRSTLANE: r = __builtin_amdgcn_readfirstlane(v); break;
    case MBCNT: {
      const unsigned mask = (unsigned)arg * 0x01010101u;
      r = __builtin_amdgcn_mbcnt_hi(mask, __builtin_amdgcn_mbcnt_lo(mask, 0u));
      break;
    }
    default: r = lane + 1000 * (warpSize == 64); break;
  }
  out[t] = r;
}

int main() {
  const char* names[] = {"shfl", "up", "down", "xor", "ballot", "any", "all", "lane", "bpermute", "firstlane",
                         "mbcnt"};
  long long *d = nullptr, h[128];
  if (hipMalloc(&d, sizeof h) != hipSuccess) return 1;
  for (int op = SHFL; op <= MBCNT; ++op)
    for (int width : {64, 32, 16, 8, 4, 2, 1})
      for (int arg : {0, 1, 3, 5, 16, 31, 32, 33, 40, 63, 64, 70}) {
        if (op >= BALLOT && width != 64) continue;
        hipLaunchKernelGGL(cases, dim3(1), dim3(128), 0, 0, op, width, arg, d);
        if (hipMemcpy(h, d, sizeof h, hipMemcpyDeviceToHost) != hipSuccess) return 1;
        printf("%s %d %d:", names[op], width, arg);
        for (long long x : h) printf(" %lld", x);
        printf("\n");
      }
  return hipFree(d) == hipSuccess ? 0 : 1;
}
