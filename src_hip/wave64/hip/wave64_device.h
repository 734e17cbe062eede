// wave64_device.h: the MI210's 64-lane wavefront on an NVIDIA GPU, for fa's emulation of a
// student's hw4.hip (included by hip_runtime.h of this folder only).
//
// A wavefront is 64 consecutive threads of the block (linear thread index t: lanes t % 64), as
// on AMD, so on NVIDIA it is two warps: the lower half (lanes 0..31) and the upper (32..63).
// Each cross-lane function computes, for every lane, the lane it reads with HIP's own index
// arithmetic (ROCm clr, hipamd/include/hip/amd_detail/amd_warp_functions.h), then reads a lane of
// its own warp with a CUDA shuffle, or a lane of the other half from that half's values in shared
// memory.
//
// How the two halves meet. A named barrier of the two warps (bar.sync id, 64) is what
// mfma_on_cuda.h uses, but it cannot serve here: the hardware has 16 barrier ids, __syncthreads
// takes id 0, so a 1024-thread block's 16 wavefronts would need one id too many; and a warp whose
// partner never arrives (a shuffle inside `if (threadIdx.x < 32)`) would wait forever, where a
// student must get a line. So each half publishes its values in its slot and then raises a
// counter; the other half waits for the counter, with a limit of kSpinCycles clock cycles after
// which it reports the half that never came; halves that meet from different calls (op and line)
// are told at once, since on AMD both halves make every call together. Slots are double-buffered
// by the counter's parity: a half can only write exchange n + 2's values after it has seen the
// other half arrive at n + 1, that is after the other half has read exchange n's. Shared memory is
// not cleared between blocks, so a counter carries a tag of its block (the grid's launch number,
// %gridid, and the block's index): a value left by another block reads as "no exchange yet".
//
// Where the slots are: appended by the launch (hip_runtime.h) to the dynamic shared memory,
// scratch_bytes() of it after the student's own; the device finds them from the end
// (%dynamic_smem_size), so the student's static and dynamic LDS are counted exactly as the MI210
// counts them, without ours.
#pragma once

#include <string>

namespace fa_wave64 {

// ---------------------------------------------------------------- the fault record
enum FaultKind { kNoFault, kPartialWarp, kMissingLane, kPartnerAbsent, kNoScratch, kHalvesApart };
enum Op { kShfl, kShflUp, kShflDown, kShflXor, kBallot, kAny, kAll, kActivemask, kBpermute, kReadfirstlane,
          kWaveBarrier };

struct Fault {
  int kind, op;
  unsigned block[3], threads;  // the block, and its size in threads
  int wave, lane, source;      // the wavefront, the lane that stopped, the lane it read (kHalvesApart: the
                               // other half's call, as site() codes it)
  unsigned active;             // the lanes of its warp that called
  int line;                    // the student's line of the call (__LINE__ where the macro was used)
};

__device__ Fault* fault_record;  // host memory the device writes through (hip_runtime.h)
__device__ int fault_claimed;    // the first fault is the one told

inline const char* op_name(int op) {
  static const char* names[] = {"__shfl", "__shfl_up", "__shfl_down", "__shfl_xor",
                                "__ballot", "__any", "__all", "__activemask",
                                "__builtin_amdgcn_ds_bpermute", "__builtin_amdgcn_readfirstlane",
                                "__builtin_amdgcn_wave_barrier"};
  return op >= 0 && op < 11 ? names[op] : "a cross-lane function";
}

// A call's op and line in one word, as the two halves compare them at each exchange.
__host__ __device__ inline unsigned site(int op, int line) { return (unsigned)op << 24 | ((unsigned)line & 0xffffff); }

// The fault in words, one line, what the student can act on.
inline std::string describe(const Fault& f) {
  char where[160];
  std::snprintf(where, sizeof where, "block (%u,%u,%u) of %u threads, wavefront %d (threads %d..%d)", f.block[0],
                f.block[1], f.block[2], f.threads, f.wave, 64 * f.wave, 64 * f.wave + 63);
  char line[32] = "";
  if (f.line > 0) std::snprintf(line, sizeof line, " at line %d", f.line);
  const std::string op = std::string(op_name(f.op)) + line, at = std::string(where);
  char text[512];
  switch (f.kind) {
    case kPartialWarp:
      std::snprintf(text, sizeof text, "%s called by only %d of the 32 lanes %d..%d of %s: a shuffle inside a branch "
                    "that not every lane of the 64-lane wavefront takes (on the MI210 it reads lanes that did not "
                    "call it)", op.c_str(), __builtin_popcount(f.active), 64 * f.wave + (f.lane & 32),
                    64 * f.wave + (f.lane & 32) + 31, at.c_str());
      break;
    case kMissingLane:
      std::snprintf(text, sizeof text, "%s in lane %d reads lane %d of %s, which the block does not have: a block "
                    "whose size is not a multiple of 64 leaves that wavefront short", op.c_str(), f.lane, f.source,
                    at.c_str());
      break;
    case kPartnerAbsent:
      std::snprintf(text, sizeof text, "%s in %s: lanes %d..%d waited in vain for lanes %d..%d, which never called "
                    "it: a cross-lane function inside a branch that only half of the 64-lane wavefront takes",
                    op.c_str(), at.c_str(), f.lane & 32, (f.lane & 32) + 31, 32 - (f.lane & 32),
                    63 - (f.lane & 32));
      break;
    case kHalvesApart: {
      const unsigned mine = site(f.op, f.line), theirs = (unsigned)f.source;
      const unsigned lower = f.lane < 32 ? mine : theirs, upper = f.lane < 32 ? theirs : mine;
      std::snprintf(text, sizeof text, "the two halves of %s met at different cross-lane calls: lanes 0..31 at %s "
                    "line %u, lanes 32..63 at %s line %u, where a lane read the other half: a cross-lane call in a "
                    "branch or loop that not every lane of the 64-lane wavefront takes (the MI210 runs it with the "
                    "other lanes switched off; the emulation cannot run the halves apart)",
                    at.c_str(), op_name((int)(lower >> 24)), lower & 0xffffff, op_name((int)(upper >> 24)),
                    upper & 0xffffff);
      break;
    }
    case kNoScratch:
      std::snprintf(text, sizeof text, "%s in %s: launched without fa's emulation layer (its scratch is missing)",
                    op.c_str(), at.c_str());
      break;
    default:
      std::snprintf(text, sizeof text, "unknown fault %d", f.kind);
  }
  return text;
}

// ---------------------------------------------------------------- the scratch
struct Slot {
  unsigned data[2][2][32];   // [parity][half][lane]
  unsigned long long tag[2];  // [half]: block tag in the high 32 bits, exchanges made in the low
  unsigned sites[2][2];       // [parity][half]: the call (site()) each half made the exchange at
};
static_assert(sizeof(Slot) % 16 == 0, "slots keep the scratch 16-byte aligned");

__host__ __device__ constexpr size_t scratch_offset(size_t dynamic) { return (dynamic + 15) & ~size_t(15); }
__host__ __device__ constexpr size_t scratch_bytes(unsigned threads) { return (threads + 63) / 64 * sizeof(Slot); }

// About one second at the H100's clock: a half that waits longer for the other is told as absent.
constexpr long long kSpinCycles = 2000000000LL;

#ifdef __CUDACC__
__device__ __forceinline__ unsigned block_threads() { return blockDim.x * blockDim.y * blockDim.z; }
__device__ __forceinline__ unsigned thread_index() {
  return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
}
__device__ __forceinline__ unsigned cuda_activemask() {
  unsigned m;
  asm volatile("activemask.b32 %0;" : "=r"(m));
  return m;
}
// Lanes of the block that exist in this thread's wavefront (64, or fewer in the last one).
__device__ __forceinline__ unsigned wave_lanes(unsigned t) {
  const unsigned rest = block_threads() - (t & ~63u);
  return rest < 64 ? rest : 64;
}
// Lanes of this thread's warp that exist, as a warp mask.
__device__ __forceinline__ unsigned warp_lanes_mask(unsigned t) {
  const unsigned rest = block_threads() - (t & ~31u);
  return rest >= 32 ? 0xffffffffu : (1u << rest) - 1;
}

__device__ __noinline__ void fail(int kind, int op, unsigned t, int source, unsigned active, int line) {
  volatile Fault* v = fault_record;
  if (atomicCAS(&fault_claimed, 0, 1) == 0) {
    if (v) {
      v->op = op, v->block[0] = blockIdx.x, v->block[1] = blockIdx.y, v->block[2] = blockIdx.z;
      v->threads = block_threads(), v->wave = t / 64, v->lane = t % 64, v->source = source, v->active = active;
      v->line = line;
      __threadfence_system();
      v->kind = kind;  // last: the host reads a whole record once it sees a kind
      __threadfence_system();
    } else {
      printf("fa-wave64: cross-lane function %d at line %d: fault %d in block (%u,%u,%u), lane %u\n", op, line,
             kind, blockIdx.x, blockIdx.y, blockIdx.z, t % 64);
    }
  } else {
    // Another lane claimed the fault (the lower halves of many wavefronts time out together): a
    // trap here would end the kernel before that lane's record reached the host, so wait for it.
    const long long start = clock64();
    while (!(v && v->kind) && clock64() - start < kSpinCycles) {
    }
  }
  __trap();
}

__device__ __forceinline__ Slot* slot(unsigned t, int op, int line) {
  extern __shared__ __align__(16) unsigned char fa_wave64_dynamic[];
  unsigned size;
  asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(size));
  const unsigned need = (unsigned)scratch_bytes(block_threads());
  if (size < need) fail(kNoScratch, op, t, -1, cuda_activemask(), line);
  return reinterpret_cast<Slot*>(fa_wave64_dynamic + (size - need)) + t / 64;
}

// This block's tag: the same for both halves, different for every block of every launch.
__device__ __forceinline__ unsigned long long block_tag() {
  unsigned long long grid;
  asm("mov.u64 %0, %%gridid;" : "=l"(grid));
  const unsigned long long b = blockIdx.x + (unsigned long long)gridDim.x * (blockIdx.y + (unsigned long long)gridDim.y * blockIdx.z);
  unsigned long long h = grid * 0x9E3779B97F4A7C15ull ^ (b + 1) * 0xC2B2AE3D27D4EB4Full;
  return (h ^ (h >> 29)) & ~0xffffffffull;
}

// One exchange between the two halves of the wavefront: every calling lane (members) publishes
// `value` (a vote: the leader alone, in position 0); returns the other half's values. `needs`: some
// lane of this half reads the other half's (a vote always does); only then do halves met from
// different calls spoil this half's result (a shuffle whose lanes all read their own half is right
// whatever the other half called).
__device__ __forceinline__ const volatile unsigned* meet(unsigned t, int op, unsigned value, unsigned members,
                                                         bool vote, bool needs, int line) {
  Slot* s = slot(t, op, line);
  const int half = (t >> 5) & 1, lane = t & 31, leader = __ffs(members) - 1;
  volatile unsigned long long* tag = s->tag;
  const unsigned long long mine = block_tag();
  const unsigned long long had = tag[half];
  const unsigned n = ((had & ~0xffffffffull) == mine ? (unsigned)had : 0u) + 1u;
  volatile unsigned* out = s->data[n & 1][half];
  if (!vote) out[lane] = value;
  else if (lane == leader) out[0] = value;
  const unsigned here = site(op, line);
  if (lane == leader) ((volatile unsigned*)s->sites[n & 1])[half] = here;
  __threadfence_block();
  __syncwarp(members);
  if (lane == leader) tag[half] = mine | n;
  __syncwarp(members);
  const long long start = clock64();
  for (;;) {
    const unsigned long long theirs = tag[half ^ 1];
    if ((theirs & ~0xffffffffull) == mine && (unsigned)theirs >= n) break;
    if (clock64() - start > kSpinCycles) fail(kPartnerAbsent, op, t, -1, members, line);
  }
  __threadfence_block();
  // On the MI210 both halves make every call together; halves at different calls took a branch
  // apart, where the real wavefront runs the call with the other half's lanes switched off.
  const unsigned there = ((volatile unsigned*)s->sites[n & 1])[half ^ 1];
  if (there != here && needs) fail(kHalvesApart, op, t, (int)there, members, line);
  return s->data[n & 1][half ^ 1];
}

// The lane HIP's formulas make lane `self` read (amd_warp_functions.h), before ds_bpermute takes
// it modulo 64. A lane whose source is out of its segment reads itself. (Also a host function,
// for tests/test_wave64.py to check it without a GPU.)
__host__ __device__ __forceinline__ int source_lane(int op, int self, int arg, int width) {
  switch (op) {
    case kShfl:  // index = (src & (width-1)) + (self & ~(width-1))
    case kBpermute:  // the lane an address names (ds_bpermute's own arithmetic; its caller passes addr / 4)
    case kReadfirstlane:  // the first active lane (its caller finds it)
      return (arg & (width - 1)) + (self & ~(width - 1));
    case kShflUp: {  // index = self - delta; own value below the segment's start
      const int index = self - arg;
      return index < (self & ~(width - 1)) ? self : index;
    }
    case kShflDown:  // own value where (self & (width-1)) + delta >= width
      return (int)((self & (width - 1)) + (unsigned)arg) >= width ? self : self + arg;
    default: {  // __shfl_xor: index = self ^ mask; own value where index >= ((self+width) & ~(width-1))
      const int index = self ^ arg;
      return index >= ((self + width) & ~(width - 1)) ? self : index;
    }
  }
}

// Whether any lane can read from the other half, decided from what both halves pass (the same
// width and offset in every lane, as in any sensible use), so both decide alike.
__host__ __device__ __forceinline__ bool crosses(int op, int arg, int width) {
  if (op == kShflXor) return (arg & 32) != 0;
  if (op == kShfl || op == kBpermute || op == kReadfirstlane) return width > 32;
  return width > 32 && arg != 0;
}

__device__ __forceinline__ unsigned shuffle32(int op, unsigned v, int arg, int width, int line) {
  const unsigned t = thread_index(), exists = warp_lanes_mask(t), members = cuda_activemask();
  if ((members & exists) != exists) fail(kPartialWarp, op, t, -1, members, line);
  const int self = t & 63;
  const int src = source_lane(op, self, arg, width) & 63;  // ds_bpermute: address bits [7:2]
  if ((unsigned)src >= wave_lanes(t)) fail(kMissingLane, op, t, src, members, line);
  const unsigned near = __shfl_sync(members, v, src & 31);
  if (kWave == 32 || !crosses(op, arg, width) || wave_lanes(t) <= 32) return near;  // 32 lanes: one warp
  const bool across = (src >> 5) != (self >> 5);
  const volatile unsigned* other = meet(t, op, v, members, false, __any_sync(members, across), line);
  return across ? other[src & 31] : near;
}

template <class T>
__device__ __forceinline__ T shuffle(int op, T v, int arg, int width, int line) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8, "HIP's shuffles take 32- and 64-bit values");
  unsigned w[2] = {0, 0};
  memcpy(w, &v, sizeof(T));
  w[0] = shuffle32(op, w[0], arg, width, line);
  if (sizeof(T) == 8) w[1] = shuffle32(op, w[1], arg, width, line);  // as HIP does: two 32-bit shuffles
  memcpy(&v, w, sizeof(T));
  return v;
}

// A vote of the calling lanes of the wavefront: each half's word, combined.
__device__ __forceinline__ unsigned long long vote(int op, int predicate, int line) {
  const unsigned t = thread_index(), members = cuda_activemask();
  const unsigned ballot = __ballot_sync(members, predicate);
  unsigned word = op == kActivemask ? members : op == kAny ? ballot != 0 : op == kAll ? ballot == members : ballot;
  if (kWave == 32 || wave_lanes(t) <= 32) return word;
  const unsigned theirs = meet(t, op, word, members, true, true, line)[0];
  if (op == kAny) return word | theirs;
  if (op == kAll) return word & theirs;
  const bool upper = (t >> 5) & 1;
  return upper ? (unsigned long long)theirs | (unsigned long long)word << 32
               : (unsigned long long)word | (unsigned long long)theirs << 32;
}
#endif  // __CUDACC__

}  // namespace fa_wave64

#ifdef __CUDACC__
// HIP's names, each taken over by a function-like macro that passes the caller's line for the fault
// line: CUDA declares its own 32-lane __shfl, __ballot, __activemask, __any and __all with other
// signatures (its headers come first, so their declarations are not rewritten).
template <class T>
__device__ __forceinline__ T fa_wave64_shfl(int line, T v, int src, int width = fa_wave64::kWave) {
  return fa_wave64::shuffle(fa_wave64::kShfl, v, src, width, line);
}
template <class T>
__device__ __forceinline__ T fa_wave64_shfl_up(int line, T v, unsigned delta, int width = fa_wave64::kWave) {
  return fa_wave64::shuffle(fa_wave64::kShflUp, v, (int)delta, width, line);
}
template <class T>
__device__ __forceinline__ T fa_wave64_shfl_down(int line, T v, unsigned delta, int width = fa_wave64::kWave) {
  return fa_wave64::shuffle(fa_wave64::kShflDown, v, (int)delta, width, line);
}
template <class T>
__device__ __forceinline__ T fa_wave64_shfl_xor(int line, T v, int mask, int width = fa_wave64::kWave) {
  return fa_wave64::shuffle(fa_wave64::kShflXor, v, mask, width, line);
}
__device__ __forceinline__ unsigned long long fa_wave64_ballot(int line, int p) {
  return fa_wave64::vote(fa_wave64::kBallot, p, line);
}
__device__ __forceinline__ int fa_wave64_any(int line, int p) { return (int)fa_wave64::vote(fa_wave64::kAny, p, line); }
__device__ __forceinline__ int fa_wave64_all(int line, int p) { return (int)fa_wave64::vote(fa_wave64::kAll, p, line); }
__device__ __forceinline__ unsigned long long fa_wave64_activemask(int line) {
  return fa_wave64::vote(fa_wave64::kActivemask, 1, line);
}
__device__ __forceinline__ unsigned fa_wave64_lane_id() { return fa_wave64::thread_index() & (fa_wave64::kWave - 1); }

// The AMD builtins a student may call directly, with the judged toolchain's (clang 15, ROCm 5.2)
// signatures: int in and out, so a float passed is converted, as there.
__device__ __forceinline__ int fa_wave64_ds_bpermute(int line, int address, int v) {  // the lane address / 4 names
  return fa_wave64::shuffle(fa_wave64::kBpermute, v, address >> 2, fa_wave64::kWave, line);
}
__device__ __forceinline__ int fa_wave64_readfirstlane(int line, int v) {  // the first active lane's value
  const unsigned t = fa_wave64::thread_index(), members = fa_wave64::cuda_activemask();
  if ((members & fa_wave64::warp_lanes_mask(t)) != fa_wave64::warp_lanes_mask(t))  // in a branch: legal on AMD;
    return __shfl_sync(members, v, __ffs(members) - 1);  // this half's first active lane (the other's not asked)
  const unsigned long long active = fa_wave64::vote(fa_wave64::kReadfirstlane, 1, line);
  return fa_wave64::shuffle(fa_wave64::kReadfirstlane, v, __ffsll((long long)active) - 1, fa_wave64::kWave, line);
}
// mbcnt: the set bits of the mask below this lane, the low word's (lanes 0..31) or the high word's (32..63).
__device__ __forceinline__ unsigned fa_wave64_mbcnt_lo(unsigned mask, unsigned add) {
  const unsigned lane = fa_wave64_lane_id();
  return __popc(mask & (lane >= 32 ? 0xffffffffu : (1u << lane) - 1)) + add;
}
__device__ __forceinline__ unsigned fa_wave64_mbcnt_hi(unsigned mask, unsigned add) {
  const unsigned lane = fa_wave64_lane_id();
  return __popc(mask & (lane >= 32 ? (1u << (lane - 32)) - 1 : 0u)) + add;
}

// wave_barrier: on CDNA a wavefront's lanes run in step, so it waits for no other wavefront of the
// block (only s_barrier, __syncthreads, does); here a wavefront is two warps, which meet at it as
// one wavefront's lanes would be there together (the lanes of each half that reach it). Not
// emulated: a wave barrier that one half of a wavefront never reaches (a branch on lane < 32),
// legal on AMD: the other half waits for it and is told as absent, as a shuffle would be.
__device__ __forceinline__ void fa_wave64_wave_barrier(int line) {
  __threadfence_block();
  (void)fa_wave64::vote(fa_wave64::kWaveBarrier, 1, line);
  __threadfence_block();
}

#define __shfl(...) fa_wave64_shfl(__LINE__, __VA_ARGS__)
#define __shfl_up(...) fa_wave64_shfl_up(__LINE__, __VA_ARGS__)
#define __shfl_down(...) fa_wave64_shfl_down(__LINE__, __VA_ARGS__)
#define __shfl_xor(...) fa_wave64_shfl_xor(__LINE__, __VA_ARGS__)
#define __ballot(p) fa_wave64_ballot(__LINE__, p)
#define __ballot64(p) fa_wave64_ballot(__LINE__, p)
#define __any(p) fa_wave64_any(__LINE__, p)
#define __all(p) fa_wave64_all(__LINE__, p)
#define __activemask() fa_wave64_activemask(__LINE__)
#define __lane_id fa_wave64_lane_id
#define __builtin_amdgcn_ds_bpermute(address, v) fa_wave64_ds_bpermute(__LINE__, address, v)
#define __builtin_amdgcn_readfirstlane(v) fa_wave64_readfirstlane(__LINE__, v)
#define __builtin_amdgcn_mbcnt_lo(mask, add) fa_wave64_mbcnt_lo(mask, add)
#define __builtin_amdgcn_mbcnt_hi(mask, add) fa_wave64_mbcnt_hi(mask, add)
#define __builtin_amdgcn_wave_barrier() fa_wave64_wave_barrier(__LINE__)
#define __builtin_amdgcn_s_barrier() __syncthreads()
#endif  // __CUDACC__
