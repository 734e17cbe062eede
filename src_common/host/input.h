// host/input.h: the course's input format, validated before anything is allocated:
//   int32 B, N, d, then per batch Q_b, K_b, V_b (N x d float32 each); the output is B*N*d float32.
// Sizes are 64-bit throughout: B*N*d reaches 56e6 in the course and more elsewhere.
// Also: a mapped input cut short while running is a one-line error (SIGBUS handler), and
// read_exact, the one way the programs read input bytes.
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include "program.h"

namespace fa {

struct Shape {
  int64_t B, N, d;
  int64_t elements() const { return B * N * d; }  // values in each of Q, K, V, O
  int64_t batch_elements() const { return N * d; }
  int64_t input_bytes() const { return 12 + 12 * elements(); }
};

struct InputFile {
  int fd;
  Shape shape;
  dev_t dev;  // the input's identity, so that an output naming the same file is refused
  ino_t ino;
};

// What a file that is not a regular one is, for errors ("input is a FIFO").
inline const char* file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// Opens and validates an input: a regular file, header present, B, N, d positive, d supported,
// sizes that fit in 64 bits, and a file size of exactly 12 + 12*B*N*d bytes. The open does not
// block (O_NONBLOCK: a FIFO with no writer would wait forever) and a file that is not regular
// is refused before anything is read from it.
inline InputFile open_input(const char* path) {
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  struct stat st;
  if (fd < 0) {
    const int err = errno;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))  // a socket: ENXIO
      fail(kExitUsage, "%s: input is %s, not a regular file", path, file_kind(st.st_mode));
    fail(kExitUsage, "%s: cannot open input: %s", path, std::strerror(err));
  }
  if (fstat(fd, &st) != 0) fail(kExitUsage, "%s: cannot stat input: %s", path, std::strerror(errno));
  if (!S_ISREG(st.st_mode)) fail(kExitUsage, "%s: input is %s, not a regular file", path, file_kind(st.st_mode));
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  int32_t header[3];
  ssize_t got = pread(fd, header, sizeof header, 0);
  if (got < 0) fail(kExitUsage, "%s: cannot read input: %s", path, std::strerror(errno));
  if (got == 0) fail(kExitUsage, "%s: empty file, expected a 12-byte header B, N, d", path);
  if (got != (ssize_t)sizeof header)
    fail(kExitUsage, "%s: short header (%zd bytes), expected a 12-byte header B, N, d", path, got);
  const char* names[3] = {"B", "N", "d"};
  for (int i = 0; i < 3; ++i)
    if (header[i] <= 0) fail(kExitUsage, "%s: %s = %d, must be positive", path, names[i], header[i]);
  Shape s = {header[0], header[1], header[2]};
  if (s.d != 32 && s.d != 64)
    fail(kExitUsage, "%s: d = %lld is not supported (the programs support d = 32 and 64)", path, (long long)s.d);
  // 12 + 12*B*N*d must fit in int64 (B*N fits: both are below 2^31).
  const int64_t max_elements = (INT64_MAX - 12) / 12;
  if (s.B * s.N > max_elements / s.d)
    fail(kExitUsage, "%s: B*N*d = %lld*%lld*%lld overflows 64-bit file sizes", path, (long long)s.B,
         (long long)s.N, (long long)s.d);
  if ((int64_t)st.st_size != s.input_bytes())
    fail(kExitUsage, "%s: file has %lld bytes, expected 12 + 12*B*N*d = %lld for B=%lld, N=%lld, d=%lld", path,
         (long long)st.st_size, (long long)s.input_bytes(), (long long)s.B, (long long)s.N, (long long)s.d);
  InputFile in = {fd, s, st.st_dev, st.st_ino};
  return in;
}

// A mapped input cut short while the program runs raises SIGBUS where the CPU reads past its
// new end: a one-line error naming the input, exit 1 and no output, as a read that comes up
// short gets. A SIGBUS elsewhere (not in the mapping) ends the program as it would have. Fixed
// storage and async-signal-safe calls only, since the handler runs them.
struct MappedInput {
  char path[4096];
  const char* base;
  size_t bytes;
};
inline MappedInput& mapped_input() {
  static MappedInput input = {"", nullptr, 0};
  return input;
}
inline void input_cut_short(int sig, siginfo_t* info, void*) {
  const MappedInput& in = mapped_input();
  const char* at = static_cast<const char*>(info->si_addr);
  if (!(at >= in.base && at < in.base + in.bytes)) {
    signal(sig, SIG_DFL);
    return;  // the faulting access runs again, and the default action ends the program
  }
  const char* parts[4] = {program_name(), ": error: ", in.path, ": input cut short while running\n"};
  for (const char* part : parts)
    if (write(STDERR_FILENO, part, std::strlen(part)) < 0) break;
  if (*pending_output()) unlink(pending_output());
  _exit(kExitFailure);
}
inline void fail_on_sigbus(const char* path, const char* base, size_t bytes) {
  MappedInput& in = mapped_input();
  std::snprintf(in.path, sizeof in.path, "%s", path);
  in.base = base;
  in.bytes = bytes;
  struct sigaction action;
  std::memset(&action, 0, sizeof action);
  action.sa_sigaction = input_cut_short;
  action.sa_flags = SA_SIGINFO;
  sigemptyset(&action.sa_mask);
  sigaction(SIGBUS, &action, nullptr);
}

// Byte offset of batch b's Q (K and V follow, N*d floats each).
inline int64_t batch_offset(const Shape& s, int64_t b) { return 12 + b * 3 * s.batch_elements() * 4; }

inline void read_exact(int fd, void* dst, int64_t bytes, int64_t offset, const char* path) {
  char* p = static_cast<char*>(dst);
  while (bytes > 0) {
    ssize_t got = pread(fd, p, (size_t)(bytes < (1 << 30) ? bytes : (1 << 30)), offset);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) fail(kExitFailure, "%s: read failed: %s", path, got < 0 ? std::strerror(errno) : "unexpected end");
    p += got, bytes -= got, offset += got;
  }
}

}  // namespace fa
