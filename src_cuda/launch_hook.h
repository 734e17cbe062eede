// launch_hook.h: what a layer that takes every launch of a student's program needs of the CUDA
// runtime (src_cuda/gtx1080/fa_gtx1080.h for hw4.cu, the MI210 emulation's hip/hip_runtime.h
// for hw4.hip). nvcc's launch stub for <<<>>> calls __cudaLaunchKernel, exported by
// libcudart.so: built with -cudart shared, a layer's own definition in the program comes first,
// and the runtime's is reached through dlsym(RTLD_NEXT) (runtime_launch). kernel_name gives the
// launched kernel's name for the layer's lines and the launch log.
#pragma once

#include <cuda_runtime.h>
#include <cxxabi.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

namespace fa_launch_hook {

using LaunchFn = cudaError_t (*)(cudaKernel_t, dim3, dim3, void**, size_t, cudaStream_t);

// The runtime's own __cudaLaunchKernel; null, said in one line from `layer`, where the program
// was not built with the shared runtime.
inline LaunchFn runtime_launch(const char* layer) {
  static const auto next = reinterpret_cast<LaunchFn>(dlsym(RTLD_NEXT, "__cudaLaunchKernel"));
  if (!next)
    std::fprintf(stderr, "%s: the CUDA runtime's __cudaLaunchKernel was not found (build with -cudart shared)\n",
                 layer);
  return next;
}

// "void attention<64>(float const*, ...)" -> "attention<64>": the runtime knows a kernel's name
// (CUDA 12.3 on), else the symbol table; looked up once a kernel, as launches are many.
inline std::string kernel_name(const void* func) {
  static auto& known = *new std::map<const void*, std::string>;
  const auto found = known.find(func);  // C++11: the course's line builds with -std=c++11
  if (found != known.end()) return found->second;
  const char* symbol = nullptr;
#if CUDART_VERSION >= 12030
  if (cudaFuncGetName(&symbol, func) != cudaSuccess) symbol = nullptr;
#endif
  Dl_info info;
  if (symbol == nullptr) {
    if (!dladdr(func, &info) || !info.dli_sname) return known[func] = "a kernel";
    symbol = info.dli_sname;
  }
  int status = 0;
  char* pretty = abi::__cxa_demangle(symbol, nullptr, nullptr, &status);
  std::string name = status == 0 && pretty ? pretty : symbol;
  std::free(pretty);
  name = name.substr(0, name.find('('));
  return known[func] = name.compare(0, 5, "void ") == 0 ? name.substr(5) : name;
}

// A grid or block with a dimension of 0 runs no thread, and the runtime refuses it with nothing
// to say which size was 0 (a count that rounded down, N below a block's rows): said in one line
// from `layer` with both sizes, once a kernel; true where it is so (the layer then refuses it).
inline bool empty_launch(const char* layer, const std::string& kernel, dim3 grid, dim3 block) {
  if (grid.x && grid.y && grid.z && block.x && block.y && block.z) return false;
  static auto& said = *new std::map<std::string, bool>;
  if (said[kernel]) return true;
  said[kernel] = true;
  std::fprintf(stderr, "%s: %s: a launch of a grid of %u x %u x %u blocks of %u x %u x %u threads: a dimension of 0, "
               "so no thread runs (refused)\n", layer, kernel.c_str(), grid.x, grid.y, grid.z, block.x, block.y,
               block.z);
  return true;
}

}  // namespace fa_launch_hook
