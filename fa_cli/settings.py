"""The settings fa reads from its environment: the one place that reads a named variable.

Each is read when it is asked for (a test or a caller may change the environment between two
commands); child processes still get the whole environment (os.environ passed on as a base).

    FA_CACHE         the cache directory (else the user cache directory)
    FA_SHARED_CACHE  1: trust a cache directory that belongs to another user
    FA_REFERENCE     numpy: compute the reference with numpy, never PyTorch
    FA_DEBUG         1: a traceback for an error, as --traceback
    FA_TIMING        not 0: print the fa-timing line (fa's programs, torch_program)
    NVCC, HIPCC, CXX the compilers' commands, as the Makefiles take them
    CUDA_HOME        where the CUDA toolkit is, for its tools (compute-sanitizer, cuda-gdb)
    ROCM_PATH        where ROCm is (/opt/rocm), for its version
    FA_PTXAS_SM61    a CUDA 12 ptxas for sm_61 reports (else the pip package's)
    FA_GTX1080_RULES 0: a student's hw4.cu runs without the GTX 1080's rules (fa run --no-gtx1080-rules)
    FA_GPU_TURNS     a lock file's path: fa processes judging side by side (fa class) take turns on
                     the GPU through it, a timed run alone (programs/gpu_turns.py)
    FA_GPU_SHARES    a log's path: how many searches for a cause fa class runs at once, from which
                     each one's budget counts its share of the time (programs/gpu_shares.py)
    FA_TOOL_SLOTS    FOLDER:COUNT, set by fa class for its searches: at most COUNT compute-sanitizer
                     runs at once among them (programs/gpu_turns.py's tool_slot)
    FA_STEP_TIMES    a file's path, set by fa class for each search: where each step of the search
                     and each compute-sanitizer run writes how long it took (judge/step_times.py)
    FA_MATH_THREADS  set by fa class for each fa run side by side: the threads NumPy's math library
                     may use in that fa (its share of the cores); read by fa, not by a program
    FA_DEVICE_DELAY_MS  set by fa for a student's program under its launch layer: the device made
                     slower (judge/slow_device.py; read by src_cuda/launch_log.h)
    CUDA_LAUNCH_BLOCKING, FA_COPIES_WAITED  set by fa for a student's failing GPU program: every
                     launch and asynchronous copy waited for (judge/slow_device.py's LaunchesWaited;
                     the second read by src_cuda/launch_log.h)
    COLUMNS          the width fa folds its words and tables to (else a terminal's)
    TMPDIR           where temporary files go; set, fa run's drawn inputs go there too (else to
                     /dev/shm where it has room: file_pages.memory_folder_for)
"""
from __future__ import annotations

import os

COMPILER_VARIABLES = {"nvcc": "NVCC", "hipcc": "HIPCC"}  # any other compiler: CXX


def cache_override() -> str | None:
    """FA_CACHE, where set and not empty."""
    return os.environ.get("FA_CACHE") or None


def shared_cache_trusted() -> bool:
    return os.environ.get("FA_SHARED_CACHE") == "1"


def numpy_reference() -> bool:
    """FA_REFERENCE=numpy: the reference computed with numpy even where PyTorch sees a GPU."""
    return os.environ.get("FA_REFERENCE") == "numpy"


def debug() -> bool:
    return os.environ.get("FA_DEBUG") == "1"


def timing_asked() -> bool:
    return os.environ.get("FA_TIMING", "0") not in ("", "0")


def compiler_command(compiler: str) -> str:
    """The command that runs a compiler: NVCC, HIPCC or CXX where set, as the Makefiles take them."""
    return os.environ.get(COMPILER_VARIABLES.get(compiler, "CXX"), compiler)


def cuda_home() -> str:
    """CUDA_HOME, or '' where unset."""
    return os.environ.get("CUDA_HOME", "")


def rocm_path() -> str:
    return os.environ.get("ROCM_PATH", "/opt/rocm")


def ptxas_sm61() -> str | None:
    """FA_PTXAS_SM61, where set and not empty: the ptxas fa resources --arch sm_61 uses."""
    return os.environ.get("FA_PTXAS_SM61") or None


def columns() -> int | None:
    """COLUMNS, where it is a positive number."""
    text = os.environ.get("COLUMNS", "")
    return int(text) if text.isdigit() and int(text) > 0 else None


def gtx1080_rules() -> bool:
    """Whether a student's hw4.cu is built under the GTX 1080's rules (default: yes)."""
    return os.environ.get("FA_GTX1080_RULES", "1") != "0"


def turn_off_gtx1080_rules() -> None:
    """fa run --no-gtx1080-rules: for this command's builds and the fa processes it starts."""
    os.environ["FA_GTX1080_RULES"] = "0"


def gpu_turns() -> str | None:
    """FA_GPU_TURNS: the lock through which fa processes side by side take turns on the GPU."""
    return os.environ.get("FA_GPU_TURNS") or None


def gpu_turns_through(path: str) -> dict[str, str]:
    """The environment that has the fa processes fa class starts take their turns through PATH."""
    return {"FA_GPU_TURNS": path}


def gpu_shares() -> str | None:
    """FA_GPU_SHARES: the log of how many searches run side by side (fa class's second half)."""
    return os.environ.get("FA_GPU_SHARES") or None


def gpu_shares_through(path: str) -> dict[str, str]:
    """The environment that has a search fa class starts count its budget by its share of PATH's log."""
    return {"FA_GPU_SHARES": path}


def tool_slots() -> tuple[str, int] | None:
    """FA_TOOL_SLOTS as (folder, count), where it names both."""
    folder, _, count = os.environ.get("FA_TOOL_SLOTS", "").rpartition(":")
    return (folder, int(count)) if folder and count.isdigit() and int(count) > 0 else None


def tool_slots_through(folder: str, count: int) -> dict[str, str]:
    """The environment that has the searches fa class starts share COUNT sanitizer slots in FOLDER."""
    return {"FA_TOOL_SLOTS": f"{folder}:{count}"}


def step_times() -> str | None:
    """FA_STEP_TIMES: the file each step of a search appends its seconds to (fa class's records)."""
    return os.environ.get("FA_STEP_TIMES") or None


def step_times_through(path: str) -> dict[str, str]:
    """The environment that has a search fa class starts write its steps' seconds to PATH."""
    return {"FA_STEP_TIMES": path}


def math_threads() -> int | None:
    """FA_MATH_THREADS, where it is a positive number."""
    text = os.environ.get("FA_MATH_THREADS", "")
    return int(text) if text.isdigit() and int(text) > 0 else None


def math_threads_through(threads: int) -> dict[str, str]:
    """The environment that limits the math library's threads of an fa process fa class starts."""
    return {"FA_MATH_THREADS": str(threads)}


def launches_waited(copies: bool = True) -> tuple[str, ...]:
    """The assignments (for env's command line) that have every launch, and with copies every
    asynchronous copy, waited for before the host goes on: CUDA_LAUNCH_BLOCKING, the runtime's own,
    waits for kernels; FA_COPIES_WAITED, read by fa's launch layer (only a build with it), for
    cudaMemcpyAsync."""
    return ("CUDA_LAUNCH_BLOCKING=1", "FA_COPIES_WAITED=1") if copies else ("CUDA_LAUNCH_BLOCKING=1",)


def device_delay(ms: int) -> str:
    """The assignment (for env's command line) that has fa's launch layer make the device slower:
    each of a student's first launches preceded by `ms` of waiting on its stream."""
    return f"FA_DEVICE_DELAY_MS={ms}"


def copied_back(folder: str) -> str:
    """The assignment (for env's command line) that has fa's launch layer keep each of a student's
    copies from the device to the host in `folder`, one file a copy."""
    return f"FA_COPIED_BACK={folder}"


def shared_poison(value: str) -> str:
    """The assignment (for env's command line) that has fa's launch layer fill each SM's shared
    memory with `value` ("nan" or a number) before each of a student's launches."""
    return f"FA_SHARED_POISON={value}"


def visible_gpus() -> str:
    """CUDA_VISIBLE_DEVICES and HIP_VISIBLE_DEVICES as set: which GPUs a measurement here was of."""
    return f"{os.environ.get('CUDA_VISIBLE_DEVICES', '')} {os.environ.get('HIP_VISIBLE_DEVICES', '')}"


def python_path() -> str:
    """PYTHONPATH as set, for a Python process of fa's own that must import fa_cli as this one does."""
    return os.environ.get("PYTHONPATH", "")


def temporary_folder_named() -> bool:
    """TMPDIR set: the user chose where temporary files go (fa run's drawn inputs too)."""
    return bool(os.environ.get("TMPDIR"))


def use_cache_dir(path: str) -> None:
    """fa class: the class's own cache (FA_CACHE) for this command and the fa processes it starts."""
    os.environ["FA_CACHE"] = path


def search_path() -> str:
    """PATH as set: a sandbox keeps the folders of it that it shows."""
    return os.environ.get("PATH", "")


def variables(names) -> dict[str, str]:
    """Those of these variables that are set (what a sandbox passes on of the environment)."""
    return {k: v for k, v in os.environ.items() if k in names}
