// host/timing.h: the fa-timing line, one contract between the programs and fa:
//   fa-timing: init=S read=S h2d=S kernel=S d2h=S write=S total=S impl=NAME arch=ARCH device=NAME
// printed on stderr with FA_TIMING=1 (or 2). The stage names are declared once here (kStages)
// and once in Python (fa_cli/programs/timing.py, which parses the line for fa run, bench, compare and
// scripts/startup_floor.py); tests/test_timing.py runs each program that prints it, the
// starter included, and parses it with that parser.
#pragma once

#include <chrono>
#include <cstdio>
#include <string>

#include "settings.h"

namespace fa {

inline double now_seconds() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

// The stages, in the line's order. Stages that overlap (streamed pipelines) are summed per stage.
constexpr const char* kStages[] = {"init", "read", "h2d", "kernel", "d2h", "write", "total"};

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
    if (!settings().timing) return;
    const double seconds[] = {init, read, h2d, kernel, d2h, write, total};
    std::string line = "fa-timing:";
    char field[64];
    for (int i = 0; i < 7; ++i) {
      std::snprintf(field, sizeof field, " %s=%.6f", kStages[i], seconds[i]);
      line += field;
    }
    line += " impl=" + impl + " arch=" + arch + " device=" + no_spaces(device) + "\n";
    std::fputs(line.c_str(), stderr);
  }
};

}  // namespace fa
