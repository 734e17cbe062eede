// host/output.h: the output file, one rule for every program (and for fa's own writers:
// fa_cli/files.py's atomic_file follows it too).
//
//   - A new name or an existing regular file is put in place atomically, only when commit() is
//     reached: the path is never missing, two runs writing one path both succeed and the file
//     is one run's whole output (the last one's), and a run that ends any other way (an error,
//     Ctrl-C, SIGTERM, SIGKILL, a judge's time limit) leaves nothing:
//       the data goes to an unnamed file in the output's directory (O_TMPFILE), which the
//       kernel reclaims however the process ends. commit() links it to the name; where a file
//       has the name already, it links it to a temporary name beside it (".NAME.PID.XXXXXX")
//       and exchanges the two names (renameat2 RENAME_EXCHANGE), then unlinks the old file
//       from the temporary name. An exchange, unlike a rename over the old file, does not make
//       ext4 write the new file back first (0.1 s for a 218 MB output);
//       where the file system has no unnamed files (NFS, say) or FA_OUTPUT_TEMP=named asks,
//       the data goes to that temporary name from the start, removed by fail() and by
//       handlers for SIGINT, SIGTERM, SIGHUP and SIGQUIT; only SIGKILL, which no program can
//       catch, leaves it behind there (fa removes those whose process is gone);
//       where the file system cannot exchange names, a rename puts the file in place.
//   - A new file's mode follows the umask; a replaced file keeps its mode where the user owns it.
//   - A symbolic link: its target is written that way, in the target's directory, and the link
//     stays. A link in a sticky world-writable directory (/tmp) is followed only where it is the
//     user's own or the directory owner's: the rule of the kernel's fs.protected_symlinks,
//     which the program applies itself at each link, since it follows them itself to find the
//     directory the file goes to.
//   - An existing file that is not regular (a device such as /dev/null, a FIFO) is written in
//     place, as cp and dd write it: never removed or replaced (a FIFO waits for its reader; a
//     write error, /dev/full's say, is exit 1).
//   - Refused (exit 2) when the OutputFile is made, right after the input is validated and
//     before any work: a directory, the input itself, a missing or unwritable directory, a name
//     too long for the file system, an existing file the user may not write (as cp refuses it),
//     another user's file in a sticky directory (which no one but its owner may replace).
#pragma once

#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "input.h"
#include "program.h"
#include "settings.h"

namespace fa {

// renameat2's flag, by its system call: glibc before 2.28 has no wrapper.
constexpr unsigned kRenameExchange = 1u << 1;
inline int exchange_names(int dir_fd, const char* a, const char* b) {
#ifdef SYS_renameat2
  return (int)syscall(SYS_renameat2, dir_fd, a, dir_fd, b, kRenameExchange);
#else
  (void)dir_fd, (void)a, (void)b;
  errno = ENOSYS;
  return -1;
#endif
}

// Splits "dir/name" (dir "." where there is no slash, "/" for a file in the root).
inline void split_path(const std::string& path, std::string& dir, std::string& name) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) dir = ".", name = path;
  else dir = path.substr(0, slash + (slash == 0)), name = path.substr(slash + 1);
}

inline mode_t current_umask() {
  const mode_t mask = umask(0);  // before any thread starts: umask has no read-only form
  umask(mask);
  return mask;
}

class OutputFile {
 public:
  OutputFile(const char* path, const InputFile& input) : path_(path) {
    if (!*path) fail(kExitUsage, "output path is empty");
    target_ = follow_links(path);
    struct stat st;
    const bool exists = stat(target_.c_str(), &st) == 0;
    if (exists && S_ISDIR(st.st_mode)) fail(kExitUsage, "%s: output path is a directory", path);
    if (exists && st.st_dev == input.dev && st.st_ino == input.ino) fail(kExitUsage, "%s: output is the input file", path);
    if (exists && !S_ISREG(st.st_mode)) {
      open_in_place(st);
      return;
    }
    std::string dir;
    split_path(target_, dir, name_);
    if (name_.empty()) fail(kExitUsage, "%s: output path names a directory", path);
    check_place(dir, exists ? &st : nullptr);
    mode_ = exists && st.st_uid == geteuid() ? (st.st_mode & 07777) : (0666 & ~current_umask());
    if (!open_unnamed()) open_named();
    fchmod(fd_, mode_);
  }
  ~OutputFile() {
    if (dir_fd_ >= 0) close(dir_fd_);
  }
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  void write(const void* src, int64_t bytes) {
    const char* p = static_cast<const char*>(src);
    while (bytes > 0) {
      ssize_t put = ::write(fd_, p, (size_t)(bytes < (1 << 30) ? bytes : (1 << 30)));
      if (put < 0 && errno == EINTR) continue;
      if (put <= 0) fail(kExitFailure, "%s: write failed: %s", path_.c_str(), std::strerror(put < 0 ? errno : EIO));
      p += put, bytes -= put;
    }
  }

  // The output put in place (see the rule above).
  void commit() {
    if (in_place_) {
      if (close(fd_) != 0) fail(kExitFailure, "%s: write failed: %s", path_.c_str(), std::strerror(errno));
      return;
    }
    if (unnamed_) {
      char self[64];
      std::snprintf(self, sizeof self, "/proc/self/fd/%d", fd_);
      if (linkat(AT_FDCWD, self, dir_fd_, name_.c_str(), AT_SYMLINK_FOLLOW) == 0) {  // a new name: done
        if (close(fd_) != 0) {
          const int err = errno;
          unlinkat(dir_fd_, name_.c_str(), 0);
          fail(kExitFailure, "%s: write failed: %s", path_.c_str(), std::strerror(err));
        }
        return;
      }
      if (errno != EEXIST) fail(kExitFailure, "%s: cannot link output into place: %s", path_.c_str(), std::strerror(errno));
      name_temporary();  // the name is taken: a temporary name, then the exchange
      if (linkat(AT_FDCWD, self, dir_fd_, temp_.c_str(), AT_SYMLINK_FOLLOW) != 0)
        fail(kExitFailure, "%s: cannot link output beside its place: %s", path_.c_str(), std::strerror(errno));
    }
    if (close(fd_) != 0) fail(kExitFailure, "%s: write failed: %s", path_.c_str(), std::strerror(errno));
    put_in_place();
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
  // The file a path names once its symbolic links are followed (it need not exist yet), each
  // link checked against the protected-symlinks rule first.
  std::string follow_links(const char* path) const {
    std::string p = path;
    for (int hops = 0; hops < 40; ++hops) {
      struct stat link;
      if (lstat(p.c_str(), &link) != 0 || !S_ISLNK(link.st_mode)) return p;
      std::string dir, name;
      split_path(p, dir, name);
      struct stat d;
      if (stat(dir.c_str(), &d) == 0 && (d.st_mode & S_ISVTX) && (d.st_mode & S_IWOTH) && link.st_uid != geteuid() &&
          link.st_uid != d.st_uid)
        fail(kExitUsage, "%s: a symbolic link of another user's in a sticky world-writable directory: not followed "
             "(as the kernel's fs.protected_symlinks does)", path_.c_str());
      char to[4096];
      const ssize_t n = readlink(p.c_str(), to, sizeof to - 1);
      if (n < 0) fail(kExitUsage, "%s: cannot read output link: %s", path_.c_str(), std::strerror(errno));
      to[n] = '\0';
      p = to[0] == '/' || dir == "." ? std::string(to) : dir + (dir == "/" ? "" : "/") + to;
    }
    fail(kExitUsage, "%s: too many levels of symbolic links", path_.c_str());
  }

  // Before any work: the directory exists, is writable and is opened (every later step is
  // relative to it), the name fits in it, and an existing file there may be replaced.
  void check_place(const std::string& dir, const struct stat* existing) {
    struct stat st;
    if (stat(dir.c_str(), &st) != 0)
      fail(kExitUsage, "%s: cannot write output: %s: %s", path_.c_str(), dir.c_str(), std::strerror(errno));
    if (!S_ISDIR(st.st_mode)) fail(kExitUsage, "%s: cannot write output: %s is not a directory", path_.c_str(), dir.c_str());
    long name_max = pathconf(dir.c_str(), _PC_NAME_MAX);
    if (name_max <= 0) name_max = 255;
    if ((long)name_.size() > name_max)
      fail(kExitUsage, "%s: output name is too long (%zu bytes; this file system allows %ld)", path_.c_str(),
           name_.size(), name_max);
    if (target_.size() >= 4096) fail(kExitUsage, "%s: output path is too long", path_.c_str());
    if (faccessat(AT_FDCWD, dir.c_str(), W_OK | X_OK, AT_EACCESS) != 0 ||
        (existing && faccessat(AT_FDCWD, target_.c_str(), W_OK, AT_EACCESS) != 0))
      fail(kExitUsage, "%s: cannot write output: %s", path_.c_str(), std::strerror(errno));
    if (existing && (st.st_mode & S_ISVTX) && existing->st_uid != geteuid() && st.st_uid != geteuid() && geteuid() != 0)
      fail(kExitUsage, "%s: cannot write output: another user's file in a sticky directory (only its owner may "
           "replace it)", path_.c_str());
    dir_fd_ = open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (dir_fd_ < 0) fail(kExitUsage, "%s: cannot write output: %s", path_.c_str(), std::strerror(errno));
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
  bool open_unnamed() {
    if (settings().named_output_temp) return false;
#ifdef O_TMPFILE
    if (access("/proc/self/fd", X_OK) != 0) return false;  // commit() links through /proc
    fd_ = openat(dir_fd_, ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
    if (fd_ >= 0) return unnamed_ = true;
    if (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL || errno == ENOENT) return false;  // none here
    fail(kExitUsage, "%s: cannot write output: %s", path_.c_str(), std::strerror(errno));
#else
    return false;
#endif
  }

  void open_named() {
    name_temporary();
    fd_ = openat(dir_fd_, temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd_ < 0) {
      const int err = errno;
      *pending_output() = '\0';
      fail(kExitUsage, "%s: cannot write output: %s", path_.c_str(), std::strerror(err));
    }
  }

  // temp_: ".NAME.PID.XXXXXXXX.tmp" beside the output (fa's own temporaries have this form, and
  // fa removes those whose process is gone), or ".fa.PID.XXXXXXXX.tmp" where that would not fit;
  // pending_output(): its whole path, for fail() and the signal handlers, which are set first,
  // so that no moment exists with a named file and no one to remove it.
  void name_temporary() {
    std::random_device random;
    char tail[48];
    std::snprintf(tail, sizeof tail, ".%ld.%08x.tmp", (long)getpid(), (unsigned)random());
    temp_ = "." + (name_.size() + 32 <= 255 ? name_ : std::string("fa")) + tail;
    std::string dir, unused;
    split_path(target_, dir, unused);
    const std::string full = dir + "/" + temp_;
    if (full.size() >= 4096) fail(kExitUsage, "%s: output path is too long", path_.c_str());
    struct sigaction action;
    std::memset(&action, 0, sizeof action);
    action.sa_handler = remove_pending_output_and_die;
    sigemptyset(&action.sa_mask);
    const int signals[4] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
    for (int sig : signals) {
      struct sigaction current;
      sigaction(sig, nullptr, &current);
      if (current.sa_handler != SIG_IGN) sigaction(sig, &action, nullptr);  // nohup's SIGHUP stays ignored
    }
    std::memcpy(pending_output(), full.c_str(), full.size() + 1);
  }

  // The named temporary onto the name: exchanged with the file there (then unlinked from the
  // temporary name, held in replaced_ until drop_replaced), or renamed where there is none or
  // the file system cannot exchange.
  void put_in_place() {
    const char* temp = temp_.c_str();
    if (exchange_names(dir_fd_, temp, name_.c_str()) == 0) {
      replaced_ = openat(dir_fd_, temp, O_PATH | O_NOFOLLOW | O_CLOEXEC);
      unlinkat(dir_fd_, temp, 0);
    } else if (renameat(dir_fd_, temp, dir_fd_, name_.c_str()) != 0) {  // ENOENT: no file there; or no exchange
      fail(kExitFailure, "%s: cannot rename output into place: %s", path_.c_str(), std::strerror(errno));
    }
    *pending_output() = '\0';
  }

  static void remove_pending_output_and_die(int sig) {
    if (*pending_output()) unlink(pending_output());  // async-signal-safe
    signal(sig, SIG_DFL);
    raise(sig);  // end as the signal would have ended us: the parent sees which one
  }

  std::string path_;    // as the user gave it, for messages
  std::string target_;  // the file written: path_ with its symbolic links followed
  std::string name_;    // target_'s last component, in dir_fd_
  std::string temp_;    // the temporary name, once there is one
  int dir_fd_ = -1;     // target_'s directory
  int fd_ = -1;
  int replaced_ = -1;
  mode_t mode_ = 0644;
  bool unnamed_ = false;
  bool in_place_ = false;
};

}  // namespace fa
