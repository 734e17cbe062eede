"""A kernel that failed where the program never checked: the judges' launch log reads the end of
every launch at the program's exit (src_cuda/launch_log.h), and a fault on the device (a
misaligned or illegal address, a trap) comes back there as the runtime's error, which it keeps for
every call after it. The program's own unchecked cudaMemcpy then copies back whatever the output
held: the verdict says WRONG (often all zeros), this step says why, before any rerun or tool.
"""
from __future__ import annotations

import re

from ..programs.timing import launches
from .findings import Finding, Kind
from .steps import Context, Step
from .tool_logs import CRASH_SIGNALS

# The runtime's errors a failed kernel leaves, in a student's words.
ERROR_WORDS = {
    "cudaErrorMisalignedAddress": "a misaligned address (a float4 or float2 access at an offset that is not a "
                                  "multiple of its size, as a row of d + 1 floats gives)",
    "cudaErrorIllegalAddress": "an address outside every allocation (an index past the end of an array)",
    "cudaErrorLaunchFailure": "an unspecified fault in the kernel",
    "cudaErrorIllegalInstruction": "an illegal instruction",
    "cudaErrorAssert": "a device-side assert",
    "cudaErrorHardwareStackError": "a stack overflow in the kernel (deep recursion or large local arrays)",
    "cudaErrorLaunchTimeout": "a kernel stopped for running too long",
}

# A launch the runtime refused for its size, by the runtime's message (which a program's own error
# check prints) or its error's name: what the input's size ran into.
REFUSED_FOR_SIZE = {
    ("too many blocks in cooperative launch", "CooperativeLaunchTooLarge"):
        "a cooperative launch may have no more blocks than the GPU holds at once "
        "(cudaOccupancyMaxActiveBlocksPerMultiprocessor times the SMs), and this grid grows with the input: "
        "launch that many blocks and let each loop over the work",
}  # not "invalid configuration argument": a grid dimension of 0 gives it too, which larger_input says otherwise


def refused_for_size(message: str) -> str | None:
    """What a launch refused in `message` ran into (REFUSED_FOR_SIZE), or None."""
    return next((words for names, words in REFUSED_FOR_SIZE.items() if any(n in message for n in names)), None)


class KernelFault(Step):
    """The judged run's launch log: a launch whose end was read with an error."""

    name = "a kernel's fault the program did not check"

    def applies(self, ctx: Context) -> bool:
        # WRONG only: a program that checked and stopped says its error itself (ERROR); an error
        # that is not a kernel's fault (events a device reset destroyed) says nothing of a kernel
        return ctx.verdict == "WRONG" and ctx.signal not in CRASH_SIGNALS and bool(faulted(ctx.run_stderr))

    def run(self, ctx: Context) -> list[Finding]:
        failed = faulted(ctx.run_stderr)
        error = failed[0].error
        kernels = ", ".join(dict.fromkeys(launch.kernel for launch in failed))
        return [Finding(Kind.CRASH, [
            f"a kernel failed on the device: the end of its launches read {error} ({ERROR_WORDS[error]}) in fa's "
            f"launch log at the program's exit (kernels whose launches ended so: {kernels}; the runtime keeps a "
            "kernel's fault for every call after it, so the one at fault is among them); the program went on "
            "without stopping on it and wrote what its output buffer held; memcheck, where it runs, names the "
            "access and its line"], dict(kernel_error=error, kernels=kernels))]


def faulted(stderr: str) -> list:
    """The launch log's launches whose end read a kernel's fault (ERROR_WORDS)."""
    return [launch for launch in launches(stderr) if launch.error in ERROR_WORDS]


def base_name(kernel: str) -> str:
    """A kernel's name without its return type, template arguments or parameters."""
    return re.sub(r"^void\s+", "", kernel).split("<")[0].split("(")[0].strip()
