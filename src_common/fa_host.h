// fa_host.h: the host side every program shares (fa-cpu, fa-cuda, fa-hip).
//
//   - the course's input format, validated before anything is allocated:
//       int32 B, N, d, then per batch Q_b, K_b, V_b (N x d float32 each); output B*N*d float32;
//   - one-line errors "PROGRAM: error: ..." with exit code 2 for unusable input or output
//     paths and 1 for failures while running;
//   - the output appears at its path only when the run succeeded; a run ended any other way
//     leaves neither an output nor a temporary file (OutputFile below);
//   - the FA_TIMING=1 line "fa-timing: init=S read=S h2d=S kernel=S d2h=S write=S total=S".
// Sizes are 64-bit throughout: B*N*d reaches 56e6 in the course and more elsewhere.
#pragma once

#include <cerrno>
#include <chrono>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

namespace fa {

constexpr int kExitUsage = 2;    // bad arguments, bad input file, unwritable output
constexpr int kExitFailure = 1;  // something failed while running (device, I/O)

inline const char*& program_name() {
  static const char* name = "fa";
  return name;
}

// The named temporary output of this run, if it has one (see OutputFile): removed when the
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

inline double now_seconds() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

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

// The output file, as cp and dd users expect it:
//   - a new name or an existing regular file appears (is replaced) only when commit() is reached;
//     a run that ends in any other way (an error, Ctrl-C, SIGTERM, SIGKILL, a judge's time
//     limit) leaves nothing:
//       where the file system allows (Linux: ext4, xfs, btrfs, tmpfs), the data goes to an
//       unnamed file in the output's directory (O_TMPFILE), which commit() links to the name;
//       the kernel reclaims an unnamed file however the process ends;
//       elsewhere (NFS, say), to a named temporary ".NAME.XXXXXX" beside the output, renamed by
//       commit(), removed by fail() and by handlers for SIGINT, SIGTERM, SIGHUP and SIGQUIT.
//       Only SIGKILL, which no program can catch, leaves it behind there;
//   - a symbolic link: its target is written that way, in the target's directory; the link stays;
//   - an existing file that is not regular (a character device such as /dev/null, a FIFO) is
//     written in place, as cp and dd write it: it is never removed or replaced (a FIFO waits
//     for its reader; a write error, /dev/full's say, is exit 1);
//   - a directory, the input itself, a missing or unwritable directory or a name too long for
//     the file system are refused (exit 2) when the OutputFile is made: right after the input is
//     validated, before any work.
// FA_OUTPUT_TEMP=named forces the named temporary, for tests.
class OutputFile {
 public:
  OutputFile(const char* path, const InputFile& input) : path_(path) {
    if (!*path) fail(kExitUsage, "output path is empty");
    target_ = resolve_links(path);
    struct stat st;
    if (stat(target_.c_str(), &st) == 0) {
      if (S_ISDIR(st.st_mode)) fail(kExitUsage, "%s: output path is a directory", path);
      if (st.st_dev == input.dev && st.st_ino == input.ino) fail(kExitUsage, "%s: output is the input file", path);
      if (!S_ISREG(st.st_mode)) {
        open_in_place(st);
        return;
      }
    }
    std::string dir = ".", name = target_;
    size_t slash = name.rfind('/');
    if (slash != std::string::npos) dir = name.substr(0, slash + (slash == 0)), name = name.substr(slash + 1);
    if (name.empty()) fail(kExitUsage, "%s: output path names a directory", path);
    check_place(dir, name);
    if (!open_unnamed(dir)) open_named(dir, name);
  }
  void write(const void* src, int64_t bytes) {
    const char* p = static_cast<const char*>(src);
    while (bytes > 0) {
      ssize_t put = ::write(fd_, p, (size_t)(bytes < (1 << 30) ? bytes : (1 << 30)));
      if (put < 0 && errno == EINTR) continue;
      if (put <= 0) fail(kExitFailure, "%s: write failed: %s", path_.c_str(), std::strerror(put < 0 ? errno : EIO));
      p += put, bytes -= put;
    }
  }
  void commit() {
    if (in_place_) {
      if (close(fd_) != 0) fail(kExitFailure, "%s: write failed: %s", path_.c_str(), std::strerror(errno));
      return;
    }
    const char* dest = target_.c_str();
#ifdef O_PATH
    replaced_ = open(dest, O_PATH | O_NOFOLLOW | O_CLOEXEC);  // the output replaced, if any: see drop_replaced
#endif
    if (unnamed_) {
      // Remove an old output first: linkat does not replace a name, and ext4 writes back the
      // whole new file before a rename that replaces another one (0.1 s for a 218 MB output).
      unlink(dest);
      char self[64];
      std::snprintf(self, sizeof self, "/proc/self/fd/%d", fd_);
      if (linkat(AT_FDCWD, self, AT_FDCWD, dest, AT_SYMLINK_FOLLOW) != 0)
        fail(kExitFailure, "%s: cannot link output into place: %s", path_.c_str(), std::strerror(errno));
      if (close(fd_) != 0) {
        const int err = errno;
        unlink(dest);
        fail(kExitFailure, "%s: write failed: %s", path_.c_str(), std::strerror(err));
      }
      return;
    }
    if (close(fd_) != 0) fail(kExitFailure, "%s: write failed: %s", path_.c_str(), std::strerror(errno));
    if (rename(pending_output(), dest) != 0)
      fail(kExitFailure, "%s: cannot rename output into place: %s", path_.c_str(), std::strerror(errno));
    *pending_output() = '\0';
  }
  // The output that commit() replaced, held since: replacing it then cost only its name. Its
  // last reference frees its pages and blocks (0.02 s for 503 MB still in the page cache, 0.15 s
  // once written back, on the H100's host), which the GPU programs pay on a thread of their
  // own while the device is released; without this call, exit pays it.
  void drop_replaced() {
    if (replaced_ >= 0) close(replaced_);
    replaced_ = -1;
  }

 private:
  // The file a path names once its symbolic links are followed (it need not exist yet).
  std::string resolve_links(const char* path) const {
    std::string p = path;
    for (int hops = 0; hops < 40; ++hops) {
      struct stat st;
      if (lstat(p.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return p;
      char link[4096];
      ssize_t n = readlink(p.c_str(), link, sizeof link - 1);
      if (n < 0) fail(kExitUsage, "%s: cannot read output link: %s", path, std::strerror(errno));
      link[n] = '\0';
      size_t slash = p.rfind('/');
      p = link[0] == '/' || slash == std::string::npos ? std::string(link) : p.substr(0, slash + 1) + link;
    }
    fail(kExitUsage, "%s: too many levels of symbolic links", path);
  }
  // Before any work: the directory exists and is writable, and the name fits in it.
  void check_place(const std::string& dir, const std::string& name) const {
    struct stat st;
    if (stat(dir.c_str(), &st) != 0)
      fail(kExitUsage, "%s: cannot write output: %s: %s", path_.c_str(), dir.c_str(), std::strerror(errno));
    if (!S_ISDIR(st.st_mode)) fail(kExitUsage, "%s: cannot write output: %s is not a directory", path_.c_str(), dir.c_str());
    long name_max = pathconf(dir.c_str(), _PC_NAME_MAX);
    if (name_max <= 0) name_max = 255;
    if ((long)name.size() > name_max)
      fail(kExitUsage, "%s: output name is too long (%zu bytes; this file system allows %ld)", path_.c_str(),
           name.size(), name_max);
    if (target_.size() >= 4096) fail(kExitUsage, "%s: output path is too long", path_.c_str());
    if (access(dir.c_str(), W_OK | X_OK) != 0)
      fail(kExitUsage, "%s: cannot write output: %s", path_.c_str(), std::strerror(errno));
  }
  // Devices and FIFOs: nothing to replace; written like dd writes them.
  void open_in_place(const struct stat& st) {
    if (S_ISSOCK(st.st_mode)) fail(kExitUsage, "%s: output is a socket", path_.c_str());
    signal(SIGPIPE, SIG_IGN);  // a FIFO whose reader has gone: a write error (exit 1), not a silent death
    fd_ = open(target_.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd_ < 0) fail(kExitUsage, "%s: cannot write output: %s", path_.c_str(), std::strerror(errno));
    in_place_ = true;
  }
  // true: an unnamed file is open; false: this file system (or FA_OUTPUT_TEMP) wants a named one.
  bool open_unnamed(const std::string& dir) {
    const char* forced = std::getenv("FA_OUTPUT_TEMP");
    if (forced && std::strcmp(forced, "named") == 0) return false;
#ifdef O_TMPFILE
    if (access("/proc/self/fd", X_OK) != 0) return false;  // commit() links through /proc
    fd_ = open(dir.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0644);
    if (fd_ >= 0) return unnamed_ = true;
    if (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL) return false;  // no O_TMPFILE here
    fail(kExitUsage, "%s: cannot write output: %s", path_.c_str(), std::strerror(errno));
#else
    (void)dir;
    return false;
#endif
  }
  void open_named(const std::string& dir, const std::string& name) {
    // ".NAME.XXXXXX", or a shorter name where that would not fit the file system's limit.
    std::string tmp = dir + "/." + (name.size() + 8 <= 255 ? name : std::string("fa-output")) + ".XXXXXX";
    if (tmp.size() >= 4096) fail(kExitUsage, "%s: output path is too long", path_.c_str());
    // Handlers first, so that no moment exists with a named file and no one to remove it.
    struct sigaction action;
    std::memset(&action, 0, sizeof action);
    action.sa_handler = remove_pending_output_and_die;
    sigemptyset(&action.sa_mask);
    const int signals[4] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
    for (int i = 0; i < 4; ++i) {
      struct sigaction current;
      sigaction(signals[i], nullptr, &current);
      if (current.sa_handler != SIG_IGN) sigaction(signals[i], &action, nullptr);  // nohup's SIGHUP stays ignored
    }
    std::memcpy(pending_output(), tmp.c_str(), tmp.size() + 1);
    fd_ = mkstemp(pending_output());
    if (fd_ < 0) {
      const int err = errno;
      *pending_output() = '\0';
      fail(kExitUsage, "%s: cannot write output: %s", path_.c_str(), std::strerror(err));
    }
    fchmod(fd_, 0644);
  }
  static void remove_pending_output_and_die(int sig) {
    if (*pending_output()) unlink(pending_output());  // async-signal-safe
    signal(sig, SIG_DFL);
    raise(sig);  // end as the signal would have ended us: the parent sees which one
  }

  std::string path_;    // as the user gave it, for messages
  std::string target_;  // the file written: path_ with its symbolic links followed
  int fd_ = -1;
  int replaced_ = -1;
  bool unnamed_ = false;
  bool in_place_ = false;
};

// Seconds spent per stage; stages that overlap (streamed pipelines) are summed per stage.
inline std::string no_spaces(std::string text) {
  for (char& c : text)
    if (c == ' ') c = '_';
  return text;
}

// `impl` names the kernel that ran, `arch` and `device` the device it ran on (result records;
// spaces in the device name become '_' to keep the line key=value).
struct Timing {
  double init = 0, read = 0, h2d = 0, kernel = 0, d2h = 0, write = 0, total = 0;
  std::string impl = "cpu", arch = "cpu", device = "cpu";
  void print_if_asked() const {
    const char* flag = std::getenv("FA_TIMING");
    if (!flag || !*flag || std::strcmp(flag, "0") == 0) return;
    std::fprintf(stderr,
                 "fa-timing: init=%.6f read=%.6f h2d=%.6f kernel=%.6f d2h=%.6f write=%.6f total=%.6f impl=%s arch=%s "
                 "device=%s\n",
                 init, read, h2d, kernel, d2h, write, total, impl.c_str(), arch.c_str(), no_spaces(device).c_str());
  }
};

// Checks for "PROGRAM INPUT OUTPUT"; errors name the program as it was invoked (hw4, fa-cuda, ...).
inline void parse_args(int argc, char** argv) {
  const char* slash = argv[0] ? std::strrchr(argv[0], '/') : nullptr;
  program_name() = slash ? slash + 1 : (argv[0] ? argv[0] : "fa");
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s INPUT OUTPUT\n", program_name());
    std::exit(kExitUsage);
  }
}

}  // namespace fa
