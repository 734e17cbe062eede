// host/settings.h: every run-time setting of the programs (FA_* environment variables), read
// once at start into one struct. A value outside a setting's choices is a one-line error (exit
// 2) before any work. `PROGRAM --settings` prints each one, its value here and what it does;
// docs/settings.md's table is checked against that listing (tests/test_docs.py).
// This is the only place that reads an FA_* variable.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <cstring>
#include <string>

#include "program.h"

namespace fa {

enum class InputMode { kMapped, kRead, kRefused, kRefusedLater };

struct Settings {
  int timing = 0;                         // FA_TIMING: 0 off, 1 the fa-timing line, 2 that and the trace
  std::string kernel;                     // FA_KERNEL: a kernel's name ("" = the default)
  std::string tc_split;                   // FA_TC_SPLIT: "", "fused" or "prepass"
  int hip_bc = 0;                         // FA_HIP_BC: 0 (the wavefront), 32 or 64
  bool simt_small = false;                // FA_SIMT_SMALL
  InputMode input = InputMode::kMapped;   // FA_INPUT
  bool named_output_temp = false;         // FA_OUTPUT_TEMP=named
  int device_delay_ms = 0;                // FA_DEVICE_DELAY_MS: a wait before each of a student's first launches
  bool copies_waited = false;             // FA_COPIES_WAITED: every cudaMemcpyAsync of a student's waited for
  std::string copied_back;                // FA_COPIED_BACK: a folder that gets each device-to-host copy of a student's
  bool shared_poisoned = false;           // FA_SHARED_POISON set: shared memory filled before each student launch
  float shared_poison = 0.0f;             //   with this value
};

// One row per setting: the listing of --settings and the order it is printed in.
struct SettingInfo {
  const char* name;
  const char* choices;  // what it takes
  const char* programs;
  const char* does;
};
constexpr SettingInfo kSettingInfo[] = {
    {"FA_TIMING", "0|1|2", "every program", "1: the fa-timing line on stderr; 2: that and the fa-trace lines"},
    {"FA_KERNEL", "a name of --kernels", "GPU programs", "force one kernel (default: the fastest this GPU runs)"},
    {"FA_TC_SPLIT", "fused|prepass", "fa-cuda", "how the mma.sync kernel gets split K and V"},
    {"FA_HIP_BC", "32|64", "HIP programs", "the tiled kernel's key-tile width (default: the wavefront)"},
    {"FA_SIMT_SMALL", "0|1", "GPU programs built by nvcc", "1: the simt kernel's 48 KB tile on any GPU"},
    {"FA_INPUT", "read|refused|refused-later", "fa-cuda", "read the input instead of locking its pages, or act "
     "as if the device refused them"},
    {"FA_OUTPUT_TEMP", "named|unnamed", "every program", "named: write through a named temporary, as on NFS"},
    {"FA_DEVICE_DELAY_MS", "1..1000", "a student's program under fa's launch layer", "each of its first launches "
     "preceded by that many ms of waiting on the launch's stream: a host that reads before the device finished"},
    {"FA_COPIES_WAITED", "0|1", "a student's program under fa's launch layer", "1: each of its asynchronous copies "
     "waited for before the host goes on (CUDA_LAUNCH_BLOCKING waits for kernels only)"},
    {"FA_COPIED_BACK", "a folder", "a student's program under fa's launch layer", "each copy from the device to the "
     "host written there as it arrives (an asynchronous one once its stream is waited for), one file a copy"},
    {"FA_SHARED_POISON", "nan|a number", "a student's program under fa's launch layer", "each SM's shared memory "
     "filled with that value before each of its launches: a kernel that reads shared memory it never wrote reads it"},
};

// The variable's value, "" when unset.
inline std::string setting_text(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

[[noreturn]] inline void bad_setting(const char* name, const std::string& value, const char* expected) {
  fail(kExitUsage, "%s=%s: expected %s (or unset)", name, value.c_str(), expected);
}

inline bool flag_setting(const char* name) {
  const std::string v = setting_text(name);
  if (v.empty() || v == "0") return false;
  if (v == "1") return true;
  bad_setting(name, v, "0 or 1");
}

inline Settings read_settings() {
  Settings s;
  const std::string timing = setting_text("FA_TIMING");
  s.timing = timing.empty() || timing == "0" ? 0 : timing == "2" ? 2 : 1;  // any other value: the line
  s.kernel = setting_text("FA_KERNEL");
  s.tc_split = setting_text("FA_TC_SPLIT");
  if (!s.tc_split.empty() && s.tc_split != "fused" && s.tc_split != "prepass")
    bad_setting("FA_TC_SPLIT", s.tc_split, "fused or prepass");
  const std::string bc = setting_text("FA_HIP_BC");
  if (!bc.empty() && bc != "32" && bc != "64") bad_setting("FA_HIP_BC", bc, "32 or 64");
  s.hip_bc = bc.empty() ? 0 : std::atoi(bc.c_str());
  s.simt_small = flag_setting("FA_SIMT_SMALL");
  const std::string input = setting_text("FA_INPUT");
  if (input == "read") s.input = InputMode::kRead;
  else if (input == "refused") s.input = InputMode::kRefused;
  else if (input == "refused-later") s.input = InputMode::kRefusedLater;
  else if (!input.empty()) bad_setting("FA_INPUT", input, "read, refused or refused-later");
  const std::string temp = setting_text("FA_OUTPUT_TEMP");
  if (!temp.empty() && temp != "named" && temp != "unnamed") bad_setting("FA_OUTPUT_TEMP", temp, "named or unnamed");
  s.named_output_temp = temp == "named";
  const std::string delay = setting_text("FA_DEVICE_DELAY_MS");
  s.device_delay_ms = delay.empty() ? 0 : std::atoi(delay.c_str());
  if (!delay.empty() && (s.device_delay_ms < 1 || s.device_delay_ms > 1000 ||
                         delay.find_first_not_of("0123456789") != std::string::npos))
    bad_setting("FA_DEVICE_DELAY_MS", delay, "a whole number of ms from 1 to 1000");
  s.copies_waited = flag_setting("FA_COPIES_WAITED");
  s.copied_back = setting_text("FA_COPIED_BACK");
  const std::string poison = setting_text("FA_SHARED_POISON");
  if (!poison.empty()) {
    char* end = nullptr;
    s.shared_poison = poison == "nan" ? NAN : std::strtof(poison.c_str(), &end);
    if (poison != "nan" && (end == poison.c_str() || *end != '\0')) bad_setting("FA_SHARED_POISON", poison, "nan or a number");
    s.shared_poisoned = true;
  }
  return s;
}

// The settings of this run: read at the first call (main makes it, before any thread starts).
inline const Settings& settings() {
  static const Settings s = read_settings();
  return s;
}

// `PROGRAM --settings`: one setting a line, tab-separated: name, value here, choices, programs, what.
inline void print_settings() {
  std::printf("setting\tvalue\tchoices\tprograms\twhat it does\n");
  for (const SettingInfo& info : kSettingInfo) {
    const std::string value = setting_text(info.name);
    std::printf("%s\t%s\t%s\t%s\t%s\n", info.name, value.empty() ? "-" : value.c_str(), info.choices, info.programs,
                info.does);
  }
}

}  // namespace fa
