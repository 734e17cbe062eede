// host/program.h: what every program says of itself: its name as invoked, its usage, and its
// one-line errors "PROGRAM: error: ..." with exit code 2 for unusable input or output paths and
// settings, 1 for failures while running.
#pragma once

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <unistd.h>

namespace fa {

constexpr int kExitUsage = 2;    // bad arguments, bad input file, unwritable output, bad setting
constexpr int kExitFailure = 1;  // something failed while running (device, I/O)

inline const char*& program_name() {
  static const char* name = "fa";
  return name;
}

// The temporary output of this run while it has a name (see host/output.h): removed when the
// program fails or is stopped by a signal. A fixed buffer, since a signal handler reads it.
inline char* pending_output() {
  static char path[4096] = "";
  return path;
}

[[noreturn]] inline void fail(int exit_code, const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  std::fprintf(stderr, "%s: error: ", program_name());
  std::vfprintf(stderr, fmt, args);
  std::fputc('\n', stderr);
  va_end(args);
  if (*pending_output()) unlink(pending_output());
  // _Exit: the GPU programs may fail from a worker thread while others still run.
  std::fflush(nullptr);
  std::_Exit(exit_code);
}

// The program's name (for messages) from argv[0]: hw4, fa-cuda, ...
inline void name_program(char** argv) {
  const char* slash = argv[0] ? std::strrchr(argv[0], '/') : nullptr;
  program_name() = slash ? slash + 1 : (argv[0] ? argv[0] : "fa");
}

// "PROGRAM INPUT OUTPUT", or one of the listing flags the program answers (`flags`, for the
// usage line: "--kernels | --settings").
inline void check_usage(int argc, const char* flags) {
  if (argc == 3) return;
  std::fprintf(stderr, "usage: %s INPUT OUTPUT\n       %s %s\n", program_name(), program_name(), flags);
  std::exit(kExitUsage);
}

}  // namespace fa
