"""GPUs on this machine: NVIDIA through the CUDA driver library, AMD through hip-python.

Neither is required: on a machine with no GPU (or no driver) the list is simply empty.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from functools import lru_cache


@dataclass(frozen=True)
class Device:
    vendor: str  # "nvidia" or "amd"
    index: int
    name: str
    arch: str  # sm_90, gfx90a, ...
    compute_units: int  # SMs on NVIDIA, CUs on AMD
    memory_bytes: int

    def __str__(self) -> str:
        return f"{self.name} ({self.arch})"


# CUdevice_attribute values from cuda.h (stable across CUDA versions).
_CU_SM_COUNT, _CU_CC_MAJOR, _CU_CC_MINOR = 16, 75, 76


# CUresult values from cuda.h that cuInit gives where no GPU can be used.
_CU_ERRORS = {35: "the NVIDIA driver is older than the CUDA runtime needs", 100: "the NVIDIA driver sees no GPU",
              3: "the NVIDIA driver did not start", 999: "the NVIDIA driver failed to start"}


@lru_cache(maxsize=1)
def _cuda_driver():
    """(libcuda, device count), or (None, why there is no NVIDIA GPU to use): asked of the
    driver itself, never guessed from tools on PATH."""
    name = ctypes.util.find_library("cuda") or "libcuda.so.1"
    try:
        cuda = ctypes.CDLL(name)
    except OSError:
        return None, "no NVIDIA driver: libcuda.so.1 is not installed"
    status = cuda.cuInit(0)
    if status != 0:
        return None, _CU_ERRORS.get(status, f"the NVIDIA driver failed to start (CUDA error {status})")
    count = ctypes.c_int()
    if cuda.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value == 0:
        return None, "the NVIDIA driver sees no GPU"
    return cuda, count.value


def nvidia_problem() -> str | None:
    """None where the CUDA driver sees an NVIDIA GPU, else why it does not, in a few words."""
    cuda, why = _cuda_driver()
    return None if cuda is not None else why


def nvidia_devices() -> list[Device]:
    cuda, count = _cuda_driver()
    if cuda is None:
        return []
    devices = []
    for i in range(count):
        dev = ctypes.c_int()
        cuda.cuDeviceGet(ctypes.byref(dev), i)
        raw = ctypes.create_string_buffer(256)
        cuda.cuDeviceGetName(raw, 256, dev)
        attrs = {}
        for key in (_CU_SM_COUNT, _CU_CC_MAJOR, _CU_CC_MINOR):
            value = ctypes.c_int()
            cuda.cuDeviceGetAttribute(ctypes.byref(value), key, dev)
            attrs[key] = value.value
        mem = ctypes.c_size_t()
        cuda.cuDeviceTotalMem_v2(ctypes.byref(mem), dev)
        devices.append(Device("nvidia", i, raw.value.decode(), f"sm_{attrs[_CU_CC_MAJOR]}{attrs[_CU_CC_MINOR]}",
                              attrs[_CU_SM_COUNT], mem.value))
    return devices


def amd_devices() -> list[Device]:
    try:
        from hip import hip  # hip-python, the optional extra fa-toolkit[amd]
    except Exception:
        return []
    err, count = hip.hipGetDeviceCount()
    if err != hip.hipError_t.hipSuccess:
        return []
    devices = []
    for i in range(count):
        props = hip.hipDeviceProp_t()
        if hip.hipGetDeviceProperties(props, i)[0] != hip.hipError_t.hipSuccess:
            continue
        name = props.name.decode() if isinstance(props.name, bytes) else str(props.name)
        arch = props.gcnArchName.decode() if isinstance(props.gcnArchName, bytes) else str(props.gcnArchName)
        devices.append(Device("amd", i, name, arch.split(":")[0], props.multiProcessorCount, props.totalGlobalMem))
    return devices


@lru_cache(maxsize=1)
def amd_problem() -> str | None:
    """None where an AMD GPU can be used here, else why not: the kernel driver's /dev/kfd, then
    the GPU agents that hip-python or rocminfo (the ROCm runtime) lists."""
    if not os.path.exists("/dev/kfd"):
        return "no AMD GPU driver: no /dev/kfd"
    if amd_devices():
        return None
    rocminfo = shutil.which("rocminfo")
    if rocminfo is None:
        return "/dev/kfd is there, and neither hip-python nor rocminfo is installed to ask it for GPUs"
    try:
        listing = subprocess.run([rocminfo], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return "rocminfo did not answer"
    if re.search(r"^\s*Name:\s+gfx\d", listing, re.MULTILINE):
        return None
    return "the ROCm runtime sees no AMD GPU (rocminfo lists no gfx agent)"


@lru_cache(maxsize=1)
def list_devices() -> tuple[Device, ...]:
    return tuple(nvidia_devices() + amd_devices())


# fa's CPU program's name for where it runs (its timing line, src_cpu/fa_cpu.cpp), and the
# name of a machine with no GPU: one name, in every table and record.
HOST_CPU = "host CPU"


def describe_first() -> str:
    """The name of the device this machine's runs use: its first GPU as the driver names it (the
    name the GPU programs' timing lines give), else the host CPU."""
    devices = list_devices()
    return devices[0].name if devices else HOST_CPU


def device_of_run(build: dict) -> str:
    """The device a run used, by the one name: the program's own word (its timing line, spaces
    restored), else this machine's first device (describe_first)."""
    return build.get("device", "").replace("_", " ") or describe_first()
