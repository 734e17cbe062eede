"""GPUs on this machine: NVIDIA through the CUDA driver library, AMD through hip-python.

Neither is required: on a machine with no GPU (or no driver) the list is simply empty.
"""
from __future__ import annotations

import ctypes
import ctypes.util
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


def nvidia_devices() -> list[Device]:
    name = ctypes.util.find_library("cuda") or "libcuda.so.1"
    try:
        cuda = ctypes.CDLL(name)
    except OSError:
        return []
    if cuda.cuInit(0) != 0:
        return []
    count = ctypes.c_int()
    if cuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return []
    devices = []
    for i in range(count.value):
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
def list_devices() -> tuple[Device, ...]:
    return tuple(nvidia_devices() + amd_devices())


def describe_first() -> str:
    """One line naming this machine's first GPU, or saying there is none (for result records)."""
    devices = list_devices()
    return str(devices[0]) if devices else "no GPU (CPU only)"
